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
    /// Quantized nodes per op type (empty when the speed check shipped the FP32 model, see
    /// [`Report::shipped_fp32`]).
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
    /// INT8-vs-FP32 agreement on held-out samples (calibration samples when too few were
    /// given or they are synthetic), and what a fidelity target or the default floor did;
    /// with [`FidelityReport::floor_missed`], the figures of the INT8 model that missed the
    /// floor, the artifact being FP32. `None` when the model holds an op ONNX Runtime cannot run (see
    /// `crate::calibrate::runnable`), and when the speed check shipped the FP32 model
    /// ([`Report::shipped_fp32`]): the artifact is then FP32, and the agreement of the
    /// slower INT8 model it replaced would describe a model that was not shipped.
    pub fidelity: Option<FidelityReport>,
    /// The speed check (`speed_check`, `min_speedup`), when it applies: its figures are the
    /// (last) INT8 model's that was timed, shipped or not (see [`Report::shipped_fp32`]).
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
    /// MatMul and Gemm nodes whose activations take the other mode than
    /// [`mode`](Self::mode), chosen group by group on the held-out samples (see
    /// `pipeline`'s per-node search); empty when none measured closer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flipped: Vec<String>,
    /// Mean cosine to FP32 of the build with [`flipped`](Self::flipped) on the held-out
    /// samples, when it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_cosine: Option<f64>,
}

impl Report {
    /// The speed check's figures when it shipped the FP32 model because the INT8 one ran
    /// slower than its floor: the artifact is then the normalized FP32 model, and
    /// `ops_quantized`, `nodes_fp32` and `fidelity` are empty (the INT8 figures are only in
    /// `speed`). `None` when the artifact is the quantized model.
    pub fn shipped_fp32(&self) -> Option<&crate::speed::SpeedReport> {
        match &self.speed {
            Some(crate::speed::SpeedCheck::Measured(s)) if s.kept_fp32 => Some(s),
            _ => None,
        }
    }

