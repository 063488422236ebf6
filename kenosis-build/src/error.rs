//! The one error type every fallible `kenosis-build` function returns, and the typed
//! reasons the stages give before the pipeline names the file.
//!
//! The reason enums ([`Unsupported`] and the groups it wraps, [`BadSample`]) are internal.
//! The pipeline turns them into [`Error::Unsupported`] or [`Error::Calibration`], whose
//! `reason` is their `Display` text, so that they can change with the stages without
//! changing the public API. Leaf modules define the group of what they check
//! (`BadTensor` in `onnx::tensor`, `Malformed` in `graph`, both the quantizer's) and need
//! nothing from here.

use std::path::PathBuf;

#[cfg(feature = "quantizer")]
pub use crate::graph::Malformed;
#[cfg(feature = "quantizer")]
pub use crate::onnx::tensor::BadTensor;
pub use crate::onnx::NodeRef;

/// Everything that can go wrong while quantizing a model from a build script.
///
/// Every variant names the file it is about, so that a failed `cargo build` tells the user
/// which model or calibration file to look at.
///
/// `Debug` prints the same sentence as `Display`, then the causes its `source()` chain holds
/// that the sentence does not already quote, as `anyhow` prints them; so `.expect("kenosis:
/// quantization failed")` in a build script prints e.g. `kenosis: quantization failed:
/// /…/models/x.onnx: not a valid ONNX model: the file is empty`, naming the file once.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The model file is not a decodable ONNX `ModelProto`.
    #[error("{path}: not a valid ONNX model: {reason}")]
    InvalidModel {
        /// The model file.
        path: PathBuf,
        /// What is wrong, e.g. the protobuf decoder's message.
        reason: String,
    },
    /// The model decodes but uses something Kenosis does not support.
    #[error("{path}: unsupported model: {reason}")]
    Unsupported {
        /// The model file.
        path: PathBuf,
        /// What is unsupported and, where possible, what to do about it.
        reason: String,
    },
    /// Calibration data does not fit the model's inputs, or could not be made from an image
    /// (see `calibration_images`, feature `images`).
    #[error("{path}: bad calibration data: {reason}")]
    Calibration {
        /// The calibration file or folder.
        path: PathBuf,
        /// Which input and what mismatched (shape, dtype, count).
        reason: String,
    },
    /// ONNX Runtime refused the model or failed while running it.
    #[error("{path}: ONNX Runtime: {source}")]
    Runtime {
        /// The model file being calibrated or verified.
        path: PathBuf,
        /// ONNX Runtime's error: its code and message.
        #[source]
        source: OrtFailure,
    },
    /// An ONNX Runtime run returned no value for a tensor Kenosis asked it for.
    #[error("{path}: ONNX Runtime: observed tensor `{tensor}` missing from outputs")]
    MissingOutput {
        /// The model file being calibrated or verified.
        path: PathBuf,
        /// The tensor Kenosis exposed as an output.
        tensor: String,
    },
    /// The INT8 model misses the requested fidelity target even with its most sensitive
    /// ops in FP32.
    #[error("{path}: fidelity target not met: {report}")]
    FidelityTarget {
        /// The model file.
        path: PathBuf,
        /// The measured numbers and the ops tried.
        report: String,
    },
    /// The INT8 model is slower than the `min_speedup` floor (above 1) asks.
    #[error("{path}: speed target not met: {report}")]
    SpeedTarget {
        /// The model file.
        path: PathBuf,
        /// The measured latencies and the floor.
        report: String,
    },
    /// The INT8 model's tensors would take more bytes than the whole FP32 model (its file
    /// and any external data files): the symptom of a weight stored once per reader instead
    /// of once (issue 54). The build refuses rather than ship a model larger than FP32; see
    /// `quantize::size` for the invariant.
    #[error("{path}: the INT8 model would be {size_int8} bytes, {tensor_bytes} of them tensor values, more than the FP32 model's {size_fp32} bytes; refused rather than shipping a model larger than FP32 (a weight quantized once per reader would do this: please report it)")]
    LargerThanFp32 {
        /// The model file.
        path: PathBuf,
        /// Bytes of the FP32 model: its file, plus its external data files when it has any.
        size_fp32: usize,
        /// Bytes the encoded INT8 model would take.
        size_int8: usize,
        /// Bytes of the values of the INT8 model's initializers.
        tensor_bytes: usize,
    },
    /// A required environment variable (set by cargo for build scripts) is missing.
    #[error("environment variable {name} is not set; kenosis_build::Config::compile must run inside a build script (or set it explicitly)")]
    MissingEnv {
        /// The variable's name.
        name: &'static str,
    },
    /// An `include_quantized!` call found by discovery has arguments that do not parse.
    #[error("{}:{line}: {message}", .file.display())]
    InvalidCall {
        /// The source file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong (unknown option, bad value, ...).
        message: String,
    },
    /// Quantizing the model of a discovered `include_quantized!` call failed.
    #[error("{}:{line}: include_quantized!({model:?}): {source}", .file.display())]
    CallSite {
        /// The source file of the call.
        file: PathBuf,
        /// 1-based line of the call.
        line: usize,
        /// The model path as written.
        model: String,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },
    /// A path the build would print in a `cargo:` line (a model, its external data, a
    /// calibration folder or file, a discovered source file) holds a line break or is not
    /// UTF-8. Refused, not escaped: cargo has no escaping, and a line break would let the file
    /// name write build-script directives of its own (see `docs/cache-trust.md`).
    #[error("{path:?}: a file name holding a line break (\\n or \\r) or invalid UTF-8 is refused: printed to cargo, it could inject build-script directives; rename the file")]
    UnsafePath {
        /// The path, as found (printed escaped).
        path: PathBuf,
    },
    /// The build configuration itself is wrong (e.g. no model registered).
    #[error("kenosis-build configuration: {0}")]
    Config(String),
    /// The `kenosis` quantizer a build script runs failed on a model; `message` is its own
    /// error message (which names the file and the problem).
    #[error("{message}")]
    Quantizer {
        /// The model.
        path: PathBuf,
        /// The quantizer's message.
        message: String,
    },
    /// No `kenosis` quantizer of this version could be found or built (see the README,
    /// "Install", and docs/troubleshooting.md).
    #[error("the kenosis quantizer {identity} is unavailable: {reason}")]
    QuantizerUnavailable {
        /// The version and source hash the build needs.
        identity: String,
        /// What went wrong, with the nested build's log where there is one.
        reason: String,
    },
}

