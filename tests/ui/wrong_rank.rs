// tiny_conv's input `x` is f32[1, 3, 8, 8]: the typed `run` takes a rank-4 view.
fn main() {
    let model = kenosis_runtime::include_quantized!("fixtures/tiny/tiny_conv.onnx");
    let x = ndarray::Array3::<f32>::zeros((3, 8, 8));
    let _ = model.run(x.view());
}
