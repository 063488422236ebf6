//! Inserting QuantizeLinear/DequantizeLinear nodes and quantized initializers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::params::{self, ActivationParams};
use super::plan::{Plan, RangeSource, WeightPlan};
use super::weights;
use crate::calibrate::gram::PatchGram;
use crate::error::BadTensor;
use crate::graph::{GraphIndex, NameGen};
use crate::onnx::{attr, make_node, tensor, GraphProto, NodeProto, TensorProto};

/// Real-valued range of a tensor, as chosen by calibration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// Lower end.
    pub min: f32,
    /// Upper end.
    pub max: f32,
}

/// Weight options that change the rewrite.
#[derive(Debug, Clone, Copy)]
pub struct WeightOptions {
    /// Per-channel scales along the output-channel axis (else one scale per tensor).
    pub per_channel: bool,
    /// 7-bit weights (`[-64, 64]`), see [`params::WEIGHT_QMAX_REDUCED`], except where
    /// [`runs_on_widening_kernel`] holds or a Conv's kept input patches show that 8 bits
    /// cost less error than the saturation they cause ([`super::saturation`]).
    pub reduce_range: bool,
    /// Correct biases for the mean output shift of weight quantization
    /// (see [`super::bias_correction`]).
    pub bias_correction: bool,
    /// GPTQ rounding where a Conv's input second moments were observed
    /// (see [`super::gptq`]).
    pub gptq_rounding: bool,
}

/// Counts of what the rewrite did, for the build report.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct RewriteSummary {
    /// Q/DQ pairs inserted on activations.
    pub activation_qdq: usize,
    /// Weights turned into int8.
    pub weights_quantized: usize,
    /// Biases turned into int32.
    pub biases_quantized: usize,
    /// Biases corrected for the weight quantization's mean output shift.
    #[serde(default)]
    pub biases_corrected: usize,
    /// Weights whose codes come from GPTQ rounding rather than nearest rounding.
    #[serde(default)]
    pub weights_gptq_rounded: usize,
    /// Weights given 8-bit codes although reduce-range is on: depthwise Convs on ORT's
    /// widening kernel, and Convs whose simulated pair saturation costs less than the extra
    /// bit saves.
    #[serde(default)]
    pub weights_full_range: usize,
    /// MatMul and Gemm weights given pair-safe codes under reduce-range
    /// ([`super::weights::quantize_pair_safe`]) instead of 7-bit ones.
    #[serde(default)]
    pub weights_pair_safe: usize,
    /// MatMuls, Gemms and embedding tables quantized with dynamic activations (see
    /// [`super::dynamic`]).
    #[serde(default)]
    pub dynamic: super::dynamic::DynamicSummary,
    /// Names of the MatMul and Gemm nodes run with dynamic activations (or, with 4-bit
    /// weights, as `MatMulNBits`), in graph order.
    #[serde(default)]
    pub dynamic_nodes: Vec<String>,
    /// MatMuls with 4-bit block weights (`MatMulNBits`, see [`super::int4`]).
    #[serde(default)]
    pub int4_matmuls: usize,
    /// Names of the MatMul and Gemm nodes run with static (calibrated QDQ) activations, in
    /// graph order; with [`dynamic_nodes`](Self::dynamic_nodes) and the report's FP32 nodes,
    /// every MatMul and Gemm is named once.
    #[serde(default)]
    pub static_matmuls: Vec<String>,
}

/// Scale/zero-point initializer names and values of one quantized tensor.
#[derive(Debug, Clone)]
struct QParams {
    scale_name: String,
    zero_point_name: String,
    params: ActivationParams,
}

/// Resolves the quantization parameters of every planned activation from the calibrated
/// `ranges` (tensors without a calibrated range and without a SameAs source are skipped).
///
/// A Concat input read by nothing else takes the Concat output's parameters where they keep
/// its absorbed Clip/Relu exact (see `concat_inputs`).
pub fn activation_params(
    plan: &Plan,
    graph: &GraphProto,
    ranges: &HashMap<String, Range>,
) -> BTreeMap<String, ActivationParams> {
    let index = GraphIndex::new(graph);
    let shared = concat_inputs(plan, graph, &index);
    let mut out = BTreeMap::new();
    let ctx = Resolver {
        plan,
        graph,
        index: &index,
        ranges,
        shared: &shared,
    };
    for name in plan.tensors.keys() {
        ctx.resolve(name, &mut out, 0);
    }
    out
}

