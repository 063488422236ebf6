//! Brings any supported FP32 model into the one form the quantizer works on:
//! weights as initializers (layout ops on them evaluated), inference-only ops removed,
//! zero Pads, per-channel Mul/Add and BatchNormalization folded into convolutions, channel
//! shuffles written as a Gather, Splits with constant sizes written as Slices, SiLUs and
//! GELUs fused into ONNX Runtime's `QuickGelu`, `Gelu` and `FastGelu`, spelled-out
//! HardSwishes and layer normalizations fused into `HardSwish` and `LayerNormalization`,
//! default-domain opset >= 13, nodes in topological order.

mod affine;
mod batchnorm;
mod constants;
mod conv;
pub mod gelu;
pub mod hardswish;
mod layernorm;
mod layout;
mod opset;
mod pad;
mod pattern;
mod shuffle;
pub mod silu;
mod split;

use std::collections::{HashMap, HashSet};

use crate::error::{Unsupported, Versioned};
use crate::graph::{GraphIndex, NameGen};
use crate::onnx::{self, ModelProto};

pub use opset::TARGET_OPSET;

/// Oldest default-domain opset Kenosis accepts (numpy-style broadcasting starts at 7).
pub const MIN_OPSET: i64 = 7;
/// Newest default-domain opset Kenosis accepts (what ONNX Runtime 1.31 implements).
pub const MAX_OPSET: i64 = 23;
/// The IR versions Kenosis accepts: every one the ONNX Runtime it is built against loads.
/// ONNX Runtime refuses a model whose `ir_version` is newer than the `IR_VERSION` of the
/// ONNX release it embeds (`onnx/onnx.proto`), and reads IR 3 and later; ONNX Runtime 1.31
/// (API 1.31, see `cache::ORT_IDENTITY`) embeds an ONNX whose `IR_VERSION` is 13. The
/// artifact keeps the model's IR version (raised to 7 with the opset, see
/// [`normalize`]), so the runtime that embeds it loads it too.
pub const IR_VERSIONS: std::ops::RangeInclusive<i64> = 3..=13;
/// IR version written when the opset is raised to 13 (IR 7 introduced opset 13 support).
const IR_FOR_OPSET_13: i64 = 7;

/// What normalization changed, for the build report.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct NormalizeSummary {
    /// Default-domain opset before normalization.
    pub opset_before: i64,
    /// Default-domain opset after normalization.
    pub opset_after: i64,
    /// Constant nodes turned into initializers.
    pub constants_extracted: usize,
    /// Layout ops (`Identity`, `Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`) of float
    /// initializers evaluated into initializers (see `normalize::layout`).
    #[serde(default)]
    pub layout_ops_folded: usize,
    /// Zero `Pad`s folded into the `pads` of the Conv reading them (see `normalize::pad`).
    #[serde(default)]
    pub pads_folded: usize,
    /// Constant per-channel Adds folded into the bias of the preceding Conv/ConvTranspose.
    #[serde(default)]
    pub bias_adds_folded: usize,
    /// Constant per-channel Muls folded into the weight and bias of the preceding
    /// Conv/ConvTranspose.
    #[serde(default)]
    pub scale_muls_folded: usize,
    /// BatchNormalization nodes folded into the preceding Conv/ConvTranspose.
    pub batchnorms_folded: usize,
    /// Channel shuffles (`Reshape → Transpose → Reshape`) written as one Gather (see
    /// `normalize::shuffle`).
    #[serde(default)]
    pub channel_shuffles_rewritten: usize,
    /// `Split`s with constant sizes written as one `Slice` per output (see `normalize::split`).
    #[serde(default)]
    pub splits_as_slices: usize,
    /// Dropout nodes removed (identity at inference).
    pub dropouts_removed: usize,
    /// Two-input `Sum` nodes written as `Add` (see `sums_as_adds`).
    #[serde(default)]
    pub sums_as_adds: usize,
    /// SiLUs (`x * Sigmoid(x)`) fused into `com.microsoft` `QuickGelu` (see `silu`).
    #[serde(default)]
    pub silus_fused: usize,
    /// GELUs written out fused into `com.microsoft` `Gelu` (`x · ½ · (1 + erf(x/√2))`) or
    /// `FastGelu` (the tanh approximation), see `gelu`.
    #[serde(default)]
    pub gelus_fused: usize,
    /// HardSwishes written out in elementary ops fused into `HardSwish` (see `hardswish`).
    #[serde(default)]
    pub hardswishes_fused: usize,
    /// Layer normalizations written out in elementary ops fused into `LayerNormalization`
    /// (see `normalize::layernorm`).
    #[serde(default)]
    pub layernorms_fused: usize,
}

