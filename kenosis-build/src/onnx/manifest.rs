//! A model's graph inputs and outputs as the manifest records them
//! ([`kenosis_manifest::TensorInfo`]).

use std::collections::HashSet;

use kenosis_manifest::{ElementType, TensorInfo};

use super::{DataType, ModelProto, ValueInfoProto};

/// The graph inputs (initializers excluded: older IR versions list them as inputs) and
/// outputs `model` declares, as the manifest records them.
pub fn declared_io(model: &ModelProto) -> (Vec<TensorInfo>, Vec<TensorInfo>) {
    let Some(graph) = &model.graph else {
        return (Vec::new(), Vec::new());
    };
    let initializers: HashSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let inputs = (graph.input.iter())
        .filter(|i| !initializers.contains(i.name()))
        .map(manifest_info)
        .collect();
    (inputs, graph.output.iter().map(manifest_info).collect())
}

/// The manifest's record of graph input or output `vi`.
pub fn manifest_info(vi: &ValueInfoProto) -> TensorInfo {
    let (elem, dims) = super::declared_tensor(vi).unwrap_or((DataType::Undefined.into(), None));
    TensorInfo {
        name: vi.name().to_owned(),
        dtype: elem
            .known()
            .and_then(element_type)
            .unwrap_or(ElementType::F32),
        shape: dims.unwrap_or_default(),
    }
}

/// The manifest's element type for ONNX type `t`; `None` for types the manifest does not
/// pass through (complex, bfloat16, the 8-, 6-, 4- and 2-bit types), which a graph input or
/// output then records as `f32`.
fn element_type(t: DataType) -> Option<ElementType> {
    use DataType as D;
    Some(match t {
        D::Float => ElementType::F32,
        D::Uint8 => ElementType::U8,
        D::Int8 => ElementType::I8,
        D::Uint16 => ElementType::U16,
        D::Int16 => ElementType::I16,
        D::Int32 => ElementType::I32,
        D::Int64 => ElementType::I64,
        D::String => ElementType::String,
        D::Bool => ElementType::Bool,
        D::Float16 => ElementType::F16,
        D::Double => ElementType::F64,
        D::Uint32 => ElementType::U32,
        D::Uint64 => ElementType::U64,
        D::Undefined
        | D::Complex64
        | D::Complex128
        | D::Bfloat16
        | D::Float8e4m3fn
        | D::Float8e4m3fnuz
        | D::Float8e5m2
        | D::Float8e5m2fnuz
        | D::Uint4
        | D::Int4
        | D::Float4e2m1
        | D::Float8e8m0
        | D::Uint2
        | D::Int2
        | D::Float6e2m3
        | D::Float6e3m2 => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx;

    #[test]
    fn declared_io_records_element_types_and_f32_for_types_the_manifest_lacks() {
        let mut unknown = onnx::tensor_info("code99", DataType::Float, Some(&[2]));
        if let Some(onnx::type_proto::Value::TensorType(t)) =
            unknown.r#type.as_mut().and_then(|t| t.value.as_mut())
        {
            t.elem_type = Some(99);
        }
        let graph = onnx::GraphProto {
            input: vec![
                onnx::tensor_info("ids", DataType::Int64, Some(&[1, 8])),
                onnx::tensor_info("flags", DataType::Bool, None),
                onnx::tensor_info("w", DataType::Float, Some(&[2])),
            ],
            initializer: vec![onnx::tensor::from_f32("w", &[2], &[0.0, 1.0])],
            output: vec![
                onnx::tensor_info("half", DataType::Float16, None),
                onnx::tensor_info("wide", DataType::Uint64, None),
                onnx::tensor_info("brain", DataType::Bfloat16, None),
                unknown,
            ],
            ..Default::default()
        };
        let model = ModelProto {
            graph: Some(graph),
            ..Default::default()
        };
        let (inputs, outputs) = declared_io(&model);
        let types = |infos: &[TensorInfo]| -> Vec<(String, ElementType)> {
            infos.iter().map(|i| (i.name.clone(), i.dtype)).collect()
        };
        let named = |pairs: &[(&str, ElementType)]| -> Vec<(String, ElementType)> {
            pairs.iter().map(|&(n, t)| (n.to_owned(), t)).collect()
        };
        assert_eq!(
            types(&inputs),
            named(&[("ids", ElementType::I64), ("flags", ElementType::Bool)])
        );
        assert_eq!(
            types(&outputs),
            named(&[
                ("half", ElementType::F16),
                ("wide", ElementType::U64),
                ("brain", ElementType::F32),
                ("code99", ElementType::F32),
            ])
        );
        assert_eq!(inputs[0].shape, vec![Some(1), Some(8)]);
    }
}
