//! Measuring the INT8 model against FP32 on held-out samples, and the fidelity floor:
//! keep the most sensitive ops and activations in FP32 until the INT8 model is close enough.
//!
//! Each output is judged as its shape and FP32 values ask ([`OutputKind`]): cosine over its
//! finite elements always, and next to it arg-max agreement along the last axis for scores
//! or the mean error relative to the output's range for values; non-finite values that
//! differ are counted apart. A cosine alone says 0.999 for an attention map whose row-wise
//! answer changed on a sixth of its rows, and 0.987 for quality scores off by a fifth of
//! their scale.
//!
//! What the build is held to ([`Judge`]): the user's `min_cosine` / `min_top1_agreement`,
//! or else, with real held-out samples, [`DEFAULT_FLOOR`]. A missed target fails the build;
//! a missed default floor ships the FP32 model with a warning.
//!
//! Sensitivity is measured, not guessed: for each candidate (a quantized op, or a quantized
//! activation with its writer and readers), the model is rebuilt with only that candidate in
//! FP32 and its gain on the calibration samples (not the held-out ones) is recorded
//! (leave-one-out, in the spirit of the layer-wise sensitivity analysis of Wu et al. 2020,
//! "Integer Quantization for Deep Learning Inference", §6). Candidates are then returned to
//! FP32 greedily, most gain per node first, until the judge holds on the held-out samples
//! (see [`meet_target`]). No rule names a pattern: a spectral front end (a MatMul or Conv
//! feeding `Pow`/`Log` of small values) is found because returning it gains most.
//!
//! A cosine target holds when the one-sided 95% lower confidence bound of the mean cosine
//! (mean − 1.645·s/√n, normal approximation over the n held-out samples) reaches it, not
//! the sample mean alone: a mean over a few held-out samples overstates, about as often as
//! not, what the artifact reaches on other inputs.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use ort::session::builder::GraphOptimizationLevel;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::calibrate::session::{
    borrowed, encode_with_observed_outputs, sample_inputs, session_with_config,
};
use crate::calibrate::SampleValue;
use crate::error::{Error, Result, Unsupported};
use crate::graph::GraphIndex;
use crate::kernels::Evaluation;
use crate::onnx::{DataType, GraphProto, ModelProto};
use crate::quantize::build::{Built, KeptFloat};
use crate::quantize::reason::FloatReason;

/// One-sided 95% standard-normal quantile: the cosine target must hold at this many standard
/// errors below the held-out mean.
const CONFIDENCE_Z: f64 = 1.645;

pub use crate::options::FidelityTarget as Target;

/// Whether a measurement meets a [`Target`].
trait MetBy {
    fn met_by(&self, m: &Measured) -> bool;
}

impl MetBy for Target {
    fn met_by(&self, m: &Measured) -> bool {
        self.min_cosine.is_none_or(|t| m.cosine_lower_bound >= t)
            && self
                .min_top1_agreement
                .is_none_or(|t| m.top1_agreement >= t)
    }
}

/// INT8-vs-FP32 agreement on a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Measured {
    /// Mean over samples of the cosine similarity of the compared tensors, each flattened:
    /// per sample, that of the worst float output (see [`Compared::FloatOutputs`]).
    pub mean_cosine: f64,
    /// One-sided 95% lower confidence bound of the mean cosine: mean − 1.645·s/√n, with s
    /// the sample standard deviation over the n samples (the mean itself when n < 2).
    #[serde(default)]
    pub cosine_lower_bound: f64,
    /// Fraction of samples with the same argmax of the first compared output.
    pub top1_agreement: f64,
    /// Lowest arg-max agreement over the score outputs ([`OutputKind::Scores`]): the share
    /// of decisive rows whose arg-max along the last axis matches FP32's; `None` without a
    /// score output.
    #[serde(default)]
    pub argmax_agreement: Option<f64>,
    /// Decisive rows behind [`Measured::argmax_agreement`] (that output's, over the
    /// samples).
    #[serde(default)]
    pub argmax_rows: u64,
    /// Highest mean error relative to the output's FP32 range over the value outputs
    /// ([`OutputKind::Values`]); `None` without a value output.
    #[serde(default)]
    pub relative_error: Option<f64>,
    /// Elements, over every compared output and sample, where FP32 or INT8 is non-finite and
    /// the two differ (see [`kenosis_numerics::agreement::Agreement`]).
    #[serde(default)]
    pub non_finite_mismatches: u64,
}

impl Measured {
    /// How far this measurement is from FP32, for ranking fallback candidates against the
    /// default floor: cosine shortfall, relative error, arg-max disagreement, and 1 when any
    /// non-finite value differs.
    fn loss(&self) -> f64 {
        (1.0 - self.mean_cosine)
            + self.relative_error.unwrap_or(0.0)
            + (1.0 - self.argmax_agreement.unwrap_or(1.0))
            + if self.non_finite_mismatches > 0 {
                1.0
            } else {
                0.0
            }
    }
}

/// Last-axis length up to which an output holds values (a scalar, a few quality scores, a
/// box's four coordinates) rather than scores to pick from.
pub const MAX_VALUES_AXIS: usize = 4;

/// Share of the output's FP32 range (over every compared sample) by which FP32's largest
/// score in a row must lead the second for the row's arg-max to be judged (see
/// [`kenosis_numerics::agreement::argmax_agreement`]). The output's range, not the row's:
/// a row of a probability map far from any object spans 1e-10, and which of its pixels
/// leads is noise.
pub const DECISIVE_MARGIN: f64 = 0.01;

/// What an output holds, which decides its task-shaped judge next to cosine. Derived from
/// the FP32 output's shape and values, never from the model's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OutputKind {
    /// Scores along the last axis (trailing axes of 1 aside): rows that are probability
    /// distributions (a softmax: class probabilities, attention rows), or logits (values
    /// going negative) along an axis longer than [`MAX_VALUES_AXIS`], where FP32 prefers
    /// one position in some rows: judged by arg-max agreement over those decisive rows.
    Scores,
    /// A scalar or regression output (a quality score, a box), a non-negative map that is
    /// no distribution (a sigmoid text map, boxes beside scores), or scores where FP32 prefers
    /// no position: judged by the mean absolute error relative to the output's FP32 range.
    Values,
    /// An embedding ([`embedding_outputs`]: a hidden state or a pooled sentence vector),
    /// which its users compare by cosine or dot product: judged by its cosine alone (the
    /// floor's `min_cosine`), neither by arg-max nor by error relative to its range.
    Embedding,
}

