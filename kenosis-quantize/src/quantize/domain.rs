//! Which planned nodes run faster in FP32: a time estimate over the whole graph, so that
//! integer regions too small to repay their conversions, or broken up by float ops, go back
//! to FP32 as a whole.
//!
//! Every node the plan would quantize is labelled INT8 or FP32 to minimise the estimated
//! time of the model: each node's kernel time in its domain plus, for every tensor that
//! crosses between domains, one QuantizeLinear or DequantizeLinear (with ONNX Runtime's
//! layout change) per element. Nodes the plan keeps in FP32, graph inputs and graph outputs
//! are fixed FP32. The prices are the target class's ([`crate::kernel_costs`]).
//!
//! The estimate is a sum of per-node costs and of pairwise costs that are zero when both
//! ends share a domain, so it is minimised exactly by a minimum s-t cut (Kolmogorov and
//! Zabih 2004, "What energy functions can be minimized via graph cuts?"): INT8 nodes on the
//! source side, FP32 on the sink side. A tensor read by several nodes is converted once,
//! which one auxiliary node per tensor expresses. Where both domains cost the same, the
//! node goes to FP32.

use std::collections::{HashMap, HashSet};

use super::min_cut::Network;
use super::plan::{data_inputs, Plan};
use super::reason::FloatReason;
use crate::graph::GraphIndex;
use crate::kernel_costs::{KernelCosts, Pricing};
use crate::onnx::{attr, tensor, GraphProto, NodeProto};
use crate::ops::{is_depthwise, rule_of, OpRule};

pub use super::reason::REASON_PREFIX;

/// Why a node [`slower_in_int8`] returns stays FP32 at `pricing`, for the build report.
pub fn reason(pricing: &Pricing) -> FloatReason {
    FloatReason::FasterInFp32 {
        costs: pricing.describe(),
    }
}

/// The tensors whose element counts [`slower_in_int8`] reads: the data inputs and outputs of
/// the planned nodes and of the activations they absorb, except constants.
pub fn sized_tensors(graph: &GraphProto, plan: &Plan) -> Vec<String> {
    sized_in(graph, &GraphIndex::new(graph), plan)
}

