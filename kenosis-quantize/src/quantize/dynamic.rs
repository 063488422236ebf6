//! Dynamic activation quantization: MatMul and Gemm with a constant weight quantize their
//! input at run time, and embedding tables are stored as int8.
//!
//! This is the form of ONNX Runtime's `quantize_dynamic` (`onnxruntime/python/tools/
//! quantization`, `operators/matmul.py` and `operators/gather.py`), which embedding
//! libraries ship as their "quantized" transformer encoders. For each planned node:
//!
//! ```text
//! x ─ DynamicQuantizeLinear ─┬─ x_q (uint8) ─┐
//!                            ├─ x_scale ─────┼─ Mul(x_scale, w_scale[N]) ─┐
//!                            └─ x_zero_point ┘                            │
//! MatMulInteger(x_q, w_q int8 [K, N], x_zero_point, 0 int8 [N]) ─ Cast(float) ─ Mul ─ y
//! ```
//!
//! ONNX Runtime's CPU provider fuses this chain into `DynamicQuantizeMatMul`
//! (`MatMulIntegerToFloatFusion`, then `DynamicQuantizeMatMulFusion`), which quantizes `x`
//! to uint8 with the range of the whole tensor at each run and multiplies with the int8
//! weights. One `DynamicQuantizeLinear` serves every planned node reading the same tensor
//! (the query, key and value projections of an attention block). Weights get one
//! symmetric scale per output column ([`super::weights::quantize`] along axis 1).
//!
//! Embedding tables (a `Gather` along axis 0 from a constant float `[V, D]` table) are
//! stored as int8 with one scale per column `d`, applied after the lookup by a
//! `DequantizeLinear` along the last axis: `Gather(w_q, ids) → DequantizeLinear(axis = -1)`.
//! Per-column scales stay valid for any gathered row, unlike per-row ones, which would need
//! a second lookup; ORT's quantizer uses one scale for the whole table.
//!
//! Activations are never clipped to a calibrated range: a dynamic range follows the
//! outlier tokens and channels transformer activations have (Dettmers et al., 2022,
//! "LLM.int8()"; Xiao et al., 2023, "SmoothQuant"), where a static range calibrated on other
//! inputs clips them or wastes its steps. The price is one pass over `x` to find its range.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::weights;
use crate::error::BadTensor;
use crate::graph::{GraphIndex, NameGen};
use crate::kernel_costs::KernelCosts;
use crate::onnx::{attr, make_node, tensor, DataType, GraphProto, NodeProto, TensorProto};

/// Fewest elements a weight or an embedding table needs to be quantized dynamically; smaller
/// ones (a classifier's last layer over a few classes) save less than their conversions
/// cost. Equal to the static placement's [`super::plan::TINY_WEIGHTS`].
pub const MIN_WEIGHTS: usize = super::plan::TINY_WEIGHTS as usize;

pub use super::reason::{DYNAMIC_SLOWER_REASON, SMALL_TABLE_REASON};

/// A MatMul or Gemm that can run with dynamic activations, with the shape of its constant
/// weight as a `[K, N]` matrix (a Gemm's `transB` undone).
#[derive(Debug, Clone, PartialEq)]
pub struct DynamicMatMul {
    /// Index of the node in the graph.
    pub node: usize,
    /// Rows (input features) of the weight.
    pub k: usize,
    /// Columns (output features) of the weight.
    pub n: usize,
}

/// What [`plan`] chose for one graph: the nodes to rewrite, in graph order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DynamicPlan {
    /// MatMul and Gemm nodes to run with dynamic activations.
    pub matmuls: Vec<DynamicMatMul>,
    /// Gathers whose constant table is stored as int8.
    pub tables: Vec<usize>,
    /// Nodes the form could take but the kernel costs keep FP32 (see
    /// [`DYNAMIC_SLOWER_REASON`]).
    pub slower: Vec<usize>,
    /// Lookups in constant tables smaller than [`MIN_WEIGHTS`] (a BERT token-type table),
    /// kept FP32 (see [`SMALL_TABLE_REASON`]): int8 would save a few bytes and add a
    /// conversion.
    pub small_tables: Vec<usize>,
}

impl DynamicPlan {
    /// Keeps the MatMuls (and the FP32-kept `slower` ones) whose name `dynamic` accepts, and
    /// the embedding tables only when `tables`: the plan of a build where other MatMuls take
    /// static activations.
    pub fn retain(&mut self, graph: &GraphProto, dynamic: impl Fn(&str) -> bool, tables: bool) {
        self.matmuls.retain(|m| dynamic(graph.node[m.node].name()));
        self.slower.retain(|&i| dynamic(graph.node[i].name()));
        if !tables {
            self.tables.clear();
            self.small_tables.clear();
        }
    }

