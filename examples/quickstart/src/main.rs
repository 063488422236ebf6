use kenosis_runtime::ndarray::Array4;

// Quantized to INT8 by build.rs (synthetic calibration: no data given), embedded here.
kenosis_runtime::include_quantized!(struct Net = "models/efficientnet_lite0.onnx");

fn main() -> Result<(), kenosis_runtime::Error> {
    let image = Array4::<f32>::zeros((1, 3, 224, 224)); // your preprocessed input
    let logits = Net.run(image.view())?; // typed from the model: Array2<f32>, [1, 1000]
    let best = logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1));
    println!("class {:?}", best.map(|(class, _)| class));
    Ok(())
}
