//! What ONNX Runtime's QDQ kernels do with each op type: the table the placement plan and
//! the synthetic-input analysis read. An op is `Weighted` or `QLinear` when ORT has an
//! integer kernel for it (`onnxruntime/core/optimizer/qdq_transformer/selectors_actions`),
//! `ShareScale` when ORT drops its Q/DQ pair and moves uint8 codes (`DropQDQNodes`).

use crate::onnx::{attr, NodeProto};

/// How one operator type is quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpRule {
    /// Has a constant weight: input 0 and the output are quantized activations, input
    /// `weight` becomes int8 (per-channel on the output-channel axis), input `bias` int32.
    Weighted {
        /// Index of the weight input.
        weight: usize,
        /// Index of the bias input, if the op has one.
        bias: Option<usize>,
    },
    /// Has an integer (QLinear*) kernel in ONNX Runtime: float data inputs and output quantized.
    QLinear,
    /// Moves or selects data without arithmetic: the output reuses input 0's scale and zero
    /// point, so ONNX Runtime runs it on uint8 directly.
    ShareScale,
    /// Relu/Clip: folded into the range of a quantized producer, otherwise left FP32.
    Activation,
    /// Everything else stays FP32.
    Float,
}

/// The placement rule of a default-domain op type.
pub fn rule_for(op_type: &str) -> OpRule {
    match op_type {
        "Conv" | "ConvTranspose" | "Gemm" => OpRule::Weighted {
            weight: 1,
            bias: Some(2),
        },
        "MatMul" => OpRule::Weighted {
            weight: 1,
            bias: None,
        },
        "Add" | "Mul" | "Concat" | "AveragePool" | "GlobalAveragePool" | "Sigmoid"
        | "LeakyRelu" | "Softmax" => OpRule::QLinear,
        "MaxPool" | "Reshape" | "Transpose" | "Flatten" | "Squeeze" | "Unsqueeze" | "Slice"
        | "Gather" | "Resize" => OpRule::ShareScale,
        "Relu" | "Clip" => OpRule::Activation,
        _ => OpRule::Float,
    }
}

/// The placement rule of `node`: [`rule_for`] its op type in the default domain, FP32
/// outside it (a custom-domain `Conv` is not ours to interpret).
pub fn rule_of(node: &NodeProto) -> OpRule {
    if crate::onnx::is_default_domain(node.domain()) {
        rule_for(node.op_type())
    } else {
        OpRule::Float
    }
}

/// Whether `node` is a depthwise Conv: grouped, one input channel per group
/// (`weight_dims` `[C_out, 1, k...]`).
pub fn is_depthwise(node: &NodeProto, weight_dims: &[i64]) -> bool {
    node.op_type() == "Conv" && attr::int(node, "group", 1) > 1 && weight_dims.get(1) == Some(&1)
}