    /// The planned MatMuls in groups that read one input tensor (and share its
    /// `DynamicQuantizeLinear`: an attention block's query, key and value projections), each
    /// with that tensor's name, in graph order.
    pub fn by_input<'a>(&'a self, graph: &'a GraphProto) -> Vec<(&'a str, Vec<&'a DynamicMatMul>)> {
        let mut by_input: Vec<(&str, Vec<&DynamicMatMul>)> = Vec::new();
        for m in &self.matmuls {
            let input = graph.node[m.node].input[0].as_str();
            match by_input.iter_mut().find(|(i, _)| *i == input) {
                Some((_, members)) => members.push(m),
                None => by_input.push((input, vec![m])),
            }
        }
        by_input
    }

    /// The planned MatMuls' names, grouped as [`DynamicPlan::by_input`]: the units a
    /// per-node choice of activation mode flips together.
    pub fn groups(&self, graph: &GraphProto) -> Vec<Vec<String>> {
        (self.by_input(graph).into_iter())
            .map(|(_, members)| {
                (members.iter())
                    .map(|m| graph.node[m.node].name().to_owned())
                    .collect()
            })
            .collect()
    }

    /// Names of every node the plan rewrites.
    pub fn node_names<'a>(&'a self, graph: &'a GraphProto) -> impl Iterator<Item = &'a str> + 'a {
        (self.matmuls.iter().map(|m| m.node))
            .chain(self.tables.iter().copied())
            .map(move |i| graph.node[i].name())
    }
}

/// Counts of what [`rewrite`] did, for the build report.
#[derive(Debug, Default, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct DynamicSummary {
    /// MatMul and Gemm nodes rewritten to `DynamicQuantizeLinear` + `MatMulInteger`.
    pub matmuls: usize,
    /// `DynamicQuantizeLinear` nodes inserted (one per distinct input tensor).
    pub dynamic_quantizers: usize,
    /// Embedding tables stored as int8.
    pub tables: usize,
    /// Inputs divided by SmoothQuant scales before their quantizer (see [`super::smooth`]).
    #[serde(default)]
    pub smoothed_inputs: usize,
}

/// The `[K, N]` shape of the constant float weight of `node`, a MatMul (weight rank 2) or a
/// Gemm without `transA`, reading a float input; `None` for other nodes.
fn weight_shape(
    graph: &GraphProto,
    index: &GraphIndex,
    node: &NodeProto,
    is_float: &dyn Fn(&str) -> bool,
) -> Option<(usize, usize)> {
    if !crate::onnx::is_default_domain(node.domain()) {
        return None;
    }
    let gemm = match node.op_type() {
        "MatMul" => false,
        "Gemm" if attr::int(node, "transA", 0) == 0 => true,
        _ => return None,
    };
    let x = node.input.first().filter(|t| !t.is_empty())?;
    if !is_float(x) || index.is_initializer(x) || !node.output.first().is_some_and(|o| is_float(o))
    {
        return None;
    }
    let w = &graph.initializer[*index.initializer.get(node.input.get(1)?)?];
    if w.elem_type() != DataType::Float || w.dims.len() != 2 || w.dims.iter().any(|&d| d <= 0) {
        return None;
    }
    if gemm {
        // A bias must be a constant; it is added back in float after the integer product.
        if let Some(c) = node.input.get(2).filter(|c| !c.is_empty()) {
            let c = &graph.initializer[*index.initializer.get(c)?];
            if c.elem_type() != DataType::Float {
                return None;
            }
        }
    }
    let (rows, cols) = (w.dims[0] as usize, w.dims[1] as usize);
    Some(if gemm && attr::int(node, "transB", 0) != 0 {
        (cols, rows)
    } else {
        (rows, cols)
    })
}

/// Whether `node` is a lookup in an embedding table: a `Gather` along axis 0 from a constant
/// float `[V, D]` table of at least [`MIN_WEIGHTS`] values, with computed indices.
fn is_table_lookup(graph: &GraphProto, index: &GraphIndex, node: &NodeProto) -> bool {
    is_lookup(graph, index, node, MIN_WEIGHTS)
}

/// [`is_table_lookup`] with a table of at least `min_values` values.
fn is_lookup(graph: &GraphProto, index: &GraphIndex, node: &NodeProto, min_values: usize) -> bool {
    if node.op_type() != "Gather"
        || !crate::onnx::is_default_domain(node.domain())
        || attr::int(node, "axis", 0) != 0
    {
        return false;
    }
    let (Some(table), Some(ids)) = (node.input.first(), node.input.get(1)) else {
        return false;
    };
    if index.is_initializer(ids) {
        return false;
    }
    index.initializer.get(table).is_some_and(|&k| {
        let t = &graph.initializer[k];
        t.elem_type() == DataType::Float
            && t.dims.len() == 2
            && tensor::element_count(&t.dims).is_some_and(|n| n >= min_values)
    })
}