/// [`sized_tensors`] with the graph's `index` at hand.
fn sized_in(graph: &GraphProto, index: &GraphIndex, plan: &Plan) -> Vec<String> {
    let mut names: Vec<String> = (plan.quantized_nodes.iter().chain(&plan.absorbed))
        .flat_map(|&i| {
            let node = &graph.node[i];
            let inputs = data_inputs(node, rule_of(node));
            (inputs.into_iter().filter_map(|k| node.input.get(k)))
                .chain(node.output.first())
                .filter(|t| !t.is_empty() && !index.is_initializer(t))
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The nodes of `plan.quantized_nodes` (indices into `graph.node`, ascending) whose INT8
/// placement the estimate finds slower than FP32 at `costs`. `elements` gives the element
/// count per sample of the tensors [`sized_tensors`] names; a tensor without one is taken
/// to hold none (it costs and saves nothing). Gathers from a constant table stay INT8: the
/// table is stored as uint8 for its size, whatever the time.
pub fn slower_in_int8(
    graph: &GraphProto,
    plan: &Plan,
    elements: &HashMap<String, usize>,
    costs: &KernelCosts,
) -> Vec<usize> {
    let index = GraphIndex::new(graph);
    let count = |t: &str| elements.get(t).copied().unwrap_or(0) as f64;
    // Node 0 is the source (INT8), 1 the sink (FP32), then one per planned node.
    let (source, sink) = (0, 1);
    let mut network = Network::new(2 + plan.quantized_nodes.len());
    let mut label: HashMap<usize, usize> = (plan.quantized_nodes.iter().enumerate())
        .map(|(k, &i)| (i, 2 + k))
        .collect();
    // An absorbed Relu/Clip runs inside its producer's kernel: it shares its label.
    for &act in &plan.absorbed {
        let producer = (graph.node[act].input.first()).and_then(|t| index.producer.get(t));
        if let Some(l) = producer.and_then(|p| label.get(p)).copied() {
            label.insert(act, l);
        }
    }
    for &i in &plan.quantized_nodes {
        let node = &graph.node[i];
        let (fp32, int8) = kernel_costs(graph, &index, node, &count, costs);
        network.add_edge(source, label[&i], fp32 - int8);
        network.add_edge(label[&i], sink, int8 - fp32);
        let embedding = node.op_type() == "Gather" && index.is_initializer(&node.input[0]);
        if embedding {
            network.add_edge(source, label[&i], f64::INFINITY);
        }
    }
    let domain_of = |node: Option<&usize>| node.and_then(|n| label.get(n)).copied();
    let absorbed: HashSet<usize> = plan.absorbed.iter().copied().collect();
    for t in sized_in(graph, &index, plan) {
        let conversion = costs.conversion * count(&t);
        // The nodes reading `t` as data, and their labels (`None`: fixed FP32), then a
        // `None` for a graph output.
        let reading: Vec<usize> = (index.consumers_of(&t).iter().copied())
            .filter(|&c| {
                let node = &graph.node[c];
                let data = match label.get(&c) {
                    Some(_) if !absorbed.contains(&c) => data_inputs(node, rule_of(node)),
                    _ => (0..node.input.len()).collect(),
                };
                data.iter().any(|&k| node.input.get(k) == Some(&t))
            })
            .collect();
        let readers: Vec<Option<usize>> = (reading.iter())
            .map(|c| domain_of(Some(c)))
            .chain(index.outputs.contains(&t).then_some(None))
            .collect();
        let writer = domain_of(index.producer.get(&t));
        // A layout change where an FP32 Conv or pooling meets an INT8 node (per reader).
        let layout = costs.layout * count(&t);
        let writer_arranges = index
            .producer
            .get(&t)
            .is_some_and(|&p| arranges(&graph.node[p]));
        for (&c, reader) in reading.iter().zip(&readers) {
            let reader_arranges = arranges(&graph.node[c]);
            match (writer, *reader) {
                (Some(w), Some(r)) => {
                    if reader_arranges {
                        network.add_edge(w, r, layout);
                    }
                    if writer_arranges {
                        network.add_edge(r, w, layout);
                    }
                }
                (Some(w), None) if reader_arranges => network.add_edge(w, sink, layout),
                (None, Some(r)) if writer_arranges => network.add_edge(r, sink, layout),
                _ => {}
            }
        }
        // One DequantizeLinear when the writer is INT8 and any reader FP32.
        if let Some(writer) = writer {
            let dequantize = network.add_node();
            network.add_edge(writer, dequantize, conversion);
            for reader in &readers {
                network.add_edge(dequantize, reader.unwrap_or(sink), f64::INFINITY);
            }
        }
        // One QuantizeLinear when the writer is FP32 and any reader INT8.
        let quantize = network.add_node();
        for reader in readers.iter().flatten() {
            network.add_edge(*reader, quantize, f64::INFINITY);
        }
        network.add_edge(quantize, writer.unwrap_or(sink), conversion);
    }
    let int8 = network.source_side(source, sink);
    (plan.quantized_nodes.iter().copied())
        .filter(|i| !int8[label[i]])
        .collect()
}

/// Whether ONNX Runtime runs `node` in a layout of its own when it is FP32 (NCHWc on x86,
/// NCHW elsewhere), unlike its integer kernels (NHWC), so that a domain change next to it
/// also changes layout: convolutions and poolings.
fn arranges(node: &NodeProto) -> bool {
    matches!(
        node.op_type(),
        "Conv"
            | "ConvTranspose"
            | "MaxPool"
            | "AveragePool"
            | "GlobalAveragePool"
            | "GlobalMaxPool"
    )
}

/// The estimated time of `node` in FP32 and in INT8, in FP32 dense multiply-adds: its
/// multiply-adds at the kernel's price for weighted ops, nothing for the others (their
/// integer and float kernels are taken to cost the same, so only conversions decide them).
fn kernel_costs(
    graph: &GraphProto,
    index: &GraphIndex,
    node: &NodeProto,
    count: &impl Fn(&str) -> f64,
    costs: &KernelCosts,
) -> (f64, f64) {
    let OpRule::Weighted { weight, .. } = rule_of(node) else {
        return (0.0, 0.0);
    };
    let Some(dims) = (node.input.get(weight))
        .and_then(|w| index.initializer.get(w))
        .map(|&k| graph.initializer[k].dims.as_slice())
    else {
        return (0.0, 0.0);
    };
    let product = |d: &[i64]| tensor::element_count(d).unwrap_or(0) as f64;
    let output = node.output.first().map_or(0.0, |o| count(o));
    // Multiply-adds per output element (per input element for ConvTranspose).
    let macs = match node.op_type() {
        "Conv" => output * product(dims.get(1..).unwrap_or_default()),
        "ConvTranspose" => count(&node.input[0]) * product(dims.get(1..).unwrap_or_default()),
        "Gemm" if attr::int(node, "transB", 0) != 0 => {
            output * product(dims.get(1..).unwrap_or_default())
        }
        _ => output * product(dims.get(..1).unwrap_or_default()),
    };
    if is_depthwise(node, dims) {
        (macs * costs.fp32_depthwise, macs * costs.int8_depthwise)
    } else {
        (macs, macs * costs.int8_dense)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::slower_in_int8;
    use crate::kernel_costs::KernelCosts;
    use crate::kernels::TargetCpu;
    use crate::onnx::{attr, tensor, DataType, GraphProto};
    use crate::quantize::plan::{plan, PlanOptions};
    use crate::test_support::{float_value, named};

    /// A MobileNetV3 inverted residual block on a `[1, c, side, side]` input: 1x1 expansion
    /// to `4c` → HardSwish → 3x3 depthwise → HardSwish → 1x1 projection to `c`, plus the
    /// input. Returns the graph, its element types and each tensor's element
    /// count.
    fn inverted_residual(
        c: i64,
        side: usize,
    ) -> (
        GraphProto,
        HashMap<String, DataType>,
        HashMap<String, usize>,
    ) {
        let wide = 4 * c;
        let mut depthwise = named("Conv", "depthwise", &["h1", "dw_w"], &["dw"]);
        depthwise.attribute.push(attr::make_int("group", wide));
        let weight = |name: &str, dims: &[i64]| {
            let count = dims.iter().product::<i64>() as usize;
            tensor::from_f32(name, dims, &vec![0.1; count])
        };
        let graph = GraphProto {
            node: vec![
                named("Conv", "expand", &["x", "ex_w"], &["ex"]),
                named("HardSwish", "hswish1", &["ex"], &["h1"]),
                depthwise,
                named("HardSwish", "hswish2", &["dw"], &["h2"]),
                named("Conv", "project", &["h2", "pr_w"], &["y"]),
                named("Add", "shortcut", &["x", "y"], &["out"]),
            ],
            initializer: vec![
                weight("ex_w", &[wide, c, 1, 1]),
                weight("dw_w", &[wide, 1, 3, 3]),
                weight("pr_w", &[c, wide, 1, 1]),
            ],
            input: vec![float_value("x")],
            output: vec![float_value("out")],
            ..Default::default()
        };
        let pixels = side * side;
        let (narrow, wide) = (c as usize * pixels, wide as usize * pixels);
        let elements: HashMap<String, usize> = [
            ("x", narrow),
            ("ex", wide),
            ("h1", wide),
            ("dw", wide),
            ("h2", wide),
            ("y", narrow),
            ("out", narrow),
        ]
        .into_iter()
        .map(|(t, n)| (t.to_owned(), n))
        .collect();
        let types = elements
            .keys()
            .map(|t| (t.clone(), DataType::Float))
            .collect();
        (graph, types, elements)
    }

    /// The names of the planned nodes the estimate returns to FP32 on `cpu`.
    fn fp32_on(cpu: TargetCpu, c: i64, side: usize) -> Vec<String> {
        let (graph, types, elements) = inverted_residual(c, side);
        let plan = plan(&graph, &types, &PlanOptions::default());
        assert_eq!(plan.quantized_nodes.len(), 3, "{:?}", plan.float_nodes);
        (slower_in_int8(&graph, &plan, &elements, &KernelCosts::of(cpu)).into_iter())
            .map(|i| graph.node[i].name().to_owned())
            .collect()
    }

    #[test]
    fn an_early_narrow_block_between_hardswishes_stays_fp32_as_a_whole() {
        // 8 channels at 112x112: every 1x1 Conv does 32 multiply-adds per element it
        // converts; the conversions around the HardSwishes outweigh what int8 saves.
        for cpu in [TargetCpu::X86, TargetCpu::X86Vnni, TargetCpu::Aarch64] {
            assert_eq!(
                fp32_on(cpu, 8, 112),
                ["expand", "depthwise", "project"],
                "{cpu:?}"
            );
        }
    }

    #[test]
    fn a_late_wide_block_keeps_its_1x1_convs_int8_and_the_depthwise_fp32() {
        // 128 channels at 7x7: the 1x1 Convs repay their conversions many times over; the
        // depthwise Conv between two float HardSwishes would pay two conversions and a
        // slower kernel.
        for cpu in [TargetCpu::X86, TargetCpu::X86Vnni] {
            assert_eq!(fp32_on(cpu, 128, 7), ["depthwise"], "{cpu:?}");
        }
    }
}
