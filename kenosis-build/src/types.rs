//! Element-type propagation: which tensors of a graph are float.
//!
//! Kenosis only quantizes float tensors and must declare an element type for every tensor it
//! exposes as a calibration output, without a full ONNX shape inference. The rules below
//! cover the operators whose output type differs from their first input's; every other
//! operator is assumed to keep its first input's type (true for the arithmetic, pooling,
//! layout and activation operators Kenosis quantizes).

use std::collections::HashMap;

use crate::onnx::{attr, dtype, GraphProto, NodeProto, ValueInfoProto};

/// Tensor name → `TensorProto.DataType` for every tensor whose type could be derived.
/// Types flow through the nodes in graph order, so `graph` must be topologically sorted
/// (normalization leaves it so).
pub fn infer_elem_types(graph: &GraphProto) -> HashMap<String, i32> {
    let mut types: HashMap<String, i32> = HashMap::new();
    for vi in graph
        .input
        .iter()
        .chain(&graph.value_info)
        .chain(&graph.output)
    {
        if let Some(t) = declared_elem_type(vi) {
            types.insert(vi.name().to_owned(), t);
        }
    }
    for init in &graph.initializer {
        types.insert(init.name().to_owned(), init.data_type());
    }
    for node in &graph.node {
        let first_input = node.input.iter().find_map(|n| types.get(n).copied());
        for (k, out) in node
            .output
            .iter()
            .enumerate()
            .filter(|(_, o)| !o.is_empty())
        {
            if let Some(t) = output_type(node, k, first_input, &types) {
                types.insert(out.clone(), t);
            }
        }
    }
    types
}

/// The element type a `ValueInfoProto` declares, if it declares a tensor type.
pub fn declared_elem_type(vi: &ValueInfoProto) -> Option<i32> {
    crate::onnx::declared_tensor(vi)
        .map(|(e, _)| e)
        .filter(|&e| e != 0)
}

fn output_type(
    node: &NodeProto,
    k: usize,
    first_input: Option<i32>,
    types: &HashMap<String, i32>,
) -> Option<i32> {
    let input_type = |i: usize| node.input.get(i).and_then(|n| types.get(n).copied());
    match node.op_type() {
        "Shape" | "Size" | "NonZero" | "ArgMax" | "ArgMin" | "NonMaxSuppression" => {
            Some(dtype::INT64)
        }
        "TopK" if k == 1 => Some(dtype::INT64),
        "Unique" if k > 0 => Some(dtype::INT64),
        "Cast" => Some(attr::int(node, "to", 0) as i32),
        "CastLike" => input_type(1),
        "Constant" => attr::tensor(node, "value")
            .map(|t| t.data_type())
            .or_else(|| {
                let a = node.attribute.first()?;
                Some(match a.name() {
                    "value_float" | "value_floats" => dtype::FLOAT,
                    "value_int" | "value_ints" => dtype::INT64,
                    _ => return None,
                })
            }),
        "ConstantOfShape" => {
            Some(attr::tensor(node, "value").map_or(dtype::FLOAT, |t| t.data_type()))
        }
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "Not" | "And" | "Or"
        | "Xor" | "IsNaN" | "IsInf" => Some(dtype::BOOL),
        "QuantizeLinear" => Some(input_type(2).unwrap_or(dtype::UINT8)),
        "DequantizeLinear" => Some(dtype::FLOAT),
        "Where" => input_type(1),
        "RandomNormal" | "RandomUniform" | "EyeLike" | "RandomNormalLike" | "RandomUniformLike" => {
            Some(attr::int(node, "dtype", dtype::FLOAT as i64) as i32)
        }
        "DynamicQuantizeLinear" => Some(if k == 0 || k == 2 {
            dtype::UINT8
        } else {
            dtype::FLOAT
        }),
        "If" | "Loop" => None,
        // Sequences are not tensors; their element types are not tracked.
        "SequenceEmpty" | "SequenceConstruct" | "SequenceInsert" | "SequenceErase"
        | "SplitToSequence" | "SequenceMap" => None,
        "SequenceLength" => Some(dtype::INT64),
        _ => first_input,
    }
}