/// One output's agreement with FP32 on the compared samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OutputFidelity {
    /// Output (or compared tensor) name.
    pub name: String,
    /// Its judge.
    pub kind: OutputKind,
    /// Mean over samples of the cosine over elements finite in both models.
    pub mean_cosine: f64,
    /// [`OutputKind::Scores`]: share of decisive rows with FP32's arg-max.
    pub argmax_agreement: Option<f64>,
    /// [`OutputKind::Scores`]: rows whose arg-max was judged, over all samples.
    pub decisive_rows: u64,
    /// [`OutputKind::Values`]: mean `|INT8 - FP32|` over finite elements, divided by
    /// [`OutputFidelity::range`].
    pub relative_error: Option<f64>,
    /// FP32's finite range over the compared samples (max - min; the largest magnitude when
    /// the output is constant, 1 when it is zero).
    pub range: f64,
    /// Elements where either model is non-finite and the two differ.
    pub non_finite_mismatches: u64,
}

/// The floor every build with real held-out samples is held to when neither `min_cosine`
/// nor `min_top1_agreement` is given (see [`DEFAULT_FLOOR`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Floor {
    /// Lowest mean cosine (per sample, that of the worst output).
    pub min_cosine: f64,
    /// Highest mean error of a value output, relative to its FP32 range.
    pub max_relative_error: f64,
    /// Lowest arg-max agreement of a score output over its decisive rows.
    pub min_argmax_agreement: f64,
}

/// The default floor. Cosine 0.98: an error vector of a fifth of the output's norm
/// (`sqrt(2 (1 - c))`), below every shared CNN on real data and well above what a
/// broken placement gives. A value output may be off by 1% of its range on average: about
/// 2.5 uint8 steps of its own range, which a model quantized well stays within. Score
/// outputs keep FP32's answer on 90% of decisive rows: a classifier agrees on 95-99% of
/// real images, and a tenth of rows answered otherwise is a different model. A non-finite
/// value FP32 does not give (or one it gives that INT8 loses) always misses it.
pub const DEFAULT_FLOOR: Floor = Floor {
    min_cosine: 0.98,
    max_relative_error: 0.01,
    min_argmax_agreement: 0.9,
};

/// What a build's fidelity is held to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Judge {
    /// The user's `min_cosine` / `min_top1_agreement`: missed after every fallback, the
    /// build fails ([`Error::FidelityTarget`]).
    Requested(Target),
    /// [`DEFAULT_FLOOR`] or another, searched for until `deadline` (see [`meet_target`]):
    /// missed after every fallback tried by then, the FP32 model ships.
    Floor {
        /// The floor.
        floor: Floor,
        /// When the search for it stops.
        deadline: Instant,
    },
}

impl MetBy for Floor {
    /// Arg-max agreement misses only when its one-sided 95% upper confidence bound (Wilson
    /// score interval over the decisive rows) is below the floor: one classifier sample of
    /// six answered otherwise is 83%, and says nothing yet; a sixth of 240 attention rows
    /// does.
    fn met_by(&self, m: &Measured) -> bool {
        m.mean_cosine >= self.min_cosine
            && m.relative_error
                .is_none_or(|e| e <= self.max_relative_error)
            && (m.argmax_agreement)
                .is_none_or(|a| wilson_upper(a, m.argmax_rows) >= self.min_argmax_agreement)
            && m.non_finite_mismatches == 0
    }
}

/// One-sided 95% upper bound of a proportion `p` observed over `n` trials (Wilson score
/// interval, E. B. Wilson 1927, "Probable inference, the law of succession, and statistical
/// inference"); 1 for no trial.
fn wilson_upper(p: f64, n: u64) -> f64 {
    if n == 0 {
        return 1.0;
    }
    let (n, z2) = (n as f64, CONFIDENCE_Z * CONFIDENCE_Z);
    let center = p + z2 / (2.0 * n);
    let spread = CONFIDENCE_Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((center + spread) / (1.0 + z2 / n)).min(1.0)
}

impl MetBy for Judge {
    fn met_by(&self, m: &Measured) -> bool {
        match self {
            Judge::Requested(t) => t.met_by(m),
            Judge::Floor { floor, .. } => floor.met_by(m),
        }
    }
}

/// What the build measured, and what the fidelity target did, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FidelityReport {
    /// Samples the INT8 model was compared on: a fifth of the calibration samples (`n / 5`
    /// of `n`, at least one; see `calibrate::rules::held_out_count`). They are held out of
    /// range calibration ([`FidelityReport::held_out`]), picked evenly over the samples'
    /// order (file-name order for `.npy` folders), whenever the data is real and holds at
    /// least `calibrate::rules::MIN_SAMPLES_TO_HOLD_OUT` samples, or a fidelity target is
    /// set or the activation mode is chosen by measurement with more than one sample;
    /// otherwise they are the last fifth in that order, also used in calibration. Not the
    /// calibration count: that is the report's `calibration_samples`.
    pub samples: usize,
    /// What ran the INT8 model: the build machine's integer kernels, or the QDQ reference
    /// where they differ from the target's (see `crate::kernels`).
    #[serde(default)]
    pub evaluation: Evaluation,
    /// True when those samples were held out of range calibration (see
    /// [`FidelityReport::samples`]).
    pub held_out: bool,
    /// Each compared output's agreement with FP32, judged as its kind asks (see
    /// [`OutputKind`]), for the final artifact (with [`FidelityReport::floor_missed`], for
    /// the INT8 model that missed the floor).
    #[serde(default)]
    pub outputs: Vec<OutputFidelity>,
    /// The floor the build was held to when no fidelity target was given: set with real
    /// held-out samples, `None` otherwise (a target set, synthetic or too few samples).
    #[serde(default)]
    pub default_floor: Option<Floor>,
    /// True when the INT8 model missed [`FidelityReport::default_floor`] even with every
    /// fallback candidate in FP32 (or with as many as may pay, see `fidelity::meet_target`):
    /// the FP32 model shipped, and these figures are the INT8 model's that did not.
    #[serde(default)]
    pub floor_missed: bool,
    /// True when the search for the default floor stopped at its time budget (see
    /// `fidelity::meet_target`) before it had tried every candidate it may.
    #[serde(default)]
    pub search_stopped: bool,
    /// Agreement of the final artifact.
    pub measured: Measured,
    /// Agreement with every candidate op quantized (before any fallback).
    pub fully_quantized: Measured,
    /// Cosine floor requested, if any.
    pub min_cosine: Option<f64>,
    /// Top-1 agreement floor requested, if any.
    pub min_top1_agreement: Option<f64>,
    /// Nodes returned to FP32 to meet the target, in the order chosen (a chosen op, or the
    /// writer and readers of a chosen activation tensor).
    pub kept_fp32: Vec<String>,
    /// Activation tensors the target left unquantized, in the order chosen.
    #[serde(default)]
    pub kept_fp32_tensors: Vec<String>,
    /// Measured cosine gain of keeping each candidate in FP32 alone (see
    /// `Candidate::label`), highest gain per node returned to FP32 first (top 10).
    pub most_sensitive: Vec<(String, f64)>,
    /// Samples the gains in `most_sensitive` were measured on (0: no search ran).
    #[serde(default)]
    pub ranking_samples: usize,
    /// The tensor compared when no graph output is float (`Compared::Tensor`); `None`: the
    /// first float graph output.
    #[serde(default)]
    pub compared_tensor: Option<String>,
    /// What the compared samples were: the calibration data given, or synthetic inputs.
    #[serde(default)]
    pub inputs: SampleSource,
    /// False when [`FidelityReport::inputs`] is [`SampleSource::Synthetic`]: activations on
    /// synthetic inputs differ from those on real data, so agreement measured on them does
    /// not predict agreement on real data (it can be far higher). True for real samples.
    #[serde(default)]
    pub predicts_real_data: bool,
}

