//! A model's graph inputs and outputs as the manifest records them
//! ([`kenosis_manifest::TensorInfo`]).

use kenosis_manifest::{ElementType, TensorInfo};

/// The manifest's record of a graph input or output `name` declared with element type
/// `elem_type` (a `TensorProto.DataType` code, 0 when undeclared) and `dims` (`None` when no
/// shape is declared).
pub fn tensor_info(name: &str, elem_type: i32, dims: Option<Vec<Option<i64>>>) -> TensorInfo {
    TensorInfo {
        name: name.to_owned(),
        dtype: element_type(elem_type).unwrap_or(ElementType::F32),
        shape: dims.unwrap_or_default(),
    }
}

/// The manifest's element type for the `TensorProto.DataType` code `code` (`onnx.proto`);
/// `None` for types the manifest does not pass through (undefined, complex, bfloat16, the 8-,
/// 6-, 4- and 2-bit types, codes `onnx.proto` does not define), which a graph input or output
/// then records as `f32`.
pub fn element_type(code: i32) -> Option<ElementType> {
    Some(match code {
        1 => ElementType::F32,
        2 => ElementType::U8,
        3 => ElementType::I8,
        4 => ElementType::U16,
        5 => ElementType::I16,
        6 => ElementType::I32,
        7 => ElementType::I64,
        8 => ElementType::String,
        9 => ElementType::Bool,
        10 => ElementType::F16,
        11 => ElementType::F64,
        12 => ElementType::U32,
        13 => ElementType::U64,
        _ => return None,
    })
}
