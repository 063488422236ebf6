//! New model families (issue 54) on rendered documents: YOLOv8n DocLayNet (layout
//! detection), PP-OCRv6 small rec (text lines) and det (text maps), each judged by its own
//! task metric against FP32 (`kenosis_eval::documents`).
//!
//! Per model: render calibration and evaluation inputs in a DejaVu font from disjoint seeds;
//! quantize with Kenosis (default options, timed) and with ONNX Runtime's `quantize_static`
//! (same calibration samples) and `quantize_dynamic` (per-channel and per-tensor weights, no
//! data) where the bench has its Python; run every model on the evaluation inputs for the
//! task metric; time each against FP32 (interleaved, 1 thread, on the first evaluation
//! input). An ORT result counts only where it is not slower than FP32: a quantized model
//! slower than the original is not one anyone would ship.

use std::path::Path;
use std::time::Instant;

use kenosis_eval::documents::{self, DetectionMatch, Fonts};
use kenosis_quantize::{quantize, Calibration, QuantizeOptions};
use ndarray::Array4;
use serde::Serialize;

use super::measure::{self, Latency};
use super::memory::{self, MemoryResult};
use super::report::TimeBound;

/// Calibration inputs rendered per model (the build holds out a fifth of them).
pub const CALIBRATION_SAMPLES: usize = 50;

/// The task of a family, deciding its inputs and metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Document layout detection, YOLOv8 head `[1, 4 + classes, anchors]`.
    Layout,
    /// Text-line recognition, CTC scores `[1, steps, classes]`.
    TextLines,
    /// Text detection, a probability map `[1, 1, h, w]`.
    TextMap,
}

/// One family of the section.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// File in the fetched models' folder.
    pub file: &'static str,
    /// Its task.
    pub task: Task,
    /// Evaluation inputs (full run, `--quick`).
    pub evaluation: (usize, usize),
}

/// The families measured, in order.
pub const FAMILIES: [Family; 3] = [
    Family {
        file: "yolov8n-doclaynet.onnx",
        task: Task::Layout,
        evaluation: (20, 8),
    },
    Family {
        file: "ppocr-v6-rec-small.onnx",
        task: Task::TextLines,
        evaluation: (100, 40),
    },
    Family {
        file: "ppocr-v6-det-small.onnx",
        task: Task::TextMap,
        evaluation: (20, 8),
    },
];

impl Task {
    /// The model input for the sample of `seed`.
    pub fn input(self, fonts: &Fonts, seed: u64) -> Array4<f32> {
        match self {
            Task::Layout => documents::yolo_input(&documents::page(fonts, seed, 768, 1024), 1024),
            Task::TextLines => documents::rec_input(&documents::text_line(fonts, seed), 320),
            Task::TextMap => documents::det_input(&documents::page(fonts, seed, 576, 768)),
        }
    }

    /// The inputs, for the report.
    pub fn describe_inputs(self) -> &'static str {
        match self {
            Task::Layout => {
                "rendered 768x1024 document pages (title, headers, paragraphs, tables, \
                 pictures with captions, lists, page header and number) letterboxed to \
                 1024x1024, RGB 0-1"
            }
            Task::TextLines => {
                "rendered text lines of 2-6 words, 48 high, padded to 320 wide, BGR \
                 (x/255-0.5)/0.5"
            }
            Task::TextMap => "rendered 576x768 document pages, BGR, ImageNet mean and std",
        }
    }

    /// The metric, for the report.
    pub fn describe_metric(self) -> &'static str {
        match self {
            Task::Layout => {
                "share of FP32's detections (confidence 0.25, class-wise NMS at IoU 0.45) \
                 matched by a detection of the same class at IoU ≥ 0.5; extra detections \
                 per FP32 detection"
            }
            Task::TextLines => {
                "share of lines whose greedy CTC decoding (arg-max, repeats collapsed, blank \
                 0 dropped) equals FP32's"
            }
            Task::TextMap => "IoU of the probability map binarized at 0.3 with FP32's (pooled)",
        }
    }
}