/// Where the samples a fidelity figure was measured on came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SampleSource {
    /// Calibration data given by the user (an `.npy` folder or samples in memory).
    Real,
    /// Inputs Kenosis generated because no calibration data was given (see
    /// `calibrate::synthetic::synthetic_with_dims`); also assumed for a report written
    /// before this field existed.
    #[default]
    Synthetic,
}

impl FidelityReport {
    /// This report with [`FidelityReport::inputs`] and
    /// [`FidelityReport::predicts_real_data`] set for samples that were synthetic or not.
    pub fn measured_on(mut self, synthetic: bool) -> Self {
        self.inputs = if synthetic {
            SampleSource::Synthetic
        } else {
            SampleSource::Real
        };
        self.predicts_real_data = !synthetic;
        self
    }
}

/// Compares candidate INT8 models against FP32 reference outputs on fixed samples.
pub struct Evaluator<'a> {
    path: PathBuf,
    input_names: &'a [String],
    samples: &'a [Vec<SampleValue>],
    /// Per sample, the values of each compared tensor.
    reference: Vec<Vec<Vec<f32>>>,
    /// Each compared tensor's name, judge and FP32 range, in the order of `reference`.
    judged: Vec<JudgedOutput>,
    /// The tensor compared (`Compared::Tensor`), or `None` for every float output.
    compared: Option<String>,
    /// How the INT8 models run.
    evaluation: Evaluation,
}

/// A compared tensor as the FP32 reference shows it.
#[derive(Debug, Clone)]
struct JudgedOutput {
    name: String,
    kind: OutputKind,
    /// Last-axis length (1 for a scalar).
    row: usize,
    /// See [`OutputFidelity::range`].
    range: f64,
}

/// Per sample, the name, shape and values of each float output (or of the compared tensor).
type Outputs = Vec<Vec<(String, Vec<usize>, Vec<f32>)>>;

/// What the fidelity check compares with FP32.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compared {
    /// The float graph outputs: some graph output is, or may be, float. A sample's cosine is
    /// that of its worst output (a detector's coarsest score map counts as much as its
    /// finest); top-1 agreement is the first float output's.
    FloatOutputs,
    /// Every graph output has a known non-float type (a classifier ending in ArgMax, a
    /// detector returning only indices): the float tensor nearest the outputs, searching back
    /// through their producers breadth-first, e.g. the logits an ArgMax reads.
    Tensor(String),
    /// No tensor the graph computes is float (a graph of sequence or string ops only); such
    /// a model has nothing to quantize either.
    Nothing,
}

/// What to compare in `graph`, given its element types (see
/// [`crate::types::infer_elem_types`]).
pub fn compared(graph: &crate::onnx::GraphProto, types: &HashMap<String, DataType>) -> Compared {
    let is_float = |t: &str| types.get(t) == Some(&DataType::Float);
    let all_known_non_float = graph
        .output
        .iter()
        .all(|o| types.get(o.name()).is_some_and(|&t| t != DataType::Float));
    if !all_known_non_float {
        return Compared::FloatOutputs;
    }
    let index = crate::graph::GraphIndex::new(graph);
    let mut queue: std::collections::VecDeque<&str> =
        graph.output.iter().map(|o| o.name()).collect();
    let mut seen: HashSet<&str> = queue.iter().copied().collect();
    while let Some(t) = queue.pop_front() {
        let Some(&p) = index.producer.get(t) else {
            continue;
        };
        if is_float(t) && !index.outputs.contains(t) {
            return Compared::Tensor(t.to_owned());
        }
        for input in graph.node[p].input.iter().filter(|i| !i.is_empty()) {
            if seen.insert(input) {
                queue.push_back(input);
            }
        }
    }
    Compared::Nothing
}

impl<'a> Evaluator<'a> {
    /// Runs the FP32 model on `samples` once to get the reference outputs of `compared`;
    /// INT8 models will run as `evaluation` says.
    ///
    /// # Errors
    /// [`Error::Runtime`] when ONNX Runtime fails, [`Error::Unsupported`] when no output
    /// (nor a tensor computing one) is float.
    pub fn new(
        fp32: &ModelProto,
        compared: &Compared,
        input_names: &'a [String],
        samples: &'a [Vec<SampleValue>],
        path: &Path,
        evaluation: Evaluation,
    ) -> Result<Self> {
        let mut e = Self {
            path: path.to_owned(),
            input_names,
            samples,
            reference: Vec::new(),
            judged: Vec::new(),
            compared: match compared {
                Compared::Tensor(t) => Some(t.clone()),
                Compared::FloatOutputs | Compared::Nothing => None,
            },
            evaluation,
        };
        let outputs = e.outputs(fp32)?;
        let embeddings = fp32
            .graph
            .as_ref()
            .map(embedding_outputs)
            .unwrap_or_default();
        e.judged = judged_outputs(&outputs, &embeddings);
        e.reference = outputs
            .into_iter()
            .map(|sample| sample.into_iter().map(|(_, _, v)| v).collect())
            .collect();
        Ok(e)
    }