/// A model normalization has run on (the stage after decoding): it has a graph, in opset 13
/// or later, with the passes' summary.
#[derive(Debug, Clone)]
pub struct Normalized {
    /// Holds a graph: [`normalize`] refuses a model without one, and only it builds a
    /// `Normalized`.
    model: ModelProto,
    /// What the passes did.
    pub summary: NormalizeSummary,
}

impl Normalized {
    /// The normalized model.
    pub fn model(&self) -> &ModelProto {
        &self.model
    }

    /// The normalized model's graph.
    pub fn graph(&self) -> &onnx::GraphProto {
        static NONE: std::sync::LazyLock<onnx::GraphProto> =
            std::sync::LazyLock::new(onnx::GraphProto::default);
        self.model.graph.as_ref().unwrap_or(&NONE)
    }
}

/// Normalizes `model`.
///
/// # Errors
/// [`Unsupported`] (the caller adds the file name) when the IR or opset version is out of
/// range, the model has no graph or its graph no node, is already quantized, an operator
/// cannot be upgraded to opset 13, a tensor payload does not match its dims, or the graph is
/// malformed (a node without output, dangling input, cycle).
pub fn normalize(mut model: ModelProto) -> Result<Normalized, Unsupported> {
    let ir = model.ir_version();
    if !IR_VERSIONS.contains(&ir) {
        return Err(Unsupported::Version {
            what: Versioned::Ir,
            found: ir,
            min: *IR_VERSIONS.start(),
            max: *IR_VERSIONS.end(),
        });
    }
    let opset = onnx::default_opset(&model).ok_or(Unsupported::NoDefaultOpset)?;
    if !(MIN_OPSET..=MAX_OPSET).contains(&opset) {
        return Err(Unsupported::Version {
            what: Versioned::Opset,
            found: opset,
            min: MIN_OPSET,
            max: MAX_OPSET,
        });
    }
    let mut summary = NormalizeSummary {
        opset_before: opset,
        opset_after: opset,
        ..Default::default()
    };
    // Taken out while the graph passes run, put back for the fusions, which edit imports.
    let mut taken = model.graph.take().ok_or(Unsupported::NoGraph)?;
    let graph = &mut taken;
    if graph.node.is_empty() {
        return Err(Unsupported::EmptyGraph);
    }
    reject_quantized(graph)?;
    // Older IR versions list initializers as graph inputs too; ORT then treats them as
    // overridable inputs and refuses to constant-fold or fuse them.
    let init_names: HashSet<String> = graph
        .initializer
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    graph.input.retain(|i| !init_names.contains(i.name()));

    name_unnamed_nodes(graph);
    crate::graph::sort_topologically(graph)?;
    summary.constants_extracted = constants::extract(graph)?;
    // Later passes size buffers from declared dims: a payload must back them.
    for t in &graph.initializer {
        crate::onnx::tensor::check_payload(t)?;
    }
    summary.dropouts_removed = remove_dropouts(graph);
    summary.sums_as_adds = sums_as_adds(graph);

    if opset < TARGET_OPSET {
        let mut names = NameGen::new(graph);
        opset::upgrade(graph, opset, &mut names)?;
        opset::set_default_opset(&mut model, TARGET_OPSET);
        model.ir_version = Some(model.ir_version().max(IR_FOR_OPSET_13));
        summary.opset_after = TARGET_OPSET;
    }
    // After the upgrade, so that axes and shapes are operands in every opset.
    summary.layout_ops_folded = layout::fold(graph);
    summary.pads_folded = pad::fold_into_convs(graph);
    let mut names = NameGen::new(graph);
    summary.channel_shuffles_rewritten = shuffle::rewrite(graph, &mut names);
    summary.splits_as_slices = split::as_slices(graph, &mut names);
    // Affine ops before and after BatchNormalization: `ConvTranspose → Add → BN` (PP-OCR)
    // needs the Add folded for the BN to fold, `Conv → BN → Mul → Add` (DenseNet's Caffe2
    // export) the BN folded for the Mul and Add to fold.
    let before = affine::fold(graph, &mut names)?;
    summary.batchnorms_folded = batchnorm::fold(graph, &mut names)?;
    let after = affine::fold(graph, &mut names)?;
    summary.bias_adds_folded = before.adds + after.adds;
    summary.scale_muls_folded = before.muls + after.muls;
    crate::graph::sort_topologically(graph)?;
    model.graph = Some(taken);
    summary.silus_fused = silu::fuse(&mut model);
    summary.gelus_fused = gelu::fuse(&mut model);
    summary.hardswishes_fused = hardswish::fuse(&mut model);
    summary.layernorms_fused = layernorm::fuse(&mut model);
    summary.opset_after = onnx::default_opset(&model).unwrap_or(summary.opset_after);
    Ok(Normalized { model, summary })
}

