//! Where Q/DQ goes: the pass that turns the op table ([`crate::ops`]) into the set of nodes
//! to quantize and tensors to observe.
//!
//! The placement mirrors what ONNX Runtime's QDQ transformers fuse
//! (`onnxruntime/core/optimizer/qdq_transformer/selectors_actions`): a node fuses into its
//! integer kernel when every data input comes from a DequantizeLinear and its output goes to
//! exactly one QuantizeLinear. So each quantized tensor gets one Q→DQ pair and *all* its
//! readers read the DQ output, a quantized node's output never has a float reader besides the
//! Q, Relu/Clip after a quantized node sit before the Q (ORT's `ReluQuantFusion` /
//! `ClipQuantFusion` then drop them), data-movement ops reuse their input's parameters (ORT's
//! `DropQDQNodes` only drops pairs with equal scale and zero point), and graph outputs stay
//! FP32.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::graph::GraphIndex;
use crate::onnx::{attr, tensor, DataType, GraphProto, NodeProto};
use crate::ops::{is_depthwise, rule_of, OpRule};

pub use super::reason::{
    FloatReason, Unplannable, CUSTOM_DOMAIN_REASON, FUSED_SILU_REASON, GELU_REASON,
};

/// Why a default-domain op the table leaves FP32 is worth naming in the report.
fn float_reason(op_type: &str) -> Option<FloatReason> {
    match op_type {
        "If" | "Loop" | "Scan" => Some(FloatReason::ControlFlow),
        "LSTM" | "GRU" | "RNN" => Some(FloatReason::Recurrent),
        _ => None,
    }
}

/// Which inputs of a node carry quantizable data (not shapes, indices, axes or scales).
pub(super) fn data_inputs(node: &NodeProto, rule: OpRule) -> Vec<usize> {
    match (rule, node.op_type()) {
        (OpRule::Weighted { .. }, _) => vec![0],
        (OpRule::QLinear, "Add" | "Mul" | "Concat") => (0..node.input.len()).collect(),
        _ => vec![0],
    }
}

/// Where a quantized tensor's range comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum RangeSource {
    /// Calibrated on the tensor itself.
    Observed,
    /// Calibrated on the tensor itself, then cut to a Clip/Relu's `[min, max]` that ORT will
    /// drop (see [`super::params::ActivationParams::for_clipped_range`]).
    Clipped {
        /// Clip lower bound (0 for Relu).
        min: f32,
        /// Clip upper bound (+inf for Relu).
        max: f32,
    },
    /// Same scale and zero point as another quantized tensor (data-movement op output).
    SameAs(String),
    /// A constant (initializer) data input: range from its own values.
    Constant,
}

/// The weight (and bias) of one quantized weighted node.
#[derive(Debug, Clone)]
pub struct WeightPlan {
    /// Index of the node in the graph.
    pub node: usize,
    /// Input slot of the weight.
    pub weight_slot: usize,
    /// Input slot of the bias, when present and a 1-D constant with one value per channel.
    pub bias_slot: Option<usize>,
    /// Output-channel axis of the weight for per-channel scales.
    pub channel_axis: usize,
}

/// Why a node stays FP32, for the build report.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct FloatNode {
    /// Node name.
    pub name: String,
    /// Op type.
    pub op_type: String,
    /// Why (its `Display` is the report's text, which the JSON report holds).
    pub reason: FloatReason,
}

/// The complete placement decision for one graph.
#[derive(Debug, Default)]
pub struct Plan {
    /// Indices of nodes that will run quantized, in graph order.
    pub quantized_nodes: Vec<usize>,
    /// Weights to quantize, one per quantized weighted node.
    pub weights: Vec<WeightPlan>,
    /// Tensors that get Q/DQ (activations) or become quantized constants, with their range source.
    pub tensors: BTreeMap<String, RangeSource>,
    /// Relu/Clip nodes ORT will drop because a Q with a fitting range follows.
    pub absorbed: Vec<usize>,
    /// Nodes left in FP32 and why.
    pub float_nodes: Vec<FloatNode>,
}

impl Plan {
    /// Tensors whose range must be calibrated (observed or clipped activations).
    pub fn observed_tensors(&self) -> impl Iterator<Item = &str> {
        self.tensors
            .iter()
            .filter(|(_, s)| matches!(s, RangeSource::Observed | RangeSource::Clipped { .. }))
            .map(|(n, _)| n.as_str())
    }
}

/// Options that change placement.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// Node names to keep in FP32 whatever their rule.
    pub keep_float: HashSet<String>,
    /// Why a node of `keep_float` is kept, where it is not the user's request (default).
    pub keep_float_reasons: HashMap<String, FloatReason>,
    /// Activation tensors that must not be quantized, with the reason calibration found
    /// (outlier-dominated, see [`crate::calibrate::range::bulk_steps`]; or unresolved
    /// channels, see [`super::channel_spread`]): nodes reading or writing them stay FP32.
    pub float_tensors: HashMap<String, FloatReason>,
}

