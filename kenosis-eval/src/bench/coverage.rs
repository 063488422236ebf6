//! INT8 against FP32 latency of the fetched model families (`fetch-models.sh`'s, and the
//! models outside it that `cargo xtask bench` fetches): each is quantized as a build script
//! would with no data (default options, synthetic calibration) and timed against its FP32
//! original on one synthetic sample of the calibration shape. Fidelity is checked elsewhere
//! (the model-coverage tests for `fetch-models.sh`'s, a one-off measurement on real inputs
//! in `docs/benchmarks.md` for the others); this measures whether the INT8 model is faster.

use std::path::Path;
use std::time::Instant;

use kenosis_quantize::calibrate::data::input_specs;
use kenosis_quantize::calibrate::session::{borrowed, sample_inputs};
use kenosis_quantize::calibrate::shapes;
use kenosis_quantize::calibrate::synthetic::{synthetic_with_dims, ImageRange};
use kenosis_quantize::onnx::decode;
use kenosis_quantize::{quantize, Calibration, QuantizeOptions};
use serde::Serialize;

use super::measure::{self, Latency};

/// The fetched models, by file name: `fetch-models.sh`'s, then those `cargo xtask bench`
/// adds (`xtask/src/wheel_models.rs`).
pub const MODELS: [&str; 8] = [
    "ppocr-v4-det.onnx",
    "ppocr-v4-rec.onnx",
    "ppocr-mobile-v2-cls.onnx",
    "paraphrase-MiniLM-L3-v2.onnx",
    "silero_vad.onnx",
    "pp-lcnet-orientation.onnx",
    "picodet-layout-cdla.onnx",
    "magika-standard-v3.onnx",
];

/// One fetched model's latency, FP32 against Kenosis INT8.
#[derive(Debug, Clone, Serialize)]
pub struct CoverageLatency {
    pub model: String,
    /// Input shapes timed (the synthetic calibration shapes), e.g. `x [1, 3, 640, 640]`.
    pub inputs: String,
    pub fp32: Option<Latency>,
    pub kenosis: Option<Latency>,
    /// FP32 median over Kenosis median.
    pub speedup_vs_fp32: Option<f64>,
    /// Ops the artifact runs in INT8 (0: the build kept the model FP32).
    pub int8_ops: Option<usize>,
    /// Kenosis's quantization time against its bound (no ORT time here: the bound's floor).
    pub time_bound: Option<super::report::TimeBound>,
    /// Why there is no measurement, when there is none.
    pub error: Option<String>,
}

/// Quantizes and times every model of [`MODELS`] found in `dir`.
pub fn measure(
    dir: &Path,
    warmup: usize,
    runs: usize,
    log: impl Fn(String),
) -> Vec<CoverageLatency> {
    MODELS
        .iter()
        .map(|name| {
            log(format!("coverage latency: {name}"));
            let mut row = CoverageLatency {
                model: (*name).to_owned(),
                inputs: String::new(),
                fp32: None,
                kenosis: None,
                speedup_vs_fp32: None,
                int8_ops: None,
                time_bound: None,
                error: None,
            };
            if let Err(e) = measure_one(&dir.join(name), warmup, runs, &mut row) {
                row.error = Some(e);
            }
            row
        })
        .collect()
}

fn measure_one(
    path: &Path,
    warmup: usize,
    runs: usize,
    row: &mut CoverageLatency,
) -> Result<(), String> {
    if !path.is_file() {
        return Err(format!(
            "{} not found: `cargo xtask bench` fetches it (../shared/fetch-models.sh, xtask/src/wheel_models.rs)",
            path.display()
        ));
    }
    let fp32 = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = Instant::now();
    let q = quantize(
        path,
        &fp32,
        &Calibration::Synthetic,
        &QuantizeOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    row.time_bound = Some(super::report::TimeBound::new(
        t.elapsed().as_secs_f64(),
        None,
    ));
    row.int8_ops = Some(q.report.ops_quantized.values().sum());

    // One sample of the shapes calibration used (symbolic dims probed the same way).
    let model = decode(path, &fp32).map_err(|e| e.to_string())?;
    let specs = input_specs(model.graph.as_ref().expect("decoded"));
    let dims = shapes::resolve(&model, &specs, path).map_err(|e| e.to_string())?;
    // INT8 kernels take the same time whatever the values.
    let ranges = vec![ImageRange::Normalized; specs.len()];
    let sample = synthetic_with_dims(&specs, &dims, &ranges, 1, path)
        .map_err(|e| e.to_string())?
        .samples
        .remove(0);
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    row.inputs = names
        .iter()
        .zip(&dims)
        .map(|(n, d)| format!("{n} {d:?}"))
        .collect::<Vec<_>>()
        .join(", ");

    let inputs = sample_inputs(&names, &sample, path).map_err(|e| e.to_string())?;
    let mut a = measure::session(&fp32, None)?;
    let mut b = measure::session(&q.bytes, None)?;
    let l = measure::interleaved(&mut [&mut a, &mut b], warmup, runs, |s| {
        let t = Instant::now();
        s.run(borrowed(&inputs)).map_err(|e| e.to_string())?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    })?;
    row.speedup_vs_fp32 = Some(l[0].median_ms / l[1].median_ms);
    row.fp32 = Some(l[0]);
    row.kenosis = Some(l[1]);
    Ok(())
}