/// Operators that only appear in models that are already quantized (QDQ or QOperator form).
const QUANTIZED_OPS: &[&str] = &[
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "QLinearConv",
    "QLinearMatMul",
    "ConvInteger",
    "MatMulInteger",
    "QGemm",
    "QLinearAdd",
    "QLinearMul",
];

/// Quantizing a quantized model again would stack a second rounding on the first; refuse it
/// and say what was found.
fn reject_quantized(graph: &onnx::GraphProto) -> Result<(), Unsupported> {
    let found: Vec<&str> = graph
        .node
        .iter()
        .map(|n| n.op_type())
        .filter(|op| QUANTIZED_OPS.contains(op))
        .collect();
    if let Some(first) = found.first() {
        return Err(Unsupported::AlreadyQuantized {
            count: found.len(),
            example: (*first).to_owned(),
        });
    }
    Ok(())
}

/// Gives every unnamed node a unique name (`<OpType>_<index>`): reports and
/// [`crate::Config::keep_float`] refer to nodes by name.
fn name_unnamed_nodes(graph: &mut onnx::GraphProto) {
    let mut names = NameGen::new(graph);
    for (i, node) in graph.node.iter_mut().enumerate() {
        if node.name().is_empty() {
            node.name = Some(names.fresh(&format!("{}_{i}", node.op_type())));
        }
    }
}

/// Dropout is the identity at inference; removing it lets its neighbours fuse.
/// Only Dropouts whose mask output is unused are removed.
fn remove_dropouts(graph: &mut onnx::GraphProto) -> usize {
    let index = GraphIndex::new(graph);
    let mut renames: Vec<(String, String)> = Vec::new();
    let mut removed = HashSet::new();
    for (i, node) in graph.node.iter().enumerate() {
        let mask_used = node.output.get(1).is_some_and(|m| {
            !m.is_empty() && (index.consumers.contains_key(m) || index.outputs.contains(m))
        });
        let (input, output) = match (node.input.first(), node.output.first()) {
            (Some(i), Some(o)) => (i.clone(), o.clone()),
            _ => continue,
        };
        // A Dropout between a graph input (or another graph output) and a graph output is
        // the only node keeping both names alive: leave it.
        let names_clash = index.outputs.contains(&output)
            && (!index.producer.contains_key(&input) || index.outputs.contains(&input));
        if node.op_type() == "Dropout"
            && onnx::is_default_domain(node.domain())
            && !mask_used
            && !names_clash
        {
            removed.insert(i);
            renames.push((output, input));
        }
    }
    for (from, to) in &renames {
        if index.outputs.contains(from) {
            // Keep the graph output's name: the producer now writes it directly.
            let p = index.producer[to];
            for o in graph.node[p].output.iter_mut().filter(|o| *o == to) {
                *o = from.clone();
            }
            rename_inputs(graph, to, from);
            continue;
        }
        rename_inputs(graph, from, to);
    }
    remove_nodes(graph, &removed);
    removed.len()
}

/// Writes every two-input default-domain `Sum` as `Add`, the same computation: Sum
/// broadcasts numpy-style from opset 8 and Add from opset 7, and an opset-7 Sum needs equal
/// shapes, which Add accepts as well.
/// Caffe2 exports (the ONNX zoo's ResNet-50, ShuffleNet) join residual branches with `Sum`,
/// which no integer kernel runs: it stayed float between a DequantizeLinear and a
/// QuantizeLinear, while ONNX Runtime fuses `DQ → Add → Q` into QLinearAdd.
/// Returns the number rewritten.
pub fn sums_as_adds(graph: &mut onnx::GraphProto) -> usize {
    let mut count = 0;
    for node in &mut graph.node {
        if node.op_type() == "Sum"
            && onnx::is_default_domain(node.domain())
            && node.input.len() == 2
        {
            node.op_type = Some("Add".into());
            count += 1;
        }
    }
    count
}

/// Puts `replaced[i]` (possibly nothing) in the place of node `i`, keeping the other nodes
/// and their order: new nodes written where the node they stand for was keep a
/// topologically sorted graph sorted.
fn replace_nodes(graph: &mut onnx::GraphProto, mut replaced: HashMap<usize, Vec<onnx::NodeProto>>) {
    let nodes = std::mem::take(&mut graph.node);
    for (i, node) in nodes.into_iter().enumerate() {
        match replaced.remove(&i) {
            Some(new) => graph.node.extend(new),
            None => graph.node.push(node),
        }
    }
}

/// Removes the nodes whose indices are in `removed`, keeping the others' order.
fn remove_nodes(graph: &mut onnx::GraphProto, removed: &HashSet<usize>) {
    let mut i = 0;
    graph.node.retain(|_| {
        i += 1;
        !removed.contains(&(i - 1))
    });
}

