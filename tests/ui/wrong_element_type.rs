// tiny_conv's input `x` is f32: an f64 array is not accepted by the typed `run`.
fn main() {
    let model = kenosis_runtime::include_quantized!("fixtures/tiny/tiny_conv.onnx");
    let x = ndarray::Array4::<f64>::zeros((1, 3, 8, 8));
    let _ = model.run(x.view());
}
