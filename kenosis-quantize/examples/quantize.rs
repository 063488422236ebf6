//! Quantizes one ONNX model outside a build script and writes the INT8 model and its report.
//!
//! usage: cargo run -p kenosis-build --example quantize -- <in.onnx> <out.onnx> [calibration_npy_dir]

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [input, output, rest @ ..] = args.as_slice() else {
        return Err("usage: quantize <in.onnx> <out.onnx> [calibration_npy_dir]".into());
    };
    let calibration = match rest.first() {
        Some(dir) => kenosis_quantize::Calibration::NpyDir(dir.clone()),
        None => kenosis_quantize::Calibration::Synthetic,
    };
    let mut options = kenosis_quantize::QuantizeOptions::default();
    if let Ok(v) = std::env::var("KENOSIS_PER_CHANNEL") {
        options.per_channel = v == "1";
    }
    if let Ok(v) = std::env::var("KENOSIS_REDUCE_RANGE") {
        options.reduce_range = v == "1";
    }
    if let Ok(v) = std::env::var("KENOSIS_BIAS_CORRECTION") {
        options.bias_correction = v == "1";
    }
    if let Ok(v) = std::env::var("KENOSIS_GPTQ") {
        options.gptq_rounding = v == "1";
    }
    if let Ok(v) = std::env::var("KENOSIS_MIN_COSINE") {
        options.min_cosine = Some(v.parse()?);
    }
    if let Ok(v) = std::env::var("KENOSIS_KEEP_FLOAT") {
        options.keep_float = v.split(',').map(str::to_owned).collect();
    }
    if let Ok(v) = std::env::var("KENOSIS_SYNTHETIC_SAMPLES") {
        options.synthetic_samples = v.parse()?;
    }
    if let Ok(v) = std::env::var("KENOSIS_SYNTHETIC_IMAGE_RANGE") {
        let (low, high) = v
            .split_once(',')
            .ok_or("KENOSIS_SYNTHETIC_IMAGE_RANGE=low,high")?;
        options.synthetic_image_range = Some([low.trim().parse()?, high.trim().parse()?]);
    }
    if let Ok(v) = std::env::var("KENOSIS_ACTIVATIONS") {
        options.activations = kenosis_quantize::Activations::parse_value(&v)?;
    }
    if let Ok(v) = std::env::var("KENOSIS_WEIGHTS") {
        options.weights = kenosis_quantize::Weights::parse_value(&v)?;
    }
    if let Ok(v) = std::env::var("KENOSIS_METHOD") {
        options.method = match v.as_str() {
            "minmax" => kenosis_quantize::calibrate::Method::MinMax,
            "entropy" => kenosis_quantize::calibrate::Method::Entropy,
            "mse" => kenosis_quantize::calibrate::Method::Mse,
            p => kenosis_quantize::calibrate::Method::Percentile(p.parse()?),
        };
    }
    let bytes = std::fs::read(input)?;
    let model = kenosis_quantize::onnx::decode(input, &bytes)?;
    let size = bytes.len();
    drop(bytes);
    let q =
        kenosis_quantize::pipeline::quantize_decoded(input, model, size, &calibration, &options)?;
    std::fs::write(output, &q.bytes)?;
    std::fs::write(
        output.with_extension("report.json"),
        serde_json::to_vec_pretty(&q.report)?,
    )?;
    println!("{}", q.report.summary_line());
    Ok(())
}
