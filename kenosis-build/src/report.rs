//! The per-model quantization report: written as JSON next to each artifact and into the
//! cache, summarized in one `cargo:warning` line.

use std::collections::BTreeMap;

use kenosis_manifest::TensorInfo;
use serde::{Deserialize, Serialize};

use crate::fidelity::FidelityReport;
use crate::normalize::NormalizeSummary;
use crate::quantize::plan::FloatNode;
use crate::quantize::reason::FloatReason;
use crate::quantize::rewrite::RewriteSummary;

/// Appended to the fidelity figures of the summary line when they were measured on
/// synthetic inputs (see [`FidelityReport::predicts_real_data`]).
pub const SYNTHETIC_FIDELITY_CAVEAT: &str = " (measured on synthetic inputs: does not predict \
     fidelity on real data; give calibration data to measure it)";

/// What was done to one model and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Report {
    /// The FP32 model path as given to the build.
    pub source: String,
    /// Cache key (BLAKE3 of model, calibration data, options and tool versions).
    pub key: String,
    /// BLAKE3 of the INT8 artifact bytes (the cache's integrity check).
    pub artifact_blake3: String,
    /// Normalization steps applied.
    pub normalize: NormalizeSummary,
    /// Quantized nodes per op type.
    pub ops_quantized: BTreeMap<String, usize>,
    /// Nodes with a quantizable op type left FP32, and why.
    pub nodes_fp32: Vec<FloatNode>,
    /// Names given to `keep_float` that match no node of the normalized model: a typo, or a
    /// node normalization folded or fused away (BatchNormalization, Dropout, a Pad, a Split,
    /// the parts of a SiLU, GELU, HardSwish or layer normalization).
    #[serde(default)]
    pub keep_float_unmatched: Vec<String>,
    /// Relu/Clip nodes folded into their producer's quantized range.
    pub activations_absorbed: usize,
    /// Q/DQ, weight and bias counts.
    pub rewrite: RewriteSummary,
    /// Calibration method, e.g. `minmax`.
    pub calibration_method: String,
    /// Number of calibration samples run.
    pub calibration_samples: usize,
    /// True when no calibration data was given and synthetic inputs were used.
    pub calibration_synthetic: bool,
    /// Value range of each synthetic image input (`"[-2.118, 2.64]"` or `"[0, 255]"` as
    /// inferred, see `crate::calibrate::image_range`, or the `synthetic_image_range`
    /// given); empty with real calibration data.
    #[serde(default)]
    pub synthetic_image_ranges: BTreeMap<String, String>,
    /// INT8-vs-FP32 agreement on calibration samples, and what a fidelity target did;
    /// `None` when the model holds an op ONNX Runtime cannot run (see
    /// `crate::calibrate::runnable`).
    pub fidelity: Option<FidelityReport>,
    /// The `min_speedup` check, when that option is set.
    #[serde(default)]
    pub speed: Option<crate::speed::SpeedCheck>,
    /// The kernel costs the placement priced INT8 against FP32 with: measured on the build
    /// machine, or the target class's table row (`measured` says which); `None` with
    /// `fp32_where_faster = false`.
    #[serde(default)]
    pub kernel_costs: Option<crate::kernel_costs::Pricing>,
    /// How MatMul and Gemm activations were quantized, and why (`None` in reports written
    /// before the choice existed).
    #[serde(default)]
    pub activations: Option<ActivationsChoice>,
    /// Options the artifact was built with: exactly `QuantizeOptions::canonical()` of the
    /// options it was quantized with, the text the cache key hashes (one `key = value` line
    /// per option, then the resolved `evaluation`, `host_runs_target`, `target_cpu` and
    /// `kernel_costs` lines; see there).
    pub options: String,
    /// FP32 model size in bytes.
    pub size_fp32: usize,
    /// INT8 artifact size in bytes.
    pub size_int8: usize,
    /// Wall time spent quantizing, in seconds.
    pub seconds: f64,
    /// Graph inputs of the artifact.
    pub inputs: Vec<TensorInfo>,
    /// Graph outputs of the artifact.
    pub outputs: Vec<TensorInfo>,
}

/// The activation mode of MatMul and Gemm nodes with a constant weight (see
/// `crate::quantize::dynamic`), and what `activations = "auto"` measured to choose it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ActivationsChoice {
    /// `"static"` (calibrated QDQ) or `"dynamic"` (`DynamicQuantizeLinear` + `MatMulInteger`).
    pub mode: String,
    /// Mean cosine to FP32 of the static build on the held-out samples, when both were built.
    pub static_cosine: Option<f64>,
    /// Mean cosine to FP32 of the dynamic build on the held-out samples, when both were built.
    pub dynamic_cosine: Option<f64>,
    /// Why this mode: requested, measured closer to FP32, or not compared.
    pub reason: String,
}