/// Replaces every node input named `from` by `to` (main graph only).
pub(crate) fn rename_inputs(graph: &mut onnx::GraphProto, from: &str, to: &str) {
    for node in &mut graph.node {
        for inp in node.input.iter_mut().filter(|i| *i == from) {
            *inp = to.to_owned();
        }
    }
}

/// Drops initializers no node (of the main graph or a subgraph) and no graph output reads.
pub(crate) fn prune_unused_initializers(graph: &mut onnx::GraphProto) {
    fn collect_inputs(graph: &onnx::GraphProto, used: &mut HashSet<String>) {
        for node in &graph.node {
            used.extend(node.input.iter().cloned());
            for g in onnx::subgraphs(node) {
                collect_inputs(g, used);
            }
        }
        used.extend(graph.output.iter().map(|o| o.name().to_owned()));
    }
    let mut used = HashSet::new();
    collect_inputs(graph, &mut used);
    graph.initializer.retain(|t| used.contains(t.name()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::{attr, tensor};
    use crate::test_support::{model, node};

    #[test]
    fn a_two_input_sum_becomes_an_add_and_a_three_input_one_stays() {
        let m = model(
            vec![
                node("Sum", &["x", "x"], "two"),
                node("Sum", &["two", "x", "x"], "y"),
            ],
            &["y"],
            vec![],
        );
        let normalized = normalize(m).unwrap();
        assert_eq!(normalized.summary.sums_as_adds, 1);
        let g = normalized.graph();
        let ops: Vec<&str> = g.node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, ["Add", "Sum"]);
        assert_eq!(g.node[0].input, ["x", "x"]);
        assert_eq!(g.node[0].output, ["two"]);
    }

    /// The ONNX model zoo's DenseNet-121 (a Caffe2 conversion, opset 9) writes each
    /// BatchNormalization's affine part as `Mul(Unsqueeze(w))` and `Add(Unsqueeze(b))`.
    #[test]
    fn conv_batchnorm_and_unsqueezed_affine_parameters_fold_into_one_conv() {
        let unsqueeze = |input: &str, output: &str| {
            let mut n = node("Unsqueeze", &[input], output);
            n.attribute.push(attr::make_ints("axes", &[1, 2]));
            n
        };
        let mut m = model(
            vec![
                node("Conv", &["x", "w"], "c"),
                node(
                    "BatchNormalization",
                    &["c", "g", "beta", "mean", "var"],
                    "bn",
                ),
                unsqueeze("s", "s3"),
                node("Mul", &["bn", "s3"], "m"),
                unsqueeze("d", "d3"),
                node("Add", &["m", "d3"], "a"),
                node("Relu", &["a"], "y"),
            ],
            &["y"],
            vec![
                tensor::from_f32("w", &[2, 1, 1, 1], &[1.0, 2.0]),
                tensor::from_f32("g", &[2], &[1.0, 1.0]),
                tensor::from_f32("beta", &[2], &[0.0, 1.0]),
                tensor::from_f32("mean", &[2], &[0.0, 0.0]),
                tensor::from_f32("var", &[2], &[1.0, 4.0]),
                tensor::from_f32("s", &[2], &[3.0, 4.0]),
                tensor::from_f32("d", &[2], &[10.0, 20.0]),
            ],
        );
        m.opset_import[0].version = Some(9);
        let normalized = normalize(m).unwrap();
        let summary = &normalized.summary;
        assert_eq!(summary.layout_ops_folded, 2);
        assert_eq!(summary.batchnorms_folded, 1);
        assert_eq!(
            (summary.scale_muls_folded, summary.bias_adds_folded),
            (1, 1)
        );
        let g = normalized.graph();
        let ops: Vec<&str> = g.node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, ["Conv", "Relu"]);
        let value = |name: &str| {
            let t = g.initializer.iter().find(|t| t.name() == name).unwrap();
            tensor::to_f32(t).unwrap()
        };
        // y = s·(γ(w·x − μ)/√(σ²+ε) + β) + d, per channel.
        let inv_std = |var: f64| (1.0 / (var + 1e-5).sqrt()) as f32;
        let (w, b) = (value(&g.node[0].input[1]), value(&g.node[0].input[2]));
        let expected_w = [3.0 * inv_std(1.0), 4.0 * 2.0 * inv_std(4.0)];
        let expected_b = [10.0, 4.0 * 1.0 + 20.0];
        for c in 0..2 {
            assert!(
                (w[c] - expected_w[c]).abs() < 1e-5,
                "{w:?} vs {expected_w:?}"
            );
            assert!(
                (b[c] - expected_b[c]).abs() < 1e-5,
                "{b:?} vs {expected_b:?}"
            );
        }
    }
}
