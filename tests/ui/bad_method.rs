// An unknown calibration method is an error at the string.
fn main() {
    let _model = kenosis_runtime::include_quantized!("fixtures/tiny/tiny_conv.onnx", method = "kl");
}