/// Concat inputs that may share the Concat output's parameters, mapped to that output: each
/// is a quantized activation (not a constant or a graph output) whose only reader is a
/// quantized Concat. ORT's QLinearConcat copies an input whose scale and zero point equal the
/// output's and requantizes the others through a lookup table; sharing also rounds the
/// producer's output once instead of twice, and the copy is far cheaper than the lookup.
fn concat_inputs(plan: &Plan, graph: &GraphProto, index: &GraphIndex) -> HashMap<String, String> {
    let mut shared = HashMap::new();
    for &i in &plan.quantized_nodes {
        let node = &graph.node[i];
        let Some(output) = node.output.first() else {
            continue;
        };
        if node.op_type() != "Concat" || !plan.tensors.contains_key(output) {
            continue;
        }
        for input in &node.input {
            let own = matches!(
                plan.tensors.get(input),
                Some(RangeSource::Observed | RangeSource::Clipped { .. })
            );
            if own && index.consumers_of(input) == [i] && !index.outputs.contains(input) {
                shared.insert(input.clone(), output.clone());
            }
        }
    }
    shared
}

/// What [`activation_params`] resolves names against.
struct Resolver<'a> {
    plan: &'a Plan,
    graph: &'a GraphProto,
    index: &'a GraphIndex,
    ranges: &'a HashMap<String, Range>,
    shared: &'a HashMap<String, String>,
}

impl Resolver<'_> {
    fn resolve(
        &self,
        name: &str,
        out: &mut BTreeMap<String, ActivationParams>,
        depth: usize,
    ) -> Option<ActivationParams> {
        if let Some(p) = out.get(name) {
            return Some(*p);
        }
        if depth >= 64 {
            return None;
        }
        let source = self.plan.tensors.get(name)?;
        let own = |out: &mut BTreeMap<String, ActivationParams>| match source {
            RangeSource::Observed => self
                .ranges
                .get(name)
                .map(|r| ActivationParams::from_range(r.min, r.max)),
            RangeSource::Clipped { min, max } => self
                .ranges
                .get(name)
                .map(|r| ActivationParams::for_clipped_range(r.min, r.max, *min, *max)),
            RangeSource::SameAs(src) => self.resolve(src, out, depth + 1),
            RangeSource::Constant => {
                let values =
                    tensor::to_f32(&self.graph.initializer[*self.index.initializer.get(name)?])
                        .ok()?;
                let (min, max) = values
                    .iter()
                    .fold((0f32, 0f32), |(a, b), &v| (a.min(v), b.max(v)));
                Some(ActivationParams::from_range(min, max))
            }
        };
        let concat = self
            .shared
            .get(name)
            .and_then(|output| self.resolve(output, out, depth + 1))
            .filter(|p| keeps_clip(p, source));
        let p = match concat {
            Some(p) => p,
            None => own(out)?,
        };
        out.insert(name.to_owned(), p);
        Some(p)
    }
}

/// True when quantizing with `p` still applies the Clip/Relu that `source` says ORT drops:
/// `p` represents nothing below the clip's lower or above its upper bound.
fn keeps_clip(p: &ActivationParams, source: &RangeSource) -> bool {
    match source {
        RangeSource::Clipped { min, max } => {
            let lowest = p.dequantize(0);
            let highest = p.dequantize(u8::MAX);
            let slack = p.scale * 1e-3;
            lowest >= *min - slack && highest <= *max + slack
        }
        _ => true,
    }
}