    /// The one-line summary printed as a cargo warning when a model is (re)quantized.
    pub fn summary_line(&self) -> String {
        if let Some(s) = self.shipped_fp32() {
            return self.kept_fp32_line(s);
        }
        let total: usize = self.ops_quantized.values().sum();
        let per_op: Vec<String> = self
            .ops_quantized
            .iter()
            .map(|(op, n)| format!("{n} {op}"))
            .collect();
        if let Some(f) = self.fidelity.as_ref().filter(|f| f.floor_missed) {
            return self.floor_missed_line(f);
        }
        let fidelity = self.fidelity.as_ref().map_or(String::new(), |f| {
            format!(
                "; vs FP32 on {} {} samples{}: {}cosine {:.4}{}, top-1 {:.0}%{}{}{}",
                f.samples,
                match (f.held_out, self.calibration_synthetic) {
                    (true, _) => "held-out",
                    (false, true) => "calibration",
                    (false, false) => "calibration (too few to hold any out)",
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
                judged_outputs(f),
                if f.kept_fp32.is_empty() {
                    String::new()
                } else {
                    let kept = match &self.activations {
                        // 4-bit weights fall back to int8 ones, not FP32 (`quantize::build`).
                        Some(a) if a.mode.contains("int4") => "at int8 weights",
                        _ => "FP32",
                    };
                    let why = match f.default_floor {
                        Some(_) => "the default fidelity floor",
                        None => "the target",
                    };
                    format!(" ({} ops kept {kept} for {why})", f.kept_fp32.len())
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
        let speed = match &self.speed {
            None => String::new(),
            Some(crate::speed::SpeedCheck::Measured(s)) => {
                format!(
                    "; speed against FP32 on this machine: {}{}",
                    s.describe(),
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
                "; no INT8 placement is estimated faster than FP32 on the target ({estimated} ops; `fp32_where_faster = false` quantizes them)"
            ),
            _ => format!(
                "; {estimated} ops estimated faster in FP32 on the target ({})",
                self.kernel_costs.as_ref().map_or_else(String::new, crate::kernel_costs::Pricing::describe)
            ),
        };
        let activations = match &self.activations {
            Some(ActivationsChoice {
                mode,
                static_cosine: Some(st),
                dynamic_cosine: Some(dy),
                flipped,
                mixed_cosine,
                ..
            }) => {
                let mixed = match mixed_cosine {
                    Some(m) => format!(", {} MatMuls the other way {m:.4}", flipped.len()),
                    None => String::new(),
                };
                format!(
                    "; {mode} MatMul activations (held-out cosine static {st:.4}, dynamic {dy:.4}{mixed})"
                )
            }
            Some(a) if a.mode == "dynamic" => "; dynamic MatMul activations".to_owned(),
            _ => String::new(),
        };
        let activations = match self.rewrite.dynamic.smoothed_inputs {
            0 => activations,
            n => format!("{activations}, {n} inputs SmoothQuant-migrated"),
        };
        let image_ranges: String = self
            .synthetic_image_ranges
            .iter()
            .map(|(input, range)| format!("input `{input}` in {range}; "))
            .collect();
        let left = (self.nodes_fp32.iter())
            .filter(|n| n.reason != FloatReason::Int8Fallback)
            .count();
        // No op in INT8 (the cost estimate, `keep_float` or the model's ops): what shipped is
        // said first, as when the speed check keeps FP32.
        let head = match total {
            0 => format!(
                "kept {} in FP32: no op quantized, {left} left FP32",
                self.source
            ),
            _ => format!(
                "quantized {} to INT8: {total} ops ({}), {left} left FP32",
                self.source,
                per_op.join(", ")
            ),
        };
        format!(
            "kenosis: {head}{estimate}{activations}{custom}; {:.1} MB -> {:.1} MB; {} {} calibration samples ({image_ranges}{}){fidelity}{speed}; {:.1} s",
            self.size_fp32 as f64 / 1e6,
            self.size_int8 as f64 / 1e6,
            self.calibration_samples,
            if self.calibration_synthetic { "synthetic" } else { "real" },
            self.calibration_method,
            self.seconds,
        )
    }

    /// The summary when the INT8 model missed the default fidelity floor (see
    /// [`FidelityReport::floor_missed`]): the FP32 model shipped, with a warning naming
    /// what INT8 measured.
    fn floor_missed_line(&self, f: &FidelityReport) -> String {
        let floor = f.default_floor.map_or(String::new(), |fl| {
            format!(
                " (cosine {}, error {}% of range, arg-max {:.0}%, no non-finite difference)",
                fl.min_cosine,
                fl.max_relative_error * 100.0,
                fl.min_argmax_agreement * 100.0
            )
        });
        format!(
            "kenosis: warning: kept {} in FP32: INT8 missed the default fidelity floor{floor} \
             on {} held-out samples: cosine {:.4}{}, still with {} ops back in FP32{}; the \
             artifact is the FP32 model ({:.1} MB); set `min_cosine` to choose another floor; \
             {:.1} s",
            self.source,
            f.samples,
            f.measured.mean_cosine,
            judged_outputs(f),
            f.kept_fp32.len(),
            if f.search_stopped {
                " (the search stopped at its time budget)"
            } else {
                ""
            },
            self.size_int8 as f64 / 1e6,
            self.seconds,
        )
    }

    /// The summary when the speed check shipped the FP32 model (see
    /// [`Report::shipped_fp32`]): what shipped and why, without INT8 figures that describe
    /// no shipped artifact.
    fn kept_fp32_line(&self, s: &crate::speed::SpeedReport) -> String {
        format!(
            "kenosis: kept {} in FP32: INT8 against FP32 on this machine: {} (at worst INT8 \
             {:.3} ms, FP32 {:.3} ms, median){}, below the floor {}; the \
             artifact is the FP32 model ({:.1} MB); {:.1} s",
            self.source,
            s.describe(),
            s.int8_ms,
            s.fp32_ms,
            revised(s),
            s.min_speedup,
            self.size_int8 as f64 / 1e6,
            self.seconds,
        )
    }
}

/// Outputs listed by name with their task-shaped judge in the summary line; more are
/// counted.
const LISTED_OUTPUTS: usize = 4;

/// `"; `name` arg-max 97% of 300 rows, `score` error 0.8% of range"`: each compared output's
/// judge (see [`crate::fidelity::OutputKind`]) and any non-finite mismatches, for the
/// summary line.
fn judged_outputs(f: &FidelityReport) -> String {
    use crate::fidelity::OutputKind;
    let mut parts: Vec<String> = (f.outputs.iter().take(LISTED_OUTPUTS))
        .map(|o| {
            let judge = match (o.kind, o.argmax_agreement, o.relative_error) {
                (OutputKind::Scores, Some(a), _) => {
                    format!("arg-max {:.0}% of {} rows", a * 100.0, o.decisive_rows)
                }
                (_, _, Some(e)) => format!("error {:.2}% of range", e * 100.0),
                _ => format!("cosine {:.4}", o.mean_cosine),
            };
            let non_finite = match o.non_finite_mismatches {
                0 => String::new(),
                n => format!(", {n} non-finite values differ"),
            };
            format!("`{}` {judge}{non_finite}", o.name)
        })
        .collect();
    if f.outputs.len() > LISTED_OUTPUTS {
        parts.push(format!("{} more outputs", f.outputs.len() - LISTED_OUTPUTS));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("; {}", parts.join(", "))
    }
}

/// `" after N revised placements"` when the speed check revised the placement.
fn revised(s: &crate::speed::SpeedReport) -> String {
    match s.revisions {
        0 => String::new(),
        n => format!(" after {n} revised placements"),
    }
}

pub use crate::onnx::manifest::manifest_info as tensor_info;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::speed::{check, timed, SpeedCheck};
    use crate::test_support::{fidelity_report, report};

    /// The report of a build whose INT8 model ran at half FP32's speed after 2 revised
    /// placements, as `pipeline` writes it: the FP32 model shipped, no op quantized, no
    /// fidelity (see `pipeline::shipped`).
    fn shipped_fp32() -> super::Report {
        let mut slower =
            check(vec![timed(1, 1.0, 2.0)], 1.0, Path::new("m.onnx")).expect("a floor of 1");
        slower.revisions = 2;
        let mut r = report(
            "models/m.onnx",
            &[],
            None,
            Some(SpeedCheck::Measured(slower)),
        );
        r.size_int8 = r.size_fp32;
        r
    }

    #[test]
    fn a_shipped_fp32_model_is_summarized_as_kept_in_fp32_and_why() {
        let r = shipped_fp32();
        assert_eq!(r.shipped_fp32().map(|s| s.speedup), Some(0.5));
        let line = r.summary_line();
        assert!(
            line.starts_with(
                "kenosis: kept models/m.onnx in FP32: INT8 against FP32 on this machine: 0.50x \
                 (0.47-0.53) at 1 thread (at worst INT8 2.000 ms, FP32 1.000 ms, median) after \
                 2 revised placements, below the floor 1; the artifact is the FP32 model (4.8 \
                 MB)"
            ),
            "{line}"
        );
        assert!(line.ends_with("; 10.6 s"), "{line}");
        for int8_figure in ["quantized", "to INT8", "cosine", "calibration samples"] {
            assert!(!line.contains(int8_figure), "`{int8_figure}` in: {line}");
        }
    }

    #[test]
    fn a_shipped_int8_model_is_summarized_as_quantized_with_its_speed_and_fidelity() {
        let faster =
            check(vec![timed(1, 3.0, 1.0)], 1.0, Path::new("m.onnx")).expect("a floor of 1");
        let r = report(
            "models/m.onnx",
            &[("Conv", 3)],
            Some(fidelity_report(0.9912)),
            Some(SpeedCheck::Measured(faster)),
        );
        assert_eq!(r.shipped_fp32(), None);
        let line = r.summary_line();
        assert!(
            line.starts_with("kenosis: quantized models/m.onnx to INT8: 3 ops (3 Conv)"),
            "{line}"
        );
        assert!(line.contains("cosine 0.9912"), "{line}");
        assert!(
            line.contains("; speed against FP32 on this machine: 3.00x (2.85-3.15) at 1 thread"),
            "{line}"
        );
    }

    #[test]
    fn a_model_with_no_op_quantized_is_summarized_as_kept_in_fp32() {
        let mut r = report("models/m.onnx", &[], Some(fidelity_report(1.0)), None);
        r.nodes_fp32 = vec![crate::quantize::plan::FloatNode {
            name: "conv".into(),
            op_type: "Conv".into(),
            reason: crate::quantize::reason::FloatReason::DynamicSlower,
        }];
        let line = r.summary_line();
        assert!(
            line.starts_with(
                "kenosis: kept models/m.onnx in FP32: no op quantized, 1 left FP32; no INT8 \
                 placement is estimated faster than FP32 on the target (1 ops;"
            ),
            "{line}"
        );
        assert!(!line.contains("to INT8"), "{line}");
    }

    /// A cache hit renames the report the miss wrote (`request::with_source`): the bytes
    /// are those a miss for the new name writes, key order and layout included.
    #[test]
    fn a_renamed_cached_report_is_the_report_a_miss_writes() {
        let faster =
            check(vec![timed(1, 3.0, 1.0)], 1.0, Path::new("m.onnx")).expect("a floor of 1");
        let miss = |source: &str| {
            let r = report(
                source,
                &[("Conv", 3), ("MatMul", 1)],
                Some(fidelity_report(0.9912)),
                Some(SpeedCheck::Measured(faster.clone())),
            );
            serde_json::to_vec_pretty(&r).expect("serializes")
        };
        for (cached, name) in [
            ("a.onnx", "models/b.onnx"),
            ("models/b.onnx", "models/b.onnx"),
            ("a.onnx", "models/\"quoted\" \\ é.onnx"),
        ] {
            let hit = crate::request::with_source(&miss(cached), name).expect("an object");
            assert_eq!(
                String::from_utf8(hit).expect("UTF-8"),
                String::from_utf8(miss(name)).expect("UTF-8"),
                "{cached} renamed {name}"
            );
        }
        // Shipped FP32 too (its `speed` is the slower INT8 model's, `fidelity` null).
        let fp32 = shipped_fp32();
        let json = serde_json::to_vec_pretty(&fp32).expect("serializes");
        let back: super::Report = serde_json::from_slice(
            &crate::request::with_source(&json, &fp32.source).expect("an object"),
        )
        .expect("a report");
        assert_eq!(back, fp32);
    }
}