/// An ONNX Runtime error as `ort` reported it: its code and message, copied out of the
/// `ort::Error`. The `ort::Error` itself is not kept: dropping it calls into ONNX Runtime (it
/// releases the C API's status object), so an error type holding one would link ONNX
/// Runtime into every program that handles a kenosis-build error, and a build script built
/// without it (docs.rs, see `Config::compile`) could not link. `Debug` prints the message,
/// then the code in parentheses.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OrtFailure {
    /// `ort`'s error code (`ort::ErrorCode`'s variant name).
    pub code: String,
    /// ONNX Runtime's message.
    pub message: String,
}

#[cfg(feature = "quantizer")]
impl<R> From<ort::Error<R>> for OrtFailure {
    fn from(e: ort::Error<R>) -> Self {
        Self::from(&e)
    }
}

#[cfg(feature = "quantizer")]
impl<R> From<&ort::Error<R>> for OrtFailure {
    fn from(e: &ort::Error<R>) -> Self {
        Self {
            code: format!("{:?}", e.code()),
            message: e.message().to_owned(),
        }
    }
}

impl std::fmt::Debug for OrtFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::fmt::Debug for Error {
    /// The `Display` sentence, then `Caused by:` and the causes of the `source()` chain that
    /// it does not quote already (one per line, numbered when there are several), as
    /// `anyhow`'s `Debug` prints an error.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let message = self.to_string();
        f.write_str(&message)?;
        let mut causes = Vec::new();
        let mut next = std::error::Error::source(self);
        while let Some(cause) = next {
            let text = cause.to_string();
            if !message.contains(&text) {
                causes.push(text);
            }
            next = cause.source();
        }
        match causes.as_slice() {
            [] => Ok(()),
            [cause] => write!(f, "\n\nCaused by:\n    {cause}"),
            causes => {
                f.write_str("\n\nCaused by:")?;
                causes
                    .iter()
                    .enumerate()
                    .try_for_each(|(i, cause)| write!(f, "\n    {i}: {cause}"))
            }
        }
    }
}