    /// Per sample, each compared tensor of `model`.
    fn outputs(&self, model: &ModelProto) -> Result<Outputs> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let bytes = match &self.compared {
            Some(t) => encode_with_observed_outputs(model, std::slice::from_ref(t)),
            None => model.encode_to_vec(),
        };
        // The QDQ reference keeps ORT's other graph optimizations, not its QDQ fusions.
        let config = self.evaluation.session_config();
        let mut s = session_with_config(
            &self.path,
            bytes,
            GraphOptimizationLevel::All,
            threads,
            config,
        )?;
        let rt = |e: ort::Error| crate::error::runtime(&self.path, e);
        self.samples
            .iter()
            .map(|sample| {
                let inputs = sample_inputs(self.input_names, sample, &self.path)?;
                let out = s.run(borrowed(&inputs)).map_err(rt)?;
                // Float outputs are compared (token-id or index outputs of detectors and
                // tokenizers are not).
                let float = |name: &str, v: &ort::value::DynValue| {
                    let (shape, values) = v.try_extract_tensor::<f32>().ok()?;
                    let shape = shape.iter().map(|&d| d.max(0) as usize).collect();
                    Some((name.to_owned(), shape, values.to_vec()))
                };
                let values: Vec<_> = match &self.compared {
                    Some(t) => (out.get(t.as_str()))
                        .and_then(|v| float(t, v))
                        .into_iter()
                        .collect(),
                    None => out.iter().filter_map(|(n, v)| float(n, &v)).collect(),
                };
                if values.is_empty() {
                    return Err(crate::error::unsupported(
                        &self.path,
                        Unsupported::NoFloatOutput,
                    ));
                }
                Ok(values)
            })
            .collect()
    }

    /// Agreement of `model` with FP32: at ORT's default optimization level, as users run it,
    /// or on the QDQ reference (see [`Evaluation`]).
    ///
    /// # Errors
    /// [`Error::Runtime`] when ONNX Runtime fails.
    pub fn measure(&self, model: &ModelProto) -> Result<Measured> {
        Ok(self.measure_outputs(model)?.0)
    }

    /// [`Evaluator::measure`], with each output's agreement judged as its kind asks.
    ///
    /// # Errors
    /// [`Error::Runtime`] when ONNX Runtime fails.
    pub fn measure_outputs(&self, model: &ModelProto) -> Result<(Measured, Vec<OutputFidelity>)> {
        let (measured, per_output, _) = self.evaluate(model)?;
        Ok((measured, per_output))
    }

    /// The cosine of each sample (that of its worst float output, in sample order), whose
    /// mean is [`Measured::mean_cosine`]: two builds measured on the same samples compare
    /// pairwise (see [`clearly_closer`]).
    ///
    /// # Errors
    /// [`Error::Runtime`] when ONNX Runtime fails.
    pub fn sample_cosines(&self, model: &ModelProto) -> Result<Vec<f64>> {
        Ok(self.evaluate(model)?.2)
    }

    /// [`Evaluator::measure_outputs`] and the per-sample cosines.
    fn evaluate(&self, model: &ModelProto) -> Result<(Measured, Vec<OutputFidelity>, Vec<f64>)> {
        use kenosis_numerics::agreement::{agreement, argmax_agreement};
        let outputs = self.outputs(model)?;
        let mut per_output: Vec<OutputFidelity> = (self.judged.iter())
            .map(|j| OutputFidelity {
                name: j.name.clone(),
                kind: j.kind,
                mean_cosine: 0.0,
                argmax_agreement: None,
                decisive_rows: 0,
                relative_error: None,
                range: j.range,
                non_finite_mismatches: 0,
            })
            .collect();
        // Per output: agreeing rows, absolute error sum, finite elements.
        let mut sums = vec![(0u64, 0.0f64, 0u64); self.judged.len()];
        let mut cosines = Vec::with_capacity(self.samples.len());
        let mut agree = 0usize;
        for (reference, sample) in self.reference.iter().zip(&outputs) {
            let mut worst = f64::INFINITY;
            for (k, (a, (_, _, b))) in reference.iter().zip(sample).enumerate() {
                let m = agreement(a, b);
                worst = worst.min(m.cosine);
                let (Some(out), Some(judged)) = (per_output.get_mut(k), self.judged.get(k)) else {
                    continue;
                };
                out.mean_cosine += m.cosine;
                out.non_finite_mismatches += m.non_finite_mismatches;
                sums[k].1 += m.abs_error_sum;
                sums[k].2 += m.finite;
                if judged.kind == OutputKind::Scores {
                    let margin = DECISIVE_MARGIN * judged.range;
                    let (agreeing, decisive) = argmax_agreement(a, b, judged.row, margin);
                    sums[k].0 += agreeing;
                    out.decisive_rows += decisive;
                }
            }
            cosines.push(worst);
            let first = |o: &[f32]| argmax(o);
            if first(&reference[0]) == sample.first().and_then(|(_, _, v)| first(v)) {
                agree += 1;
            }
        }
        let samples = cosines.len().max(1) as f64;
        for (out, (agreeing, abs, finite)) in per_output.iter_mut().zip(sums) {
            out.mean_cosine /= samples;
            match out.kind {
                OutputKind::Scores => {
                    out.argmax_agreement =
                        (out.decisive_rows > 0).then(|| agreeing as f64 / out.decisive_rows as f64)
                }
                OutputKind::Values => {
                    out.relative_error = Some(abs / finite.max(1) as f64 / out.range)
                }
                OutputKind::Embedding => {}
            }
        }
        let n = samples;
        let mean = cosines.iter().sum::<f64>() / n;
        let lower = if cosines.len() < 2 {
            mean
        } else {
            let var = cosines.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (n - 1.0);
            mean - CONFIDENCE_Z * (var / n).sqrt()
        };
        let agreement = |o: &&OutputFidelity| o.argmax_agreement.unwrap_or(1.0);
        let worst_scores = (per_output.iter())
            .filter(|o| o.argmax_agreement.is_some())
            .min_by(|a, b| agreement(a).total_cmp(&agreement(b)));
        let measured = Measured {
            mean_cosine: mean,
            cosine_lower_bound: lower,
            top1_agreement: agree as f64 / n,
            argmax_agreement: worst_scores.and_then(|o| o.argmax_agreement),
            argmax_rows: worst_scores.map_or(0, |o| o.decisive_rows),
            relative_error: (per_output.iter())
                .filter_map(|o| o.relative_error)
                .reduce(f64::max),
            non_finite_mismatches: per_output.iter().map(|o| o.non_finite_mismatches).sum(),
        };
        Ok((measured, per_output, cosines))
    }
}

