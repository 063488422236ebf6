//! Helpers on the generated ONNX types (the quantizer's): element types, node references,
//! value-info builders and readers, and the decoding of a whole model.

use super::proto::*;
use super::InvalidModel;

use tensor_proto::DataType;

/// An element type as a model states it (`TensorProto.data_type`,
/// `TypeProto.Tensor.elem_type`): the generated [`DataType`] where `onnx.proto` defines the
/// code, else the code itself.
///
/// prost keeps those fields as `i32`, so a model can hold a code no [`DataType`] names.
/// Such a code is carried as [`ElemType::Unknown`] rather than dropped or folded into a
/// defined type, so that errors can name it (`unknown (99)`) and it never compares equal to
/// a type Kenosis handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// A type `onnx.proto` defines (`UNDEFINED` for an unset field).
    Known(DataType),
    /// A code `onnx.proto` does not define.
    Unknown(i32),
}

impl ElemType {
    /// The element type of protobuf `code`.
    pub fn from_code(code: i32) -> Self {
        DataType::try_from(code).map_or(ElemType::Unknown(code), ElemType::Known)
    }

    /// The protobuf code.
    pub fn code(self) -> i32 {
        match self {
            ElemType::Known(t) => t as i32,
            ElemType::Unknown(code) => code,
        }
    }

    /// The [`DataType`], `None` for a code `onnx.proto` does not define.
    pub fn known(self) -> Option<DataType> {
        match self {
            ElemType::Known(t) => Some(t),
            ElemType::Unknown(_) => None,
        }
    }
}

impl From<DataType> for ElemType {
    fn from(t: DataType) -> Self {
        ElemType::Known(t)
    }
}

impl PartialEq<DataType> for ElemType {
    fn eq(&self, other: &DataType) -> bool {
        *self == ElemType::Known(*other)
    }
}

/// The name in `TensorProto.DataType` with the code, e.g. `DOUBLE (11)`, as errors name a
/// type; `unknown (code)` for a code the enum does not define.
impl std::fmt::Display for ElemType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.known().map_or("unknown", |t| t.as_str_name());
        write!(f, "{name} ({})", self.code())
    }
}

impl TensorProto {
    /// The tensor's element type (its `data_type`; `UNDEFINED` when unset).
    pub fn elem_type(&self) -> ElemType {
        ElemType::from_code(self.data_type())
    }
}

/// The default (`ai.onnx`) operator domain is written as `""` or `"ai.onnx"`.
pub fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// Opset version of the default domain imported by `model`, if any.
pub fn default_opset(model: &ModelProto) -> Option<i64> {
    model
        .opset_import
        .iter()
        .find(|o| is_default_domain(o.domain()))
        .map(|o| o.version())
}

/// A tensor `ValueInfoProto` (a graph input or output) of element type `elem_type` with
/// fixed `dims`, or with no declared shape when `dims` is `None`.
pub fn tensor_info(name: &str, elem_type: DataType, dims: Option<&[i64]>) -> ValueInfoProto {
    let shape = dims.map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|&d| tensor_shape_proto::Dimension {
                value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                ..Default::default()
            })
            .collect(),
    });
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem_type as i32),
                shape,
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The tensor type a `ValueInfoProto` declares: element type (`UNDEFINED` when unset) and
/// dims (`None` when no shape is declared; a dim is `None` when symbolic
/// or not positive). `None` for non-tensor types (sequences, maps) or no type at all.
pub fn declared_tensor(vi: &ValueInfoProto) -> Option<(ElemType, Option<Vec<Option<i64>>>)> {
    let t = tensor_type(vi)?;
    let dims = t.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match d.value {
                Some(tensor_shape_proto::dimension::Value::DimValue(v)) if v > 0 => Some(v),
                _ => None,
            })
            .collect()
    });
    Some((ElemType::from_code(t.elem_type()), dims))
}

/// The `dim_param` of each declared dim of `vi` (`None` for fixed or unnamed dims; empty
/// when the shape is not declared).
pub fn declared_dim_names(vi: &ValueInfoProto) -> Vec<Option<String>> {
    let Some(t) = tensor_type(vi) else {
        return Vec::new();
    };
    t.shape.as_ref().map_or_else(Vec::new, |s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(tensor_shape_proto::dimension::Value::DimParam(p)) => Some(p.clone()),
                _ => None,
            })
            .collect()
    })
}

/// The tensor type `vi` declares; `None` for other types or no type.
fn tensor_type(vi: &ValueInfoProto) -> Option<&type_proto::Tensor> {
    match vi.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => Some(t),
        _ => None,
    }
}

/// The subgraphs `node` holds in its graph-valued attributes (If branches, Loop and Scan
/// bodies).
pub fn subgraphs(node: &NodeProto) -> impl Iterator<Item = &GraphProto> {
    node.attribute
        .iter()
        .flat_map(|a| a.g.iter().chain(&a.graphs))
}

/// A node with the given type, inputs, outputs and attributes in the default domain.
pub fn make_node(
    op_type: &str,
    name: String,
    inputs: Vec<String>,
    outputs: Vec<String>,
    attributes: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        op_type: Some(op_type.to_owned()),
        name: Some(name),
        input: inputs,
        output: outputs,
        attribute: attributes,
        ..Default::default()
    }
}

/// Decodes an ONNX model, naming `path` in errors.
///
/// # Errors
/// [`InvalidModel`] for empty input, bytes that are not a `ModelProto`, or a model without a
/// graph.
pub fn decode(path: &std::path::Path, bytes: &[u8]) -> Result<ModelProto, InvalidModel> {
    use prost::Message;

    let invalid = |reason: String| InvalidModel {
        path: path.to_owned(),
        reason,
    };
    if bytes.is_empty() {
        return Err(invalid("the file is empty".into()));
    }
    let model =
        ModelProto::decode(bytes).map_err(|e| invalid(format!("protobuf decoding failed: {e}")))?;
    if model.graph.is_none() || model.ir_version.is_none() {
        return Err(invalid(
            "no graph or IR version: this protobuf is not an ONNX ModelProto".into(),
        ));
    }
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_types_are_named_with_the_enum_name_and_code() {
        assert_eq!(ElemType::from(DataType::Double).to_string(), "DOUBLE (11)");
        assert_eq!(ElemType::from_code(8).to_string(), "STRING (8)");
        assert_eq!(ElemType::from_code(0).to_string(), "UNDEFINED (0)");
        assert_eq!(ElemType::from_code(-3).to_string(), "unknown (-3)");
    }

    #[test]
    fn unknown_codes_keep_their_code_and_match_no_type() {
        let unknown = ElemType::from_code(99);
        assert_eq!(unknown, ElemType::Unknown(99));
        assert_eq!((unknown.code(), unknown.known()), (99, None));
        assert!(unknown != DataType::Undefined && unknown != DataType::Float);
        let float = ElemType::from_code(1);
        assert_eq!((float.code(), float.known()), (1, Some(DataType::Float)));
        assert!(float == DataType::Float && float != DataType::Double);
    }
}