/// One quantizer's row of a family.
#[derive(Debug, Clone, Serialize, Default)]
pub struct FamilyRow {
    /// `Kenosis (default options)`, `ORT quantize_static`, ...
    pub quantizer: String,
    /// Artifact size, bytes.
    pub bytes: Option<usize>,
    /// Quantization wall time, s (ORT: measured in Python, imports excluded).
    pub quantize_seconds: Option<f64>,
    /// The task metric (see [`Task::describe_metric`]).
    pub metric: Option<f64>,
    /// Layout: extra detections per FP32 detection.
    pub extra: Option<f64>,
    /// The metric's counts, e.g. `212 of 220 matched, 3 extra`.
    pub detail: String,
    pub latency: Option<Latency>,
    /// FP32 median latency over this model's.
    pub speedup_vs_fp32: Option<f64>,
    /// Whether the row counts: ORT's only when not slower than FP32; Kenosis's always (its
    /// build times INT8 against FP32 and ships the faster).
    pub counted: bool,
    /// Kenosis's one-line build report.
    pub summary: Option<String>,
    /// Why the row has no measurement.
    pub error: Option<String>,
}

/// One family's section.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyResult {
    pub model: String,
    pub inputs: &'static str,
    pub metric: &'static str,
    pub calibration_samples: usize,
    pub evaluation_samples: usize,
    pub fp32_bytes: usize,
    pub fp32_latency: Option<Latency>,
    pub rows: Vec<FamilyRow>,
    /// Kenosis's quantization time against its bound.
    pub time_bound: Option<TimeBound>,
    /// Peak memory of Kenosis quantizing the model (None when skipped).
    pub memory: Option<MemoryResult>,
    /// Why the family was not measured.
    pub error: Option<String>,
}

/// What [`measure`] needs from the bench.
pub struct Setup<'a> {
    /// The fetched models' folder.
    pub dir: &'a Path,
    /// Python with ORT's quantizer, if any.
    pub python: Option<&'a Path>,
    /// Folder for the artifacts.
    pub out: &'a Path,
    pub quick: bool,
    pub warmup: usize,
    pub runs: usize,
    /// Measure peak memory too.
    pub memory: bool,
    /// Only the families whose file name starts with one of these (all when empty).
    pub only: &'a [String],
}

/// Measures every family of [`FAMILIES`].
pub fn measure(setup: &Setup, log: impl Fn(String)) -> Vec<FamilyResult> {
    let fonts = documents::dejavu_fonts();
    FAMILIES
        .iter()
        .filter(|f| {
            setup.only.is_empty() || setup.only.iter().any(|o| f.file.starts_with(o.as_str()))
        })
        .map(|f| {
            log(format!("== family: {} ==", f.file));
            let mut r = FamilyResult {
                model: f.file.to_owned(),
                inputs: f.task.describe_inputs(),
                metric: f.task.describe_metric(),
                calibration_samples: CALIBRATION_SAMPLES,
                evaluation_samples: if setup.quick {
                    f.evaluation.1
                } else {
                    f.evaluation.0
                },
                fp32_bytes: 0,
                fp32_latency: None,
                rows: Vec::new(),
                time_bound: None,
                memory: None,
                error: None,
            };
            let started = Instant::now();
            match &fonts {
                None => {
                    r.error = Some(format!(
                        "no DejaVu fonts in $KENOSIS_FONT_DIR or {:?} (apt-get install \
                         fonts-dejavu-core)",
                        documents::FONT_DIRS
                    ))
                }
                Some(fonts) => {
                    if let Err(e) = measure_one(setup, f, fonts, &mut r, &log) {
                        r.error = Some(e);
                    }
                }
            }
            log(format!(
                "family {} done in {:.0} s",
                f.file,
                started.elapsed().as_secs_f64()
            ));
            r
        })
        .collect()
}

/// A model waiting for evaluation: its row and bytes.
struct Candidate {
    row: FamilyRow,
    bytes: Vec<u8>,
}

