//! ONNX Runtime sessions that report errors instead of panicking, the fidelity pass (several
//! candidates against FP32 in one pass over the images) and interleaved latency.

use std::path::{Path, PathBuf};
use std::time::Instant;

use ndarray::Array4;
use ort::session::{builder::GraphOptimizationLevel, Session};
use ort::value::Tensor;
use serde::Serialize;

use kenosis_eval::{argmax, conv_counts, cosine, op_types};

/// A session at `ORT_ENABLE_ALL` (1 intra-op thread, as every benchmark row measures),
/// optionally saving the optimized graph to `save_optimized`.
pub fn session(bytes: &[u8], save_optimized: Option<&Path>) -> Result<Session, String> {
    kenosis_eval::try_session(bytes, GraphOptimizationLevel::All, save_optimized, &[])
}

/// Runs a single-input model on `x`, returning output 0 flattened.
pub fn run(session: &mut Session, x: &Array4<f32>) -> Result<Vec<f32>, String> {
    let input = Tensor::from_array(x.clone()).map_err(|e| e.to_string())?;
    let outputs = session
        .run(ort::inputs![input])
        .map_err(|e| e.to_string())?;
    let (_, values) = outputs[0]
        .try_extract_tensor::<f32>()
        .map_err(|e| e.to_string())?;
    Ok(values.to_vec())
}

/// Fidelity of one candidate against FP32.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Fidelity {
    /// Fraction of images with the same argmax (classifiers only).
    pub top1_agreement: Option<f64>,
    pub mean_cosine: f64,
    pub min_cosine: f64,
    /// Mean and min cosine over a subset of each output row (YOLOX: the objectness and
    /// class scores, columns 4..85), when the model defines one.
    pub score_mean_cosine: Option<f64>,
    pub score_min_cosine: Option<f64>,
    pub images: usize,
}

/// Columns `start..end` of each row of `width` values: a secondary cosine is computed on them.
#[derive(Debug, Clone, Copy)]
pub struct Columns {
    pub width: usize,
    pub start: usize,
    pub end: usize,
}

impl Columns {
    fn select(&self, v: &[f32]) -> Vec<f32> {
        v.chunks(self.width)
            .flat_map(|row| &row[self.start.min(row.len())..self.end.min(row.len())])
            .copied()
            .collect()
    }
}

#[derive(Debug, Clone)]
struct Acc {
    /// Whether each image's top-1 matched, by its index in the file list.
    agreed: Vec<(usize, bool)>,
    sum: f64,
    min: f64,
    score_sum: f64,
    score_min: f64,
    n: usize,
}

impl Acc {
    const EMPTY: Acc = Acc {
        agreed: Vec::new(),
        sum: 0.0,
        min: f64::INFINITY,
        score_sum: 0.0,
        score_min: f64::INFINITY,
        n: 0,
    };
    fn add(&mut self, image: usize, reference: &[f32], y: &[f32], scores: Option<Columns>) {
        self.agreed.push((image, argmax(reference) == argmax(y)));
        let c = cosine(reference, y);
        self.sum += c;
        self.min = self.min.min(c);
        if let Some(cols) = scores {
            let c = cosine(&cols.select(reference), &cols.select(y));
            self.score_sum += c;
            self.score_min = self.score_min.min(c);
        }
        self.n += 1;
    }
    fn merge(mut self, o: Acc) -> Acc {
        self.agreed.extend(o.agreed);
        Acc {
            agreed: self.agreed,
            sum: self.sum + o.sum,
            min: self.min.min(o.min),
            score_sum: self.score_sum + o.score_sum,
            score_min: self.score_min.min(o.score_min),
            n: self.n + o.n,
        }
    }
}

/// One candidate's fidelity and, per image of the file list (in its order), whether its
/// top-1 class matched FP32's.
pub type FidelityWithAgreement = (Fidelity, Vec<bool>);