/// True for a depthwise Conv with multiplier one (`group` = input = output channels,
/// weight `[C, 1, kh, kw]`): ONNX Runtime runs it with its depthwise kernel
/// (`MlasConvDepthwise`, chosen in `QLinearConv` when each group has one input and one output
/// channel), which widens u8 and s8 to 16 bits before multiplying. It has no `VPMADDUBSW`
/// pair to saturate, so reduce-range gains nothing there and its weights keep 8 bits.
pub fn runs_on_widening_kernel(node: &NodeProto, weight_dims: &[i64]) -> bool {
    crate::ops::is_depthwise(node, weight_dims)
        && weight_dims.first() == Some(&attr::int(node, "group", 1))
}

/// Weighted ops' codes kept from one rewrite of a model to the next, for rewrites that
/// differ only in which nodes stay FP32 (the fidelity target's trial builds). An op's codes
/// depend on nothing else that varies between them than the parameters of its data input,
/// so the key is the node's index and those parameters. Without it, most of a trial build's
/// time would go to GPTQ rounding and the saturation check of unchanged Convs.
#[derive(Default)]
pub struct WeightCache(Mutex<HashMap<(usize, u32, u8), WeightedOp>>);

/// Rewrites `graph` into QDQ form following `plan`, with activation parameters `act`;
/// weighted ops' codes come from, and go into, `cache` when one is given.
///
/// # Errors
/// [`BadTensor`] when a planned weight or bias payload cannot be read.
pub fn rewrite(
    graph: &mut GraphProto,
    plan: &Plan,
    act: &BTreeMap<String, ActivationParams>,
    channel_means: &HashMap<String, Vec<f64>>,
    patch_grams: &HashMap<String, PatchGram>,
    options: WeightOptions,
    cache: Option<&WeightCache>,
) -> Result<RewriteSummary, BadTensor> {
    let index = GraphIndex::new(graph);
    let mut edits = Edits {
        names: NameGen::new(graph),
        nodes: Vec::new(),
        initializers: Vec::new(),
        constants: HashMap::new(),
    };
    let mut summary = RewriteSummary::default();

    // Scale/zero-point initializers, shared by tensors with identical parameters so that ORT
    // sees data-movement ops' Q and DQ as equal.
    let mut qparams: BTreeMap<String, QParams> = BTreeMap::new();
    let mut by_value: HashMap<(u32, u8), (String, String)> = HashMap::new();
    for (name, p) in act {
        let (scale_name, zero_point_name) = by_value
            .entry((p.scale.to_bits(), p.zero_point))
            .or_insert_with(|| {
                let s = edits.names.fresh(&format!("{name}_scale"));
                let z = edits.names.fresh(&format!("{name}_zero_point"));
                edits
                    .initializers
                    .push(tensor::from_f32(&s, &[], &[p.scale]));
                edits
                    .initializers
                    .push(tensor::from_u8(&z, &[], &[p.zero_point]));
                (s, z)
            })
            .clone();
        qparams.insert(
            name.clone(),
            QParams {
                scale_name,
                zero_point_name,
                params: *p,
            },
        );
    }

    // Weights and biases: codes computed first, then written in plan order. GPTQ rounding
    // and the saturation check, where a Conv's input patches were observed, dominate, so
    // those ops are spread over the cores; the rest stay on this thread, which keeps large
    // transformer weights out of per-thread allocator arenas (each thread's arena would
    // keep a weight-sized peak of its own).
    let graph_read: &GraphProto = graph;
    let quantize_one = |wp: &WeightPlan| {
        let node = &graph_read.node[wp.node];
        qparams.get(&node.input[0]).map(|x| {
            let key = (wp.node, x.params.scale.to_bits(), x.params.zero_point);
            let cached = cache.and_then(|c| c.0.lock().ok()?.get(&key).cloned());
            if let Some(op) = cached {
                return Ok::<_, BadTensor>(op);
            }
            let op = quantize_weighted(
                graph_read,
                &index,
                wp,
                &x.params,
                channel_means,
                patch_grams,
                options,
            )?;
            if let Some(mut map) = cache.and_then(|c| c.0.lock().ok()) {
                map.insert(key, op.clone());
            }
            Ok(op)
        })
    };
    let observed_patches = |wp: &&WeightPlan| {
        let node = &graph_read.node[wp.node];
        node.output
            .first()
            .is_some_and(|o| patch_grams.contains_key(o))
    };
    let heavy: Vec<&WeightPlan> = plan.weights.iter().filter(observed_patches).collect();
    let mut heavy_done = crate::parallel::map(&heavy, |wp| quantize_one(wp)).into_iter();
    let computed: Vec<_> = plan
        .weights
        .iter()
        .map(|wp| {
            if observed_patches(&wp) {
                heavy_done.next().flatten()
            } else {
                quantize_one(wp)
            }
        })
        .collect();
    for (wp, op) in plan.weights.iter().zip(computed) {
        let Some(op) = op.transpose()? else {
            continue;
        };
        let node = graph.node[wp.node].clone();
        let x = &qparams[&node.input[0]];
        let w_name = &node.input[wp.weight_slot];
        let WeightedOp {
            q,
            dims,
            axis,
            bias,
            bias_slot,
            gemm_beta,
            full_range,
            pair_safe,
            gptq_rounded,
            bias_corrected,
        } = op;
        summary.weights_full_range += usize::from(full_range);
        summary.weights_pair_safe += usize::from(pair_safe);
        summary.weights_gptq_rounded += usize::from(gptq_rounded);
        summary.biases_corrected += usize::from(bias_corrected);
        // Named after the weight, as ORT's quantizer does; a weight shared by several nodes
        // is stored once when their uses quantize it alike, else once per distinct result
        // (numbered copies).
        let scale_dims: Vec<i64> = if axis.is_some() {
            vec![q.scales.len() as i64]
        } else {
            vec![]
        };
        let deq = edits.dequantized_constant(
            w_name,
            |codes| tensor::from_i8(codes, &dims, &q.codes),
            |scale| tensor::from_f32(scale, &scale_dims, &q.scales),
            |zero_point| tensor::from_i8(zero_point, &scale_dims, &vec![0; q.scales.len()]),
            axis,
        );
        graph.node[wp.node].input[wp.weight_slot] = deq;
        summary.weights_quantized += 1;

        if let (Some(slot), Some(b)) = (bias_slot, bias) {
            let b_scales: Vec<f64> = (0..b.len())
                .map(|c| params::bias_scale(x.params.scale, q.channel_scale(c)))
                .collect();
            let b_codes: Vec<i32> = b
                .iter()
                .zip(&b_scales)
                .map(|(&v, &s)| params::quantize_bias(v, s))
                .collect();
            let bias_name = node
                .input
                .get(slot)
                .filter(|b| !b.is_empty())
                .map_or("bias", |b| b.as_str());
            let n = b.len() as i64;
            let deq = edits.dequantized_constant(
                bias_name,
                |codes| tensor::from_i32(codes, &[n], &b_codes),
                |scale| {
                    let scales: Vec<f32> = b_scales.iter().map(|&s| s as f32).collect();
                    tensor::from_f32(scale, &[n], &scales)
                },
                |zero_point| tensor::from_i32(zero_point, &[n], &vec![0; b.len()]),
                Some(0),
            );
            let inputs = &mut graph.node[wp.node].input;
            inputs.resize(inputs.len().max(slot + 1), String::new());
            inputs[slot] = deq;
            if gemm_beta != 1.0 {
                // beta is folded into the int32 bias above.
                attr::set(&mut graph.node[wp.node], attr::make_float("beta", 1.0));
            }
            summary.biases_quantized += 1;
        }
    }

    // Activations and constant data inputs.
    for (name, q) in &qparams {
        if let Some(&k) = index.initializer.get(name) {
            // Constant operand of a quantized op: stored quantized, read through a DQ by the
            // quantized readers only (float readers keep the float initializer).
            let values = tensor::to_f32(&graph.initializer[k])?;
            let dims = graph.initializer[k].dims.clone();
            let codes: Vec<u8> = values.iter().map(|&v| q.params.quantize(v)).collect();
            let c = edits.names.fresh(&format!("{name}_quantized"));
            edits.initializers.push(tensor::from_u8(&c, &dims, &codes));
            let inputs = vec![c, q.scale_name.clone(), q.zero_point_name.clone()];
            let deq = edits.dequantize(name, inputs, None);
            for &i in &plan.quantized_nodes {
                for inp in graph.node[i].input.iter_mut().filter(|t| *t == name) {
                    *inp = deq.clone();
                }
            }
            continue;
        }
        let quantized = edits.names.fresh(&format!("{name}_QuantizeLinear_Output"));
        let deq = edits
            .names
            .fresh(&format!("{name}_DequantizeLinear_Output"));
        for &c in index.consumers_of(name) {
            for inp in graph.node[c].input.iter_mut().filter(|t| *t == name) {
                *inp = deq.clone();
            }
        }
        edits.nodes.push(make_node(
            "QuantizeLinear",
            edits.names.fresh(&format!("{name}_QuantizeLinear")),
            vec![
                name.clone(),
                q.scale_name.clone(),
                q.zero_point_name.clone(),
            ],
            vec![quantized.clone()],
            vec![],
        ));
        edits.nodes.push(make_node(
            "DequantizeLinear",
            edits.names.fresh(&format!("{name}_DequantizeLinear")),
            vec![quantized, q.scale_name.clone(), q.zero_point_name.clone()],
            vec![deq],
            vec![],
        ));
        summary.activation_qdq += 1;
    }
    graph.node.extend(edits.nodes);
    graph.initializer.extend(edits.initializers);
    crate::normalize::prune_unused_initializers(graph);
    Ok(summary)
}