/// The share of constant weights (MatMul and Gemm weights, embedding tables, Conv weights)
/// held by the MatMuls, Gemms and tables the dynamic form can take, in `[0, 1]`: a
/// transformer encoder's is near 1, a CNN's a classifier head's share.
pub fn matmul_weight_share(
    graph: &GraphProto,
    types: &std::collections::HashMap<String, DataType>,
) -> f64 {
    let index = GraphIndex::new(graph);
    let is_float = |t: &str| types.get(t) == Some(&DataType::Float);
    let size = |name: &str| {
        index
            .initializer
            .get(name)
            .and_then(|&k| tensor::element_count(&graph.initializer[k].dims))
            .unwrap_or(0) as f64
    };
    let (mut dynamic, mut all) = (0.0, 0.0);
    for node in &graph.node {
        let Some(w) = node.input.get(1) else { continue };
        if weight_shape(graph, &index, node, &is_float).is_some() {
            dynamic += size(w);
            all += size(w);
        } else if is_table_lookup(graph, &index, node) {
            dynamic += size(&node.input[0]);
            all += size(&node.input[0]);
        } else if matches!(node.op_type(), "Conv" | "ConvTranspose" | "MatMul" | "Gemm") {
            all += size(w);
        }
    }
    if all == 0.0 {
        0.0
    } else {
        dynamic / all
    }
}

/// Whether quantizing input tensor `x` (`k` features a row) at run time for MatMuls with
/// `columns` output features in total saves time at `costs`: per row, the integer kernel
/// saves `(1 - int8_dynamic_dense)·k·columns` multiply-adds' time, and
/// `DynamicQuantizeLinear` costs two passes over the row (range, then codes) and the scaling
/// of each output.
fn pays(costs: &KernelCosts, k: usize, columns: usize) -> bool {
    let saved = (1.0 - costs.int8_dynamic_dense) * (k * columns) as f64;
    let cost = costs.conversion * (2 * k + columns) as f64;
    saved > cost
}

/// Chooses the nodes of `graph` to run with dynamic activations: every MatMul and Gemm with
/// a constant weight of at least [`MIN_WEIGHTS`] values that no name in `keep_float` names,
/// and every embedding-table Gather; with `costs`, the MatMuls whose input's conversion
/// costs more than their integer kernels save stay FP32 (listed in `slower`).
pub fn plan(
    graph: &GraphProto,
    types: &std::collections::HashMap<String, DataType>,
    keep_float: &HashSet<String>,
    costs: Option<&KernelCosts>,
) -> DynamicPlan {
    let index = GraphIndex::new(graph);
    let is_float = |t: &str| types.get(t) == Some(&DataType::Float);
    let mut by_input: BTreeMap<&str, Vec<DynamicMatMul>> = BTreeMap::new();
    let mut out = DynamicPlan::default();
    for (i, node) in graph.node.iter().enumerate() {
        if keep_float.contains(node.name()) {
            continue;
        }
        if let Some((k, n)) = weight_shape(graph, &index, node, &is_float) {
            if k * n >= MIN_WEIGHTS {
                by_input
                    .entry(node.input[0].as_str())
                    .or_default()
                    .push(DynamicMatMul { node: i, k, n });
            }
        } else if is_table_lookup(graph, &index, node) {
            // A table also read by other ops keeps its float copy for them: no saving.
            let table = &node.input[0];
            let only_lookups = (index.consumers_of(table).iter())
                .all(|&c| is_table_lookup(graph, &index, &graph.node[c]));
            if only_lookups && !index.outputs.contains(table) {
                out.tables.push(i);
            }
        } else if is_lookup(graph, &index, node, 0) {
            out.small_tables.push(i);
        }
    }
    for group in by_input.into_values() {
        let (k, columns) = (group[0].k, group.iter().map(|m| m.n).sum());
        if costs.is_some_and(|c| !pays(c, k, columns)) {
            out.slower.extend(group.iter().map(|m| m.node));
        } else {
            out.matmuls.extend(group);
        }
    }
    out.matmuls.sort_by_key(|m| m.node);
    out.slower.sort_unstable();
    out
}