/// Decides placement for `graph` (normalized, topologically sorted), in the order of the
/// steps below: each step only drops candidates, so a later one sees what earlier ones kept.
pub fn plan(graph: &GraphProto, types: &HashMap<String, DataType>, options: &PlanOptions) -> Plan {
    let mut planner = Planner {
        graph,
        index: GraphIndex::new(graph),
        options,
        rules: HashMap::new(),
        se_pools: HashMap::new(),
        plan: Plan::default(),
    };
    planner.choose_candidates(types);
    planner.drop_readers_of_unfit_tensors();
    planner.drop_output_convs();
    planner.drop_se_branches();
    planner.drop_unread();
    planner.place_tensors();
    planner.report_dropped_without_reason();
    planner.plan
}

/// The placement pass's state: the candidates still kept and the plan being filled.
struct Planner<'a> {
    graph: &'a GraphProto,
    index: GraphIndex,
    options: &'a PlanOptions,
    /// Node index → rule, for the nodes still to be quantized.
    rules: HashMap<usize, OpRule>,
    /// Squeeze-and-excitation GlobalAveragePool → its gating Mul (see [`se_branch`]).
    se_pools: HashMap<usize, usize>,
    plan: Plan,
}

impl Planner<'_> {
    fn float(&mut self, i: usize, reason: FloatReason) {
        let node = &self.graph.node[i];
        self.plan.float_nodes.push(FloatNode {
            name: node.name().into(),
            op_type: node.op_type().into(),
            reason,
        });
    }

    /// Drops candidate `i` (if still kept), reporting why.
    fn drop_candidate(&mut self, i: usize, reason: FloatReason) {
        if self.rules.remove(&i).is_some() {
            self.float(i, reason);
        }
    }

    /// Step 1: candidates and their rules; ops that cannot be quantized are reported.
    fn choose_candidates(&mut self, types: &HashMap<String, DataType>) {
        let graph = self.graph;
        let is_float = |t: &str| types.get(t) == Some(&DataType::Float);
        for (i, node) in graph.node.iter().enumerate() {
            let rule = rule_of(node);
            if self.options.keep_float.contains(node.name()) {
                if rule != OpRule::Float {
                    let reason = (self.options.keep_float_reasons.get(node.name()))
                        .map_or(FloatReason::Requested, Clone::clone);
                    self.float(i, reason);
                }
                continue;
            }
            match rule {
                OpRule::Float => {
                    if crate::normalize::silu::is_fused_silu(node) {
                        self.float(i, FloatReason::FusedSilu);
                    } else if crate::normalize::gelu::is_gelu(node) {
                        self.float(i, FloatReason::Gelu);
                    } else if !crate::onnx::is_default_domain(node.domain()) {
                        let domain = node.domain().to_owned();
                        self.float(i, FloatReason::CustomDomain { domain });
                    } else if let Some(reason) = float_reason(node.op_type()) {
                        self.float(i, reason);
                    }
                }
                OpRule::Activation => {}
                OpRule::Weighted { .. } => {
                    match weight_plan(graph, &self.index, i, node, &is_float) {
                        Ok(w) => {
                            self.rules.insert(i, rule);
                            self.plan.weights.push(w);
                        }
                        Err(reason) => self.float(i, FloatReason::Unplannable(reason)),
                    }
                }
                _ => {
                    let inputs = data_inputs(node, rule);
                    let all_float = inputs.iter().all(|&k| {
                        node.input
                            .get(k)
                            .is_some_and(|t| !t.is_empty() && is_float(t))
                    });
                    if all_float && node.output.first().is_some_and(|o| is_float(o)) {
                        self.rules.insert(i, rule);
                    }
                }
            }
        }
    }

    /// Step 2: the tensor candidate `i`'s Q goes on: after a Relu/Clip that is its only
    /// reader, with the node index and range of that activation.
    fn quantized_output(&self, i: usize) -> (String, Option<(usize, RangeSource)>) {
        let out = self.graph.node[i].output[0].clone();
        if self.index.outputs.contains(&out) {
            return (out, None);
        }
        if let [only] = self.index.consumers_of(&out) {
            let act = &self.graph.node[*only];
            if let Some(range) = absorbable(self.graph, &self.index, act) {
                if !self.options.keep_float.contains(act.name()) {
                    return (act.output[0].clone(), Some((*only, range)));
                }
            }
        }
        (out, None)
    }

    /// Step 2b: nodes that would quantize a tensor calibration found unfit stay FP32.
    fn drop_readers_of_unfit_tensors(&mut self) {
        let mut coarse: Vec<(usize, String)> = self
            .rules
            .iter()
            .filter_map(|(&i, &rule)| {
                let node = &self.graph.node[i];
                let inputs = data_inputs(node, rule)
                    .into_iter()
                    .filter_map(|k| node.input.get(k));
                std::iter::once(&self.quantized_output(i).0)
                    .chain(inputs)
                    .find(|t| self.options.float_tensors.contains_key(*t))
                    .map(|t| (i, t.clone()))
            })
            .collect();
        coarse.sort_unstable();
        for (i, t) in coarse {
            let reason = self.options.float_tensors[&t].clone();
            self.drop_candidate(i, reason);
        }
    }

    /// Step 3: a Conv that writes a graph output, directly or through element-wise ops only
    /// (a text detector's `ConvTranspose → Sigmoid` map), stays FP32. QLinearConv needs a
    /// quantized output and graph outputs stay float, so its DequantizeLinear inputs would
    /// not fuse; and its output range is the prediction itself, whose rare decisive tail
    /// (text pixels) a calibrated range clips (a text detector's probability map capped at
    /// sigmoid(0) = 0.5). Convs that only *lead* to outputs through a mixing op (YOLOX's
    /// heads before Concat) are quantized: their readers dequantize, so every Conv fuses,
    /// and the mixing op's range is the one calibrated.
    fn drop_output_convs(&mut self) {
        let graph = self.graph;
        let mut writers: Vec<usize> = self
            .rules
            .iter()
            .filter(|(&i, r)| {
                matches!(r, OpRule::Weighted { .. })
                    && matches!(graph.node[i].op_type(), "Conv" | "ConvTranspose")
                    && reaches_output_elementwise(graph, &self.index, &graph.node[i].output[0])
            })
            .map(|(&i, _)| i)
            .collect();
        writers.sort_unstable();
        for i in writers {
            self.drop_candidate(i, FloatReason::OutputConv);
        }
    }

    /// Step 3b: squeeze-and-excitation branches stay FP32 (see [`se_branch`]), whether or
    /// not their GlobalAveragePool is kept; a kept one stays quantized, with its input's
    /// scale, while the gating Mul is.
    fn drop_se_branches(&mut self) {
        let pools: Vec<usize> = (self.graph.node.iter().enumerate())
            .filter(|(_, n)| n.op_type() == "GlobalAveragePool")
            .map(|(i, _)| i)
            .collect();
        for p in pools {
            let Some((branch, gate)) = se_branch(self.graph, &self.index, p) else {
                continue;
            };
            for b in branch {
                self.drop_candidate(b, FloatReason::SeBranch);
            }
            self.se_pools.insert(p, gate);
        }
    }

    /// Whether `t` is written by a kept node, directly or through kept single-input
    /// pooling/data-movement nodes that exist only to feed it.
    fn quantized_upstream(&self, t: &str) -> bool {
        let mut t = t.to_string();
        loop {
            let Some((&k, _)) = self
                .rules
                .iter()
                .find(|(&k, _)| self.quantized_output(k).0 == t)
            else {
                return false;
            };
            let node = &self.graph.node[k];
            let kept_readers = self
                .index
                .consumers_of(&t)
                .iter()
                .filter(|c| self.rules.contains_key(c))
                .count();
            let single_reader = kept_readers <= 1;
            match self.rules[&k] {
                OpRule::ShareScale | OpRule::QLinear
                    if single_reader && data_inputs(node, self.rules[&k]) == [0] =>
                {
                    t = node.input[0].clone();
                }
                _ => return true,
            }
        }
    }

    /// Step 4: drops non-weighted candidates whose output no kept candidate reads, to a
    /// fixpoint: quantizing them costs accuracy and buys no integer kernel. This includes a
    /// classifier's final GlobalAveragePool: pooled in float, the logits keep their
    /// precision (one uint8 step of the logits can merge close classes), and pooling is
    /// cheap next to the Convs before it. Likewise a weighted op whose integer kernel gains
    /// less than the Q/DQ it needs when nothing around it is quantized (see
    /// [`cheap_alone`]).
    fn drop_unread(&mut self) {
        let graph = self.graph;
        loop {
            // In graph order, so that the report lists drops the same way on every run (the
            // fixpoint itself does not depend on the order: dropping only ever removes readers).
            let mut kept: Vec<usize> = self.rules.keys().copied().collect();
            kept.sort_unstable();
            let mut changed = false;
            for i in kept {
                let (out, _) = self.quantized_output(i);
                let read_by_kept = self.index.consumers_of(&out).iter().any(|&c| {
                    self.rules.get(&c).is_some_and(|&r| {
                        data_inputs(&graph.node[c], r)
                            .iter()
                            .any(|&k| graph.node[c].input.get(k) == Some(&out))
                    })
                });
                // Weighted ops, and Gathers from a constant table (embeddings), are worth it
                // alone: the table is stored as uint8, and ORT drops the DQ→Gather→Q pair to
                // gather codes directly (a Gather reading a dequantized table would
                // dequantize all of it on every run).
                let gathers_constant = graph.node[i].op_type() == "Gather"
                    && self.index.is_initializer(&graph.node[i].input[0])
                    && !self.index.outputs.contains(&out);
                if let OpRule::Weighted { .. } = self.rules[&i] {
                    if let Some(reason) = cheap_alone(graph, &self.index, i) {
                        if !read_by_kept && !self.quantized_upstream(&graph.node[i].input[0]) {
                            self.drop_candidate(i, reason);
                            changed = true;
                        }
                    }
                    continue;
                }
                if gathers_constant
                    || self
                        .se_pools
                        .get(&i)
                        .is_some_and(|m| self.rules.contains_key(m))
                {
                    continue;
                }
                if !read_by_kept || self.index.outputs.contains(&out) {
                    self.rules.remove(&i);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let rules = &self.rules;
        self.plan.weights.retain(|w| rules.contains_key(&w.node));
    }

    /// Step 5: the tensors, every data input and the (post-activation) output of each kept
    /// node.
    fn place_tensors(&mut self) {
        let mut order: Vec<usize> = self.rules.keys().copied().collect();
        order.sort_unstable();
        for &i in &order {
            let node = &self.graph.node[i];
            let rule = self.rules[&i];
            for k in data_inputs(node, rule) {
                let t = &node.input[k];
                let source = if self.index.is_initializer(t) {
                    RangeSource::Constant
                } else {
                    RangeSource::Observed
                };
                self.plan.tensors.entry(t.clone()).or_insert(source);
            }
            let (out, absorbed) = self.quantized_output(i);
            if self.index.outputs.contains(&out) {
                continue;
            }
            let source = match (rule, absorbed) {
                (OpRule::ShareScale, _) => RangeSource::SameAs(node.input[0].clone()),
                // A mean lies within its inputs' range, so the input's parameters never clip it.
                _ if self.se_pools.contains_key(&i) => RangeSource::SameAs(node.input[0].clone()),
                (_, Some((act, range))) => {
                    self.plan.absorbed.push(act);
                    range
                }
                _ => RangeSource::Observed,
            };
            // An output wins over an earlier "input" entry: it knows its absorbed Clip range.
            self.plan.tensors.insert(out, source);
        }
        self.plan.quantized_nodes = order;
    }

    /// Reports the candidates the steps above dropped without a reason (step 4's unread
    /// ones); the others are reported already.
    fn report_dropped_without_reason(&mut self) {
        let reported: HashSet<String> = self
            .plan
            .float_nodes
            .iter()
            .map(|f| f.name.clone())
            .collect();
        for (i, node) in self.graph.node.iter().enumerate() {
            if !self.rules.contains_key(&i)
                && matches!(rule_of(node), OpRule::QLinear | OpRule::ShareScale)
                && !self.options.keep_float.contains(node.name())
                && !reported.contains(node.name())
            {
                self.float(i, FloatReason::NoQuantizedReader);
            }
        }
    }
}

/// Why a weighted op whose integer kernel would gain nothing on its own stays FP32, if it
/// is such an op: quantized with neither a quantized producer nor a quantized reader, it pays
/// a QuantizeLinear on its input and a DequantizeLinear on its output (plus uint8 copies of
/// any pooling in between) for its kernel alone. Two kinds, from ONNX Runtime's CPU kernels:
/// - Depthwise convolutions with kernels larger than 3x3: ORT's int8 depthwise kernel is
///   slower than its FP32 NCHWc one (PP-OCR cls's 5x5 layers between HardSwishes). 3x3 ones
///   keep fusing.
/// - MatMul/Gemm with fewer than [`TINY_WEIGHTS`] weights (a classifier's last layer), so
///   as few multiply-adds per row: they cannot repay the uint8 pooling chain they pull in
///   (ORT runs a uint8 MaxPool in NCHW, with layout changes around it).
fn cheap_alone(graph: &GraphProto, index: &GraphIndex, i: usize) -> Option<FloatReason> {
    let node = &graph.node[i];
    let weight = index
        .initializer
        .get(node.input.get(1)?)
        .map(|&k| &graph.initializer[k])?;
    // Dims come from the file: a product that overflows (or a negative dim) counts as huge.
    let count = |dims: &[i64]| tensor::element_count(dims).unwrap_or(usize::MAX);
    let kernel_area = count(weight.dims.get(2..).unwrap_or_default());
    let depthwise = is_depthwise(node, &weight.dims);
    let values = count(&weight.dims);
    if depthwise && kernel_area > 9 {
        Some(FloatReason::IsolatedDepthwise)
    } else if matches!(node.op_type(), "MatMul" | "Gemm") && values < TINY_WEIGHTS as usize {
        Some(FloatReason::IsolatedTiny)
    } else {
        None
    }
}

/// Weight count below which a MatMul/Gemm with no quantized neighbour stays FP32.
pub const TINY_WEIGHTS: i64 = 4096;

/// Most nodes a squeeze-and-excitation branch may have between its pooling and its gate.
const SE_MAX_NODES: usize = 16;

/// The squeeze-and-excitation branch (Hu et al. 2018, "Squeeze-and-Excitation Networks")
/// that starts at GlobalAveragePool `pool`, if it starts one: the nodes reachable from the
/// pooled `[N, C, 1, 1]` vector, none of them writing a graph output, with every path ending
/// in one two-input Mul that also reads the pool's input (the gate, MobileNetV3's
/// `x * HardSigmoid(Conv(Relu(Conv(pool(x)))))`), and with at least one weighted op.
/// Returns the branch's node indices and the gating Mul's.
///
/// Why the branch stays FP32: its pooled vectors and excitation outputs are calibrated on
/// only N x C values per tensor (one per sample and channel), whose ranges miss those of
/// other inputs, and its 1x1 Convs are too small to repay their Q/DQ (the model-coverage
/// test checks PP-OCR cls, a MobileNetV3, on real images). The pooling stays
/// QLinearGlobalAveragePool: a float one would need the whole uint8 map dequantized (and
/// ORT's NHWC layout transposed back).
fn se_branch(graph: &GraphProto, index: &GraphIndex, pool: usize) -> Option<(Vec<usize>, usize)> {
    let x = graph.node[pool].input.first()?;
    let mut branch: Vec<usize> = Vec::new();
    let mut gate = None;
    let mut pending = vec![graph.node[pool].output.first()?.clone()];
    while let Some(t) = pending.pop() {
        let readers = index.consumers_of(&t);
        if readers.is_empty() || index.outputs.contains(&t) {
            return None;
        }
        for &c in readers {
            let node = &graph.node[c];
            if node.op_type() == "Mul"
                && crate::onnx::is_default_domain(node.domain())
                && node.input.len() == 2
                && node.input.contains(x)
            {
                if gate.replace(c).is_some_and(|g| g != c) {
                    return None;
                }
            } else if !branch.contains(&c) {
                branch.push(c);
                if branch.len() > SE_MAX_NODES {
                    return None;
                }
                pending.extend(node.output.iter().filter(|o| !o.is_empty()).cloned());
            }
        }
    }
    let weighted = branch
        .iter()
        .any(|&b| matches!(rule_of(&graph.node[b]), OpRule::Weighted { .. }));
    branch.sort_unstable();
    Some((branch, gate?)).filter(|_| weighted)
}

/// Whether every path from `tensor` ends in a graph output after only element-wise ops:
/// unary activations, Softmax, or Add/Sub/Mul/Div with a constant.
fn reaches_output_elementwise(graph: &GraphProto, index: &GraphIndex, tensor: &str) -> bool {
    let readers = index.consumers_of(tensor);
    if index.outputs.contains(tensor) {
        return true;
    }
    !readers.is_empty()
        && readers.iter().all(|&c| {
            let node = &graph.node[c];
            let elementwise = match node.op_type() {
                "Sigmoid" | "Tanh" | "Relu" | "Clip" | "HardSigmoid" | "Softmax" | "LogSoftmax"
                | "Identity" | "Exp" => true,
                "Add" | "Sub" | "Mul" | "Div" => node
                    .input
                    .iter()
                    .filter(|t| *t != tensor)
                    .all(|t| index.is_initializer(t)),
                _ => false,
            };
            elementwise
                && crate::onnx::is_default_domain(node.domain())
                && node.output.len() == 1
                && reaches_output_elementwise(graph, index, &node.output[0])
        })
}

/// If `act` is a Relu, or a Clip with constant bounds, the range ORT can absorb it into.
fn absorbable(graph: &GraphProto, index: &GraphIndex, act: &NodeProto) -> Option<RangeSource> {
    if !crate::onnx::is_default_domain(act.domain()) {
        return None;
    }
    match act.op_type() {
        "Relu" => Some(RangeSource::Clipped {
            min: 0.0,
            max: f32::INFINITY,
        }),
        "Clip" => {
            let bound = |k: usize, default: f32| -> Option<f32> {
                match act.input.get(k).filter(|n| !n.is_empty()) {
                    None => Some(default),
                    Some(n) => {
                        let t = &graph.initializer[*index.initializer.get(n)?];
                        tensor::to_f32(t)
                            .ok()
                            .filter(|v| v.len() == 1)
                            .map(|v| v[0])
                    }
                }
            };
            let (min, max) = (bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?);
            // ORT can only drop a Clip whose lower bound is at or below 0 (the uint8
            // zero_point = 0 case).
            // A Clip with max < min (or a NaN bound) is no range at all: it sets every value
            // to `max`, and stays FP32.
            (min <= 0.0 && min < max).then_some(RangeSource::Clipped { min, max })
        }
        _ => None,
    }
}

fn weight_plan(
    graph: &GraphProto,
    index: &GraphIndex,
    i: usize,
    node: &NodeProto,
    is_float: &dyn Fn(&str) -> bool,
) -> Result<WeightPlan, Unplannable> {
    let input = node
        .input
        .first()
        .filter(|t| !t.is_empty())
        .ok_or(Unplannable::NoDataInput)?;
    if !is_float(input) || !node.output.first().is_some_and(|o| is_float(o)) {
        return Err(Unplannable::NotFloat);
    }
    let w_name = node.input.get(1).ok_or(Unplannable::NoWeight)?;
    let w = index
        .initializer
        .get(w_name)
        .map(|&k| &graph.initializer[k])
        .ok_or(Unplannable::ComputedWeight)?;
    if w.elem_type() != DataType::Float {
        return Err(Unplannable::WeightNotFloat);
    }
    let rank = w.dims.len();
    let channel_axis = match node.op_type() {
        "Conv" if rank >= 3 => 0,
        "ConvTranspose" if rank >= 3 => {
            if attr::int(node, "group", 1) != 1 {
                return Err(Unplannable::GroupedConvTranspose);
            }
            1
        }
        "Gemm" if rank == 2 => {
            if attr::int(node, "transA", 0) != 0 {
                return Err(Unplannable::GemmTransA);
            }
            if attr::int(node, "transB", 0) == 1 {
                0
            } else {
                1
            }
        }
        "MatMul" if rank == 2 => 1,
        op => {
            return Err(Unplannable::Rank {
                rank,
                op: op.to_owned(),
            })
        }
    };
    let channels = w.dims[channel_axis];
    let bias_slot = match node.input.get(2).filter(|b| !b.is_empty()) {
        None => None,
        Some(b) => {
            let t = index.initializer.get(b).map(|&k| &graph.initializer[k]);
            match t {
                Some(t) if t.elem_type() == DataType::Float && t.dims == [channels] => Some(2),
                // A broadcast or computed bias stays FP32; the op still quantizes.
                _ => return Err(Unplannable::Bias),
            }
        }
    };
    Ok(WeightPlan {
        node: i,
        weight_slot: 1,
        bias_slot,
        channel_axis,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{float_value, named};

    /// Element types for `names`, all float.
    fn float_types(names: &[&str]) -> HashMap<String, DataType> {
        names
            .iter()
            .map(|t| (t.to_string(), DataType::Float))
            .collect()
    }

    /// MobileNetV3's block: `feat → GlobalAveragePool → Conv → Relu → Conv → HardSigmoid`,
    /// gating `feat` through a Mul, then a Conv.
    #[test]
    fn a_squeeze_and_excitation_branch_stays_fp32_between_a_quantized_pool_and_gate() {
        let named = |name: &str, op: &str, inputs: &[&str], output: &str| {
            named(op, name, inputs, &[output])
        };
        let graph = GraphProto {
            node: vec![
                named("stem", "Conv", &["x", "w0", "b0"], "c0"),
                named("stem_relu", "Relu", &["c0"], "feat"),
                named("squeeze", "GlobalAveragePool", &["feat"], "pooled"),
                named("reduce", "Conv", &["pooled", "w1", "b1"], "s1"),
                named("reduce_relu", "Relu", &["s1"], "s1r"),
                named("expand", "Conv", &["s1r", "w2", "b2"], "s2"),
                named("excite", "HardSigmoid", &["s2"], "gate"),
                named("scale", "Mul", &["feat", "gate"], "scaled"),
                named("project", "Conv", &["scaled", "w3", "b3"], "c3"),
                named("pool", "MaxPool", &["c3"], "y"),
            ],
            initializer: vec![
                tensor::from_f32("w0", &[4, 2, 1, 1], &[0.5; 8]),
                tensor::from_f32("b0", &[4], &[0.0; 4]),
                tensor::from_f32("w1", &[2, 4, 1, 1], &[0.5; 8]),
                tensor::from_f32("b1", &[2], &[0.0; 2]),
                tensor::from_f32("w2", &[4, 2, 1, 1], &[0.5; 8]),
                tensor::from_f32("b2", &[4], &[0.0; 4]),
                tensor::from_f32("w3", &[4, 4, 1, 1], &[0.5; 16]),
                tensor::from_f32("b3", &[4], &[0.0; 4]),
            ],
            output: vec![float_value("y")],
            ..Default::default()
        };
        let types = float_types(&[
            "x", "c0", "feat", "pooled", "s1", "s1r", "s2", "gate", "scaled", "c3", "y",
        ]);
        let plan = plan(&graph, &types, &PlanOptions::default());

        let float: Vec<&str> = plan
            .float_nodes
            .iter()
            .filter(|f| f.reason == FloatReason::SeBranch)
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(float, ["reduce", "expand"]);
        let weighted: Vec<&str> = plan
            .weights
            .iter()
            .map(|w| graph.node[w.node].name())
            .collect();
        assert_eq!(
            weighted,
            ["stem", "project"],
            "the branch's weights stay FP32"
        );
        let quantized: Vec<&str> = plan
            .quantized_nodes
            .iter()
            .map(|&i| graph.node[i].name())
            .collect();
        assert_eq!(quantized, ["stem", "squeeze", "scale", "project"]);
        assert_eq!(
            plan.tensors["pooled"],
            RangeSource::SameAs("feat".into()),
            "the pooled means take the pooled map's scale"
        );
        assert_eq!(plan.tensors["gate"], RangeSource::Observed, "the Mul fuses");
        assert!(!plan.tensors.contains_key("s1r") && !plan.tensors.contains_key("s2"));
    }

    /// SqueezeNet's head: `Conv → Relu → GlobalAveragePool → Softmax → output`.
    #[test]
    fn a_pooling_read_only_by_float_ops_stays_fp32() {
        let graph = GraphProto {
            node: vec![
                named("Conv", "Conv", &["x", "w", "b"], &["conv"]),
                named("Relu", "Relu", &["conv"], &["relu"]),
                named(
                    "GlobalAveragePool",
                    "GlobalAveragePool",
                    &["relu"],
                    &["pool"],
                ),
                named("Softmax", "Softmax", &["pool"], &["prob"]),
            ],
            initializer: vec![
                tensor::from_f32("w", &[4, 2, 1, 1], &[0.5; 8]),
                tensor::from_f32("b", &[4], &[0.0; 4]),
            ],
            output: vec![float_value("prob")],
            ..Default::default()
        };
        let types = float_types(&["x", "w", "b", "conv", "relu", "pool", "prob"]);
        let plan = plan(&graph, &types, &PlanOptions::default());

        assert_eq!(plan.quantized_nodes, [0], "only the Conv runs quantized");
        assert_eq!(
            plan.tensors.keys().collect::<Vec<_>>(),
            ["relu", "x"],
            "the Conv's input and its Relu-clipped output get Q/DQ; the pooled logits do not"
        );
        let pool = plan
            .float_nodes
            .iter()
            .find(|f| f.op_type == "GlobalAveragePool")
            .expect("the pooling is reported FP32");
        assert_eq!(pool.reason, FloatReason::NoQuantizedReader);
    }

    /// A residual Add whose output is outlier-dominated (MiniLM's layer-0 feed-forward).
    #[test]
    fn a_tensor_calibration_rejects_keeps_its_add_fp32_once_with_the_reason() {
        let graph = GraphProto {
            node: vec![
                named("Conv", "Conv", &["x", "w", "b"], &["conv"]),
                named("Add", "Add", &["conv", "x"], &["sum"]),
                named("Conv", "Conv", &["sum", "w", "b"], &["out"]),
            ],
            initializer: vec![
                tensor::from_f32("w", &[2, 2, 1, 1], &[0.5; 4]),
                tensor::from_f32("b", &[2], &[0.0; 2]),
            ],
            output: vec![float_value("out")],
            ..Default::default()
        };
        let types = float_types(&["x", "w", "b", "conv", "sum", "out"]);
        let options = PlanOptions {
            float_tensors: [(
                "sum".to_string(),
                FloatReason::outlier_dominated("sum", 2.5),
            )]
            .into(),
            ..Default::default()
        };
        let plan = plan(&graph, &types, &options);
        let add: Vec<&FloatNode> = plan
            .float_nodes
            .iter()
            .filter(|f| f.name == "Add")
            .collect();
        assert_eq!(add.len(), 1, "{:?}", plan.float_nodes);
        assert_eq!(add[0].reason, FloatReason::outlier_dominated("sum", 2.5));
    }

    /// A MobileNetV3 block: `HardSwish → depthwise Conv → HardSwish`, then a classifier head
    /// `MaxPool → GlobalAveragePool → Reshape → MatMul` on another HardSwish.
    fn hardswish_block(kernel: i64, head_columns: i64) -> (GraphProto, HashMap<String, DataType>) {
        let mut depthwise = named("Conv", "Conv", &["a", "dw_w", "dw_b"], &["dw"]);
        depthwise.attribute.push(attr::make_int("group", 8));
        let k = kernel as usize;
        let graph = GraphProto {
            node: vec![
                named("HardSwish", "HardSwish", &["x"], &["a"]),
                depthwise,
                named("HardSwish", "HardSwish", &["dw"], &["h"]),
                named("MaxPool", "MaxPool", &["h"], &["mp"]),
                named("GlobalAveragePool", "GlobalAveragePool", &["mp"], &["gap"]),
                named("Reshape", "Reshape", &["gap", "shape"], &["flat"]),
                named("MatMul", "MatMul", &["flat", "fc_w"], &["logits"]),
            ],
            initializer: vec![
                tensor::from_f32("dw_w", &[8, 1, kernel, kernel], &vec![0.1; 8 * k * k]),
                tensor::from_f32("dw_b", &[8], &[0.0; 8]),
                tensor::from_i64("shape", &[2], &[1, 8]),
                tensor::from_f32(
                    "fc_w",
                    &[8, head_columns],
                    &vec![0.1; 8 * head_columns as usize],
                ),
            ],
            output: vec![float_value("logits")],
            ..Default::default()
        };
        let types = float_types(&["x", "a", "dw", "h", "mp", "gap", "flat", "logits"]);
        (graph, types)
    }

    fn reason_of<'a>(plan: &'a Plan, name: &str) -> Option<&'a FloatReason> {
        plan.float_nodes
            .iter()
            .find(|f| f.name == name)
            .map(|f| &f.reason)
    }

    #[test]
    fn isolated_large_depthwise_convs_and_tiny_heads_stay_fp32() {
        let (graph, types) = hardswish_block(5, 2);
        let plan = plan(&graph, &types, &PlanOptions::default());
        assert!(
            plan.quantized_nodes.is_empty(),
            "{:?}",
            plan.quantized_nodes
        );
        assert!(plan.tensors.is_empty(), "{:?}", plan.tensors);
        assert!(plan.weights.is_empty());
        assert_eq!(
            reason_of(&plan, "Conv"),
            Some(&FloatReason::IsolatedDepthwise)
        );
        assert_eq!(reason_of(&plan, "MatMul"), Some(&FloatReason::IsolatedTiny));
        // The pooling that only fed the head goes with it.
        assert_eq!(
            reason_of(&plan, "MaxPool"),
            Some(&FloatReason::NoQuantizedReader)
        );
    }

    #[test]
    fn ops_dropped_as_cheap_alone_are_reported_in_graph_order() {
        // Six 5x5 depthwise Convs, each between float HardSwishes, so each is isolated.
        let mut nodes = Vec::new();
        let mut initializer = Vec::new();
        let mut names = vec!["x".to_owned()];
        for i in 0..6 {
            let (input, conv, act) = (
                names.last().unwrap().clone(),
                format!("c{i}"),
                format!("h{i}"),
            );
            let mut depthwise = named("Conv", "Conv", &[&input, &format!("w{i}")], &[&conv]);
            depthwise.name = Some(format!("dw{i}"));
            depthwise.attribute.push(attr::make_int("group", 8));
            nodes.push(depthwise);
            nodes.push(named("HardSwish", "HardSwish", &[&conv], &[&act]));
            initializer.push(tensor::from_f32(
                &format!("w{i}"),
                &[8, 1, 5, 5],
                &[0.1; 200],
            ));
            names.extend([conv, act]);
        }
        let graph = GraphProto {
            node: nodes,
            initializer,
            output: vec![float_value(names.last().unwrap())],
            ..Default::default()
        };
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let plan = plan(&graph, &float_types(&names), &PlanOptions::default());
        let dropped: Vec<&str> = plan.float_nodes.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(dropped, ["dw0", "dw1", "dw2", "dw3", "dw4", "dw5"]);
    }

    #[test]
    fn a_3x3_depthwise_conv_and_a_large_head_stay_quantized() {
        let (graph, types) = hardswish_block(3, TINY_WEIGHTS / 8);
        let plan = plan(&graph, &types, &PlanOptions::default());
        // Conv, MaxPool, GlobalAveragePool, Reshape, MatMul.
        assert_eq!(
            plan.quantized_nodes,
            [1, 3, 4, 5, 6],
            "{:?}",
            plan.float_nodes
        );
        assert_eq!(plan.weights.len(), 2);
    }

    #[test]
    fn a_large_depthwise_conv_with_a_quantized_neighbour_stays_quantized() {
        // The float HardSwish before (slot 0) or after (slot 2) the depthwise Conv becomes a
        // quantized pointwise Conv.
        for (slot, input, output) in [(0, "x", "a"), (2, "dw", "h")] {
            let (mut graph, types) = hardswish_block(5, 2);
            graph.node[slot] = named("Conv", "Conv", &[input, "pw_w"], &[output]);
            graph.node[slot].name = Some("pointwise".into());
            graph
                .initializer
                .push(tensor::from_f32("pw_w", &[8, 8, 1, 1], &[0.1; 64]));
            let plan = plan(&graph, &types, &PlanOptions::default());
            assert!(
                plan.quantized_nodes.contains(&1),
                "neighbour in slot {slot}: {:?}",
                plan.float_nodes
            );
            assert_eq!(reason_of(&plan, "Conv"), None);
        }
    }
}