/// Whether a build whose per-sample cosines are `candidate` is closer to FP32 than one with
/// `baseline` (the same samples, in the same order) beyond the noise of so few samples: the
/// one-sided 95% lower confidence bound of the mean paired gain, mean − 1.645·s/√n (s the
/// sample standard deviation of the gains), is above 0 (a paired t-style comparison with
/// the normal quantile, as [`Measured::cosine_lower_bound`]). With fewer than 2 samples, a
/// higher mean.
pub fn clearly_closer(candidate: &[f64], baseline: &[f64]) -> bool {
    let gains: Vec<f64> = candidate.iter().zip(baseline).map(|(c, b)| c - b).collect();
    let n = gains.len() as f64;
    let mean = gains.iter().sum::<f64>() / n.max(1.0);
    if gains.len() < 2 {
        return mean > 0.0;
    }
    let var = gains.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0);
    mean - CONFIDENCE_Z * (var / n).sqrt() > 0.0
}

/// Ops that move or regroup values without computing new ones, which [`embedding_outputs`]
/// looks through.
const LAYOUT_OPS: [&str; 7] = [
    "Identity",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Transpose",
    "Concat",
];

/// Outputs of `graph` that are embeddings, not scores: those written (through ops that
/// only move values, such as `Reshape`, `Transpose` or `Concat`, and L2 normalizations, `Div`
/// by a norm or `LpNormalization`) by a layer normalization (`LayerNormalization`, or its
/// opset-13 export `Div → Mul(γ) → Add(β)`) or a pooling (`ReduceMean`, or `ReduceSum` or
/// `ReduceMean` then `Div`). The arg-max of a hidden state
/// is its largest channel, often one of the few outlier channels a transformer keeps
/// (Bondarenko et al. 2021, "Understanding and overcoming the challenges of efficient
/// transformer quantization"), not an answer, and its error relative to the range those
/// channels set says little of the similarities the embedding is used for: such outputs are
/// judged by cosine ([`OutputKind::Embedding`]) whatever their rows look like.
pub fn embedding_outputs(graph: &GraphProto) -> HashSet<String> {
    let index = GraphIndex::new(graph);
    let op_of = |t: &str| index.producer.get(t).map(|&p| &graph.node[p]);
    let writes_embedding = |output: &str| -> bool {
        let mut t = output;
        for _ in 0..8 {
            let Some(node) = op_of(t) else {
                return false;
            };
            let from = |slot: usize| node.input.get(slot).and_then(|i| op_of(i));
            let op = node.op_type();
            let layer_norm = op == "Add"
                && from(0).is_some_and(|m| {
                    m.op_type() == "Mul"
                        && (m.input.first().and_then(|i| op_of(i)))
                            .is_some_and(|d| d.op_type() == "Div")
                });
            let pooled = op == "Div"
                && from(0).is_some_and(|r| matches!(r.op_type(), "ReduceSum" | "ReduceMean"));
            if matches!(op, "LayerNormalization" | "ReduceMean") || layer_norm || pooled {
                return true;
            }
            // `x / max(‖x‖, ε)`: the divisor's first few producers reach a norm.
            let l2 = op == "LpNormalization"
                || (op == "Div" && {
                    let mut d = from(1);
                    (0..4).any(|_| {
                        let Some(n) = d else { return false };
                        d = n.input.first().and_then(|i| op_of(i));
                        matches!(n.op_type(), "ReduceL2" | "Sqrt")
                    })
                });
            if !(LAYOUT_OPS.contains(&op) || l2) {
                return false;
            }
            t = node.input[0].as_str();
        }
        false
    };
    (graph.output.iter())
        .map(|o| o.name())
        .filter(|o| writes_embedding(o))
        .map(str::to_owned)
        .collect()
}

/// Each compared tensor's judge, from the FP32 `outputs` (per sample, as
/// [`Evaluator::outputs`] gives them): its kind from its last axis longer than 1 and whether
/// FP32 decides any row there (see [`OutputKind`]), [`OutputKind::Embedding`] for the
/// `embeddings`, and its finite range over every sample.
fn judged_outputs(outputs: &Outputs, embeddings: &HashSet<String>) -> Vec<JudgedOutput> {
    use kenosis_numerics::agreement::{argmax_agreement, finite_range, rows_are_distributions};
    let Some(first) = outputs.first() else {
        return Vec::new();
    };
    (first.iter().enumerate())
        .map(|(k, (name, shape, _))| {
            // Trailing axes of 1 do not count: a Caffe classifier's `[1, 1000, 1, 1]` scores
            // are rows of 1000.
            let row = shape.iter().rev().copied().find(|&d| d > 1).unwrap_or(1);
            let values = || outputs.iter().filter_map(|s| s.get(k)).map(|(_, _, v)| v);
            let (lo, hi) = values()
                .filter_map(|v| finite_range(v))
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), (l, h)| {
                    (lo.min(l), hi.max(h))
                });
            let (lo, hi) = (f64::from(lo), f64::from(hi));
            let range = if hi > lo {
                hi - lo
            } else if hi.is_finite() && hi.abs().max(lo.abs()) > 0.0 {
                hi.abs().max(lo.abs())
            } else {
                1.0
            };
            let margin = DECISIVE_MARGIN * range;
            // Rows that are probability distributions (a softmax) are scores however few:
            // a two-class classifier's `[1, 2]` is an answer, not two regressed values.
            let distributions = values().all(|v| rows_are_distributions(v, row));
            // Otherwise scores are logits, which go negative. Non-negative rows that are no
            // distribution (a sigmoid text map, boxes beside per-anchor scores, ReLU
            // features) are values: which of their near-equal positions leads is no answer.
            let logits = lo < 0.0;
            let decides = (distributions || (logits && row > MAX_VALUES_AXIS))
                && values().any(|v| argmax_agreement(v, v, row, margin).1 > 0);
            JudgedOutput {
                name: name.clone(),
                kind: if embeddings.contains(name) {
                    OutputKind::Embedding
                } else if decides {
                    OutputKind::Scores
                } else {
                    OutputKind::Values
                },
                row,
                range,
            }
        })
        .collect()
}

