//! Comparing a model with its FP32 original on samples, as `kenosis validate` does: how
//! closely the outputs agree ([`agreement`]), which ops lose the fidelity ([`attribute`]),
//! and how fast both run ([`latency`]).
//!
//! The other model can be a Kenosis INT8 artifact, another quantizer's, or a 16-bit cast
//! (see [`crate::cast`]). Agreement is measured as the build's fidelity check measures it
//! (see [`crate::FidelityReport`]): per sample the cosine similarity of every float output
//! both models have, the sample counting with its worst output, and the argmax of the first
//! such output.
//!
//! ```no_run
//! use std::path::Path;
//!
//! use kenosis_quantize::compare::{self, Model};
//! use kenosis_quantize::model::decode;
//! use kenosis_quantize::samples::{calibration_data, input_specs};
//! use kenosis_quantize::{normalize_decoded, Calibration, QuantizeOptions};
//!
//! let read = |path: &'static str| -> kenosis_quantize::Result<_> {
//!     let bytes = std::fs::read(path).map_err(|e| kenosis_quantize::Error::io(path, e))?;
//!     Ok((Path::new(path), decode(Path::new(path), &bytes)?))
//! };
//! let (fp32_path, fp32) = read("net.onnx")?;
//! let (int8_path, int8) = read("net.int8.onnx")?;
//! // Samples made as a build makes them, here from a folder of `.npy` files.
//! let normalized = normalize_decoded(fp32_path, fp32.clone())?;
//! let specs = input_specs(normalized.graph());
//! let calibration = Calibration::NpyDir("samples".into());
//! let options = QuantizeOptions::default();
//! let (data, _) = calibration_data(&calibration, normalized.model(), &specs, &options, fp32_path)?;
//! let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
//! let a = Model { path: fp32_path, proto: &fp32 };
//! let b = Model { path: int8_path, proto: &int8 };
//! let agreement = compare::agreement(a, b, &names, &data.samples, &mut |_| {})?;
//! println!("cosine {:.4} on {} samples", agreement.mean_cosine, agreement.samples);
//! # Ok::<(), kenosis_quantize::Error>(())
//! ```

mod attribution;

use std::path::Path;

use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionOutputs};
use ort::value::DynValue;
use prost::Message;

pub use attribution::{attribute, Attribution, OpLoss, ATTRIBUTION_SAMPLES};

use crate::calibrate::session::{borrowed, sample_inputs, session};
use crate::calibrate::SampleValue;
use crate::fidelity::cosine;
use crate::onnx::ModelProto;
use crate::Result;

/// One of the two models compared: its file (named in errors) and its decoded contents.
#[derive(Debug, Clone, Copy)]
pub struct Model<'a> {
    /// Where the model was read from.
    pub path: &'a Path,
    /// The decoded model (see [`crate::model::decode`]).
    pub proto: &'a ModelProto,
}

/// How far a comparison is, for a progress display: `done` of `total` steps of `what`.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    /// What is being done, e.g. "running models/net.onnx on the samples".
    pub what: &'a str,
    /// Steps done.
    pub done: usize,
    /// Steps in all.
    pub total: usize,
}

/// Agreement over the samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    /// Samples compared.
    pub samples: usize,
    /// Mean over samples of each sample's worst output cosine.
    pub mean_cosine: f64,
    /// The worst sample's.
    pub min_cosine: f64,
    /// Samples whose first float output has the same argmax in both models.
    pub top1_agree: usize,
    /// One-sided 95% lower confidence bound of `mean_cosine` (normal approximation, as
    /// [`crate::Measured`] gives it); `mean_cosine` itself for fewer than two samples.
    pub cosine_lower_bound: f64,
    /// Why the figures say nothing about the model, when they do not: see [`Uninformative`].
    pub uninformative: Option<Uninformative>,
}

/// Why an agreement says nothing: the FP32 model's first compared output does not depend on
/// the samples, so any model that outputs the same agrees (a saturated Softmax on synthetic
/// inputs of the wrong range, a dead branch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uninformative {
    /// The output holds one value repeated, on every sample.
    Constant {
        /// The output's name.
        output: String,
    },
    /// The output is the same on every sample (two or more samples).
    SameOnEverySample {
        /// The output's name.
        output: String,
    },
}

impl std::fmt::Display for Uninformative {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Constant { output } => write!(
                f,
                "the FP32 model's output `{output}` holds one value repeated on every sample"
            ),
            Self::SameOnEverySample { output } => write!(
                f,
                "the FP32 model's output `{output}` is the same on every sample (saturated)"
            ),
        }
    }
}

/// Relative difference (to the output's largest magnitude) below which two values count as
/// the same in [`uninformative`].
const SAME: f32 = 1e-6;

/// Whether the FP32 outputs `first` (the first compared output of each sample, named
/// `output`) depend on the samples; see [`Uninformative`].
fn uninformative(output: &str, first: &[&Vec<f32>]) -> Option<Uninformative> {
    let scale = |v: &[f32]| {
        v.iter()
            .fold(0f32, |m, x| m.max(x.abs()))
            .max(f32::MIN_POSITIVE)
    };
    let constant = |v: &[f32]| {
        let s = scale(v);
        v.iter().all(|x| (x - v[0]).abs() <= SAME * s)
    };
    if !first.is_empty() && first.iter().all(|v| v.is_empty() || constant(v)) {
        return Some(Uninformative::Constant {
            output: output.to_owned(),
        });
    }
    let base = first.first()?;
    let s = scale(base);
    let same = |v: &&Vec<f32>| {
        v.len() == base.len()
            && v.iter()
                .zip(base.iter())
                .all(|(x, y)| (x - y).abs() <= SAME * s)
    };
    (first.len() >= 2 && first.iter().all(same)).then(|| Uninformative::SameOnEverySample {
        output: output.to_owned(),
    })
}