/// Rewrites the nodes `plan` names (computed on this `graph`, whose nodes must not have
/// moved since) into the dynamic form described in the [module docs](self): weights as int8
/// with per-column scales (with `reduce_range`, for x86 kernels without VNNI whose
/// `VPMADDUBSW` pairs saturate on 8-bit weights, on the pair-safe grid of
/// [`weights::quantize_pair_safe`]), tables as int8 with per-column scales. A weight or
/// table several nodes read (directly, or through `Identity` nodes, which normalization
/// folds into the one initializer) is stored once, as one int8 tensor with one set of
/// scales, and so is a Gemm bias: only nodes that make a different `[K, N]` matrix of it (a
/// Gemm's `transB` or `alpha`) get their own copy. A group whose input tensor `smoothing`
/// names, with SmoothQuant scales `s_j` per input channel, reads it divided by the scales
/// (one `Mul` before its quantizer), its weights' rows multiplied by them; its weights must
/// have no other reader (`quantize::smooth` leaves such groups out). The rewritten nodes
/// keep their output names; the caller sorts the graph topologically afterwards.
///
/// # Errors
/// [`BadTensor`] when a weight, bias or table payload cannot be read.
pub fn rewrite(
    graph: &mut GraphProto,
    plan: &DynamicPlan,
    reduce_range: bool,
    smoothing: &HashMap<String, Vec<f32>>,
) -> Result<DynamicSummary, BadTensor> {
    let index = GraphIndex::new(graph);
    let mut names = NameGen::new(graph);
    let mut nodes: Vec<NodeProto> = Vec::new();
    let mut initializers: Vec<TensorProto> = Vec::new();
    let mut summary = DynamicSummary::default();
    let mut removed: HashSet<usize> = HashSet::new();

    // One DynamicQuantizeLinear per input tensor: (codes, scale, zero point).
    let mut quantized: BTreeMap<String, [String; 3]> = BTreeMap::new();
    // One int8 copy per weight and form (see `WeightForm`), shared by the nodes reading it
    // (an ALBERT-style model's layers): (codes, scales, zero points); one float copy per
    // Gemm bias and `beta`.
    let mut weights_done: HashMap<WeightForm, [String; 3]> = HashMap::new();
    let mut biases_done: HashMap<(String, u32), String> = HashMap::new();
    for m in &plan.matmuls {
        let node = &graph.node[m.node];
        let x = node.input[0].clone();
        let y = node.output[0].clone();
        let [x_q, x_scale, x_zero] = quantized
            .entry(x.clone())
            .or_insert_with(|| {
                let outs = [
                    names.fresh(&format!("{x}_quantized")),
                    names.fresh(&format!("{x}_scale")),
                    names.fresh(&format!("{x}_zero_point")),
                ];
                let mut read = x.clone();
                if let Some(scales) = smoothing.get(&x) {
                    let inverse: Vec<f32> = scales.iter().map(|v| 1.0 / v).collect();
                    let divisor = names.fresh(&format!("{x}_smoothing"));
                    read = names.fresh(&format!("{x}_smoothed"));
                    initializers.push(tensor::from_f32(
                        &divisor,
                        &[inverse.len() as i64],
                        &inverse,
                    ));
                    nodes.push(make_node(
                        "Mul",
                        names.fresh(&format!("{x}_smoothing_Mul")),
                        vec![x.clone(), divisor],
                        vec![read.clone()],
                        vec![],
                    ));
                    summary.smoothed_inputs += 1;
                }
                nodes.push(make_node(
                    "DynamicQuantizeLinear",
                    names.fresh(&format!("{x}_DynamicQuantizeLinear")),
                    vec![read],
                    outs.to_vec(),
                    vec![],
                ));
                summary.dynamic_quantizers += 1;
                outs
            })
            .clone();
        let form = WeightForm::of(node);
        let (w, bias) = if weights_done.contains_key(&form) {
            (Vec::new(), gemm_bias(graph, &index, node)?)
        } else {
            weight_matrix(graph, &index, node, m)?
        };
        let dims = [m.k as i64, m.n as i64];
        let base = node.name().to_owned();
        let [w_q, w_scale, w_zero] = match weights_done.get(&form) {
            Some(done) => done.clone(),
            None => {
                let mut w = w;
                if let Some(scales) = smoothing.get(&x) {
                    for (row, &s) in w.chunks_mut(m.n).zip(scales) {
                        row.iter_mut().for_each(|v| *v *= s);
                    }
                }
                let q = quantize_weight(&w, [m.k, m.n], reduce_range);
                let w_name = &node.input[1];
                let made = [
                    names.fresh(&format!("{w_name}_quantized")),
                    names.fresh(&format!("{w_name}_scale")),
                    names.fresh(&format!("{w_name}_zero_point")),
                ];
                let n = [m.n as i64];
                initializers.push(tensor::from_i8(&made[0], &dims, &q.codes));
                initializers.push(tensor::from_f32(&made[1], &n, &q.scales));
                initializers.push(tensor::from_i8(&made[2], &n, &vec![0; m.n]));
                weights_done.insert(form, made.clone());
                made
            }
        };
        let [product, product_f, scale, scaled] = [
            names.fresh(&format!("{base}_MatMulInteger_output")),
            names.fresh(&format!("{base}_MatMulInteger_output_float")),
            names.fresh(&format!("{base}_scales")),
            names.fresh(&format!("{base}_scaled")),
        ];
        let product_out = if bias.is_some() {
            scaled.clone()
        } else {
            y.clone()
        };
        nodes.push(make_node(
            "MatMulInteger",
            names.fresh(&format!("{base}_MatMulInteger")),
            vec![x_q, w_q, x_zero, w_zero],
            vec![product.clone()],
            vec![],
        ));
        nodes.push(make_node(
            "Cast",
            names.fresh(&format!("{base}_Cast")),
            vec![product],
            vec![product_f.clone()],
            vec![attr::make_int("to", i64::from(DataType::Float as i32))],
        ));
        nodes.push(make_node(
            "Mul",
            names.fresh(&format!("{base}_scales_Mul")),
            vec![x_scale, w_scale],
            vec![scale.clone()],
            vec![],
        ));
        nodes.push(make_node(
            "Mul",
            names.fresh(&format!("{base}_output_Mul")),
            vec![product_f, scale],
            vec![product_out],
            vec![],
        ));
        if let Some((c_dims, c)) = bias {
            let beta = attr::float(node, "beta", 1.0).to_bits();
            let key = (node.input[2].clone(), beta);
            let c_name = match biases_done.get(&key) {
                Some(done) => done.clone(),
                None => {
                    let c_name = names.fresh(&format!("{base}_bias"));
                    initializers.push(tensor::from_f32(&c_name, &c_dims, &c));
                    biases_done.insert(key, c_name.clone());
                    c_name
                }
            };
            nodes.push(make_node(
                "Add",
                names.fresh(&format!("{base}_bias_Add")),
                vec![scaled, c_name],
                vec![y],
                vec![],
            ));
        }
        removed.insert(m.node);
        summary.matmuls += 1;
    }

    // One int8 copy per table, shared by its lookups: (codes, scale, zero point).
    let mut tables: BTreeMap<String, [String; 3]> = BTreeMap::new();
    for &i in &plan.tables {
        let node = &graph.node[i];
        let table_name = node.input[0].clone();
        let [t_q, t_scale, t_zero] = match tables.get(&table_name) {
            Some(names) => names.clone(),
            None => {
                let table = &graph.initializer[index.initializer[&table_name]];
                let values = tensor::to_f32(table)?;
                let dims = table.dims.clone();
                let q = weights::quantize(&values, &dims, Some(1), false, None);
                let columns = [dims[1]];
                let made = [
                    names.fresh(&format!("{table_name}_quantized")),
                    names.fresh(&format!("{table_name}_scale")),
                    names.fresh(&format!("{table_name}_zero_point")),
                ];
                initializers.push(tensor::from_i8(&made[0], &dims, &q.codes));
                initializers.push(tensor::from_f32(&made[1], &columns, &q.scales));
                initializers.push(tensor::from_i8(
                    &made[2],
                    &columns,
                    &vec![0; q.scales.len()],
                ));
                tables.insert(table_name.clone(), made.clone());
                summary.tables += 1;
                made
            }
        };
        let gathered = names.fresh(&format!("{}_quantized", node.output[0]));
        let mut lookup = node.clone();
        lookup.input[0] = t_q;
        lookup.output = vec![gathered.clone()];
        let y = node.output[0].clone();
        nodes.push(lookup);
        nodes.push(make_node(
            "DequantizeLinear",
            names.fresh(&format!("{}_DequantizeLinear", node.name())),
            vec![gathered, t_scale, t_zero],
            vec![y],
            vec![attr::make_int("axis", -1)],
        ));
        removed.insert(i);
    }

    crate::graph::replace_nodes(graph, &removed, nodes);
    graph.initializer.extend(initializers);
    crate::normalize::prune_unused_initializers(graph);
    Ok(summary)
}

