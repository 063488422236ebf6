//! The ops that lose the most fidelity (what `kenosis validate` lists): the activations both
//! models share compared tensor by tensor, and each FP32 node charged with what its output
//! loses beyond its inputs.
//!
//! The method is that of ONNX Runtime's QDQ debugging tool
//! (`onnxruntime/python/tools/quantization/qdq_loss_debug.py`: `collect_activations` exposes
//! intermediate tensors as graph outputs and runs both models with graph optimizations off,
//! `compute_activation_error` compares the float model's activations with the quantized
//! model's by tensor name). Here:
//!
//! - The shared tensors are the float outputs of nodes of the normalized FP32 graph (the
//!   graph a build quantizes, its nodes named as reports and `keep_float` name them) that a
//!   node of the other model also produces: a QDQ model's quantized op keeps its float output
//!   name. Where the other model quantizes such a tensor (`QuantizeLinear` then
//!   `DequantizeLinear`), the dequantized value, the one its consumers read, stands for it
//!   (the tool's "post-QDQ" activation), so an op is charged for its output's rounding.
//! - Both models run with graph optimizations off, the shared tensors exposed as outputs
//!   (as calibration exposes tensors), on at most [`ATTRIBUTION_SAMPLES`] samples, each sample's activations folded into
//!   running sums and dropped before the next.
//! - Per shared tensor: the mean over samples of the cosine similarity of the flattened
//!   tensors ([`cosine`]).
//! - Per node whose output is shared: its loss is the lowest cosine among its float inputs
//!   (1 for graph inputs and initializers; an input the other model does not share counts
//!   with the lowest cosine of the shared tensors it is computed from) minus its output's
//!   cosine. Nodes are ranked by that loss; those losing nothing are left out.
//!
//! What a line means: an op quantized with its activation (Conv then Relu, one integer
//! kernel) has its output rounded after the activation, so the activation's line carries the
//! pair's rounding; an op left in FP32 is charged with what it amplifies (a Softmax sharpens
//! its logits' error). The runs simulate the QDQ model in float, as the debugging tool does,
//! so the cosines differ a little from those of the agreement line, measured as programs run
//! the model.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionOutputs};

use super::{run, Model, Progress};
use crate::calibrate::session::{encode_with_observed_outputs, sample_inputs, session};
use crate::calibrate::SampleValue;
use crate::fidelity::cosine;
use crate::graph::GraphIndex;
use crate::onnx::{DataType, GraphProto, ModelProto};
use crate::types::infer_elem_types;
use crate::Result;

/// The most samples the activations are compared on: every run exposes all shared tensors,
/// several times the work of a plain run.
pub const ATTRIBUTION_SAMPLES: usize = 8;

/// A loss below this is rounding (cosines are accumulated in f64 over f32 values).
const NEGLIGIBLE: f64 = 1e-6;

/// One FP32 node's fidelity loss.
#[derive(Debug, Clone, PartialEq)]
pub struct OpLoss {
    /// The node's name in the normalized FP32 graph.
    pub node: String,
    /// Its operator.
    pub op_type: String,
    /// Mean cosine of its output with the other model's.
    pub output_cosine: f64,
    /// The lowest mean cosine among its float inputs.
    pub input_cosine: f64,
}

impl OpLoss {
    /// What the node itself loses: its input cosine minus its output cosine.
    pub fn loss(&self) -> f64 {
        self.input_cosine - self.output_cosine
    }
}

/// What [`attribute`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Attribution {
    /// The models share intermediate tensors: the nodes that lose fidelity, most first.
    Ranked {
        /// Samples compared.
        samples: usize,
        /// Shared float tensors compared.
        tensors: usize,
        /// Every node losing fidelity, by loss, most first.
        ops: Vec<OpLoss>,
    },
    /// The models share no intermediate tensor name (e.g. an ONNX Runtime-optimized model
    /// whose fused ops have new names): nothing to attribute.
    NoSharedTensors,
}