/// The agreement of `other` with `fp32` on `samples` (one value per input of `names`, in
/// that order), each model run at ONNX Runtime's full graph optimizations on one thread, as
/// programs run it. `progress` is called after each run.
///
/// # Errors
/// [`crate::Error::Runtime`] naming the file when ONNX Runtime fails; [`crate::Error::Calibration`] when
/// a sample does not fit; [`crate::Error::Unsupported`] naming `other` when the models share no
/// float output.
pub fn agreement(
    fp32: Model<'_>,
    other: Model<'_>,
    names: &[String],
    samples: &[Vec<SampleValue>],
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Agreement> {
    let total = 2 * samples.len();
    let mut done = 0;
    let mut outputs = |model: Model<'_>| -> Result<Vec<NamedOutputs>> {
        let what = format!("running {} on the samples", model.path.display());
        let bytes = model.proto.encode_to_vec();
        let mut s = session(model.path, bytes, GraphOptimizationLevel::All, 1)?;
        samples
            .iter()
            .map(|sample| {
                let inputs = sample_inputs(names, sample, model.path)?;
                let out = run(&mut s, model.path, &inputs)?;
                done += 1;
                progress(Progress {
                    what: &what,
                    done,
                    total,
                });
                Ok(out
                    .iter()
                    .filter_map(|(name, v)| {
                        let (_, values) = v.try_extract_tensor::<f32>().ok()?;
                        Some((name.to_owned(), values.to_vec()))
                    })
                    .collect())
            })
            .collect()
    };
    let a = outputs(fp32)?;
    let b = outputs(other)?;
    let mut cosines = Vec::new();
    let mut top1_agree = 0;
    // The first compared output of FP32 on each sample, and its name.
    let mut first_outputs: Vec<&Vec<f32>> = Vec::new();
    let mut first_name = "";
    for (a, b) in a.iter().zip(&b) {
        let shared: Vec<(&str, &Vec<f32>, &Vec<f32>)> = (a.iter())
            .filter_map(|(name, x)| {
                (b.iter().find(|(n, _)| n == name)).map(|(_, y)| (name.as_str(), x, y))
            })
            .collect();
        let Some(&(name, first_a, first_b)) = shared.first() else {
            return Err(crate::Error::Unsupported {
                path: other.path.to_owned(),
                reason: format!(
                    "shares no float output with {} to compare",
                    fp32.path.display()
                ),
            });
        };
        let worst = (shared.iter())
            .map(|(_, x, y)| cosine(x, y))
            .fold(f64::INFINITY, f64::min);
        cosines.push(worst);
        top1_agree += usize::from(argmax(first_a) == argmax(first_b));
        first_outputs.push(first_a);
        first_name = name;
    }
    let n = cosines.len().max(1) as f64;
    let mean_cosine = cosines.iter().sum::<f64>() / n;
    let cosine_lower_bound = if cosines.len() < 2 {
        mean_cosine
    } else {
        let variance = (cosines.iter())
            .map(|c| (c - mean_cosine).powi(2))
            .sum::<f64>()
            / (n - 1.0);
        mean_cosine - 1.645 * variance.sqrt() / n.sqrt()
    };
    Ok(Agreement {
        samples: cosines.len(),
        mean_cosine,
        min_cosine: cosines.iter().copied().fold(f64::INFINITY, f64::min),
        top1_agree,
        cosine_lower_bound,
        uninformative: uninformative(first_name, &first_outputs),
    })
}

/// One sample's float outputs, by output name.
type NamedOutputs = Vec<(String, Vec<f32>)>;

fn argmax(v: &[f32]) -> Option<usize> {
    (v.iter().enumerate())
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
}

/// Median latencies of `fp32` and `other` on `sample` (one value per input of `names`), in
/// milliseconds, over exactly `runs` interleaved runs of each (at least 1) at `threads`
/// intra-op threads (at least 1), sessions made as `kenosis-runtime` makes them. The speed
/// check of a build times the same way (see [`crate::SpeedReport`]).
///
/// # Errors
/// [`crate::Error::Runtime`] naming `fp32.path` when ONNX Runtime fails;
/// [`crate::Error::Calibration`] when the sample does not fit.
pub fn latency(
    fp32: Model<'_>,
    other: Model<'_>,
    names: &[String],
    sample: &[SampleValue],
    (runs, threads): (usize, usize),
) -> Result<(f64, f64)> {
    crate::speed::measure_runs(
        fp32.proto,
        other.proto,
        names,
        sample,
        fp32.path,
        (runs, threads),
    )
}

/// The outputs of `session` (the model at `path`) on `inputs`.
fn run<'s>(
    session: &'s mut Session,
    path: &Path,
    inputs: &[(String, DynValue)],
) -> Result<SessionOutputs<'s>> {
    session
        .run(borrowed(inputs))
        .map_err(|e| crate::error::runtime(path, e))
}