/// A Gemm bias as `(dims, values)`, `beta` folded in.
type Bias = (Vec<i64>, Vec<f32>);

/// What decides the `[K, N]` matrix [`weight_matrix`] makes of a node's weight: the
/// weight's name and, for a Gemm, `transB` and the bits of `alpha`. Nodes with equal forms
/// share one int8 copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct WeightForm {
    weight: String,
    gemm: Option<(i64, u32)>,
}

impl WeightForm {
    fn of(node: &NodeProto) -> Self {
        let gemm = (node.op_type() == "Gemm").then(|| {
            let alpha = attr::float(node, "alpha", 1.0).to_bits();
            (attr::int(node, "transB", 0), alpha)
        });
        Self {
            weight: node.input[1].clone(),
            gemm,
        }
    }
}

/// A Gemm's bias times `beta` (`None` for a MatMul or a Gemm without one).
fn gemm_bias(
    graph: &GraphProto,
    index: &GraphIndex,
    node: &NodeProto,
) -> Result<Option<Bias>, BadTensor> {
    if node.op_type() != "Gemm" {
        return Ok(None);
    }
    let beta = attr::float(node, "beta", 1.0);
    match node.input.get(2).filter(|c| !c.is_empty()) {
        Some(c) => {
            let t = &graph.initializer[index.initializer[c]];
            let values = tensor::to_f32(t)?.into_iter().map(|v| beta * v).collect();
            Ok(Some((t.dims.clone(), values)))
        }
        None => Ok(None),
    }
}

