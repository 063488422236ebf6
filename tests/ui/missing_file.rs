// No such file next to the registered fixture.
fn main() {
    let _model = kenosis_runtime::include_quantized!("fixtures/tiny/no_such_model.onnx");
}
