// The file exists, but tests/build.rs does not register it with kenosis-build.
fn main() {
    let _model = kenosis_runtime::include_quantized!("../kenosis-runtime/testdata/tiny_conv.onnx");
}