/// Compares every candidate model against `fp32` on `files` (loaded with `load`), in one
/// pass: each image is decoded once and the FP32 output computed once. The images are split
/// over `threads` workers, each with its own single-threaded sessions.
pub fn fidelity(
    fp32: &[u8],
    candidates: &[&[u8]],
    files: &[PathBuf],
    load: &(dyn Fn(&Path) -> Array4<f32> + Sync),
    classifier: bool,
    scores: Option<Columns>,
    threads: usize,
) -> Result<Vec<Result<FidelityWithAgreement, String>>, String> {
    let threads = threads.max(1).min(files.len().max(1));
    let per_worker: Vec<Result<Vec<Result<Acc, String>>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<Vec<Result<Acc, String>>, String> {
                    let mut reference = session(fp32, None)?;
                    let mut sessions: Vec<Result<Session, String>> =
                        candidates.iter().map(|b| session(b, None)).collect();
                    let mut accs = vec![Acc::EMPTY; candidates.len()];
                    for (image, file) in files.iter().enumerate().skip(t).step_by(threads) {
                        let x = load(file);
                        let r = run(&mut reference, &x)?;
                        for (sess, acc) in sessions.iter_mut().zip(&mut accs) {
                            let Ok(s) = sess else { continue };
                            match run(s, &x) {
                                Ok(y) => acc.add(image, &r, &y, scores),
                                Err(e) => *sess = Err(format!("{}: {e}", file.display())),
                            }
                        }
                    }
                    Ok(sessions
                        .into_iter()
                        .zip(accs)
                        .map(|(s, a)| s.map(|_| a))
                        .collect())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("fidelity worker panicked"))
            .collect()
    });
    let mut total: Vec<Result<Acc, String>> = vec![Ok(Acc::EMPTY); candidates.len()];
    for worker in per_worker {
        for (t, w) in total.iter_mut().zip(worker?) {
            *t = match (std::mem::replace(t, Ok(Acc::EMPTY)), w) {
                (Ok(a), Ok(b)) => Ok(a.merge(b)),
                (Err(e), _) | (_, Err(e)) => Err(e),
            };
        }
    }
    Ok(total
        .into_iter()
        .map(|acc| {
            acc.map(|mut a| {
                let agree = a.agreed.iter().filter(|&&(_, agreed)| agreed).count();
                let f = Fidelity {
                    top1_agreement: classifier.then(|| agree as f64 / a.n as f64),
                    mean_cosine: a.sum / a.n as f64,
                    min_cosine: a.min,
                    score_mean_cosine: scores.map(|_| a.score_sum / a.n as f64),
                    score_min_cosine: scores.map(|_| a.score_min),
                    images: a.n,
                };
                a.agreed.sort_unstable_by_key(|&(image, _)| image);
                (f, a.agreed.into_iter().map(|(_, agreed)| agreed).collect())
            })
        })
        .collect())
}

/// The difference in top-1 agreement of two models scored on the same images, with a 95%
/// confidence interval for the difference of paired proportions (Wald interval with the
/// McNemar variance; Agresti, "Categorical Data Analysis", comparing dependent proportions in
/// matched pairs). Only the images where exactly one model agrees with FP32 inform it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PairedTop1 {
    /// Images where only the first model's top-1 matched FP32.
    pub only_first: usize,
    /// Images where only the second model's top-1 matched FP32.
    pub only_second: usize,
    /// Images both models were scored on.
    pub images: usize,
    /// First minus second, in percentage points.
    pub difference_points: f64,
    /// Half-width of the 95% interval, in percentage points.
    pub half_width_points: f64,
}

impl PairedTop1 {
    /// `None` when the lists differ in length or are empty.
    pub fn new(first: &[bool], second: &[bool]) -> Option<Self> {
        if first.len() != second.len() || first.is_empty() {
            return None;
        }
        let count = |a: bool, b: bool| {
            first
                .iter()
                .zip(second)
                .filter(|&(&x, &y)| x == a && y == b)
                .count()
        };
        let (b, c, n) = (count(true, false), count(false, true), first.len());
        let (b_f, c_f, n_f) = (b as f64, c as f64, n as f64);
        let difference = (b_f - c_f) / n_f;
        let variance = ((b_f + c_f) - (b_f - c_f).powi(2) / n_f) / (n_f * n_f);
        Some(Self {
            only_first: b,
            only_second: c,
            images: n,
            difference_points: 100.0 * difference,
            half_width_points: 100.0 * 1.96 * variance.max(0.0).sqrt(),
        })
    }
}

