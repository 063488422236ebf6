//! Depthwise Conv inputs whose channels one per-tensor scale cannot resolve.
//!
//! QLinearConv reads its input with one scale and zero point (ONNX operator spec,
//! QLinearConv: `x_scale` and `x_zero_point` are scalars), and ONNX Runtime's QDQ fusion
//! needs exactly that. The step is then set by the loudest channels. A dense Conv sums over
//! all input channels, so a quiet channel's rounding error is one term among many; a
//! depthwise Conv never mixes channels, so each output channel is only as good as its one
//! input channel. When many of those vary by less than one step (standard deviation), their
//! information is gone, and no later layer can recover it.
//!
//! This happens at image stems, where a Conv on raw pixels writes channels of very different
//! spread (YOLOX-Nano's stem feeding its first depthwise Conv); deeper layers, normalized
//! by training, rarely have such channels.

use std::collections::{HashMap, HashSet};

use crate::graph::GraphIndex;
use crate::onnx::{GraphProto, NodeProto, TensorProto};

use super::reason::FloatReason;
use super::rewrite::Range;

/// Fraction of a depthwise Conv's input channels that may vary by less than one uint8 step
/// before the input stays FP32.
pub const MAX_UNRESOLVED_FRACTION: f64 = 0.2;

/// Activation tensors read by a depthwise Conv of `weighted` (weighted ops with their
/// weight initializer) that must stay FP32, each with the reason for the report: those with
/// more than [`MAX_UNRESOLVED_FRACTION`] of their non-constant channels below one uint8 step
/// of their calibrated `ranges`, as measured by `spreads` (population standard deviation per
/// channel, axis 1). The pointwise activation and the weighted op that write such a tensor
/// compute the same channels, so their tensors are included too, as long as each feeds only
/// the next.
///
/// Only the stem qualifies: no weighted op may run before that chain. There the FP32 ops
/// read the float model input, so they need no extra DequantizeLinear. Deeper in a network
/// an FP32 island costs Q/DQ and layout changes between ONNX Runtime's integer (NHWC) and
/// float (NCHWc) kernels, which synthetic calibration data would trigger for no gain.
#[allow(
    clippy::expect_used,
    reason = "the chain starts with one tensor and only grows"
)]
pub fn unresolved_depthwise_inputs(
    graph: &GraphProto,
    weighted: &[(&NodeProto, &TensorProto)],
    ranges: &HashMap<String, Range>,
    spreads: &HashMap<String, Vec<f64>>,
) -> HashMap<String, FloatReason> {
    let index = GraphIndex::new(graph);
    let mut float = HashMap::new();
    for &(node, weight) in weighted {
        if !crate::ops::is_depthwise(node, &weight.dims) {
            continue;
        }
        let input = &node.input[0];
        let (Some(range), Some(stds)) = (ranges.get(input), spreads.get(input)) else {
            continue;
        };
        let step = f64::from(range.max.max(0.0) - range.min.min(0.0)) / 255.0;
        let varying = stds.iter().filter(|&&s| s > 0.0).count();
        let unresolved = stds.iter().filter(|&&s| s > 0.0 && s < step).count();
        if varying == 0 || (unresolved as f64) <= MAX_UNRESOLVED_FRACTION * varying as f64 {
            continue;
        }
        let reason = FloatReason::UnresolvedChannels {
            tensor: input.clone(),
            conv: node.name().to_owned(),
            unresolved,
            varying,
            step: format!("{step:.3}"),
        };
        let mut chain = vec![input.clone()];
        while let Some(&p) = index.producer.get(chain.last().expect("non-empty")) {
            let producer = &graph.node[p];
            let Some(upstream) = producer.input.first() else {
                break;
            };
            if !is_pointwise(producer.op_type()) || index.consumers_of(upstream).len() != 1 {
                break;
            }
            chain.push(upstream.clone());
        }
        let head = chain.last().expect("non-empty");
        let before_head = index
            .producer
            .get(head)
            .map_or(Vec::new(), |&p| graph.node[p].input.clone());
        if computed_by_weighted_op(graph, &index, before_head) {
            continue;
        }
        for tensor in chain {
            float.insert(tensor, reason.clone());
        }
    }
    float
}

