//! Measuring the INT8 model against FP32 on calibration samples, and the fidelity target:
//! keep the most sensitive ops and activations in FP32 until the INT8 model is close enough.
//!
//! Sensitivity is measured, not guessed: for each candidate (a quantized op, or a quantized
//! activation with its writer and readers), the model is rebuilt with only that candidate in
//! FP32 and the gain in mean output cosine on the calibration samples (not the held-out
//! ones) is recorded
//! (leave-one-out, in the spirit of the layer-wise sensitivity analysis of Wu et al. 2020,
//! "Integer Quantization for Deep Learning Inference", §6). Candidates are then returned to
//! FP32 greedily, most gain per node first, until the target holds on the held-out samples
//! (see [`meet_target`]).
//!
//! A cosine target holds when the one-sided 95% lower confidence bound of the mean cosine
//! (mean − 1.645·s/√n, normal approximation over the n held-out samples) reaches it, not
//! the sample mean alone: a mean over a few held-out samples overstates, about as often as
//! not, what the artifact reaches on other inputs.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use ort::session::builder::GraphOptimizationLevel;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::calibrate::session::{
    borrowed, encode_with_observed_outputs, sample_inputs, session_with_config,
};
use crate::calibrate::SampleValue;
use crate::error::{Error, Result, Unsupported};
use crate::kernels::Evaluation;
use crate::onnx::{DataType, ModelProto};
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
}

