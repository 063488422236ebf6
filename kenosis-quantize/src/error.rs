//! The typed reasons the quantizer's stages give before the pipeline names the file, and the
//! shared [`Error`] they become (from `kenosis-request`).
//!
//! The reason enums ([`Unsupported`] and the groups it wraps, [`BadSample`]) are internal.
//! The pipeline turns them into [`Error::Unsupported`] or [`Error::Calibration`], whose
//! `reason` is their `Display` text, so that they can change with the stages without
//! changing the public API. Leaf modules define the group of what they check
//! ([`BadTensor`] in `onnx::tensor`, [`Malformed`] in `graph`) and need nothing from here.

use std::path::PathBuf;

pub use kenosis_request::error::{Error, OrtFailure, Result};

pub use crate::graph::Malformed;
pub use crate::onnx::tensor::BadTensor;
pub use crate::onnx::NodeRef;

/// [`Error::Unsupported`] for the model at `path`, with `reason`'s text.
pub(crate) fn unsupported(path: impl Into<PathBuf>, reason: impl Into<Unsupported>) -> Error {
    Error::Unsupported {
        path: path.into(),
        reason: reason.into().to_string(),
    }
}

/// [`Error::Runtime`] for the model at `path` and `ort`'s error `e`.
pub(crate) fn runtime<R>(
    path: impl Into<PathBuf>,
    e: impl std::borrow::Borrow<ort::Error<R>>,
) -> Error {
    Error::runtime(path, ort_failure(e.borrow()))
}

/// `ort`'s error as the shared [`OrtFailure`]: its code and message.
pub fn ort_failure<R>(e: &ort::Error<R>) -> OrtFailure {
    OrtFailure {
        code: format!("{:?}", e.code()),
        message: e.message().to_owned(),
    }
}

/// Why Kenosis cannot quantize a model that decodes: the reason of [`Error::Unsupported`],
/// grouped by what is wrong. The text says what was found and, where possible, what to do.
#[derive(Debug, thiserror::Error)]
pub enum Unsupported {
    /// The model's IR version or default-domain opset is outside what Kenosis reads.
    #[error("{what} {found} is not supported (supported: {min} to {max})")]
    Version {
        /// Which version.
        what: Versioned,
        /// The model's.
        found: i64,
        /// Lowest supported.
        min: i64,
        /// Highest supported.
        max: i64,
    },
    /// The model imports no default-domain opset, so its operators have no meaning.
    #[error("the model imports no default-domain (ai.onnx) opset")]
    NoDefaultOpset,
    /// The model has no graph.
    #[error("the model has no graph")]
    NoGraph,
    /// The model's graph has no nodes.
    #[error("the graph has no nodes")]
    EmptyGraph,
    /// The model already holds quantization operators; quantizing again would stack a
    /// second rounding on the first.
    #[error("the model is already quantized ({count} quantization nodes, e.g. {example}); give Kenosis the FP32 original")]
    AlreadyQuantized {
        /// How many quantization nodes.
        count: usize,
        /// The operator of the first one.
        example: String,
    },
    /// The graph breaks ONNX's structural rules.
    #[error(transparent)]
    Malformed(#[from] Malformed),
    /// A tensor's payload cannot be read as declared.
    #[error(transparent)]
    Tensor(#[from] BadTensor),
    /// An operator cannot be upgraded or folded as written.
    #[error(transparent)]
    Operator(#[from] BadOperator),
    /// A fidelity target is set but the FP32 model cannot run in ONNX Runtime.
    #[error("the fidelity target {target} cannot be checked: node `{}` ({} of domain `{domain}`) needs a kernel ONNX Runtime does not have, so the FP32 model cannot run", .node.name, .node.op_type)]
    TargetUncheckable {
        /// The target as the options state it (`Debug` form).
        target: String,
        /// The node without a kernel.
        node: NodeRef,
        /// Its operator domain.
        domain: String,
    },
    /// A fidelity target is set but no output (nor a tensor computing one) is float.
    #[error("neither the model's outputs nor the tensors computing them are float: nothing to compare with FP32")]
    NoFloatOutput,
    /// The quantized model cannot be written as one ONNX file.
    #[error("the INT8 model would be {bytes} bytes, over protobuf's 2 GB limit for one ONNX file")]
    TooLarge {
        /// Its encoded size.
        bytes: usize,
    },
    /// The offline entry point reads no external data files.
    #[error("external data is not read offline")]
    ExternalOffline,
}

/// Which version [`Unsupported::Version`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versioned {
    /// `ModelProto.ir_version`.
    Ir,
    /// The default-domain opset import.
    Opset,
}

impl std::fmt::Display for Versioned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Versioned::Ir => "IR version",
            Versioned::Opset => "opset",
        })
    }
}

