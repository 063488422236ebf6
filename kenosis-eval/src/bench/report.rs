//! The benchmark's results: serialized to `bench.json`, rendered to `bench.md`.

use std::fmt::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::measure::{thread_counts, ConvFusion, Fidelity, Latency, PairedTop1};

#[derive(Debug, Serialize)]
pub struct Bench {
    /// The command line.
    pub command: Vec<String>,
    pub quick: bool,
    /// ONNX Runtime's build string.
    pub onnxruntime: String,
    pub cpu: Option<String>,
    /// The CPU flags that choose ONNX Runtime's integer kernels (`avx2`, `avx512_vnni`,
    /// `avx_vnni`, `asimddp`, ...), as `/proc/cpuinfo` lists them.
    pub cpu_flags: Vec<String>,
    pub logical_cpus: usize,
    /// `/proc/loadavg` (1, 5, 15 min) when the bench started and when it ended: other work
    /// on the machine adds noise to the latencies (interleaving keeps the ratios fair).
    pub load_average: [Option<String>; 2],
    pub calibration_images: usize,
    /// Worker threads (each with 1-thread sessions) of the fidelity pass.
    pub fidelity_threads: usize,
    pub latency_setup: LatencySetup,
    /// Kenosis's default calibration method (`QuantizeOptions::default()`).
    pub default_method: String,
    pub ort_quantizer: OrtQuantizerSetup,
    pub models: Vec<ModelResult>,
    /// INT8 vs FP32 latency of the fetched model families (empty when skipped).
    pub coverage: Vec<super::coverage::CoverageLatency>,
    /// Transformer encoders against ORT's dynamic quantizer, on real prose (empty when
    /// skipped).
    pub transformers: Vec<super::transformer::EncoderResult>,
    /// New model families on rendered documents (empty when skipped).
    pub families: Vec<super::families::FamilyResult>,
    /// The vision transformer against ORT's quantizers, on ImageNet images (None when
    /// skipped).
    pub vit: Option<super::vit::VitResult>,
    /// Peak memory while quantizing the transformer (None when skipped).
    pub memory: Option<super::memory::MemoryResult>,
    pub total_seconds: f64,
}

/// The time bound on quantizing one model: no longer than
/// max([`TimeBound::MIN_SECONDS`], [`TimeBound::ORT_FACTOR`] x ORT's `quantize_static` on the
/// same samples).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TimeBound {
    /// Kenosis's quantization wall time, s.
    pub kenosis_seconds: f64,
    /// ORT's `quantize_static` on the same samples, s (None: not measured; the bound is then
    /// [`TimeBound::MIN_SECONDS`]).
    pub ort_static_seconds: Option<f64>,
    /// The bound, s.
    pub bound_seconds: f64,
    /// Whether `kenosis_seconds <= bound_seconds`.
    pub met: bool,
}

impl TimeBound {
    /// The bound's floor, s.
    pub const MIN_SECONDS: f64 = 30.0;
    /// Multiple of ORT's time allowed.
    pub const ORT_FACTOR: f64 = 2.0;

