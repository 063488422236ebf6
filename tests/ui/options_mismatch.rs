// tests/build.rs registers tiny_conv without options; an artifact built with other options
// than the call site's must not be embedded.
fn main() {
    let _model = kenosis_runtime::include_quantized!("fixtures/tiny/tiny_conv.onnx", per_channel = false);
}