/// Whether any of `tensors` is computed, directly or further up, by a Conv, Gemm or MatMul.
fn computed_by_weighted_op(graph: &GraphProto, index: &GraphIndex, tensors: Vec<String>) -> bool {
    let mut stack = tensors;
    let mut seen = HashSet::new();
    while let Some(t) = stack.pop() {
        let Some(&p) = index.producer.get(&t) else {
            continue;
        };
        if !seen.insert(p) {
            continue;
        }
        let node = &graph.node[p];
        if matches!(
            crate::ops::rule_of(node),
            crate::ops::OpRule::Weighted { .. }
        ) {
            return true;
        }
        stack.extend(node.input.iter().cloned());
    }
    false
}

/// Single-input activations that map each element on its own, so their input has the same
/// channels as their output (`QuickGelu` is the SiLU normalization writes).
fn is_pointwise(op_type: &str) -> bool {
    matches!(
        op_type,
        "Relu"
            | "Clip"
            | "LeakyRelu"
            | "Sigmoid"
            | "HardSigmoid"
            | "HardSwish"
            | "Tanh"
            | "QuickGelu"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::{attr, tensor};
    use crate::test_support::node;

    /// `x → Slice → Conv (stem) → QuickGelu → Conv (depthwise, 4 channels) → y`, with the
    /// Slice replaced by a Conv when `deep`.
    fn stem(deep: bool) -> GraphProto {
        let first = if deep {
            node("Conv", &["x", "stem_w"], "xs")
        } else {
            node("Slice", &["x", "starts", "ends"], "xs")
        };
        let mut silu = node("QuickGelu", &["pre"], "act");
        silu.domain = Some("com.microsoft".into());
        let mut dw = node("Conv", &["act", "dw_w"], "y");
        dw.attribute.push(attr::make_int("group", 4));
        GraphProto {
            node: vec![first, node("Conv", &["xs", "stem_w"], "pre"), silu, dw],
            initializer: vec![
                tensor::from_f32("stem_w", &[4, 3, 3, 3], &[0.1; 108]),
                tensor::from_f32("dw_w", &[4, 1, 3, 3], &[0.1; 36]),
            ],
            ..Default::default()
        }
    }

    /// `act` quantized with a step of 0.1.
    fn unresolved_in(deep: bool, stds: &[f64]) -> HashMap<String, FloatReason> {
        let graph = stem(deep);
        let g = &graph;
        let weighted = [
            (&g.node[1], &g.initializer[0]),
            (&g.node[3], &g.initializer[1]),
        ];
        let ranges = [(
            "act".to_string(),
            Range {
                min: -0.5,
                max: 25.0,
            },
        )]
        .into();
        let spreads = [("act".to_string(), stds.to_vec())].into();
        unresolved_depthwise_inputs(&graph, &weighted, &ranges, &spreads)
    }

    fn unresolved(stds: &[f64]) -> HashMap<String, FloatReason> {
        unresolved_in(false, stds)
    }

    #[test]
    fn quiet_channels_under_a_depthwise_conv_keep_the_chain_to_the_stem_fp32() {
        // Two of four channels below one step.
        let float = unresolved(&[3.0, 0.02, 2.0, 0.09]);
        let mut tensors: Vec<&str> = float.keys().map(String::as_str).collect();
        tensors.sort_unstable();
        assert_eq!(tensors, ["act", "pre"]);
        assert!(
            matches!(
                &float["pre"],
                FloatReason::UnresolvedChannels {
                    unresolved: 2,
                    varying: 4,
                    ..
                }
            ),
            "{float:?}"
        );
        // One of four is still over the limit.
        assert_eq!(unresolved(&[3.0, 0.02, 2.0, 1.0]).len(), 2);
    }

    #[test]
    fn few_quiet_or_dead_channels_keep_the_depthwise_conv_quantized() {
        // One of six varying channels is under the limit.
        assert!(unresolved(&[3.0, 0.02, 2.0, 1.0, 0.5, 0.3]).is_empty());
        // Constant channels lose nothing to rounding and are not counted.
        assert!(unresolved(&[3.0, 0.0, 2.0, 0.0, 0.0]).is_empty());
        // Channels at one step or more are resolved.
        assert!(unresolved(&[3.0, 0.1, 2.0, 0.2]).is_empty());
    }

    #[test]
    fn quiet_channels_after_another_weighted_op_stay_quantized() {
        assert!(unresolved_in(true, &[3.0, 0.02, 2.0, 0.09]).is_empty());
    }
}