/// The int8 codes and per-column scales the rewrite writes for a row-major `[K, N]` weight.
pub(crate) fn quantize_weight(
    w: &[f32],
    [k, n]: [usize; 2],
    reduce_range: bool,
) -> weights::QuantizedWeight {
    let dims = [k as i64, n as i64];
    if reduce_range {
        weights::quantize_pair_safe(w, &dims, 1, None)
    } else {
        weights::quantize(w, &dims, Some(1), false, None)
    }
}

/// The weight of `node` as a row-major `[K, N]` matrix (a Gemm's `transB` undone and its
/// `alpha` folded in), and a Gemm's bias times `beta`.
pub(crate) fn weight_matrix(
    graph: &GraphProto,
    index: &GraphIndex,
    node: &NodeProto,
    m: &DynamicMatMul,
) -> Result<(Vec<f32>, Option<Bias>), BadTensor> {
    let w = tensor::to_f32(&graph.initializer[index.initializer[&node.input[1]]])?;
    if node.op_type() != "Gemm" {
        return Ok((w, None));
    }
    let alpha = attr::float(node, "alpha", 1.0);
    let w: Vec<f32> = if attr::int(node, "transB", 0) != 0 {
        // Stored [N, K].
        (0..m.k * m.n)
            .map(|e| alpha * w[(e % m.n) * m.k + e / m.n])
            .collect()
    } else {
        w.into_iter().map(|v| alpha * v).collect()
    };
    Ok((w, gemm_bias(graph, index, node)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{float_value, named};
    use std::collections::HashMap;

    fn types(names: &[&str]) -> HashMap<String, DataType> {
        names
            .iter()
            .map(|t| (t.to_string(), DataType::Float))
            .collect()
    }

    /// `x → MatMul(w_q) → q; x → MatMul(w_k) → k; q + k`: an attention block's projections
    /// reading one LayerNorm output.
    #[test]
    fn projections_of_one_input_share_one_dynamic_quantizer() {
        let (k, n) = (64, 64);
        let graph = GraphProto {
            node: vec![
                named("MatMul", "q", &["x", "wq"], &["yq"]),
                named("MatMul", "k", &["x", "wk"], &["yk"]),
                named("Add", "sum", &["yq", "yk"], &["y"]),
            ],
            initializer: vec![
                tensor::from_f32("wq", &[k, n], &vec![0.25; (k * n) as usize]),
                tensor::from_f32("wk", &[k, n], &vec![-0.5; (k * n) as usize]),
            ],
            output: vec![float_value("y")],
            ..Default::default()
        };
        let types = types(&["x", "yq", "yk", "y"]);
        let plan = plan(&graph, &types, &HashSet::new(), None);
        assert_eq!(plan.matmuls.len(), 2);
        let mut rewritten = graph.clone();
        let summary = rewrite(&mut rewritten, &plan, false, &HashMap::new()).unwrap();
        assert_eq!((summary.matmuls, summary.dynamic_quantizers), (2, 1));
        let ops: Vec<&str> = rewritten.node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops.iter().filter(|o| **o == "MatMulInteger").count(), 2);
        assert!(!ops.contains(&"MatMul"));
        // Outputs keep their names, so the Add still reads them.
        assert!(rewritten.node.iter().any(|n| n.output == ["yq"]));
        assert!(rewritten.initializer.iter().all(|t| t.name() != "wq"));
    }

    /// A smoothed group reads its input divided by the scales, through one `Mul` before its
    /// one quantizer, and its weights' rows carry the scales: the int8 weight dequantizes to
    /// `s_j · W_jn`.
    #[test]
    fn a_smoothed_group_divides_its_input_and_scales_its_weight_rows() {
        let (k, n) = (64, 64);
        let w: Vec<f32> = (0..k * n).map(|e| ((e % 7) as f32 - 3.0) / 8.0).collect();
        let graph = GraphProto {
            node: vec![
                named("MatMul", "q", &["x", "wq"], &["yq"]),
                named("MatMul", "k", &["x", "wk"], &["yk"]),
                named("Add", "sum", &["yq", "yk"], &["y"]),
            ],
            initializer: vec![
                tensor::from_f32("wq", &[k as i64, n as i64], &w),
                tensor::from_f32("wk", &[k as i64, n as i64], &w),
            ],
            output: vec![float_value("y")],
            ..Default::default()
        };
        let types = types(&["x", "yq", "yk", "y"]);
        let plan = plan(&graph, &types, &HashSet::new(), None);
        let scales: Vec<f32> = (0..k).map(|j| if j == 0 { 8.0 } else { 0.5 }).collect();
        let smoothing = HashMap::from([("x".to_owned(), scales.clone())]);
        let mut rewritten = graph.clone();
        let summary = rewrite(&mut rewritten, &plan, false, &smoothing).unwrap();
        assert_eq!(
            (summary.dynamic_quantizers, summary.smoothed_inputs),
            (1, 1)
        );
        let mul = (rewritten.node.iter())
            .find(|n| n.op_type() == "Mul" && n.input[0] == "x")
            .expect("the input is divided");
        let divisor = (rewritten.initializer.iter())
            .find(|t| t.name() == mul.input[1])
            .expect("by a constant");
        let inverse = tensor::to_f32(divisor).unwrap();
        assert_eq!((inverse[0], inverse[1]), (0.125, 2.0));
        let quantizer = (rewritten.node.iter())
            .find(|n| n.op_type() == "DynamicQuantizeLinear")
            .expect("one quantizer");
        assert_eq!(quantizer.input, mul.output);
        let find = |name: String| {
            let t = rewritten.initializer.iter().find(|t| t.name() == name);
            t.expect("initializer").clone()
        };
        for w_name in ["wq", "wk"] {
            let codes = find(format!("{w_name}_quantized")).raw_data().to_vec();
            let w_scales = tensor::to_f32(&find(format!("{w_name}_scale"))).unwrap();
            for (e, &c) in codes.iter().enumerate() {
                let (j, col) = (e / n, e % n);
                let got = f32::from(c as i8) * w_scales[col];
                let expected = scales[j] * w[e];
                assert!(
                    (got - expected).abs() <= w_scales[col] / 2.0 + 1e-6,
                    "{w_name}[{e}]"
                );
            }
        }
    }

    /// Projections reading one tensor form one group; a later MatMul on their sum another.
    /// A plan keeps only the MatMuls a per-node choice leaves dynamic, and the tables only
    /// when the model's mode is dynamic.
    #[test]
    fn matmuls_group_by_their_input_and_a_plan_keeps_the_dynamic_ones() {
        let n = 64;
        let w = |name: &str| tensor::from_f32(name, &[n, n], &vec![0.25; (n * n) as usize]);
        let graph = GraphProto {
            node: vec![
                named("Gather", "lookup", &["table", "ids"], &["x"]),
                named("MatMul", "q", &["x", "wq"], &["yq"]),
                named("MatMul", "k", &["x", "wk"], &["yk"]),
                named("Add", "sum", &["yq", "yk"], &["s"]),
                named("MatMul", "o", &["s", "wo"], &["y"]),
            ],
            initializer: vec![w("wq"), w("wk"), w("wo"), w("table")],
            output: vec![float_value("y")],
            ..Default::default()
        };
        let types = types(&["table", "x", "yq", "yk", "s", "y"]);
        let full = plan(&graph, &types, &HashSet::new(), None);
        assert_eq!(full.tables, vec![0]);
        assert_eq!(
            full.groups(&graph),
            vec![vec!["q".to_owned(), "k".to_owned()], vec!["o".to_owned()]]
        );
        let mut only_o = full.clone();
        only_o.retain(&graph, |name| name == "o", false);
        assert_eq!(only_o.groups(&graph), vec![vec!["o".to_owned()]]);
        assert!(only_o.tables.is_empty());
        let mut but_o = full.clone();
        but_o.retain(&graph, |name| name != "o", true);
        assert_eq!(
            but_o.groups(&graph),
            vec![vec!["q".to_owned(), "k".to_owned()]]
        );
        assert_eq!(but_o.tables, vec![0]);
    }

    #[test]
    fn a_gemm_with_transposed_weight_keeps_its_product_and_bias() {
        let (k, n) = (64usize, 80usize);
        let w: Vec<f32> = (0..k * n)
            .map(|e| ((e * 7919) % 255) as f32 / 255.0 - 0.5)
            .collect();
        let mut gemm = named("Gemm", "fc", &["x", "w", "c"], &["y"]);
        gemm.attribute = vec![
            attr::make_int("transB", 1),
            attr::make_float("alpha", 2.0),
            attr::make_float("beta", 0.5),
        ];
        let graph = GraphProto {
            node: vec![gemm],
            initializer: vec![
                tensor::from_f32("w", &[n as i64, k as i64], &w),
                tensor::from_f32("c", &[n as i64], &vec![1.0; n]),
            ],
            output: vec![float_value("y")],
            ..Default::default()
        };
        let plan = plan(&graph, &types(&["x", "y"]), &HashSet::new(), None);
        assert_eq!(plan.matmuls, [DynamicMatMul { node: 0, k, n }]);
        let (matrix, bias) = weight_matrix(
            &graph,
            &GraphIndex::new(&graph),
            &graph.node[0],
            &plan.matmuls[0],
        )
        .unwrap();
        // Element (row r, column c) of the [K, N] matrix is alpha · w[c][r].
        assert_eq!(matrix[3 * n + 5], 2.0 * w[5 * k + 3]);
        assert_eq!(bias, Some((vec![n as i64], vec![0.5; n])));
    }

    #[test]
    fn tiny_weights_and_weights_too_small_to_repay_the_conversion_stay_float() {
        let graph = |k: i64, n: i64| GraphProto {
            node: vec![named("MatMul", "m", &["x", "w"], &["y"])],
            initializer: vec![tensor::from_f32("w", &[k, n], &vec![0.1; (k * n) as usize])],
            output: vec![float_value("y")],
            ..Default::default()
        };
        let types = types(&["x", "y"]);
        let costs = KernelCosts::of(crate::kernels::TargetCpu::X86Vnni);
        // Fewer than MIN_WEIGHTS values: not a candidate at all.
        let tiny = plan(&graph(8, 8), &types, &HashSet::new(), Some(&costs));
        assert!(tiny.matmuls.is_empty() && tiny.slower.is_empty());
        // A long thin projection to 2 outputs: 2 multiply-adds saved per input, 20 spent.
        let thin = plan(&graph(4096, 2), &types, &HashSet::new(), Some(&costs));
        assert_eq!((thin.matmuls.len(), thin.slower), (0, vec![0]));
        let wide = plan(&graph(384, 384), &types, &HashSet::new(), Some(&costs));
        assert_eq!(wide.matmuls.len(), 1);
        // A device whose dynamic kernel is no faster than FP32 keeps even a wide one FP32;
        // the static kernel's price does not enter.
        let no_faster = KernelCosts {
            int8_dynamic_dense: 1.0,
            int8_dense: 0.1,
            ..costs
        };
        let kept = plan(&graph(384, 384), &types, &HashSet::new(), Some(&no_faster));
        assert_eq!((kept.matmuls.len(), kept.slower), (0, vec![0]));
    }

    #[test]
    fn an_embedding_table_becomes_int8_with_one_scale_per_column() {
        let (v, d) = (128usize, 64usize);
        let table: Vec<f32> = (0..v * d).map(|e| (e % d) as f32 * 0.01 + 0.001).collect();
        let graph = GraphProto {
            node: vec![named("Gather", "embed", &["table", "ids"], &["e"])],
            initializer: vec![tensor::from_f32("table", &[v as i64, d as i64], &table)],
            output: vec![float_value("e")],
            ..Default::default()
        };
        let plan = plan(&graph, &types(&["table", "e"]), &HashSet::new(), None);
        assert_eq!(plan.tables, [0]);
        let mut rewritten = graph.clone();
        let summary = rewrite(&mut rewritten, &plan, false, &HashMap::new()).unwrap();
        assert_eq!(summary.tables, 1);
        let dq = rewritten
            .node
            .iter()
            .find(|n| n.op_type() == "DequantizeLinear")
            .expect("a DequantizeLinear after the lookup");
        assert_eq!(dq.output, ["e"]);
        assert_eq!(attr::int(dq, "axis", 1), -1);
        let scale = rewritten
            .initializer
            .iter()
            .find(|t| t.name() == dq.input[1])
            .unwrap();
        assert_eq!(scale.dims, [d as i64]);
        let scales = tensor::to_f32(scale).unwrap();
        // Column c spans up to c·0.01 + 0.001: its own scale, not the table's largest.
        assert!((scales[1] - 0.011 / 127.0).abs() < 1e-7, "{}", scales[1]);
    }
}