impl Report {
    /// The one-line summary printed as a cargo warning when a model is (re)quantized.
    pub fn summary_line(&self) -> String {
        let total: usize = self.ops_quantized.values().sum();
        let per_op: Vec<String> = self
            .ops_quantized
            .iter()
            .map(|(op, n)| format!("{n} {op}"))
            .collect();
        let fidelity = self.fidelity.as_ref().map_or(String::new(), |f| {
            format!(
                "; vs FP32 on {} {} samples{}: {}cosine {:.4}{}, top-1 {:.0}%{}{}",
                f.samples,
                if f.held_out {
                    "held-out"
                } else {
                    "calibration"
                },
                match f.evaluation {
                    crate::kernels::Evaluation::HostKernels => String::new(),
                    e => format!(", measured on {}", e.describe()),
                },
                f.compared_tensor
                    .as_ref()
                    .map_or(String::new(), |t| format!("`{t}` ")),
                f.measured.mean_cosine,
                if f.held_out {
                    format!(" (95% lower bound {:.4})", f.measured.cosine_lower_bound)
                } else {
                    String::new()
                },
                f.measured.top1_agreement * 100.0,
                if f.kept_fp32.is_empty() {
                    String::new()
                } else {
                    let kept = match &self.activations {
                        // 4-bit weights fall back to int8 ones, not FP32 (`quantize::build`).
                        Some(a) if a.mode.contains("int4") => "at int8 weights",
                        _ => "FP32",
                    };
                    format!(" ({} ops kept {kept} for the target)", f.kept_fp32.len())
                },
                if f.predicts_real_data {
                    ""
                } else {
                    SYNTHETIC_FIDELITY_CAVEAT
                }
            )
        });
        let custom: Vec<String> = self
            .nodes_fp32
            .iter()
            .filter(|n| n.reason.is_custom_domain())
            .map(|n| format!("{} ({})", n.name, n.op_type))
            .collect();
        let custom = if custom.is_empty() {
            String::new()
        } else {
            format!(
                "; custom-domain ops left FP32, check they are not on a hot path: {}",
                custom.join(", ")
            )
        };
        let blocked = self
            .nodes_fp32
            .iter()
            .filter(|n| n.reason.is_uncalibratable())
            .count();
        // Unmeasured either because ORT cannot run an op, or because nothing is float.
        let runs_everything = blocked == 0 && custom.is_empty();
        let custom = match (&self.fidelity, runs_everything) {
            (Some(_), _) => custom,
            (None, true) => "; fidelity not measured: no float tensor to compare".to_owned(),
            (None, false) => format!(
                "{custom}; {blocked} more ops depend on ops ONNX Runtime has no kernel for and \
                 stay FP32; fidelity not measured; register the custom kernels to run the model"
            ),
        };
        let revised = |s: &crate::speed::SpeedReport| match s.revisions {
            0 => String::new(),
            n => format!(" after {n} revised placements"),
        };
        let speed = match &self.speed {
            None => String::new(),
            Some(crate::speed::SpeedCheck::Measured(s)) if s.kept_fp32 => format!(
                "; INT8 ran at {:.2}x FP32's speed on this machine{}, below the floor {}: the artifact is the FP32 model",
                s.speedup,
                revised(s),
                s.min_speedup
            ),
            Some(crate::speed::SpeedCheck::Measured(s)) => {
                format!(
                    "; {:.2}x FP32's speed measured on this machine (1 thread){}",
                    s.speedup,
                    revised(s)
                )
            }
            Some(crate::speed::SpeedCheck::NotMeasured(why)) => {
                format!("; speed not measured: {why}")
            }
        };
        let estimated = (self.nodes_fp32.iter())
            .filter(|n| n.reason.is_estimated_faster())
            .count();
        let estimate = match (estimated, total) {
            (0, _) => String::new(),
            (_, 0) => format!(
                "; no INT8 placement is estimated faster than FP32 on the target: the model stays FP32 ({estimated} ops; `fp32_where_faster = false` quantizes them)"
            ),
            _ => format!(
                "; {estimated} ops estimated faster in FP32 on the target ({})",
                self.kernel_costs.map_or_else(String::new, |p| p.describe())
            ),
        };
        let activations = match &self.activations {
            Some(ActivationsChoice {
                mode,
                static_cosine: Some(st),
                dynamic_cosine: Some(dy),
                ..
            }) => format!(
                "; {mode} MatMul activations (held-out cosine static {st:.4}, dynamic {dy:.4})"
            ),
            Some(a) if a.mode == "dynamic" => "; dynamic MatMul activations".to_owned(),
            _ => String::new(),
        };
        let image_ranges: String = self
            .synthetic_image_ranges
            .iter()
            .map(|(input, range)| format!("input `{input}` in {range}; "))
            .collect();
        format!(
            "kenosis: quantized {} to INT8: {total} ops ({}), {} left FP32{estimate}{activations}{custom}; {:.1} MB -> {:.1} MB; {} {} calibration samples ({image_ranges}{}){fidelity}{speed}; {:.1} s",
            self.source,
            per_op.join(", "),
            (self.nodes_fp32.iter())
                .filter(|n| n.reason != FloatReason::Int8Fallback)
                .count(),
            self.size_fp32 as f64 / 1e6,
            self.size_int8 as f64 / 1e6,
            self.calibration_samples,
            if self.calibration_synthetic { "synthetic" } else { "real" },
            self.calibration_method,
            self.seconds,
        )
    }
}

pub use crate::onnx::manifest::{declared_io, manifest_info as tensor_info};