/// Cosine similarity over the positions where both values are finite (f64 accumulation);
/// 1 for two all-zero vectors (see [`kenosis_numerics::agreement::agreement`]).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    kenosis_numerics::agreement::agreement(a, b).cosine
}

fn argmax(v: &[f32]) -> Option<usize> {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
}

/// What the fidelity search can return to FP32.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Candidate {
    /// One op whose quantization adds error of its own (an integer kernel, or a Gather from
    /// a constant table stored as uint8), by node name.
    Op(String),
    /// One quantized activation tensor, by name: its writer and every reader stay FP32, so
    /// its QuantizeLinear goes. Returning ops one at a time never removes the quantizer
    /// between two weighted ops (the writer still writes uint8 for the other readers, or for
    /// the FP32 reader's DequantizeLinear), yet that rounding can cost more than any op (an
    /// activation with a few channels of very different range, such as SqueezeNet 1.0's
    /// first squeeze output).
    Tensor(String),
}

impl Candidate {
    /// How reports name it: an op by its node name, a tensor as `activation <name>`.
    pub fn label(&self) -> String {
        match self {
            Candidate::Op(name) => name.clone(),
            Candidate::Tensor(name) => format!("activation {name}"),
        }
    }
}

/// `kept` with `candidate` kept float too.
fn with(kept: &KeptFloat, candidate: &Candidate) -> KeptFloat {
    let mut kept = kept.clone();
    match candidate.clone() {
        Candidate::Op(name) => kept.ops.insert(name),
        Candidate::Tensor(name) => kept.tensors.insert(name),
    };
    kept
}

