//! `--format text|json`: how `inspect`, `validate`, `diff`, `report`, `quantize`, `cast` and
//! `probe` print their result.
//!
//! Text is for people and may change; JSON is for scripts and keeps its field names (see
//! `docs/cli-json.md`). Field names are those of the build's JSON report
//! (`kenosis_quantize::Report`) where the two describe the same thing: sizes in bytes
//! (`size_fp32`, `size_int8`), latencies in milliseconds (`fp32_ms`, `int8_ms`), agreement
//! as fractions (`top1_agreement`) and cosines (`mean_cosine`), tensors as
//! `{name, dtype, shape}`.

use kenosis_quantize::model::ElemType;
use serde::Serialize;

use crate::error::{Error, Result};

/// How a command prints its result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Lines for people to read (the default).
    #[default]
    Text,
    /// One JSON document on standard output, with the fields `docs/cli-json.md` lists.
    Json,
}

/// Prints `value` as one pretty-printed JSON document and a line feed on standard output.
///
/// # Errors
/// [`Error::Mismatch`] when `value` does not serialize (a non-string map key).
pub fn print_json(value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Mismatch(format!("the result does not serialize as JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

/// A graph input, output or initializer as JSON: the build report's `{name, dtype, shape}`
/// (`kenosis_build::TensorInfo`), with the names of symbolic dimensions beside the shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tensor {
    /// The ONNX value name.
    pub name: String,
    /// The element type, see [`dtype`].
    pub dtype: String,
    /// Dimensions, `null` where symbolic or unknown; empty when no shape is declared.
    pub shape: Vec<Option<i64>>,
    /// The name (`dim_param`) of each dimension, `null` where fixed or unnamed; as long as
    /// `shape`.
    pub dim_names: Vec<Option<String>>,
}

impl Tensor {
    /// The declared type and shape of graph input or output `vi`.
    pub fn of_value(vi: &kenosis_quantize::model::ValueInfoProto) -> Self {
        let (elem, dims) =
            kenosis_quantize::model::declared_tensor(vi).unwrap_or((ElemType::from_code(0), None));
        let shape = dims.unwrap_or_default();
        let mut dim_names = kenosis_quantize::model::declared_dim_names(vi);
        dim_names.resize(shape.len(), None);
        Self {
            name: vi.name().to_owned(),
            dtype: dtype(elem),
            shape,
            dim_names,
        }
    }
}

/// An element type as the build report writes it (`f32`, `u8`, `i8`, `i64`, `f16`, `bool`,
/// `string`, ...: `kenosis_manifest::ElementType`); a type the report does not carry by
/// its ONNX name in lower case (`bfloat16`, `int4`, `float8e4m3fn`, ...); `undefined` when
/// none is declared.
pub fn dtype(elem: ElemType) -> String {
    let code = elem.code();
    if let Some(t) = kenosis_request::onnx::manifest::element_type(code) {
        if let Ok(serde_json::Value::String(name)) = serde_json::to_value(t) {
            return name;
        }
    }
    elem.known().map_or_else(
        || format!("type {code}"),
        |t| t.as_str_name().to_ascii_lowercase(),
    )
}
