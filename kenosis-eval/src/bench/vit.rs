//! A vision transformer (issue 56): ViT-S/16 at 224 pixels as `kenosis_eval::vit` builds it
//! from seeded random weights with timm's initialization (no pretrained ViT is obtainable
//! here), quantized by Kenosis with default options (x86-64), by ORT's `quantize_dynamic`
//! (per-channel and per-tensor) and by ORT's `quantize_static` (settings of
//! [`super::ort_quantizer::SETTINGS`]), both static quantizers calibrated on the same
//! [`CALIBRATION_IMAGES`] ImageNet images; every row evaluated on [`EVALUATION_IMAGES`]
//! others and timed interleaved in one process at 1 thread on the first evaluation image.
//!
//! Metrics against FP32 over the evaluation images:
//! - the cosine of the `cls_embedding` `[1, 384]` (mean and min over images);
//! - the saliency region IoU: each `[14, 14]` saliency map thresholded at its own top
//!   [`REGION_PATCHES`] patches (the top 20% of the 196), the intersection over union of the
//!   INT8 and the FP32 region ([`kenosis_eval::vit::top_region_iou`]), mean and min.

use std::path::Path;
use std::time::Instant;

use kenosis_eval::vit::{self, Config, CLS_OUTPUT, SALIENCY_OUTPUT};
use kenosis_quantize::calibrate::session::{borrowed, sample_inputs};
use kenosis_quantize::calibrate::SampleValue;
use kenosis_quantize::fidelity::cosine;
use kenosis_quantize::{quantize, Calibration, QuantizeOptions};
use ndarray::Array4;
use ort::session::Session;
use serde::Serialize;

use super::measure::{self, Latency};

/// The model measured.
pub const CONFIG: Config = Config::SMALL;
/// Calibration images: every 20th of the sorted 1000 of `images/imagenet-224`.
pub const CALIBRATION_IMAGES: usize = 50;
/// Evaluation images: every 10th, offset by 5 (none of the calibration images).
pub const EVALUATION_IMAGES: usize = 100;
/// Patches of a saliency map's region: the top 20% of the 196.
pub const REGION_PATCHES: usize = 39;

/// One quantizer's row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub quantizer: String,
    pub cls_cosine_mean: f64,
    pub cls_cosine_min: f64,
    pub saliency_iou_mean: f64,
    pub saliency_iou_min: f64,
    pub bytes: usize,
    pub latency: Latency,
    /// FP32 median latency over this row's.
    pub speedup_vs_fp32: f64,
    /// Wall time of the quantization, s (ORT's as measured in Python, imports excluded;
    /// `None` for `quantize_dynamic`, timed with its process start-up).
    pub quantize_seconds: Option<f64>,
    /// The Kenosis build's summary line, or ORT's steps.
    pub summary: Option<String>,
}

/// The section's result.
#[derive(Debug, Clone, Serialize)]
pub struct VitResult {
    pub model: String,
    pub parameters: usize,
    pub fp32_bytes: usize,
    pub fp32_latency: Option<Latency>,
    pub rows: Vec<Row>,
    /// Kenosis's MatMul, Gemm and Conv nodes left FP32, with the report's reason
    /// (`name (op): reason`).
    pub kenosis_fp32_nodes: Vec<String>,
    /// Kenosis's MatMuls whose activations took the other mode than the whole model's
    /// (`ActivationsChoice::flipped`).
    pub kenosis_flipped: Vec<String>,
    /// Per quantizer that failed: its error.
    pub failures: Vec<(String, String)>,
    pub error: Option<String>,
}

/// Builds the model into `models` when absent and measures it on the images of `shared`;
/// `python` runs ORT's quantizers (their rows are missing without it).
pub fn measure(
    shared: &Path,
    models: &Path,
    python: Option<&Path>,
    out: &Path,
    warmup: usize,
    runs: usize,
    log: impl Fn(String),
) -> VitResult {
    let mut result = VitResult {
        model: vit::onnx_file(&CONFIG),
        parameters: CONFIG
            .tensors()
            .iter()
            .map(|t| t.1.iter().product::<usize>())
            .sum(),
        fp32_bytes: 0,
        fp32_latency: None,
        rows: Vec::new(),
        kenosis_fp32_nodes: Vec::new(),
        kenosis_flipped: Vec::new(),
        failures: Vec::new(),
        error: None,
    };
    if let Err(e) = measure_one(shared, models, python, out, warmup, runs, &log, &mut result) {
        result.error = Some(e);
    }
    result
}

/// A quantized model: its label, bytes, quantization seconds and summary.
type Candidate = (String, Vec<u8>, Option<f64>, Option<String>);

