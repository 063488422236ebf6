// tiny_conv's output `y` is f32[1, 4, 8, 8]: the typed `run` returns an Array4<f32>.
fn main() {
    let model = kenosis_runtime::include_quantized!("fixtures/tiny/tiny_conv.onnx");
    let x = ndarray::Array4::<f32>::zeros((1, 3, 8, 8));
    let _y: ndarray::Array2<f32> = model.run(x.view()).unwrap();
}