    /// The bound for a Kenosis time against ORT's (if measured).
    pub fn new(kenosis_seconds: f64, ort_static_seconds: Option<f64>) -> Self {
        let bound_seconds = ort_static_seconds.map_or(Self::MIN_SECONDS, |o| {
            (Self::ORT_FACTOR * o).max(Self::MIN_SECONDS)
        });
        Self {
            kenosis_seconds,
            ort_static_seconds,
            bound_seconds,
            met: kenosis_seconds <= bound_seconds,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct LatencySetup {
    pub warmup_rounds: usize,
    pub runs: usize,
    pub intra_op_threads: usize,
    pub optimization_level: &'static str,
    pub input: &'static str,
    pub order: &'static str,
}

#[derive(Debug, Serialize)]
pub struct OrtQuantizerSetup {
    pub available: bool,
    pub python: Option<PathBuf>,
    pub settings: &'static str,
    /// Why the column is missing, when it is.
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelResult {
    pub model: &'static str,
    pub file: &'static str,
    pub image_set: &'static str,
    pub preprocessing: &'static str,
    /// What "agreement" means for this model.
    pub metric: &'static str,
    pub calibration_images: usize,
    pub evaluation_images: usize,
    pub fp32: Fp32Result,
    pub kenosis: QuantResult,
    pub ort: QuantResult,
    /// Kenosis's top-1 agreement minus the ORT quantizer's, paired over the same evaluation
    /// images (classifiers whose both models ran).
    pub top1_kenosis_minus_ort: Option<PairedTop1>,
    /// Kenosis INT8 median latency / ORT-quantizer INT8 median latency (< 1: Kenosis faster).
    pub kenosis_over_ort_latency: Option<f64>,
    /// Kenosis with each calibration method (fidelity only; latency is for the default).
    pub methods: Vec<MethodResult>,
    /// Kenosis built with `min_cosine` (models whose spec sets one).
    pub target: Option<TargetResult>,
    /// FP32 and Kenosis INT8 latency at 1, 2, 4 and all intra-op threads.
    pub threads: Vec<super::measure::ThreadLatency>,
    /// Kenosis's (default options) quantization time against its bound.
    pub time_bound: Option<TimeBound>,
    /// Peak memory of Kenosis quantizing the model on the same calibration images (None
    /// when skipped).
    pub memory: Option<super::memory::MemoryResult>,
    /// Errors outside any one column (e.g. the FP32 model failing to run).
    pub error: Option<String>,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Fp32Result {
    pub size_bytes: usize,
    /// `Conv` nodes in the FP32 file.
    pub convs: usize,
    pub latency: Option<Latency>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct QuantResult {
    /// `ok`, `failed` or `skipped`.
    pub status: String,
    /// The error text, verbatim.
    pub error: Option<String>,
    pub artifact: Option<PathBuf>,
    pub size_bytes: Option<usize>,
    pub quantize_seconds: Option<f64>,
    pub fidelity: Option<Fidelity>,
    pub latency: Option<Latency>,
    /// FP32 median latency / INT8 median latency.
    pub speedup_vs_fp32: Option<f64>,
    pub conv_fusion: Option<ConvFusion>,
    /// Extra facts (ORT: the script's steps; Kenosis: quantized op counts, FP32 nodes).
    pub notes: Vec<String>,
}

impl QuantResult {
    pub fn failed(error: String) -> Self {
        Self {
            status: "failed".into(),
            error: Some(error),
            ..Default::default()
        }
    }
    pub fn skipped(reason: &str) -> Self {
        Self {
            status: "skipped".into(),
            error: Some(reason.into()),
            ..Default::default()
        }
    }
}

/// A Kenosis build with a fidelity target, measured like the default column.
#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    /// The `min_cosine` the build was given.
    pub min_cosine: f64,
    /// Mean cosine the build measured on its held-out calibration samples.
    pub build_cosine: Option<f64>,
    /// Its 95% lower confidence bound, which the target is checked against.
    pub build_cosine_bound: Option<f64>,
    /// Held-out calibration samples the build measured on.
    pub build_samples: Option<usize>,
    /// Ops the build returned to FP32 to meet the target, in the order chosen.
    pub kept_fp32: Vec<String>,
    /// Fidelity on the evaluation images, latency (interleaved with the others), size.
    pub result: QuantResult,
    /// This build's median latency / the default Kenosis build's (> 1: the target costs speed).
    pub latency_vs_default: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MethodResult {
    pub method: String,
    pub is_default: bool,
    pub status: String,
    pub error: Option<String>,
    pub quantize_seconds: Option<f64>,
    pub fidelity: Option<Fidelity>,
}

fn pct(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |v| format!("{:.1}%", v * 100.0))
}
fn cos(f: &Option<Fidelity>) -> String {
    f.map_or("—".into(), |f| {
        format!("{:.4} / {:.4}", f.mean_cosine, f.min_cosine)
    })
}
fn score_cos(f: &Option<Fidelity>) -> String {
    match f.map(|f| (f.score_mean_cosine, f.score_min_cosine)) {
        Some((Some(m), Some(n))) => format!("{m:.4} / {n:.4}"),
        _ => "—".into(),
    }
}

/// `+1.5 points (95% interval +0.2 to +2.8; Kenosis alone agrees on 25 images, ORT alone on
/// 11, of 900)`.
pub fn describe_paired(p: &PairedTop1) -> String {
    format!(
        "{:+.1} points (95% interval {:+.1} to {:+.1}; Kenosis alone agrees on {} images, ORT \
         alone on {}, of {})",
        p.difference_points,
        p.difference_points - p.half_width_points,
        p.difference_points + p.half_width_points,
        p.only_first,
        p.only_second,
        p.images
    )
}

fn top1(r: &QuantResult) -> String {
    match &r.fidelity {
        Some(f) => pct(f.top1_agreement),
        None => "—".into(),
    }
}
fn ms(l: &Option<Latency>) -> String {
    l.map_or("—".into(), |l| format!("{:.2}", l.median_ms))
}
fn ratio(x: Option<f64>) -> String {
    x.map_or("—".into(), |v| format!("{v:.2}x"))
}
fn mb(b: Option<usize>) -> String {
    b.map_or("—".into(), |b| format!("{:.2}", b as f64 / 1e6))
}
fn secs(s: Option<f64>) -> String {
    s.map_or("—".into(), |s| format!("{s:.1}"))
}
fn fusion(c: &Option<ConvFusion>) -> String {
    c.as_ref().map_or("—".into(), |c| {
        let verdict = if c.all_fused {
            "yes"
        } else if c.all_quantized_fused {
            "all quantized"
        } else {
            "**no**"
        };
        let float = if c.float_conv > 0 && c.all_quantized_fused {
            " (left FP32 by the quantizer)"
        } else {
            ""
        };
        format!(
            "{verdict}: {} QLinearConv / {} quantized Conv, {} float{float}",
            c.qlinear_conv, c.quantized_convs, c.float_conv
        )
    })
}
/// `12.3 ≤ 30 met` / `45.6 > 30 **missed**`.
fn bound(t: &Option<TimeBound>) -> String {
    t.as_ref().map_or("—".into(), |t| {
        if t.met {
            format!("{:.0}: met", t.bound_seconds)
        } else {
            format!("{:.0}: **missed**", t.bound_seconds)
        }
    })
}
/// One table cell: no pipes or newlines.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

impl Bench {
    /// The latency table of the shared models: FP32, Kenosis and ORT-quantizer INT8.
    fn latency_table(&self, w: &mut String) {
        let _ = writeln!(
            w,
            "| model | FP32 | Kenosis INT8 | ORT INT8 | Kenosis speedup | ORT speedup | Kenosis / ORT latency |"
        );
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|");
        for m in &self.models {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} |",
                m.model,
                ms(&m.fp32.latency),
                ms(&m.kenosis.latency),
                ms(&m.ort.latency),
                ratio(m.kenosis.speedup_vs_fp32),
                ratio(m.ort.speedup_vs_fp32),
                m.kenosis_over_ort_latency
                    .map_or("—".into(), |v| format!("{v:.2}"))
            );
        }
    }

    /// Latency against the intra-op thread count: one row per model and form, one column per
    /// count of [`thread_counts`].
    fn threads_table(&self, w: &mut String) {
        let counts = thread_counts();
        let all = self.logical_cpus;
        let header: Vec<String> = (counts.iter())
            .map(|&t| {
                if t == all {
                    format!("{t} (all)")
                } else {
                    t.to_string()
                }
            })
            .collect();
        let _ = writeln!(w, "| model | {} |", header.join(" | "));
        let _ = writeln!(w, "|---|{}", "---:|".repeat(counts.len()));
        for m in self.models.iter().filter(|m| !m.threads.is_empty()) {
            let cell = |t: usize, f: &dyn Fn(&super::measure::ThreadLatency) -> String| {
                (m.threads.iter().find(|l| l.threads == t)).map_or("—".into(), f)
            };
            let row = |form: &str, f: &dyn Fn(&super::measure::ThreadLatency) -> String| {
                let cells: Vec<String> = counts.iter().map(|&t| cell(t, f)).collect();
                format!("| {} {form} | {} |", m.model, cells.join(" | "))
            };
            let _ = writeln!(w, "{}", row("FP32 ms", &|l| format!("{:.2}", l.fp32_ms)));
            let _ = writeln!(
                w,
                "{}",
                row("Kenosis INT8 ms", &|l| format!("{:.2}", l.kenosis_ms))
            );
            let _ = writeln!(
                w,
                "{}",
                row("speedup (95% band)", &|l| format!(
                    "{:.2}x ({:.2}-{:.2})",
                    l.speedup, l.speedup_band[0], l.speedup_band[1]
                ))
            );
        }
    }

    /// This CPU's latency section of `docs/benchmarks.md`, kept beside the other CPUs' (one
    /// section per CPU model seen): its name and integer-kernel flags, the setup, the table.
    pub fn cpu_latency_markdown(&self) -> String {
        let mut s = String::new();
        let w = &mut s;
        let _ = writeln!(
            w,
            "### {}\n\nFlags: {}. {} logical CPUs; load average at start {}. ONNX Runtime {}; \
             median of {} interleaved runs, 1 intra-op thread.\n",
            self.cpu.as_deref().unwrap_or("unknown CPU"),
            if self.cpu_flags.is_empty() {
                "none of the integer-kernel flags".to_owned()
            } else {
                self.cpu_flags.join(", ")
            },
            self.logical_cpus,
            self.load_average[0].as_deref().unwrap_or("unknown"),
            self.onnxruntime,
            self.latency_setup.runs,
        );
        self.latency_table(w);
        let _ = writeln!(
            w,
            "\nBy intra-op thread count (median of interleaved rounds as the build's speed check \
             times them; speedup = median per-round FP32/INT8 ratio, with its 95% band; counts \
             above the logical CPUs oversubscribe):\n"
        );
        self.threads_table(w);
        s
    }

    /// The report as Markdown: fidelity, speed, size/time and method tables, then errors.
    /// The vision transformer's section of [`Bench::markdown`].
    fn vit_markdown(&self, w: &mut String, v: &super::vit::VitResult) {
        use super::vit::{CALIBRATION_IMAGES, CONFIG, EVALUATION_IMAGES, REGION_PATCHES};
        let _ = writeln!(w, "\n## Vision transformer against ORT's quantizers\n");
        let fp32 = v
            .fp32_latency
            .map_or("-".into(), |l| format!("{:.2} ms", l.median_ms));
        let _ = writeln!(
            w,
            "`{}`: ViT-S/16 ({:.1}M parameters, FP32 {:.1} MB, {fp32}) built by \
             `kenosis_eval::vit` with seeded random weights (timm's initialization). Static \
             quantizers calibrated on {CALIBRATION_IMAGES} ImageNet images, every row evaluated \
             on {EVALUATION_IMAGES} others; CLS = cosine of the `cls_embedding`; saliency IoU = \
             intersection over union of the top {REGION_PATCHES} of the {} patches of each \
             saliency map, INT8 against FP32. Latency interleaved, 1 thread, on the first \
             evaluation image.\n",
            v.model,
            v.parameters as f64 / 1e6,
            v.fp32_bytes as f64 / 1e6,
            CONFIG.patches(),
        );
        if let Some(err) = &v.error {
            let _ = writeln!(w, "not measured: {err}\n");
            return;
        }
        let _ = writeln!(
            w,
            "| quantizer | CLS cosine mean / min | saliency IoU mean / min | MB | latency ms | \
             speed-up vs FP32 | quantize s |"
        );
        let _ = writeln!(w, "|---|---|---|---:|---:|---:|---:|");
        for r in &v.rows {
            let _ = writeln!(
                w,
                "| {} | {:.4} / {:.4} | {:.3} / {:.3} | {:.2} | {:.2} | {:.2}x | {} |",
                r.quantizer,
                r.cls_cosine_mean,
                r.cls_cosine_min,
                r.saliency_iou_mean,
                r.saliency_iou_min,
                r.bytes as f64 / 1e6,
                r.latency.median_ms,
                r.speedup_vs_fp32,
                r.quantize_seconds.map_or("-".into(), |s| format!("{s:.1}")),
            );
        }
        let _ = writeln!(w);
        for (q, e) in &v.failures {
            let _ = writeln!(w, "- {q} failed: {e}");
        }
        if !v.kenosis_flipped.is_empty() {
            let _ = writeln!(
                w,
                "- Kenosis's MatMuls in the other activation mode: {}",
                v.kenosis_flipped.join(", ")
            );
        }
        if !v.kenosis_fp32_nodes.is_empty() {
            let _ = writeln!(
                w,
                "- Kenosis's MatMul, Gemm and Conv nodes left FP32: {}",
                v.kenosis_fp32_nodes.join("; ")
            );
        }
        for r in &v.rows {
            if let Some(s) = &r.summary {
                let _ = writeln!(w, "- {}: `{}`", r.quantizer, s);
            }
        }
        let _ = writeln!(w);
    }

    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let w = &mut s;
        let _ = writeln!(
            w,
            "# Kenosis benchmark{}\n",
            if self.quick { " (--quick)" } else { "" }
        );
        let _ = writeln!(
            w,
            "ONNX Runtime: {}. CPU: {} ({} logical). Calibration: first {} images (sorted) of \
             each set; evaluation: the images after them. Latency: median of {} interleaved \
             runs after {} warm-up rounds, 1 intra-op thread, ORT_ENABLE_ALL, one fixed input \
             (the first evaluation image). Total time {:.0} s.\n",
            self.onnxruntime,
            self.cpu.as_deref().unwrap_or("unknown"),
            self.logical_cpus,
            self.calibration_images,
            self.latency_setup.runs,
            self.latency_setup.warmup_rounds,
            self.total_seconds
        );
        if let [Some(start), Some(end)] = &self.load_average {
            let _ = writeln!(
                w,
                "Load average (1/5/15 min) at start {start}, at end {end}: latencies are noisy \
                 on a busy machine; the interleaved runs keep the ratios comparable.\n"
            );
        }
        let _ = writeln!(w, "ORT quantizer column: {}.", self.ort_quantizer.settings);
        if let Some(note) = &self.ort_quantizer.note {
            let _ = writeln!(w, "\n**ORT quantizer not available:** {note}");
        }

        let _ = writeln!(w, "\n## Fidelity vs FP32\n");
        let scores = self.models.iter().any(|m| {
            [&m.kenosis, &m.ort]
                .iter()
                .any(|r| r.fidelity.is_some_and(|f| f.score_mean_cosine.is_some()))
        });
        let _ = write!(
            w,
            "| model | eval images | Kenosis top-1 | Kenosis cosine mean / min | ORT top-1 | ORT cosine mean / min |"
        );
        let _ = if scores {
            writeln!(
                w,
                " Kenosis score cosine mean / min | ORT score cosine mean / min |\n|---|---:|---:|---:|---:|---:|---:|---:|"
            )
        } else {
            writeln!(w, "\n|---|---:|---:|---:|---:|---:|")
        };
        for m in &self.models {
            let _ = write!(
                w,
                "| {} | {} | {} | {} | {} | {} |",
                m.model,
                m.evaluation_images,
                top1(&m.kenosis),
                cos(&m.kenosis.fidelity),
                top1(&m.ort),
                cos(&m.ort.fidelity)
            );
            let _ = if scores {
                writeln!(
                    w,
                    " {} | {} |",
                    score_cos(&m.kenosis.fidelity),
                    score_cos(&m.ort.fidelity)
                )
            } else {
                writeln!(w)
            };
        }

        let paired: Vec<_> = self
            .models
            .iter()
            .filter_map(|m| m.top1_kenosis_minus_ort.map(|p| (m.model, p)))
            .collect();
        if !paired.is_empty() {
            let _ = writeln!(
                w,
                "\nKenosis minus ORT top-1 agreement, paired over the same images (95% interval of \
                 the difference of paired proportions; only images where exactly one of the two \
                 matches FP32 inform it):\n"
            );
            for (model, p) in paired {
                let _ = writeln!(w, "- {model}: {}", describe_paired(&p));
            }
        }

        let _ = writeln!(w, "\n## Latency (ms, median, 1 thread)\n");
        self.latency_table(w);

        let _ = writeln!(
            w,
            "\n## Latency by intra-op thread count\n\nThe shipped artifact (default options, \
             after the build's speed check) against FP32 on the same input, timed as the speed \
             check times them (`kenosis_quantize::speed`): one run of each model per round, \
             interleaved, ONNX Runtime's default spinning; medians in ms, and the speedup as the \
             median per-round FP32/INT8 ratio with its distribution-free 95% band, the noise \
             measured in the same run. {} logical CPUs here, so a count above that \
             oversubscribes.\n",
            self.logical_cpus
        );
        self.threads_table(w);

        let _ = writeln!(w, "\n## Size, quantization time, Conv fusion\n");
        let _ = writeln!(
            w,
            "| model | FP32 MB | Kenosis MB | ORT MB | Kenosis quantize s | ORT quantize s | time bound s | FP32 Convs | Kenosis: Convs fused into QLinearConv | ORT: Convs fused into QLinearConv |"
        );
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---|---:|---|---|");
        for m in &self.models {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                m.model,
                mb(Some(m.fp32.size_bytes)),
                mb(m.kenosis.size_bytes),
                mb(m.ort.size_bytes),
                secs(m.kenosis.quantize_seconds),
                secs(m.ort.quantize_seconds),
                bound(&m.time_bound),
                m.fp32.convs,
                fusion(&m.kenosis.conv_fusion),
                fusion(&m.ort.conv_fusion)
            );
        }

        let with_target: Vec<(&ModelResult, &TargetResult)> = self
            .models
            .iter()
            .filter_map(|m| m.target.as_ref().map(|t| (m, t)))
            .collect();
        if !with_target.is_empty() {
            let _ = writeln!(w, "\n## Kenosis with a fidelity target\n");
            let _ = writeln!(
                w,
                "The build holds out part of its calibration images, measures the INT8 model \
                 against FP32 on them, and returns the most sensitive ops and activations \
                 (ranked on its calibration images, not the held-out ones) to FP32 until the 95% lower confidence bound of the mean cosine there reaches `min_cosine`; the evaluation columns are the bench's own images.\n"
            );
            let _ = writeln!(
                w,
                "| model | min_cosine | build: held-out cosine, 95% lower bound | ops kept FP32 | eval top-1 | eval cosine mean / min | latency ms | vs default Kenosis | MB | quantize s |"
            );
            let _ = writeln!(w, "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|");
            for (m, t) in with_target {
                let kept = if t.kept_fp32.is_empty() {
                    "none".to_owned()
                } else {
                    format!("{}: {}", t.kept_fp32.len(), t.kept_fp32.join(", "))
                };
                let build = match (t.build_cosine, t.build_cosine_bound, t.build_samples) {
                    (Some(c), Some(b), Some(n)) => format!("{c:.4}, bound {b:.4} ({n} samples)"),
                    _ => "—".into(),
                };
                let _ = writeln!(
                    w,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    m.model,
                    t.min_cosine,
                    build,
                    cell(&kept),
                    top1(&t.result),
                    cos(&t.result.fidelity),
                    ms(&t.result.latency),
                    ratio(t.latency_vs_default),
                    mb(t.result.size_bytes),
                    secs(t.result.quantize_seconds)
                );
                if let Some(e) = &t.result.error {
                    let _ = writeln!(w, "\n- {}: {} `{}`", m.model, t.result.status, cell(e));
                }
            }
        }

        let with_methods: Vec<&ModelResult> = self
            .models
            .iter()
            .filter(|m| !m.methods.is_empty())
            .collect();
        if !with_methods.is_empty() {
            let _ = writeln!(w, "\n## Kenosis calibration methods (fidelity)\n");
            let _ = writeln!(
                w,
                "| model | method | top-1 | cosine mean / min | quantize s |"
            );
            let _ = writeln!(w, "|---|---|---:|---:|---:|");
            for m in with_methods {
                for r in &m.methods {
                    let name = if r.is_default {
                        format!("{} (default)", r.method)
                    } else {
                        r.method.clone()
                    };
                    let (t, c) = match (&r.fidelity, &r.error) {
                        (Some(f), _) => (pct(f.top1_agreement), cos(&Some(*f))),
                        (None, Some(e)) => ("failed".into(), cell(e)),
                        _ => ("—".into(), "—".into()),
                    };
                    let _ = writeln!(
                        w,
                        "| {} | {} | {} | {} | {} |",
                        m.model,
                        name,
                        t,
                        c,
                        secs(r.quantize_seconds)
                    );
                }
            }
        }

        if !self.transformers.is_empty() {
            let t = super::transformer::TOKENS;
            let _ = writeln!(
                w,
                "\n## Transformer encoders against ORT's dynamic quantizer\n"
            );
            let _ = writeln!(
                w,
                "Kenosis calibrated on {} windows of {t} tokens of licence prose, every model \
                 evaluated on {} windows of other licences (`kenosis_eval::prose`); latency \
                 interleaved, 1 thread, on the first evaluation window.\n",
                super::transformer::CALIBRATION_WINDOWS,
                super::transformer::EVALUATION_WINDOWS
            );
            for e in &self.transformers {
                let fp32 = e
                    .fp32_latency
                    .map_or("-".into(), |l| format!("{:.2} ms", l.median_ms));
                let _ = writeln!(
                    w,
                    "**{}** (FP32 {:.1} MB, {fp32})\n",
                    e.model,
                    e.fp32_bytes as f64 / 1e6
                );
                if let Some(err) = &e.error {
                    let _ = writeln!(w, "not measured: {err}\n");
                    continue;
                }
                let _ = writeln!(w, "| quantizer | pooled cosine mean / min | token cosine | MB | latency ms | speed-up vs FP32 | latency / ORT dynamic per-channel |");
                let _ = writeln!(w, "|---|---|---|---:|---:|---:|---:|");
                for r in &e.rows {
                    let _ = writeln!(
                        w,
                        "| {} | {:.4} / {:.4} | {:.4} | {:.2} | {:.2} | {:.2}x | {} |",
                        r.quantizer,
                        r.pooled_cosine_mean,
                        r.pooled_cosine_min,
                        r.token_cosine_mean,
                        r.bytes as f64 / 1e6,
                        r.latency.median_ms,
                        r.speedup_vs_fp32,
                        r.latency_vs_ort_dynamic
                            .map_or("-".into(), |x| format!("{x:.2}")),
                    );
                }
                let _ = writeln!(w);
                for r in e
                    .rows
                    .iter()
                    .filter_map(|r| r.summary.as_ref().map(|s| (&r.quantizer, s)))
                {
                    let _ = writeln!(w, "- {}: `{}`", r.0, r.1);
                }
                let _ = writeln!(w);
            }
        }
        if let Some(v) = &self.vit {
            self.vit_markdown(w, v);
        }
        if !self.coverage.is_empty() {
            let _ = writeln!(w, "\n## Fetched models: INT8 vs FP32 latency\n");
            let _ = writeln!(
                w,
                "Default options, synthetic calibration; both timed as above on one synthetic \
                 sample of the calibration shape (fidelity: `tests/tests/model_coverage.rs`; \
                 for the last three, the section \"Models outside `../shared`\" of \
                 `docs/benchmarks.md`).\n"
            );
            let _ = writeln!(
                w,
                "| model | inputs | FP32 ms | Kenosis ms | INT8 speedup | ops in INT8 |"
            );
            let _ = writeln!(w, "|---|---|---:|---:|---:|---|");
            for c in &self.coverage {
                let ops = match c.int8_ops {
                    None => "—".to_owned(),
                    Some(0) => "none: the build kept the FP32 model".to_owned(),
                    Some(n) => n.to_string(),
                };
                let _ = writeln!(
                    w,
                    "| {} | {} | {} | {} | {} | {ops} |",
                    c.model,
                    cell(&c.inputs),
                    ms(&c.fp32),
                    ms(&c.kenosis),
                    ratio(c.speedup_vs_fp32),
                );
            }
            for c in self.coverage.iter().filter(|c| c.error.is_some()) {
                let _ = writeln!(
                    w,
                    "\n- {}: `{}`",
                    c.model,
                    cell(c.error.as_deref().unwrap_or(""))
                );
            }
        }

        self.families_section(w);
        self.bounds_section(w);

        let _ = writeln!(w, "\n## Notes\n");
        for m in &self.models {
            let _ = writeln!(
                w,
                "- **{}** ({}): {}; metric: {}; {} calibration / {} evaluation images.",
                m.model,
                m.file,
                m.preprocessing,
                m.metric,
                m.calibration_images,
                m.evaluation_images
            );
            if let Some(e) = &m.error {
                let _ = writeln!(w, "  - error: `{}`", cell(e));
            }
            for (name, r) in [("Kenosis", &m.kenosis), ("ORT quantizer", &m.ort)] {
                if let Some(e) = &r.error {
                    let _ = writeln!(w, "  - {name} {}: `{}`", r.status, cell(e));
                }
                if !r.notes.is_empty() {
                    let _ = writeln!(w, "  - {name}: {}", r.notes.join("; "));
                }
            }
        }
        s
    }

    /// The new families' section: per model, every quantizer's task metric, size, time and
    /// speed against FP32.
    fn families_section(&self, w: &mut String) {
        if self.families.is_empty() {
            return;
        }
        let _ = writeln!(w, "\n## New model families on rendered documents\n");
        let _ = writeln!(
            w,
            "Inputs drawn in DejaVu fonts from seeds (`kenosis_eval::documents`): {} \
             calibration inputs (the first seeds; Kenosis holds out a fifth), evaluation inputs \
             from other seeds. Each quantizer's task metric against FP32 on the evaluation \
             inputs; latency interleaved with FP32, 1 thread, on the first evaluation input. \
             An ORT result counts only where it is not slower than FP32 (\"counted\").\n",
            super::families::CALIBRATION_SAMPLES
        );
        for f in &self.families {
            let fp32 = f
                .fp32_latency
                .map_or("—".into(), |l| format!("{:.2} ms", l.median_ms));
            let _ = writeln!(
                w,
                "**{}** (FP32 {:.2} MB, {fp32}): {}; metric: {}; {} evaluation inputs.\n",
                f.model,
                f.fp32_bytes as f64 / 1e6,
                f.inputs,
                f.metric,
                f.evaluation_samples
            );
            if let Some(e) = &f.error {
                let _ = writeln!(w, "not measured: `{}`\n", cell(e));
                continue;
            }
            let _ = writeln!(
                w,
                "| quantizer | metric | counts | MB | quantize s | latency ms | speed-up vs FP32 | counted |"
            );
            let _ = writeln!(w, "|---|---:|---|---:|---:|---:|---:|---|");
            for r in &f.rows {
                let metric = match (r.metric, &r.error) {
                    (Some(m), _) => format!("{m:.4}"),
                    (None, Some(_)) => "failed".into(),
                    _ => "—".into(),
                };
                let counted = match (r.counted, r.speedup_vs_fp32) {
                    (_, None) => "—",
                    (true, _) => "yes",
                    (false, _) => "no: slower than FP32",
                };
                let _ = writeln!(
                    w,
                    "| {} | {metric} | {} | {} | {} | {} | {} | {counted} |",
                    r.quantizer,
                    cell(&r.detail),
                    mb(r.bytes),
                    secs(r.quantize_seconds),
                    ms(&r.latency),
                    ratio(r.speedup_vs_fp32),
                );
            }
            let _ = writeln!(w);
            for r in &f.rows {
                if let Some(s) = &r.summary {
                    let _ = writeln!(w, "- {}: `{}`", r.quantizer, cell(s));
                }
                if let Some(e) = &r.error {
                    let _ = writeln!(w, "- {}: error `{}`", r.quantizer, cell(e));
                }
            }
        }
    }

    /// Time and memory bounds of quantizing every model the bench quantized.
    fn bounds_section(&self, w: &mut String) {
        let mut rows: Vec<(
            String,
            Option<TimeBound>,
            Option<&super::memory::MemoryResult>,
        )> = Vec::new();
        for m in &self.models {
            rows.push((m.model.to_owned(), m.time_bound, m.memory.as_ref()));
        }
        for f in &self.families {
            rows.push((f.model.clone(), f.time_bound, f.memory.as_ref()));
        }
        for c in &self.coverage {
            rows.push((c.model.clone(), c.time_bound, None));
        }
        if let Some(m) = &self.memory {
            rows.push((m.model.clone(), None, Some(m)));
        }
        if rows.iter().all(|r| r.1.is_none() && r.2.is_none()) {
            return;
        }
        let _ = writeln!(w, "\n## Quantization time and peak memory bounds\n");
        let _ = writeln!(
            w,
            "Time: Kenosis (default options) against max({:.0} s, {:.0}x ORT's \
             `quantize_static` on the same samples), {:.0} s where ORT's was not measured \
             (the fetched models, synthetic calibration). Memory: peak resident set (VmHWM) \
             of a process that decodes the model, drops the file's bytes and quantizes it \
             (default options) on the calibration samples named, against {:.0}x the FP32 file \
             plus ONNX Runtime: the peak resident set, in the same run, of a process that \
             loaded ONNX Runtime and created a session of the FP32 model. Real samples are \
             read from `.npy` files, as a build script's calibration folder is; their float32 \
             size is shown, since they are held in memory while calibrating.\n",
            TimeBound::MIN_SECONDS,
            TimeBound::ORT_FACTOR,
            TimeBound::MIN_SECONDS,
            super::memory::TARGET_RATIO,
        );
        let _ = writeln!(
            w,
            "| model | Kenosis quantize s | ORT quantize_static s | time bound s | calibration | file MB | ORT baseline MB | peak RSS MB | memory bound MB | memory |"
        );
        let _ = writeln!(w, "|---|---:|---:|---|---|---:|---:|---:|---:|---|");
        for (model, t, m) in rows {
            let (kenosis, ort) = t.map_or(("—".into(), "—".into()), |t| {
                (secs(Some(t.kenosis_seconds)), secs(t.ort_static_seconds))
            });
            let calibration = m.map_or("—".into(), |m| match m.calibration_mb {
                Some(c) => format!("{} {} ({c:.0} MB)", m.samples, m.calibration),
                None => format!("{} {}", m.samples, m.calibration),
            });
            let one = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.0}"));
            let verdict = m.map_or("—".to_owned(), |m| match (m.met, &m.error) {
                (Some(true), _) => "met".into(),
                (Some(false), _) => "**missed**".into(),
                (None, Some(e)) => format!("not measured: `{}`", cell(e)),
                (None, None) => "—".into(),
            });
            let _ = writeln!(
                w,
                "| {model} | {kenosis} | {ort} | {} | {calibration} | {} | {} | {} | {} | {verdict} |",
                bound(&t),
                m.map_or("—".into(), |m| format!("{:.1}", m.file_mb)),
                one(m.and_then(|m| m.ort_baseline_mb)),
                one(m.and_then(|m| m.peak_rss_mb)),
                one(m.and_then(|m| m.bound_mb)),
            );
        }
    }
}