/// Latency statistics of one model, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    pub median_ms: f64,
    pub min_ms: f64,
    pub p90_ms: f64,
    pub runs: usize,
}

/// Latency of each session (at its own intra-op thread count) on the same input `x`,
/// interleaved (see [`interleaved`]).
pub fn latency(
    sessions: &mut [&mut Session],
    x: &Array4<f32>,
    warmup: usize,
    runs: usize,
) -> Result<Vec<Latency>, String> {
    interleaved(sessions, warmup, runs, |s| {
        let t = Instant::now();
        run(s, x)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    })
}

/// Latency of each session as timed by `run_once` (milliseconds of one run), interleaved:
/// after `warmup` rounds, `runs` rounds each run every model once, starting with a different
/// one each round, so load changes on the machine hit all models alike.
pub fn interleaved(
    sessions: &mut [&mut Session],
    warmup: usize,
    runs: usize,
    mut run_once: impl FnMut(&mut Session) -> Result<f64, String>,
) -> Result<Vec<Latency>, String> {
    let n = sessions.len();
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); n];
    for round in 0..warmup + runs {
        for k in 0..n {
            let i = (round + k) % n;
            let ms = run_once(sessions[i])?;
            if round >= warmup {
                times[i].push(ms);
            }
        }
    }
    Ok(times
        .into_iter()
        .map(|mut t| {
            t.sort_by(f64::total_cmp);
            let pick = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize];
            let median = if t.len() % 2 == 0 {
                (t[t.len() / 2 - 1] + t[t.len() / 2]) / 2.0
            } else {
                t[t.len() / 2]
            };
            Latency {
                median_ms: median,
                min_ms: t[0],
                p90_ms: pick(0.9),
                runs: t.len(),
            }
        })
        .collect())
}

/// Intra-op thread counts the bench times: 1, 2, 4 and all logical CPUs (once each).
pub fn thread_counts() -> Vec<usize> {
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts = vec![1, 2, 4, all];
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// FP32 against Kenosis INT8 at one intra-op thread count, timed as the build's speed check
/// times them (`kenosis_quantize::speed::measure_rounds`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ThreadLatency {
    /// Intra-op threads of both sessions.
    pub threads: usize,
    /// Median FP32 latency, milliseconds.
    pub fp32_ms: f64,
    /// Median INT8 latency, milliseconds.
    pub kenosis_ms: f64,
    /// Median of the per-round ratios FP32 time / INT8 time: above 1 when INT8 is faster.
    pub speedup: f64,
    /// The 95% confidence interval of [`speedup`](Self::speedup), `[low, high]`: the noise
    /// band measured in the same run.
    pub speedup_band: [f64; 2],
}

/// FP32 (`fp32`) against Kenosis INT8 (`int8`) on `x` at each of [`thread_counts`]:
/// `runs` rounds per count, one run of each model per round after the speed check's warm-up,
/// as `kenosis_quantize::speed` times a build's artifact (ONNX Runtime's default spinning, as
/// programs run it). Empty when Kenosis's model did not build.
///
/// # Errors
/// ONNX Runtime's message when a session cannot be made or run.
pub fn thread_latencies(
    fp32: &[u8],
    int8: Option<&[u8]>,
    x: &Array4<f32>,
    runs: usize,
) -> Result<Vec<ThreadLatency>, String> {
    use kenosis_quantize::calibrate::data::input_specs;
    use kenosis_quantize::calibrate::SampleValue;
    use kenosis_quantize::onnx::ModelProto;
    use prost::Message;

    let Some(int8) = int8 else {
        return Ok(Vec::new());
    };
    let decode = |bytes: &[u8]| ModelProto::decode(bytes).map_err(|e| e.to_string());
    let (a, b) = (decode(fp32)?, decode(int8)?);
    let names: Vec<String> = input_specs(a.graph.as_ref().ok_or("the FP32 model has no graph")?)
        .into_iter()
        .map(|s| s.name)
        .collect();
    let sample = [SampleValue::F32(x.clone().into_dyn())];
    let path = Path::new("bench");
    thread_counts()
        .into_iter()
        .map(|threads| {
            let t = kenosis_quantize::speed::measure_rounds(
                (&a, &b),
                &names,
                &sample,
                path,
                Some(threads),
                runs,
            )
            .map_err(|e| e.to_string())?;
            Ok(ThreadLatency {
                threads,
                fp32_ms: t.fp32_ms,
                kenosis_ms: t.int8_ms,
                speedup: t.speedup,
                speedup_band: t.speedup_band,
            })
        })
        .collect()
}