fn measure_one(
    setup: &Setup,
    family: &Family,
    fonts: &Fonts,
    r: &mut FamilyResult,
    log: &impl Fn(String),
) -> Result<(), String> {
    let path = setup.dir.join(family.file);
    if !path.is_file() {
        return Err(format!(
            "{} not found: `cargo xtask bench` fetches it (../shared/fetch-models.sh)",
            path.display()
        ));
    }
    let fp32 = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    r.fp32_bytes = fp32.len();
    let dir = setup
        .out
        .join("families")
        .join(family.file.trim_end_matches(".onnx"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;

    log(format!(
        "rendering {CALIBRATION_SAMPLES} calibration inputs"
    ));
    let task = family.task;
    let calib: Vec<Array4<f32>> = (0..CALIBRATION_SAMPLES as u64)
        .map(|s| task.input(fonts, s))
        .collect();

    // Kenosis, default options.
    log("Kenosis quantize (default options)".into());
    let t = Instant::now();
    let q = quantize(
        &path,
        &fp32,
        &Calibration::Data(kenosis_eval::calibration(&calib)),
        &QuantizeOptions::default(),
    );
    let seconds = t.elapsed().as_secs_f64();
    let mut candidates = Vec::new();
    let kenosis_seconds = match q {
        Ok(q) => {
            let line = q.report.summary_line();
            log(format!("Kenosis: {seconds:.1} s; {line}"));
            let _ = std::fs::write(dir.join("kenosis.int8.onnx"), &q.bytes);
            candidates.push(Candidate {
                row: FamilyRow {
                    quantizer: "Kenosis (default options)".into(),
                    bytes: Some(q.bytes.len()),
                    quantize_seconds: Some(seconds),
                    counted: true,
                    summary: Some(line),
                    ..Default::default()
                },
                bytes: q.bytes,
            });
            Some(seconds)
        }
        Err(e) => {
            log(format!("Kenosis failed: {e}"));
            r.rows.push(FamilyRow {
                quantizer: "Kenosis (default options)".into(),
                error: Some(e.to_string()),
                ..Default::default()
            });
            None
        }
    };

    // ONNX Runtime's quantizers.
    let mut ort_static_seconds = None;
    if let Some(python) = setup.python {
        log("ORT quantize_static (Python)".into());
        let out = dir.join("ort-static.int8.onnx");
        match super::ort_quantizer::quantize(python, &path, &calib, &out) {
            Ok(o) => {
                ort_static_seconds = Some(o.seconds);
                log(format!("ORT quantize_static: {:.1} s", o.seconds));
                candidates.push(Candidate {
                    row: FamilyRow {
                        quantizer: "ORT quantize_static".into(),
                        bytes: Some(o.bytes.len()),
                        quantize_seconds: Some(o.seconds),
                        ..Default::default()
                    },
                    bytes: o.bytes,
                });
            }
            Err(f) => r.rows.push(FamilyRow {
                quantizer: "ORT quantize_static".into(),
                error: Some(f.error),
                ..Default::default()
            }),
        }
        log("ORT quantize_dynamic (Python)".into());
        let (pc, pt) = (
            dir.join("ort-dynamic-pc.onnx"),
            dir.join("ort-dynamic-pt.onnx"),
        );
        let t = Instant::now();
        match super::transformer::ort_dynamic(python, &path, &pc, &pt) {
            Ok(()) => {
                let seconds = t.elapsed().as_secs_f64();
                for (name, p) in [
                    ("ORT quantize_dynamic, per-channel", &pc),
                    ("ORT quantize_dynamic, per-tensor (default)", &pt),
                ] {
                    match std::fs::read(p) {
                        Ok(bytes) => candidates.push(Candidate {
                            row: FamilyRow {
                                quantizer: name.into(),
                                bytes: Some(bytes.len()),
                                ..Default::default()
                            },
                            bytes,
                        }),
                        Err(e) => r.rows.push(FamilyRow {
                            quantizer: name.into(),
                            error: Some(format!("{}: {e}", p.display())),
                            ..Default::default()
                        }),
                    }
                }
                log(format!(
                    "ORT quantize_dynamic: {seconds:.1} s for both (Python process)"
                ));
            }
            Err(e) => r.rows.push(FamilyRow {
                quantizer: "ORT quantize_dynamic".into(),
                error: Some(e),
                ..Default::default()
            }),
        }
    }
    r.time_bound = kenosis_seconds.map(|k| TimeBound::new(k, ort_static_seconds));

    // Peak memory of Kenosis quantizing on the same samples.
    if setup.memory {
        log("peak memory (child processes)".into());
        r.memory = Some(memory::measure(&path, memory::Samples::Real(&calib)));
    }
    drop(calib);

    // The task metric on the evaluation inputs.
    log(format!(
        "task metric of {} model(s) on {} inputs",
        candidates.len(),
        r.evaluation_samples
    ));
    let eval: Vec<Array4<f32>> = (0..r.evaluation_samples as u64)
        .map(|s| task.input(fonts, 1_000_000 + s))
        .collect();
    let (reference, classes) = outputs(&fp32, &eval)?;
    for c in &mut candidates {
        match outputs(&c.bytes, &eval) {
            Ok((o, _)) => score(task, classes, &reference, &o, &mut c.row),
            Err(e) => c.row.error = Some(format!("inference: {e}")),
        }
    }

    // Latency, interleaved with FP32.
    log(format!(
        "latency: {} warm-up + {} runs, interleaved",
        setup.warmup, setup.runs
    ));
    let mut sessions = vec![measure::session(&fp32, None)?];
    let mut timed = Vec::new();
    for (i, c) in candidates.iter_mut().enumerate() {
        if c.row.error.is_some() {
            continue;
        }
        match measure::session(&c.bytes, None) {
            Ok(s) => {
                sessions.push(s);
                timed.push(i);
            }
            Err(e) => c.row.error = Some(format!("session: {e}")),
        }
    }
    let mut refs: Vec<&mut ort::session::Session> = sessions.iter_mut().collect();
    let l = measure::latency(&mut refs, &eval[0], setup.warmup, setup.runs)?;
    r.fp32_latency = Some(l[0]);
    for (k, &i) in timed.iter().enumerate() {
        let row = &mut candidates[i].row;
        row.latency = Some(l[k + 1]);
        let speedup = l[0].median_ms / l[k + 1].median_ms;
        row.speedup_vs_fp32 = Some(speedup);
        if !row.quantizer.starts_with("Kenosis") {
            row.counted = speedup >= 1.0;
        }
    }
    for c in candidates {
        log(format!(
            "  {:<44} {} ({}), {}",
            c.row.quantizer,
            c.row.metric.map_or("—".into(), |m| format!("{m:.4}")),
            c.row.detail,
            c.row
                .speedup_vs_fp32
                .map_or("—".into(), |s| format!("{s:.2}x FP32 speed"))
        ));
        r.rows.push(c.row);
    }
    // Kenosis first, then ORT's in the order run.
    r.rows
        .sort_by_key(|row| !row.quantizer.starts_with("Kenosis"));
    Ok(())
}

/// Output 0 of `bytes` on each input, flattened, with the length of its last axis.
fn outputs(bytes: &[u8], inputs: &[Array4<f32>]) -> Result<(Vec<Vec<f32>>, usize), String> {
    let mut s = measure::session(bytes, None)?;
    let mut last = 0;
    let values = inputs
        .iter()
        .map(|x| {
            let input = ort::value::Tensor::from_array(x.clone()).map_err(|e| e.to_string())?;
            let out = s.run(ort::inputs![input]).map_err(|e| e.to_string())?;
            let (shape, v) = out[0]
                .try_extract_tensor::<f32>()
                .map_err(|e| e.to_string())?;
            last = shape.last().map_or(0, |&d| d as usize);
            Ok(v.to_vec())
        })
        .collect::<Result<_, String>>()?;
    Ok((values, last))
}

/// Fills `row`'s metric from the reference's and the model's outputs (`last`: the length of
/// the output's last axis).
fn score(
    task: Task,
    last: usize,
    reference: &[Vec<f32>],
    candidate: &[Vec<f32>],
    row: &mut FamilyRow,
) {
    match task {
        Task::Layout => {
            let decode = documents::decode_doclaynet;
            let m = (reference.iter().zip(candidate))
                .map(|(r, c)| DetectionMatch::of(&decode(r), &decode(c)))
                .fold(DetectionMatch::default(), |a, b| a + b);
            row.metric = Some(m.matched_share());
            row.extra = Some(m.extra_share());
            row.detail = format!(
                "{} of {} matched, {} extra",
                m.matched, m.reference, m.extra
            );
        }
        Task::TextLines => {
            // [1, steps, classes].
            let classes = last;
            let same = (reference.iter().zip(candidate))
                .filter(|(r, c)| {
                    documents::ctc_greedy(r, classes) == documents::ctc_greedy(c, classes)
                })
                .count();
            row.metric = Some(same as f64 / reference.len() as f64);
            row.detail = format!("{same} of {} lines identical", reference.len());
        }
        Task::TextMap => {
            let (mut inter, mut union) = (0u64, 0u64);
            for (r, c) in reference.iter().zip(candidate) {
                let (i, u) = documents::binary_overlap(r, c, documents::DET_THRESHOLD);
                inter += i;
                union += u;
            }
            row.metric = Some(inter as f64 / union.max(1) as f64);
            row.detail = format!("{inter} of {union} pixels");
        }
    }
}