/// An operator that cannot be upgraded to opset 13, or folded, as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadOperator {
    /// An operator (or a form of one) that ONNX removed and that has no opset-13 equivalent.
    #[error("{} node `{}` {what}", .node.op_type, .node.name)]
    NotUpgradable {
        /// The node.
        node: NodeRef,
        /// What it uses, and why that cannot be converted.
        what: Removed,
    },
    /// A node lacks an attribute or input its conversion needs.
    #[error("{} node `{}` has no {what}", .node.op_type, .node.name)]
    Missing {
        /// The node.
        node: NodeRef,
        /// The attribute or input, e.g. `scales input`.
        what: &'static str,
    },
    /// A Constant node without a value attribute.
    #[error("Constant node producing `{output}` has no value")]
    ConstantWithoutValue {
        /// The tensor it produces.
        output: String,
    },
    /// A Constant node whose value attribute Kenosis does not read (sparse, string).
    #[error("Constant node producing `{output}` uses attribute `{attribute}`, which Kenosis does not support")]
    ConstantAttribute {
        /// The tensor it produces.
        output: String,
        /// The attribute.
        attribute: String,
    },
    /// A BatchNormalization folded into a convolution has parameters of another length than
    /// the convolution's output channels.
    #[error("BatchNormalization `{node}` has parameters that do not match the Conv's {channels} output channels")]
    BatchNormChannels {
        /// The BatchNormalization.
        node: String,
        /// The convolution's output channels.
        channels: usize,
    },
    /// A convolution's bias has another length than its output channels.
    #[error("Conv `{node}` has {found} bias values for its {channels} output channels")]
    BiasChannels {
        /// The convolution.
        node: String,
        /// Bias values it holds.
        found: usize,
        /// Its output channels.
        channels: usize,
    },
}

/// What [`BadOperator::NotUpgradable`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// An operator with no opset-13 equivalent.
    Operator,
    /// BatchNormalization's `spatial=0`, removed in opset 9.
    SpatialBatchNorm,
    /// Scan before opset 9, whose batch axis cannot be converted.
    BatchedScan,
}

impl std::fmt::Display for Removed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Removed::Operator => {
                "uses an operator removed from ONNX; it has no opset-13 equivalent"
            }
            Removed::SpatialBatchNorm => "uses spatial=0, which opset 9 removed",
            Removed::BatchedScan => {
                "comes from before opset 9, when Scan had a batch axis that cannot be converted"
            }
        })
    }
}

/// Why an `.npy` file is not a calibration sample for an input: the reason of
/// [`Error::Calibration`] for that file.
#[derive(Debug, thiserror::Error)]
pub enum BadSample {
    /// The file does not hold data of the input's element type.
    #[error("input `{input}` expects {npy} data: {source}")]
    Data {
        /// The input.
        input: String,
        /// The `.npy` dtype it takes, e.g. `float32 (<f4)`.
        npy: &'static str,
        /// What is wrong with the file.
        #[source]
        source: BadNpy,
    },
    /// The input's element type is not one Kenosis calibrates.
    #[error("input `{input}` has element type {}; Kenosis calibrates float32, int64, int32, int16, int8, uint8 and bool inputs", .elem_type)]
    ElementType {
        /// The input.
        input: String,
        /// Its declared element type.
        elem_type: crate::onnx::ElemType,
    },
    /// The sample's shape does not fit the input's declared dims.
    #[error("input `{input}` expects shape [{}] (batch dimension optional), found {found:?}", .expected.iter().map(|d| d.map_or("?".to_owned(), |v| v.to_string())).collect::<Vec<_>>().join(", "))]
    Shape {
        /// The input.
        input: String,
        /// Its declared dims (`None` where symbolic).
        expected: Vec<Option<i64>>,
        /// The sample's shape.
        found: Vec<usize>,
    },
    /// The elements cannot be viewed in the input's shape.
    #[error("cannot view shape {shape:?} as {full:?}: {source}")]
    Reshape {
        /// The sample's shape.
        shape: Vec<usize>,
        /// The input's shape.
        full: Vec<usize>,
        /// ndarray's reason.
        #[source]
        source: ndarray::ShapeError,
    },
}

