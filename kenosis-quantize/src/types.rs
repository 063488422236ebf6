//! Element-type propagation: which tensors of a graph are float.
//!
//! Kenosis only quantizes float tensors and must declare an element type for every tensor it
//! exposes as a calibration output, without a full ONNX shape inference. The rules below
//! cover the operators whose output type differs from their first input's; every other
//! operator is assumed to keep its first input's type (true for the arithmetic, pooling,
//! layout and activation operators Kenosis quantizes).

use std::collections::HashMap;

use crate::onnx::{attr, DataType, ElemType, GraphProto, NodeProto, ValueInfoProto};

/// Tensor name → element type for every tensor whose type could be derived.
/// Types flow through the nodes in graph order, so `graph` must be topologically sorted
/// (normalization leaves it so).
///
/// A code `onnx.proto` does not define is recorded as [`DataType::Undefined`], as an unset
/// initializer type is: all the map answers is whether a tensor is float, and such a tensor
/// is not, yet its type still passes on to the nodes that read it as any other type does.
pub fn infer_elem_types(graph: &GraphProto) -> HashMap<String, DataType> {
    let mut types: HashMap<String, DataType> = HashMap::new();
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
        types.insert(init.name().to_owned(), named(init.elem_type()));
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

/// The element type a `ValueInfoProto` declares, if it declares a tensor type and sets it
/// (an unset or `UNDEFINED` type declares nothing). A code `onnx.proto` does not define comes
/// back as [`DataType::Undefined`] (see [`infer_elem_types`]).
pub fn declared_elem_type(vi: &ValueInfoProto) -> Option<DataType> {
    crate::onnx::declared_tensor(vi)
        .map(|(e, _)| e)
        .filter(|&e| e != DataType::Undefined)
        .map(named)
}

/// `t`, or [`DataType::Undefined`] for a code `onnx.proto` does not define (see
/// [`infer_elem_types`]).
fn named(t: ElemType) -> DataType {
    t.known().unwrap_or(DataType::Undefined)
}

/// The element type integer attribute `name` of `node` names (`Cast`'s `to`, the random
/// generators' `dtype`), `default` when absent. The attribute's `i64` is truncated to the
/// `i32` of a `TensorProto.DataType` code.
fn attr_type(node: &NodeProto, name: &str, default: DataType) -> DataType {
    named(ElemType::from_code(
        attr::int(node, name, i64::from(default as i32)) as i32,
    ))
}

fn output_type(
    node: &NodeProto,
    k: usize,
    first_input: Option<DataType>,
    types: &HashMap<String, DataType>,
) -> Option<DataType> {
    let input_type = |i: usize| node.input.get(i).and_then(|n| types.get(n).copied());
    match node.op_type() {
        "Shape" | "Size" | "NonZero" | "ArgMax" | "ArgMin" | "NonMaxSuppression" => {
            Some(DataType::Int64)
        }
        "TopK" if k == 1 => Some(DataType::Int64),
        "Unique" if k > 0 => Some(DataType::Int64),
        "Cast" => Some(attr_type(node, "to", DataType::Undefined)),
        "CastLike" => input_type(1),
        "Constant" => attr::tensor(node, "value")
            .map(|t| named(t.elem_type()))
            .or_else(|| {
                let a = node.attribute.first()?;
                Some(match a.name() {
                    "value_float" | "value_floats" => DataType::Float,
                    "value_int" | "value_ints" => DataType::Int64,
                    _ => return None,
                })
            }),
        "ConstantOfShape" => {
            Some(attr::tensor(node, "value").map_or(DataType::Float, |t| named(t.elem_type())))
        }
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "Not" | "And" | "Or"
        | "Xor" | "IsNaN" | "IsInf" => Some(DataType::Bool),
        "QuantizeLinear" => Some(input_type(2).unwrap_or(DataType::Uint8)),
        "DequantizeLinear" => Some(DataType::Float),
        "Where" => input_type(1),
        "RandomNormal" | "RandomUniform" | "EyeLike" | "RandomNormalLike" | "RandomUniformLike" => {
            Some(attr_type(node, "dtype", DataType::Float))
        }
        "DynamicQuantizeLinear" => Some(if k == 0 || k == 2 {
            DataType::Uint8
        } else {
            DataType::Float
        }),
        "If" | "Loop" => None,
        // Sequences are not tensors; their element types are not tracked.
        "SequenceEmpty" | "SequenceConstruct" | "SequenceInsert" | "SequenceErase"
        | "SplitToSequence" | "SequenceMap" => None,
        "SequenceLength" => Some(DataType::Int64),
        _ => first_input,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::{tensor_info, type_proto};
    use crate::test_support::node;

    /// `vi` with its declared element type code set to `code`.
    fn with_code(mut vi: ValueInfoProto, code: i32) -> ValueInfoProto {
        if let Some(type_proto::Value::TensorType(t)) =
            vi.r#type.as_mut().and_then(|t| t.value.as_mut())
        {
            t.elem_type = Some(code);
        }
        vi
    }

    #[test]
    fn unknown_codes_are_undefined_types_that_still_flow_and_unset_ones_are_absent() {
        let mut cast = node("Cast", &["c"], "f");
        cast.attribute.push(attr::make_int("to", 1));
        let mut cast_unknown = node("Cast", &["x"], "k");
        cast_unknown.attribute.push(attr::make_int("to", 99));
        let graph = GraphProto {
            input: vec![
                tensor_info("x", DataType::Float, None),
                with_code(tensor_info("c", DataType::Float, None), 99),
                with_code(tensor_info("u", DataType::Float, None), 0),
            ],
            node: vec![
                node("Add", &["c", "x"], "s"),
                node("Add", &["u", "x"], "t"),
                cast,
                cast_unknown,
            ],
            ..Default::default()
        };
        let types = infer_elem_types(&graph);
        let get = |t: &str| types.get(t).copied();
        assert_eq!(get("c"), Some(DataType::Undefined));
        // `c` is the first typed input of its Add, so the sum is not taken as float.
        assert_eq!(get("s"), Some(DataType::Undefined));
        // An unset type declares nothing: the next input's type is used.
        assert_eq!(get("u"), None);
        assert_eq!(get("t"), Some(DataType::Float));
        assert_eq!(get("f"), Some(DataType::Float));
        assert_eq!(get("k"), Some(DataType::Undefined));
    }
}
