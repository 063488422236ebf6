// A known option with a value of the wrong kind is an error at the value.
fn main() {
    let _model = kenosis_runtime::include_quantized!("fixtures/tiny/tiny_conv.onnx", per_channel = "no");
}