/// Names of the nodes `built` leaves in FP32 that are not in `known`, sorted.
fn float_nodes_besides(built: &Built, known: &HashSet<String>) -> Vec<String> {
    let mut names: Vec<String> = (built.plan.float_nodes.iter())
        .map(|n| &n.name)
        .filter(|n| !known.contains(*n))
        .cloned()
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Most calibration samples the sensitivity ranking of [`meet_target`] compares on for a
/// requested target.
pub const RANKING_SAMPLES: usize = 100;

/// Most calibration samples the ranking compares on for the default floor: it runs on
/// every build that misses the floor, so each candidate's trial is kept short; a floor
/// needs the few candidates that break the model, not a fine order of the rest.
pub const FLOOR_RANKING_SAMPLES: usize = 16;

/// Measures `base` and, if `judge` is set and missed, keeps `candidates` in FP32, adding
/// them to `kept`, until it holds.
///
/// Each candidate is first measured alone (leave-one-out; candidates that leave the same
/// nodes in FP32 are measured once) and ranked by its gain per node it returns to FP32, so
/// that an activation tensor, which takes its writer and readers along, is chosen over an op
/// only when it gains more per op. The gain is the cosine gain (and a thousandth of the
/// top-1 gain) for a requested target, and the fall of `Measured::loss` for a
/// [`Judge::Floor`], which also weighs relative error, arg-max agreement and non-finite
/// mismatches. Candidates are then added in that order until the judge holds on
/// `evaluator`'s held-out samples (greedy, as for a knapsack by value density). Against a
/// floor, the search stops once half of the candidates are FP32 (past that, INT8 rarely
/// pays for what is left quantized, and the speed check would ship FP32 anyway), and at
/// the floor's `deadline`: every candidate costs a rebuild and a run over the ranking samples, so an
/// unbounded search would make the build's time grow with the model's op count. The
/// ranking takes at most the first half of that time, and what it ranked is tried in
/// order in the rest.
///
/// The ranking compares on the evaluator `ranking` builds, meant for the calibration samples
/// (up to [`RANKING_SAMPLES`]), never the held-out ones: samples that choose what is kept
/// and then check the target overstate what carries over (a selection bias: the check
/// must be independent of the choice it checks).
///
/// Returns the build that meets the judge (`base` when it already does or none is set), or
/// `None` when a [`Judge::Floor`] is missed after the search: the caller ships FP32. The
/// report's `outputs` are those of the returned build (of the last one tried when `None`).
///
/// # Errors
/// [`Error::FidelityTarget`] with the measured numbers when even keeping every candidate
/// in FP32 does not reach a [`Judge::Requested`] target; [`Error::Runtime`] on ORT failures.
pub fn meet_target<'a>(
    evaluator: &Evaluator<'a>,
    base: Built,
    judge: Option<Judge>,
    ranking: impl FnOnce() -> Result<Evaluator<'a>>,
    candidates: &[Candidate],
    kept: &mut KeptFloat,
    build: impl Fn(&KeptFloat) -> Result<Built>,
) -> Result<(Option<Built>, FidelityReport)> {
    let (fully, outputs) = evaluator.measure_outputs(&base.model)?;
    // Only a floor's search has a deadline: a requested target is searched to the end. The
    // ranking may take the first half of the time left, so that what it ranked is tried.
    let deadline = match judge {
        Some(Judge::Floor { deadline, .. }) => Some(deadline),
        _ => None,
    };
    let now = Instant::now();
    let ranking_deadline = deadline.map(|d| now + d.saturating_duration_since(now) / 2);
    let past = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
    let target = match judge {
        Some(Judge::Requested(t)) => Some(t),
        _ => None,
    };
    let mut report = FidelityReport {
        samples: evaluator.samples.len(),
        held_out: judge.is_some(),
        outputs,
        default_floor: match judge {
            Some(Judge::Floor { floor, .. }) => Some(floor),
            _ => None,
        },
        floor_missed: false,
        search_stopped: false,
        measured: fully,
        fully_quantized: fully,
        min_cosine: target.and_then(|t| t.min_cosine),
        min_top1_agreement: target.and_then(|t| t.min_top1_agreement),
        kept_fp32: Vec::new(),
        kept_fp32_tensors: Vec::new(),
        most_sensitive: Vec::new(),
        ranking_samples: 0,
        compared_tensor: evaluator.compared.clone(),
        evaluation: evaluator.evaluation,
        // Set by the caller, who knows where the samples came from.
        inputs: SampleSource::Synthetic,
        predicts_real_data: false,
    };
    let Some(judge) = judge.filter(|j| !j.met_by(&fully)) else {
        return Ok((Some(base), report));
    };
    let ranking = ranking()?;
    report.ranking_samples = ranking.samples.len();
    let fully_ranked = ranking.measure(&base.model)?;
    let gain_of = |m: &Measured| match judge {
        Judge::Requested(_) => {
            m.mean_cosine - fully_ranked.mean_cosine
                + (m.top1_agreement - fully_ranked.top1_agreement) * 1e-3
        }
        Judge::Floor { .. } => fully_ranked.loss() - m.loss(),
    };

    // Nodes FP32 before the search; below, also those it has returned to FP32 so far.
    let mut float: HashSet<String> = (base.plan.float_nodes.iter())
        .map(|n| n.name.clone())
        .collect();
    drop(base);
    let mut measured: HashMap<Vec<String>, Measured> = HashMap::new();
    // (candidate, gain, gain per node returned to FP32)
    let mut gains = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        if past(ranking_deadline) {
            report.search_stopped = true;
            break;
        }
        let trial = build(&with(kept, candidate))?;
        let returned = float_nodes_besides(&trial, &float);
        let cost = returned.len().max(1) as f64;
        let m = match measured.get(&returned) {
            Some(&m) => m,
            None => {
                let m = ranking.measure(&trial.model)?;
                measured.insert(returned, m);
                m
            }
        };
        let gain = gain_of(&m);
        gains.push((candidate, gain, gain / cost));
    }
    // Stable: equal densities keep the candidates' order (ops in graph order first).
    gains.sort_by(|a, b| b.2.total_cmp(&a.2));
    report.most_sensitive = gains
        .iter()
        .take(10)
        .map(|(c, gain, _)| (c.label(), *gain))
        .collect();

    let most_chosen = match judge {
        Judge::Requested(_) => gains.len(),
        Judge::Floor { .. } => gains.len().div_ceil(2),
    };
    let mut chosen = 0;
    for (candidate, _, _) in &gains {
        if chosen == most_chosen {
            break;
        }
        if past(deadline) {
            report.search_stopped = true;
            break;
        }
        let trial = with(kept, candidate);
        let mut built = build(&trial)?;
        let mut newly = float_nodes_besides(&built, &float);
        if newly.is_empty() {
            // Earlier choices already keep all of it in FP32.
            continue;
        }
        chosen += 1;
        *kept = trial;
        if let Candidate::Tensor(name) = candidate {
            report.kept_fp32_tensors.push(name.clone());
        }
        // The chosen op first, then what the choice took along, by name.
        if let Some(i) = newly
            .iter()
            .position(|n| matches!(candidate, Candidate::Op(c) if c == n))
        {
            newly[..=i].rotate_right(1);
        }
        float.extend(newly.iter().cloned());
        report.kept_fp32.extend(newly);
        let (m, outputs) = evaluator.measure_outputs(&built.model)?;
        report.measured = m;
        report.outputs = outputs;
        if judge.met_by(&m) {
            // Chosen ops get this reason; nodes a choice took along keep their own, and those
            // around a chosen activation already name the target.
            for node in &mut built.plan.float_nodes {
                let fallback = node.reason == FloatReason::Int8Fallback;
                if kept.ops.contains(&node.name)
                    && report.kept_fp32.contains(&node.name)
                    && !fallback
                {
                    node.reason = FloatReason::FidelityTarget;
                }
            }
            return Ok((Some(built), report));
        }
    }
    let Judge::Requested(target) = judge else {
        report.floor_missed = true;
        return Ok((None, report));
    };
    Err(Error::FidelityTarget {
        path: evaluator.path.clone(),
        report: format!(
            "target {target:?} not reached on {} held-out samples (cosine: 95% lower bound): \
             fully quantized {:.4} (bound {:.4}) cosine / {:.1}% top-1, still {:.4} (bound {:.4}) \
             / {:.1}% with all {} candidates (quantized ops and activations) in FP32; most \
             sensitive: {:?}",
            report.samples,
            fully.mean_cosine,
            fully.cosine_lower_bound,
            fully.top1_agreement * 100.0,
            report.measured.mean_cosine,
            report.measured.cosine_lower_bound,
            report.measured.top1_agreement * 100.0,
            candidates.len(),
            report.most_sensitive.iter().take(5).collect::<Vec<_>>()
        ),
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::onnx::tensor;

    /// A transformer's token states (an exported LayerNorm) and its mean-pooled,
    /// L2-normalized sentence vector are embeddings; a classifier's logits after the same
    /// LayerNorm, and a Concat of boxes, are not.
    #[test]
    fn outputs_written_by_a_layer_norm_or_a_pooling_are_embeddings() {
        let nodes = vec![
            node("ReduceMean", &["h"], "mean"),
            node("Sub", &["h", "mean"], "centred"),
            node("Div", &["centred", "std"], "normed"),
            node("Mul", &["normed", "gamma"], "scaled"),
            node("Add", &["scaled", "beta"], "states"),
            node("Identity", &["states"], "token_embeddings"),
            node("ReduceSum", &["states"], "sum"),
            node("Div", &["sum", "count"], "pooled"),
            node("Mul", &["pooled", "pooled"], "squares"),
            node("ReduceSum", &["squares"], "sum_squares"),
            node("Sqrt", &["sum_squares"], "norm"),
            node("Max", &["norm", "eps"], "divisor"),
            node("Div", &["pooled", "divisor"], "sentence_embedding"),
            node("Gemm", &["states", "w"], "logits"),
            node("Conv", &["h", "k"], "boxes_raw"),
            node("Concat", &["boxes_raw", "logits"], "boxes"),
        ];
        let outputs = ["token_embeddings", "sentence_embedding", "logits", "boxes"];
        let m = model(nodes, &outputs, vec![]);
        let found = embedding_outputs(m.graph.as_ref().unwrap());
        let expected: HashSet<String> = ["token_embeddings", "sentence_embedding"]
            .map(str::to_owned)
            .into();
        assert_eq!(found, expected);
    }
    use crate::quantize::{plan::FloatNode, plan::Plan, rewrite::RewriteSummary};
    use crate::test_support::{model, node};
    use ndarray::{ArrayD, IxDyn};

    /// When every candidate kept in FP32 still misses the target, the build fails with the
    /// measured numbers and has tried every candidate. The rewrite cannot help here by
    /// construction: each build returns the same model, the FP32 one plus an offset.
    #[test]
    fn a_target_keeping_ops_fp32_cannot_reach_fails_with_the_measurements() {
        let fp32 = model(vec![node("Relu", &["x"], "y")], &["y"], vec![]);
        let offset = model(
            vec![node("Relu", &["x"], "r"), node("Add", &["r", "c"], "y")],
            &["y"],
            vec![tensor::from_f32("c", &[], &[0.5])],
        );
        let names = vec!["x".to_owned()];
        let samples: Vec<Vec<SampleValue>> = (0..10)
            .map(|s| {
                let x = ArrayD::from_shape_fn(IxDyn(&[1, 16]), |i| ((i[1] + s) % 7) as f32 - 3.0);
                vec![SampleValue::F32(x)]
            })
            .collect();
        let path = Path::new("offset.onnx");
        let evaluate = || {
            Evaluator::new(
                &fp32,
                &Compared::FloatOutputs,
                &names,
                &samples,
                path,
                Evaluation::HostKernels,
            )
        };
        let evaluator = evaluate().unwrap();
        // Each kept op, and a kept tensor's reader `<tensor>_reader`, is reported FP32.
        let built = |kept: &KeptFloat| Built {
            model: offset.clone(),
            plan: Plan {
                float_nodes: (kept.ops.iter().cloned())
                    .chain(kept.tensors.iter().map(|t| format!("{t}_reader")))
                    .map(|name| FloatNode {
                        name,
                        op_type: "Relu".into(),
                        reason: FloatReason::Requested,
                    })
                    .collect(),
                ..Plan::default()
            },
            rewrite: RewriteSummary::default(),
        };
        let target = Target {
            min_cosine: Some(0.999),
            min_top1_agreement: None,
        };
        let candidates = [Candidate::Op("a".into()), Candidate::Tensor("t".into())];
        let mut keep = KeptFloat::default();
        let outcome = meet_target(
            &evaluator,
            built(&KeptFloat::default()),
            Some(Judge::Requested(target)),
            evaluate,
            &candidates,
            &mut keep,
            |kept| Ok(built(kept)),
        );
        let Err(Error::FidelityTarget { path: p, report }) = outcome else {
            panic!("no op choice can reach the target");
        };
        assert_eq!(p, path);
        assert!(
            report.contains("not reached on 10 held-out samples")
                && report.contains("with all 2 candidates"),
            "{report}"
        );
        let tried = KeptFloat {
            ops: HashSet::from(["a".to_owned()]),
            tensors: HashSet::from(["t".to_owned()]),
        };
        assert_eq!(keep, tried);
    }

    /// `nodes` over float input `x`, with output `y` of element type `y_type`.
    fn graph_with_output(nodes: Vec<crate::onnx::NodeProto>, y_type: DataType) -> ModelProto {
        let mut m = model(nodes, &["y"], vec![]);
        m.graph.as_mut().unwrap().output = vec![crate::onnx::tensor_info("y", y_type, None)];
        m
    }

    fn compared_in(m: &ModelProto) -> Compared {
        let graph = m.graph.as_ref().unwrap();
        compared(graph, &crate::types::infer_elem_types(graph))
    }

    /// The arg-max floor is judged on the upper confidence bound: a flip in 6 rows keeps
    /// it, a sixth of 240 rows misses it.
    #[test]
    fn arg_max_agreement_misses_the_floor_only_when_the_shortfall_is_significant() {
        let measured = |a: f64, rows: u64| Measured {
            mean_cosine: 1.0,
            cosine_lower_bound: 1.0,
            top1_agreement: 1.0,
            argmax_agreement: Some(a),
            argmax_rows: rows,
            relative_error: None,
            non_finite_mismatches: 0,
        };
        assert!(DEFAULT_FLOOR.met_by(&measured(5.0 / 6.0, 6)));
        assert!(!DEFAULT_FLOOR.met_by(&measured(200.0 / 240.0, 240)));
        assert!(DEFAULT_FLOOR.met_by(&measured(0.97, 240)));
        assert!((wilson_upper(0.5, 100) - 0.581).abs() < 0.002);
    }

    #[test]
    fn a_float_output_is_compared_itself() {
        let m = graph_with_output(vec![node("Relu", &["x"], "y")], DataType::Float);
        assert_eq!(compared_in(&m), Compared::FloatOutputs);
    }

    #[test]
    fn an_argmax_output_is_compared_on_the_float_tensor_it_reads() {
        let m = graph_with_output(
            vec![node("Relu", &["x"], "r"), node("ArgMax", &["r"], "y")],
            DataType::Int64,
        );
        assert_eq!(compared_in(&m), Compared::Tensor("r".into()));
    }

    #[test]
    fn a_graph_of_sequence_ops_has_nothing_to_compare() {
        let m = graph_with_output(
            vec![
                node("SplitToSequence", &["x"], "s"),
                node("SequenceLength", &["s"], "y"),
            ],
            DataType::Int64,
        );
        assert_eq!(compared_in(&m), Compared::Nothing);
    }

    /// A gain on every sample clears the noise; the same mean gain carried by one sample of
    /// ten, the rest slightly worse, does not.
    #[test]
    fn a_build_is_clearly_closer_only_beyond_the_paired_noise() {
        let baseline = [0.98, 0.97, 0.99, 0.96, 0.98, 0.97, 0.99, 0.98, 0.97, 0.98];
        let steady: Vec<f64> = baseline.iter().map(|c| c + 0.001).collect();
        assert!(clearly_closer(&steady, &baseline));
        let mut lucky: Vec<f64> = baseline.iter().map(|c| c - 0.0005).collect();
        lucky[0] += 0.015;
        let gain = lucky.iter().zip(&baseline).map(|(a, b)| a - b).sum::<f64>();
        assert!(gain > 0.0, "a higher mean");
        assert!(!clearly_closer(&lucky, &baseline));
        assert!(!clearly_closer(&baseline, &steady));
    }
}