/// The nodes and initializers [`rewrite`] adds, named uniquely in the graph.
struct Edits {
    names: NameGen,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    /// The quantized constants written so far, by the constant they stand for and their
    /// DequantizeLinear's axis.
    constants: HashMap<(String, Option<usize>), Vec<Written>>,
}

/// One quantized constant [`Edits::dequantized_constant`] wrote: the index in
/// `Edits::initializers` of the first of its three tensors (codes, scale, zero point) and
/// its DequantizeLinear's output.
type Written = (usize, String);

impl Edits {
    /// Adds `{base}_quantized`, `{base}_scale` and `{base}_zero_point` initializers (made by
    /// the three closures from their names) and a DequantizeLinear reading them along
    /// `axis`; returns the name of its output.
    ///
    /// A constant read by several ops (a weight shared by the layers of an ALBERT-style
    /// model) is written once: when an earlier call for the same `base` and `axis` wrote
    /// the same three tensors (dims, type and payload), its DequantizeLinear's output is
    /// returned and nothing is added. Uses that quantize it differently (per-use bias
    /// headroom, GPTQ codes) get one copy each.
    fn dequantized_constant(
        &mut self,
        base: &str,
        codes: impl FnOnce(&str) -> TensorProto,
        scale: impl FnOnce(&str) -> TensorProto,
        zero_point: impl FnOnce(&str) -> TensorProto,
        axis: Option<usize>,
    ) -> String {
        let mut made = [codes(""), scale(""), zero_point("")];
        let key = (base.to_owned(), axis);
        let written = self.constants.get(&key).into_iter().flatten();
        for (first, output) in written {
            let same = (made.iter_mut().zip(&self.initializers[*first..])).all(|(t, w)| {
                t.name.clone_from(&w.name);
                t == w
            });
            if same {
                return output.clone();
            }
        }
        let names = [
            self.names.fresh(&format!("{base}_quantized")),
            self.names.fresh(&format!("{base}_scale")),
            self.names.fresh(&format!("{base}_zero_point")),
        ];
        let first = self.initializers.len();
        for (mut t, name) in made.into_iter().zip(&names) {
            t.name = Some(name.clone());
            self.initializers.push(t);
        }
        let output = self.dequantize(base, names.into(), axis);
        (self.constants.entry(key).or_default()).push((first, output.clone()));
        output
    }