/// Conv fusion in ONNX Runtime's optimized graph (saved at `ORT_ENABLE_ALL`).
#[derive(Debug, Clone, Serialize)]
pub struct ConvFusion {
    /// `QLinearConv` nodes.
    pub qlinear_conv: usize,
    /// `Conv`, `FusedConv` and `NchwcConv` nodes (float convolutions).
    pub float_conv: usize,
    /// No float convolution left and at least one `QLinearConv`.
    pub all_fused: bool,
    /// Convs the QDQ model quantized (weight from a DequantizeLinear), before ORT's fusion.
    pub quantized_convs: usize,
    /// Every quantized Conv became a `QLinearConv` (the rest were left FP32 by the quantizer).
    pub all_quantized_fused: bool,
    /// The optimized graph this was counted in.
    pub optimized_model: PathBuf,
}

/// Counts the convolutions of a saved optimized graph, against the Convs the QDQ model
/// `qdq` quantized.
pub fn conv_fusion(qdq: &[u8], optimized: &Path) -> ConvFusion {
    let quantized_convs = quantized_convs(qdq);
    let (qlinear_conv, float_conv) = conv_counts(&op_types(optimized));
    ConvFusion {
        qlinear_conv,
        float_conv,
        all_fused: float_conv == 0 && qlinear_conv > 0,
        quantized_convs,
        all_quantized_fused: qlinear_conv == quantized_convs,
        optimized_model: optimized.to_owned(),
    }
}

/// Conv nodes of a QDQ model whose weight comes from a DequantizeLinear.
fn quantized_convs(qdq: &[u8]) -> usize {
    let Ok(model) = kenosis_quantize::onnx::decode(Path::new("qdq"), qdq) else {
        return 0;
    };
    let graph = model.graph.expect("decode checks the graph");
    let dequantized: std::collections::HashSet<&str> = graph
        .node
        .iter()
        .filter(|n| n.op_type() == "DequantizeLinear")
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    graph
        .node
        .iter()
        .filter(|n| n.op_type() == "Conv")
        .filter(|n| {
            n.input
                .get(1)
                .is_some_and(|w| dequantized.contains(w.as_str()))
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::PairedTop1;

    #[test]
    fn paired_top1_counts_only_the_discordant_images() {
        // Image 0 both agree, 1-2 only the first, 3 only the second, 4 neither.
        let first = [true, true, true, false, false];
        let second = [true, false, false, true, false];
        let p = PairedTop1::new(&first, &second).unwrap();
        assert_eq!((p.only_first, p.only_second, p.images), (2, 1, 5));
        assert!((p.difference_points - 20.0).abs() < 1e-9);
        // Var = ((2 + 1) - (2 - 1)² / 5) / 5² = 0.112.
        assert!((p.half_width_points - 100.0 * 1.96 * 0.112f64.sqrt()).abs() < 1e-9);
        // Swapping the models negates the difference, not the interval.
        let q = PairedTop1::new(&second, &first).unwrap();
        assert!((q.difference_points + 20.0).abs() < 1e-9);
        assert!((q.half_width_points - p.half_width_points).abs() < 1e-12);
    }

    #[test]
    fn paired_top1_needs_the_same_images() {
        assert!(PairedTop1::new(&[true], &[true, false]).is_none());
        assert!(PairedTop1::new(&[], &[]).is_none());
    }
}