/// What the build measured, and what the fidelity target did, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FidelityReport {
    /// Samples the INT8 model was compared on: the last fifth of the calibration samples
    /// (`n / 5` of `n`, at least one; see `calibrate::rules::held_out_count`), whether or
    /// not they were held out. When a fidelity target is set or the activation mode is chosen
    /// by measurement, and there is more than one sample, they are picked evenly over the
    /// samples' order (file-name order for `.npy` folders) and held out of range calibration
    /// ([`FidelityReport::held_out`]); otherwise they are the last fifth in that order, also
    /// used in calibration. Not the calibration count: that is the report's
    /// `calibration_samples`.
    pub samples: usize,
    /// What ran the INT8 model: the build machine's integer kernels, or the QDQ reference
    /// where they differ from the target's (see `crate::kernels`).
    #[serde(default)]
    pub evaluation: Evaluation,
    /// True when those samples were held out of range calibration (a fidelity target was
    /// set or the activation mode was chosen by measurement, with more than one sample).
    pub held_out: bool,
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
    /// The tensor compared (`Compared::Tensor`), or `None` for every float output.
    compared: Option<String>,
    /// How the INT8 models run.
    evaluation: Evaluation,
}

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
            compared: match compared {
                Compared::Tensor(t) => Some(t.clone()),
                Compared::FloatOutputs | Compared::Nothing => None,
            },
            evaluation,
        };
        e.reference = e.outputs(fp32)?;
        Ok(e)
    }

    /// Per sample, the values of each compared tensor of `model`.
    fn outputs(&self, model: &ModelProto) -> Result<Vec<Vec<Vec<f32>>>> {
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
        let rt = |e: ort::Error| Error::runtime(&self.path, e);
        self.samples
            .iter()
            .map(|sample| {
                let inputs = sample_inputs(self.input_names, sample, &self.path)?;
                let out = s.run(borrowed(&inputs)).map_err(rt)?;
                // Float outputs are compared (token-id or index outputs of detectors and
                // tokenizers are not).
                let float = |v: &ort::value::DynValue| {
                    v.try_extract_tensor::<f32>().ok().map(|(_, v)| v.to_vec())
                };
                let values: Vec<Vec<f32>> = match &self.compared {
                    Some(t) => out.get(t.as_str()).and_then(float).into_iter().collect(),
                    None => out.values().filter_map(|v| float(&v)).collect(),
                };
                if values.is_empty() {
                    return Err(Error::unsupported(&self.path, Unsupported::NoFloatOutput));
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
        let outputs = self.outputs(model)?;
        let cosines: Vec<f64> = (self.reference.iter().zip(&outputs))
            .map(|(a, b)| {
                (a.iter().zip(b))
                    .map(|(a, b)| cosine(a, b))
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        let agree = (self.reference.iter().zip(&outputs))
            .filter(|(a, b)| argmax(&a[0]) == argmax(&b[0]))
            .count();
        let n = cosines.len().max(1) as f64;
        let mean = cosines.iter().sum::<f64>() / n;
        let lower = if cosines.len() < 2 {
            mean
        } else {
            let var = cosines.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (n - 1.0);
            mean - CONFIDENCE_Z * (var / n).sqrt()
        };
        Ok(Measured {
            mean_cosine: mean,
            cosine_lower_bound: lower,
            top1_agreement: agree as f64 / n,
        })
    }
}

/// Cosine similarity (f64 accumulation); 1 for two all-zero vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let na: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum();
    let nb: f64 = b.iter().map(|&x| f64::from(x).powi(2)).sum();
    if na == 0.0 && nb == 0.0 {
        return 1.0;
    }
    dot / (na.sqrt() * nb.sqrt()).max(f64::MIN_POSITIVE)
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

/// Most calibration samples the sensitivity ranking of [`meet_target`] compares on.
pub const RANKING_SAMPLES: usize = 100;

/// Measures `base` and, if `target` is set and missed, keeps `candidates` in FP32, adding
/// them to `kept`, until it holds.
///
/// Each candidate is first measured alone (leave-one-out; candidates that leave the same
/// nodes in FP32 are measured once) and ranked by its cosine gain per node it returns to
/// FP32, so that an activation tensor, which takes its writer and readers along, is chosen
/// over an op only when it gains more per op. Candidates are then added in that order until
/// the target holds on `evaluator`'s held-out samples (greedy, as for a knapsack by value
/// density).
///
/// The ranking compares on the evaluator `ranking` builds, meant for the calibration samples
/// (up to [`RANKING_SAMPLES`]), never the held-out ones: samples that choose what is kept
/// and then check the target overstate what carries over (a selection bias: the check
/// must be independent of the choice it checks).
///
/// # Errors
/// [`Error::FidelityTarget`] with the measured numbers when even keeping every candidate
/// in FP32 does not reach the target; [`Error::Runtime`] on ORT failures.
pub fn meet_target<'a>(
    evaluator: &Evaluator<'a>,
    base: Built,
    target: Option<Target>,
    ranking: impl FnOnce() -> Result<Evaluator<'a>>,
    candidates: &[Candidate],
    kept: &mut KeptFloat,
    build: impl Fn(&KeptFloat) -> Result<Built>,
) -> Result<(Built, FidelityReport)> {
    let fully = evaluator.measure(&base.model)?;
    let mut report = FidelityReport {
        samples: evaluator.samples.len(),
        held_out: target.is_some(),
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
    let Some(target) = target.filter(|t| !t.met_by(&fully)) else {
        return Ok((base, report));
    };
    let ranking = ranking()?;
    report.ranking_samples = ranking.samples.len();
    let fully_ranked = ranking.measure(&base.model)?;

    // Nodes FP32 before the search; below, also those it has returned to FP32 so far.
    let mut float: HashSet<String> = (base.plan.float_nodes.iter())
        .map(|n| n.name.clone())
        .collect();
    drop(base);
    let mut measured: HashMap<Vec<String>, Measured> = HashMap::new();
    // (candidate, cosine gain, gain per node returned to FP32)
    let mut gains = Vec::with_capacity(candidates.len());
    for candidate in candidates {
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
        let gain = m.mean_cosine - fully_ranked.mean_cosine
            + (m.top1_agreement - fully_ranked.top1_agreement) * 1e-3;
        gains.push((candidate, gain, gain / cost));
    }
    // Stable: equal densities keep the candidates' order (ops in graph order first).
    gains.sort_by(|a, b| b.2.total_cmp(&a.2));
    report.most_sensitive = gains
        .iter()
        .take(10)
        .map(|(c, gain, _)| (c.label(), *gain))
        .collect();

    for (candidate, _, _) in &gains {
        let trial = with(kept, candidate);
        let mut built = build(&trial)?;
        let mut newly = float_nodes_besides(&built, &float);
        if newly.is_empty() {
            // Earlier choices already keep all of it in FP32.
            continue;
        }
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
        let m = evaluator.measure(&built.model)?;
        report.measured = m;
        if target.met_by(&m) {
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
            return Ok((built, report));
        }
    }
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
            Some(target),
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
}
