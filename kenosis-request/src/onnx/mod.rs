//! What both sides read of an ONNX model without decoding it: the fields the front end
//! needs from the file ([`outline`]), where external tensors live ([`external`]), the
//! manifest's record of inputs and outputs ([`manifest`]), and how reasons name a node. The
//! quantizer decodes the whole model (`kenosis_quantize`'s `onnx`).

pub mod external;
pub mod manifest;
pub mod outline;

/// A node as reasons name it: `` `name` (OpType) ``.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    /// The node's name.
    pub name: String,
    /// The node's operator.
    pub op_type: String,
}

impl std::fmt::Display for NodeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` ({})", self.name, self.op_type)
    }
}

/// Bytes that are not an ONNX model, and why: the crate's `Error::InvalidModel` (`?` converts
/// it), with the same text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: not a valid ONNX model: {reason}")]
pub struct InvalidModel {
    /// The model file.
    pub path: std::path::PathBuf,
    /// What is wrong, e.g. the protobuf decoder's message.
    pub reason: String,
}