    /// Adds a DequantizeLinear `{base}_DequantizeLinear` of `inputs` (codes, scale, zero
    /// point) along `axis`; returns the name of its output, `{base}_dequantized`.
    fn dequantize(&mut self, base: &str, inputs: Vec<String>, axis: Option<usize>) -> String {
        let output = self.names.fresh(&format!("{base}_dequantized"));
        let attributes = axis
            .map(|a| attr::make_int("axis", a as i64))
            .into_iter()
            .collect();
        self.nodes.push(make_node(
            "DequantizeLinear",
            self.names.fresh(&format!("{base}_DequantizeLinear")),
            inputs,
            vec![output.clone()],
            attributes,
        ));
        output
    }
}

/// What [`quantize_weighted`] computes for one weighted op, before any graph edit: its
/// weight's codes and the float bias to quantize with them.
#[derive(Clone)]
struct WeightedOp {
    q: weights::QuantizedWeight,
    dims: Vec<i64>,
    axis: Option<usize>,
    /// The bias (times Gemm's `beta`), corrected; `None` when the op has none.
    bias: Option<Vec<f32>>,
    /// Where the bias goes: the op's own slot, or slot 2 for one bias correction added.
    bias_slot: Option<usize>,
    gemm_beta: f32,
    /// 8-bit codes although reduce-range was asked for.
    full_range: bool,
    /// Codes on the pair-safe grid of [`weights::quantize_pair_safe`] (reduce-range asked).
    pair_safe: bool,
    gptq_rounded: bool,
    bias_corrected: bool,
}

