// Options after the path are reserved; an unknown one is an error at its name.
fn main() {
    let _model = kenosis_runtime::include_quantized!("fixtures/tiny/tiny_conv.onnx", bits = 4);
}