/// Why bytes are not an `.npy` file of the expected element type. The format is NumPy's
/// (`numpy.lib.format`, NEP 1): a magic string, a version, a header length, then a Python
/// dict literal with keys `'descr'`, `'fortran_order'` and `'shape'`, then the data.
#[derive(Debug, thiserror::Error)]
pub enum BadNpy {
    /// No `\x93NUMPY` magic string.
    #[error("not an .npy file (no \\x93NUMPY magic string)")]
    NotNpy,
    /// A format version other than 1.0, 2.0 or 3.0.
    #[error(".npy format version {major}.{minor} is not supported (supported: 1.0, 2.0 and 3.0)")]
    Version {
        /// The major version byte.
        major: u8,
        /// The minor version byte.
        minor: u8,
    },
    /// The file ends inside the version or the header length field.
    #[error("the .npy header is truncated")]
    TruncatedHeader,
    /// The header runs past the end of the file.
    #[error(
        "the .npy header declares {header_len} header bytes but the file has {file_len} bytes"
    )]
    HeaderPastEnd {
        /// The header length the file declares.
        header_len: usize,
        /// The file's length.
        file_len: usize,
    },
    /// The header is not a Python dict literal.
    #[error("the .npy header is not a Python dict literal: expected {expected} at byte {at} of the header, found {found}")]
    HeaderSyntax {
        /// Offset in the header text (after the length field).
        at: usize,
        /// What the format allows there.
        expected: &'static str,
        /// What is there (an excerpt), or `the end of the header`.
        found: String,
    },
    /// The header dict has a key other than `'descr'`, `'fortran_order'` and `'shape'`.
    #[error("the .npy header has unknown key {0}; it takes 'descr', 'fortran_order' and 'shape'")]
    UnknownKey(String),
    /// The header dict lacks one of its three keys.
    #[error("the .npy header has no '{0}' key")]
    MissingKey(&'static str),
    /// The header dict gives a key twice.
    #[error("the .npy header gives '{0}' twice")]
    DuplicateKey(&'static str),
    /// A key's value is not of the kind the format specifies.
    #[error("the .npy header's '{key}' is {found}, not {expected}")]
    Value {
        /// The key.
        key: &'static str,
        /// What the format specifies for it.
        expected: &'static str,
        /// What the header gives (an excerpt).
        found: String,
    },
    /// A dimension of `'shape'` is negative.
    #[error("the .npy header's shape has dimension {0}, which is negative")]
    NegativeDim(String),
    /// A dimension of `'shape'` does not fit in `usize`.
    #[error("the .npy header's shape has dimension {0}, more than usize::MAX")]
    DimTooLarge(String),
    /// The header's `'descr'` is another dtype than the one expected.
    #[error("the .npy header declares dtype {0}")]
    Dtype(String),
    /// The header declares another amount of data than follows it.
    #[error("the .npy header declares shape {shape:?} ({} bytes of data) but the file holds {held} bytes after it", .declared.map_or("more than usize::MAX".to_owned(), |d| d.to_string()))]
    Size {
        /// The declared shape.
        shape: Vec<usize>,
        /// Bytes it declares; `None` past `usize::MAX`.
        declared: Option<usize>,
        /// Bytes after the header.
        held: usize,
    },
    /// A shape with a zero dimension whose other dimensions multiply past `isize::MAX`
    /// bytes: no array can have it.
    #[error("the .npy header declares shape {0:?}, too large for an array")]
    ShapeOverflow(Vec<usize>),
    /// A bool (`|b1`) element is neither 0 nor 1.
    #[error("the .npy data has byte {byte:#04x} at element {index}, which is not a bool (0 or 1)")]
    Bool {
        /// The element's index in file order.
        index: usize,
        /// Its byte.
        byte: u8,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, op_type: &str) -> NodeRef {
        NodeRef {
            name: name.into(),
            op_type: op_type.into(),
        }
    }

    #[test]
    fn reasons_read_as_one_sentence_each() {
        let cases: [(Unsupported, &str); 4] = [
            (
                Malformed::WrittenTwice {
                    tensor: "t".into(),
                    first: node("a", "Relu"),
                    second: node("b", "Add"),
                }
                .into(),
                "tensor `t` is written by node `a` (Relu) and again by node `b` (Add); an ONNX \
                 graph assigns each name once",
            ),
            (
                Unsupported::Version {
                    what: Versioned::Opset,
                    found: 99,
                    min: 7,
                    max: 23,
                },
                "opset 99 is not supported (supported: 7 to 23)",
            ),
            (
                BadOperator::NotUpgradable {
                    node: node("s", "Scan"),
                    what: Removed::BatchedScan,
                }
                .into(),
                "Scan node `s` comes from before opset 9, when Scan had a batch axis that cannot \
                 be converted",
            ),
            (
                BadOperator::Missing {
                    node: node("u", "Upsample"),
                    what: "scales input",
                }
                .into(),
                "Upsample node `u` has no scales input",
            ),
        ];
        for (reason, text) in cases {
            assert_eq!(reason.to_string(), text);
        }
    }

    #[test]
    fn sample_reasons_name_the_input_and_the_file_problem() {
        let not_npy = BadSample::Data {
            input: "x".into(),
            npy: "float32 (<f4)",
            source: BadNpy::NotNpy,
        };
        assert_eq!(
            not_npy.to_string(),
            r"input `x` expects float32 (<f4) data: not an .npy file (no \x93NUMPY magic string)"
        );
        let shape = BadSample::Shape {
            input: "x".into(),
            expected: vec![None, Some(3)],
            found: vec![2, 4],
        };
        assert_eq!(
            shape.to_string(),
            "input `x` expects shape [?, 3] (batch dimension optional), found [2, 4]"
        );
    }
}