#[allow(clippy::too_many_arguments)]
fn measure_one(
    shared: &Path,
    models: &Path,
    python: Option<&Path>,
    out: &Path,
    warmup: usize,
    runs: usize,
    log: &impl Fn(String),
    result: &mut VitResult,
) -> Result<(), String> {
    let path = vit::ensure_onnx(models, CONFIG)?;
    log(format!("vit: {}", path.display()));
    let files = kenosis_eval::imagenet_files(shared);
    if files.len() < 1000 {
        return Err(format!("{} ImageNet images, 1000 expected", files.len()));
    }
    let calibration: Vec<Array4<f32>> = (0..CALIBRATION_IMAGES)
        .map(|i| vit::load_image(&files[20 * i], CONFIG.image))
        .collect();
    let evaluation: Vec<Array4<f32>> = (0..EVALUATION_IMAGES)
        .map(|i| vit::load_image(&files[10 * i + 5], CONFIG.image))
        .collect();
    let fp32 = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    result.fp32_bytes = fp32.len();

    let mut candidates: Vec<Candidate> = Vec::new();
    let t = Instant::now();
    let q = quantize(
        &path,
        &fp32,
        &Calibration::Data(kenosis_eval::calibration(&calibration)),
        &QuantizeOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    let seconds = t.elapsed().as_secs_f64();
    log(format!(
        "vit: Kenosis {seconds:.1} s: {}",
        q.report.summary_line()
    ));
    result.kenosis_fp32_nodes = (q.report.nodes_fp32.iter())
        .filter(|n| matches!(n.op_type.as_str(), "MatMul" | "Gemm" | "Conv"))
        .map(|n| format!("{} ({}): {}", n.name, n.op_type, n.reason))
        .collect();
    result.kenosis_flipped = (q.report.activations.iter())
        .flat_map(|a| a.flipped.clone())
        .collect();
    candidates.push((
        "Kenosis, default options (x86-64)".into(),
        q.bytes,
        Some(seconds),
        Some(q.report.summary_line()),
    ));
    if let Some(python) = python {
        let (pc, pt) = (
            out.join("vit_ort_dynamic_pc.onnx"),
            out.join("vit_ort_dynamic_pt.onnx"),
        );
        match super::transformer::ort_dynamic(python, &path, &pc, &pt) {
            Ok(()) => {
                for (label, p) in [
                    ("ORT quantize_dynamic, per-channel", &pc),
                    ("ORT quantize_dynamic, per-tensor (default)", &pt),
                ] {
                    let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
                    candidates.push((label.to_owned(), bytes, None, None));
                }
            }
            Err(e) => result
                .failures
                .push(("ORT quantize_dynamic".into(), e.to_string())),
        }
        log("vit: ORT quantize_static (Python)".into());
        let st = out.join("vit_ort_static.onnx");
        match super::ort_quantizer::quantize(python, &path, &calibration, &st) {
            Ok(o) => candidates.push((
                "ORT quantize_static".into(),
                o.bytes,
                Some(o.seconds),
                Some(o.steps.join("; ")),
            )),
            Err(e) => result
                .failures
                .push(("ORT quantize_static".into(), e.error)),
        }
    }

    let names = vec!["pixel_values".to_owned()];
    let mut sessions: Vec<Session> = std::iter::once(&fp32)
        .chain(candidates.iter().map(|c| &c.1))
        .map(|b| measure::session(b, None))
        .collect::<Result<_, _>>()?;
    let outputs = |s: &mut Session, x: &Array4<f32>| -> Result<Vec<Vec<f32>>, String> {
        let sample = vec![SampleValue::F32(x.clone().into_dyn())];
        let inputs = sample_inputs(&names, &sample, &path).map_err(|e| e.to_string())?;
        let out = s.run(borrowed(&inputs)).map_err(|e| e.to_string())?;
        Ok(out
            .iter()
            .map(|(_, v)| {
                v.try_extract_tensor::<f32>()
                    .map(|(_, x)| x.to_vec())
                    .unwrap_or_default()
            })
            .collect())
    };
    log("vit: fidelity".into());
    let reference: Vec<Vec<Vec<f32>>> = evaluation
        .iter()
        .map(|x| outputs(&mut sessions[0], x))
        .collect::<Result<_, _>>()?;
    let mut fidelity = Vec::new();
    for session in &mut sessions[1..] {
        let (mut cls, mut iou) = (Vec::new(), Vec::new());
        for (x, r) in evaluation.iter().zip(&reference) {
            let o = outputs(session, x)?;
            cls.push(cosine(&r[CLS_OUTPUT], &o[CLS_OUTPUT]));
            iou.push(vit::top_region_iou(
                &r[SALIENCY_OUTPUT],
                &o[SALIENCY_OUTPUT],
                REGION_PATCHES,
            ));
        }
        fidelity.push((cls, iou));
    }

    log("vit: latency".into());
    let sample = vec![SampleValue::F32(evaluation[0].clone().into_dyn())];
    let inputs = sample_inputs(&names, &sample, &path).map_err(|e| e.to_string())?;
    let mut refs: Vec<&mut Session> = sessions.iter_mut().collect();
    let latency = measure::interleaved(&mut refs, warmup, runs, |s| {
        let t = Instant::now();
        s.run(borrowed(&inputs)).map_err(|e| e.to_string())?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    })?;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    for (k, ((label, bytes, seconds, summary), (cls, iou))) in
        candidates.into_iter().zip(fidelity).enumerate()
    {
        let l = latency[k + 1];
        result.rows.push(Row {
            quantizer: label,
            cls_cosine_mean: mean(&cls),
            cls_cosine_min: min(&cls),
            saliency_iou_mean: mean(&iou),
            saliency_iou_min: min(&iou),
            bytes: bytes.len(),
            latency: l,
            speedup_vs_fp32: latency[0].median_ms / l.median_ms,
            quantize_seconds: seconds,
            summary,
        });
    }
    result.fp32_latency = Some(latency[0]);
    Ok(())
}