/// A tensor both models compute: its FP32 name, and the tensor of the other model standing
/// for it (itself, or its dequantized value).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shared {
    fp32: String,
    other: String,
}

/// Ranks the nodes of `fp32` (the normalized FP32 model: see [`crate::normalize_decoded`])
/// by the fidelity `other` loses at each, on the first [`ATTRIBUTION_SAMPLES`] of `samples`
/// (one value per input of `names`, in that order). `progress` is called after each sample.
///
/// # Errors
/// [`crate::Error::Runtime`] naming the file when ONNX Runtime cannot run a model with its
/// shared tensors exposed; [`crate::Error::Calibration`] when a sample does not fit.
pub fn attribute(
    Model {
        path: fp32_path,
        proto: fp32,
    }: Model<'_>,
    Model {
        path: other_path,
        proto: other,
    }: Model<'_>,
    names: &[String],
    samples: &[Vec<SampleValue>],
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Attribution> {
    let empty = GraphProto::default();
    let graph = fp32.graph.as_ref().unwrap_or(&empty);
    let shared = shared_tensors(graph, other.graph.as_ref().unwrap_or(&empty));
    let outputs: HashSet<&str> = graph.output.iter().map(|o| o.name()).collect();
    if shared.iter().all(|s| outputs.contains(s.fp32.as_str())) {
        return Ok(Attribution::NoSharedTensors);
    }
    let samples = &samples[..samples.len().min(ATTRIBUTION_SAMPLES)];
    let cosines = mean_cosines(
        (fp32_path, fp32),
        (other_path, other),
        &shared,
        names,
        samples,
        progress,
    )?;
    Ok(Attribution::Ranked {
        samples: samples.len(),
        tensors: cosines.len(),
        ops: rank(graph, &cosines),
    })
}

/// The float node outputs of `fp32` that a node of `other` also produces, each with the
/// tensor of `other` standing for it: the output of a `DequantizeLinear` reading a
/// `QuantizeLinear` of it, else itself.
fn shared_tensors(fp32: &GraphProto, other: &GraphProto) -> Vec<Shared> {
    let types_a = infer_elem_types(fp32);
    let types_b = infer_elem_types(other);
    let float = |types: &HashMap<String, DataType>, t: &str| types.get(t) == Some(&DataType::Float);
    let produced: HashSet<&str> = (other.node.iter())
        .flat_map(|n| &n.output)
        .map(String::as_str)
        .collect();
    let index = GraphIndex::new(other);
    let first_output_read_by = |tensor: &str, op: &str| {
        (index.consumers_of(tensor).iter())
            .map(|&i| &other.node[i])
            .find(|n| n.op_type() == op && n.input.first().is_some_and(|i| i == tensor))
            .and_then(|n| n.output.first())
            .filter(|o| !o.is_empty())
    };
    (fp32.node.iter())
        .flat_map(|n| &n.output)
        .filter(|t| !t.is_empty() && produced.contains(t.as_str()))
        .filter(|t| float(&types_a, t) && float(&types_b, t))
        .map(|t| {
            let dequantized = first_output_read_by(t, "QuantizeLinear")
                .and_then(|q| first_output_read_by(q, "DequantizeLinear"))
                .filter(|d| float(&types_b, d));
            Shared {
                fp32: t.clone(),
                other: dequantized.unwrap_or(t).clone(),
            }
        })
        .collect()
}

/// The mean cosine over `samples` of each of `shared` between the two models, by FP32
/// name; a tensor that does not come out as f32 in both is left out.
fn mean_cosines(
    (fp32_path, fp32): (&Path, &ModelProto),
    (other_path, other): (&Path, &ModelProto),
    shared: &[Shared],
    names: &[String],
    samples: &[Vec<SampleValue>],
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<HashMap<String, f64>> {
    let what = format!(
        "comparing {} shared activations of both models",
        shared.len()
    );
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let exposed = |path: &Path, model: &ModelProto, tensors: Vec<String>| -> Result<Session> {
        let bytes = encode_with_observed_outputs(model, &tensors);
        session(path, bytes, GraphOptimizationLevel::Disable, threads)
    };
    let compared = exposed(
        fp32_path,
        fp32,
        shared.iter().map(|s| s.fp32.clone()).collect(),
    )
    .and_then(|a| {
        let others = shared.iter().map(|s| s.other.clone()).collect();
        Ok((a, exposed(other_path, other, others)?))
    })
    .and_then(|(mut a, mut b)| {
        // Per shared tensor: the sum of its cosines and the samples it was compared on.
        let mut sums: Vec<(f64, usize)> = vec![(0.0, 0); shared.len()];
        for (done, sample) in samples.iter().enumerate() {
            // Kept alive while the outputs are read (see `sample_inputs`).
            let inputs = sample_inputs(names, sample, fp32_path)?;
            let out_a = run(&mut a, fp32_path, &inputs)?;
            let out_b = run(&mut b, other_path, &inputs)?;
            for (s, sum) in shared.iter().zip(&mut sums) {
                if let (Some(x), Some(y)) = (f32s(&out_a, &s.fp32), f32s(&out_b, &s.other)) {
                    if x.len() == y.len() {
                        sum.0 += cosine(x, y);
                        sum.1 += 1;
                    }
                }
            }
            progress(Progress {
                what: &what,
                done: done + 1,
                total: samples.len(),
            });
        }
        Ok(sums)
    });
    let sums = compared?;
    Ok((shared.iter().zip(sums))
        .filter(|(_, (_, n))| *n > 0)
        .map(|(s, (sum, n))| (s.fp32.clone(), sum / n as f64))
        .collect())
}

/// The values of output `tensor` in `outputs`, if it is there as f32.
fn f32s<'o>(outputs: &'o SessionOutputs<'_>, tensor: &str) -> Option<&'o [f32]> {
    let (_, values) = outputs.get(tensor)?.try_extract_tensor::<f32>().ok()?;
    Some(values)
}

/// The nodes of `graph` (topologically ordered, as normalization leaves it) whose output has
/// a cosine in `cosines`, with the loss each adds, most first; nodes losing nothing are left
/// out.
fn rank(graph: &GraphProto, cosines: &HashMap<String, f64>) -> Vec<OpLoss> {
    let types = infer_elem_types(graph);
    // The cosine a tensor carries into its consumers: its own where shared, else the lowest
    // of what it is computed from (1 for graph inputs, initializers and non-float tensors).
    let mut carried: HashMap<&str, f64> = HashMap::new();
    let carried_of = |carried: &HashMap<&str, f64>, t: &str| -> f64 {
        if types.get(t) == Some(&DataType::Float) {
            carried.get(t).copied().unwrap_or(1.0)
        } else {
            1.0
        }
    };
    let mut ops = Vec::new();
    for node in &graph.node {
        let input_cosine = (node.input.iter())
            .filter(|i| !i.is_empty())
            .map(|i| carried_of(&carried, i))
            .fold(1.0, f64::min);
        let mut output_cosine: Option<f64> = None;
        for out in node.output.iter().filter(|o| !o.is_empty()) {
            let c = cosines.get(out).copied();
            carried.insert(out, c.unwrap_or(input_cosine));
            if let Some(c) = c {
                output_cosine = Some(output_cosine.map_or(c, |o: f64| o.min(c)));
            }
        }
        if let Some(output_cosine) = output_cosine {
            let op = OpLoss {
                node: node.name().to_owned(),
                op_type: node.op_type().to_owned(),
                output_cosine,
                input_cosine,
            };
            if op.loss() > NEGLIGIBLE {
                ops.push(op);
            }
        }
    }
    ops.sort_by(|a, b| b.loss().total_cmp(&a.loss()));
    ops
}

#[cfg(test)]
mod tests {
    use crate::onnx::{self, tensor_proto::DataType as Dt};

    use super::*;

    fn node(op: &str, name: &str, inputs: &[&str], output: &str) -> onnx::NodeProto {
        onnx::make_node(
            op,
            name.into(),
            inputs.iter().map(|&i| i.into()).collect(),
            vec![output.into()],
            vec![],
        )
    }

    /// `x → a:Relu → b:Relu → c:Relu → d:Relu → y`.
    fn chain() -> GraphProto {
        GraphProto {
            node: vec![
                node("Relu", "a", &["x"], "ta"),
                node("Relu", "b", &["ta"], "tb"),
                node("Relu", "c", &["tb"], "tc"),
                node("Relu", "d", &["tc"], "y"),
            ],
            input: vec![onnx::tensor_info("x", Dt::Float, Some(&[1, 4]))],
            output: vec![onnx::tensor_info("y", Dt::Float, Some(&[1, 4]))],
            ..Default::default()
        }
    }

    fn cosines(pairs: &[(&str, f64)]) -> HashMap<String, f64> {
        pairs.iter().map(|&(t, c)| (t.to_owned(), c)).collect()
    }

    #[test]
    fn each_node_is_charged_with_what_it_adds_most_first() {
        let ranked = rank(
            &chain(),
            &cosines(&[("ta", 0.99), ("tb", 0.98), ("tc", 0.90), ("y", 0.90)]),
        );
        let names: Vec<&str> = ranked.iter().map(|o| o.node.as_str()).collect();
        // d loses nothing and is left out.
        assert_eq!(names, ["c", "a", "b"]);
        assert_eq!(ranked[0].input_cosine, 0.98);
        assert_eq!(ranked[0].output_cosine, 0.90);
        assert_eq!(ranked[1].input_cosine, 1.0, "a reads the graph input");
    }

    #[test]
    fn a_node_after_an_unshared_tensor_is_charged_from_the_last_shared_one() {
        // `tb` is not shared: c's input counts with ta's cosine.
        let ranked = rank(&chain(), &cosines(&[("ta", 0.99), ("tc", 0.95)]));
        assert_eq!(ranked[0].node, "c");
        assert_eq!(ranked[0].input_cosine, 0.99);
    }

    #[test]
    fn models_sharing_only_their_outputs_have_nothing_to_attribute() {
        let fp32 = ModelProto {
            graph: Some(chain()),
            ..Default::default()
        };
        let mut renamed = chain();
        for (i, node) in renamed.node.iter_mut().enumerate().take(3) {
            node.output[0] = format!("fused_{i}");
        }
        for (i, node) in renamed.node.iter_mut().enumerate().skip(1) {
            node.input[0] = format!("fused_{}", i - 1);
        }
        let other = ModelProto {
            graph: Some(renamed),
            ..Default::default()
        };
        // Decided from the graphs alone: no model is run.
        let model = |path, proto| Model {
            path: Path::new(path),
            proto,
        };
        let found = attribute(
            model("a.onnx", &fp32),
            model("b.onnx", &other),
            &[],
            &[],
            &mut |_| {},
        );
        assert_eq!(found.ok(), Some(Attribution::NoSharedTensors));
    }

    #[test]
    fn a_quantized_tensor_is_compared_after_its_dequantization() {
        let fp32 = chain();
        let mut other = chain();
        other
            .node
            .insert(1, node("QuantizeLinear", "q", &["ta", "s", "z"], "ta_q"));
        other.node.insert(
            2,
            node("DequantizeLinear", "dq", &["ta_q", "s", "z"], "ta_dq"),
        );
        other.node[3].input[0] = "ta_dq".into();
        other.node[4].output[0] = "renamed".into();
        other.node[5].input[0] = "renamed".into();
        let shared = shared_tensors(&fp32, &other);
        let pairs: Vec<(&str, &str)> = (shared.iter())
            .map(|s| (s.fp32.as_str(), s.other.as_str()))
            .collect();
        assert_eq!(pairs, [("ta", "ta_dq"), ("tb", "tb"), ("y", "y")]);
    }
}
