//! A decoded model's graph inputs and outputs as the manifest records them (see
//! `kenosis_request::onnx::manifest`, which records them from the front end's outline).

use kenosis_manifest::TensorInfo;
pub use kenosis_request::onnx::manifest::*;

use super::ValueInfoProto;

/// The manifest's record of graph input or output `vi`.
pub fn manifest_info(vi: &ValueInfoProto) -> TensorInfo {
    let (elem, dims) = super::declared_tensor(vi).map_or((0, None), |(e, d)| (e.code(), d));
    tensor_info(vi.name(), elem, dims)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::onnx;
    use crate::onnx::DataType;
    use kenosis_manifest::ElementType;

    /// Through the front end's reading of the file ([`super::super::outline`]), which
    /// builds each record with [`tensor_info`].
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
        let model = onnx::ModelProto {
            ir_version: Some(7),
            graph: Some(graph),
            ..Default::default()
        };
        let outline =
            onnx::outline::read("model.onnx".as_ref(), &model.encode_to_vec()).expect("an outline");
        let (inputs, outputs) = outline.declared_io();
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