/// Shorthand for `Result<T, kenosis_build::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<crate::onnx::InvalidModel> for Error {
    fn from(e: crate::onnx::InvalidModel) -> Self {
        Error::InvalidModel {
            path: e.path,
            reason: e.reason,
        }
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// [`Error::Unsupported`] for the model at `path`, with `reason`'s text.
    pub(crate) fn unsupported(path: impl Into<PathBuf>, reason: impl Into<Unsupported>) -> Self {
        Error::Unsupported {
            path: path.into(),
            reason: reason.into().to_string(),
        }
    }

    /// [`Error::Runtime`] for the model at `path`.
    pub(crate) fn runtime(path: impl Into<PathBuf>, source: impl Into<OrtFailure>) -> Self {
        Error::Runtime {
            path: path.into(),
            source: source.into(),
        }
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
    #[cfg(feature = "quantizer")]
    #[error(transparent)]
    Malformed(#[from] Malformed),
    /// A tensor's payload cannot be read as declared.
    #[cfg(feature = "quantizer")]
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
    /// A path `include_quantized!` would have to embed is not UTF-8.
    #[error("the path {} is not valid UTF-8, so include_quantized! could not embed it; move the model (or the target directory) to a UTF-8 path", .path.display())]
    NonUtf8Path {
        /// The path.
        path: PathBuf,
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
    #[cfg(feature = "quantizer")]
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
    #[cfg(feature = "quantizer")]
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

    /// An error with a cause of its own, as an I/O error can wrap one.
    #[derive(Debug, thiserror::Error)]
    #[error("the lock is held")]
    struct Held(#[source] std::io::Error);

    #[test]
    fn debug_is_the_sentence_then_the_causes_it_does_not_quote() {
        let missing = || Error::io("m/x.onnx", std::io::ErrorKind::NotFound.into());
        assert_eq!(format!("{:?}", missing()), "m/x.onnx: entity not found");
        // The path once: `Quantizer` keeps it as a field, but its message names it already.
        let quantizer = Error::Quantizer {
            path: "/p/m.onnx".into(),
            message: "/p/m.onnx: unsupported model: the graph has no nodes".into(),
        };
        assert_eq!(
            format!("{quantizer:?}"),
            "/p/m.onnx: unsupported model: the graph has no nodes"
        );
        let call = Error::CallSite {
            file: "src/main.rs".into(),
            line: 3,
            model: "x.onnx".into(),
            source: Box::new(missing()),
        };
        assert_eq!(
            format!("{call:?}"),
            "src/main.rs:3: include_quantized!(\"x.onnx\"): m/x.onnx: entity not found"
        );
        // A cause the sentence does not quote follows it, as anyhow prints one.
        let denied = std::io::Error::other(Held(std::io::ErrorKind::PermissionDenied.into()));
        assert_eq!(
            format!("{:?}", Error::io("cache", denied)),
            "cache: the lock is held\n\nCaused by:\n    permission denied"
        );
        let failure = OrtFailure {
            code: "InvalidGraph".into(),
            message: "no kernel for Foo".into(),
        };
        assert_eq!(format!("{failure:?}"), "no kernel for Foo (InvalidGraph)");
        assert_eq!(
            format!("{:?}", Error::runtime("m.onnx", failure)),
            "m.onnx: ONNX Runtime: no kernel for Foo"
        );
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