/// Quantizes the weight of the op planned by `wp`, whose data input has parameters `x`:
/// per-channel or per-tensor scales, GPTQ codes where its input patches were observed, the
/// 8-bit choice of [`super::saturation`] (Convs) or the pair-safe grid (MatMul, Gemm) under
/// reduce-range, and bias correction.
///
/// # Errors
/// [`BadTensor`] when the weight or bias payload cannot be read.
fn quantize_weighted(
    graph: &GraphProto,
    index: &GraphIndex,
    wp: &WeightPlan,
    x: &ActivationParams,
    channel_means: &HashMap<String, Vec<f64>>,
    patch_grams: &HashMap<String, PatchGram>,
    options: WeightOptions,
) -> Result<WeightedOp, BadTensor> {
    let node = &graph.node[wp.node];
    let w_name = &node.input[wp.weight_slot];
    let w_t = &graph.initializer[index.initializer[w_name]];
    let w_values = tensor::to_f32(w_t)?;
    let dims = w_t.dims.clone();
    let axis = options.per_channel.then_some(wp.channel_axis);
    let gemm_beta = if node.op_type() == "Gemm" {
        attr::float(node, "beta", 1.0)
    } else {
        1.0
    };
    let mut bias = match wp.bias_slot {
        Some(slot) => {
            let b = tensor::to_f32(&graph.initializer[index.initializer[&node.input[slot]]])?;
            Some(b.into_iter().map(|v| v * gemm_beta).collect::<Vec<f32>>())
        }
        None => None,
    };
    // Per-channel bias headroom (per-tensor: the largest bias decides).
    let min_scales: Option<Vec<f32>> = bias.as_ref().map(|b| match axis {
        Some(_) => b
            .iter()
            .map(|&v| params::bias_safe_weight_scale(0.0, v, x.scale))
            .collect(),
        None => vec![b
            .iter()
            .map(|&v| params::bias_safe_weight_scale(0.0, v, x.scale))
            .fold(0.0, f32::max)],
    });
    // GPTQ codes on nearest rounding's scales, where the input patches were observed
    // (Conv weights `[O, C, kh, kw]` are rows of `C·kh·kw` in the patches' order).
    let gram = node.output.first().and_then(|o| patch_grams.get(o));
    let factor = gram
        .filter(|_| options.gptq_rounding)
        .and_then(PatchGram::matrix)
        .and_then(|(len, h)| super::gptq::factor(h, len));
    // MatMul and Gemm weights (2-D, per channel) without GPTQ codes: the pair-safe grid.
    let pair_safe_axis = axis.filter(|_| dims.len() == 2 && factor.is_none());
    let quantize = |reduce_range| {
        if let Some(a) = pair_safe_axis.filter(|_| reduce_range) {
            let q = weights::quantize_pair_safe(&w_values, &dims, a, min_scales.as_deref());
            return (q, false);
        }
        let mut q = weights::quantize(&w_values, &dims, axis, reduce_range, min_scales.as_deref());
        let rows = dims.first().map_or(0, |&o| o as usize);
        let gptq = factor
            .as_ref()
            .and_then(|f| super::gptq::round(&w_values, rows, f, &q.scales, reduce_range));
        let rounded = gptq.is_some();
        if let Some(codes) = gptq {
            q.codes = codes;
        }
        (q, rounded)
    };
    let mut reduce_range = options.reduce_range && !runs_on_widening_kernel(node, &dims);
    let (mut q, mut gptq_rounded) = quantize(reduce_range);
    // Judged on the final codes: GPTQ moves codes towards the clamp, where pairs clip.
    if let Some((len, patches)) = gram
        .and_then(PatchGram::kept_patches)
        .filter(|_| reduce_range)
    {
        let (full, full_gptq) = quantize(false);
        if super::saturation::full_range_pays(patches, len, &dims, x, &w_values, &q, &full) {
            (q, gptq_rounded, reduce_range) = (full, full_gptq, false);
        }
    }
    // Bias correction; Conv and Gemm without a bias get one to carry it.
    let mut bias_slot = wp.bias_slot;
    let mut bias_corrected = false;
    let means = channel_means
        .get(&node.input[0])
        .filter(|_| options.bias_correction);
    if let Some(means) = means {
        let deq = weights::dequantize(&q, &dims, axis);
        let shift = super::bias_correction::output_shift(node, &dims, &w_values, &deq, means);
        if let Some(shift) = shift.filter(|_| matches!(node.op_type(), "Conv" | "Gemm")) {
            let b = bias.get_or_insert_with(|| vec![0.0; shift.len()]);
            for (v, s) in b.iter_mut().zip(&shift) {
                *v = (f64::from(*v) - s) as f32;
            }
            bias_slot = bias_slot.or(Some(2));
            bias_corrected = true;
        }
    }
    Ok(WeightedOp {
        q,
        dims,
        axis,
        bias,
        bias_slot,
        gemm_beta,
        full_range: options.reduce_range && !reduce_range,
        pair_safe: reduce_range && pair_safe_axis.is_some(),
        gptq_rounded,
        bias_corrected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_depthwise_convs_with_multiplier_one_run_on_the_widening_kernel() {
        let conv = |group: i64| {
            let attrs = vec![attr::make_int("group", group)];
            make_node("Conv", "c".into(), vec![], vec![], attrs)
        };
        assert!(runs_on_widening_kernel(&conv(32), &[32, 1, 3, 3]));
        assert!(runs_on_widening_kernel(&conv(8), &[8, 1, 5, 5]));
        // Multiplier two: ORT runs one small GEMM per group, with VPMADDUBSW pairs.
        assert!(!runs_on_widening_kernel(&conv(32), &[64, 1, 3, 3]));
        // Grouped with two channels per group, and dense.
        assert!(!runs_on_widening_kernel(&conv(16), &[16, 2, 3, 3]));
        assert!(!runs_on_widening_kernel(&conv(1), &[32, 16, 1, 1]));
        let gemm = make_node("Gemm", "g".into(), vec![], vec![], vec![]);
        assert!(!runs_on_widening_kernel(&gemm, &[1, 1]));
    }

    #[test]
    fn a_concat_scale_is_shared_only_where_it_keeps_the_dropped_clip() {
        let relu6 = RangeSource::Clipped { min: 0.0, max: 6.0 };
        let relu = RangeSource::Clipped {
            min: 0.0,
            max: f32::INFINITY,
        };
        let within = ActivationParams::from_range(0.0, 5.0);
        let beyond = ActivationParams::from_range(0.0, 8.0);
        let signed = ActivationParams::from_range(-1.0, 5.0);
        assert!(keeps_clip(&within, &relu6));
        assert!(!keeps_clip(&beyond, &relu6), "6..8 would pass unclipped");
        assert!(keeps_clip(&beyond, &relu));
        assert!(
            !keeps_clip(&signed, &relu),
            "negatives would pass the dropped Relu"
        );
        assert!(keeps_clip(&signed, &RangeSource::Observed));
    }
}
