//! The one error type every fallible function of Kenosis's build path returns: the front
//! end's (`kenosis-build`) and the quantizer's (`kenosis-quantize`), which a build script
//! reads alike, in process or from the `kenosis` binary.
//!
//! The quantizer's stages give typed reasons first (`kenosis_quantize`'s `error` module);
//! its pipeline turns them into [`Error::Unsupported`] or [`Error::Calibration`], whose
//! `reason` is their `Display` text, so that they can change with the stages without
//! changing this type.

use std::path::PathBuf;

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
    /// A device profile (`device_profile`, `KENOSIS_DEVICE_PROFILE`) cannot be used: not a
    /// profile, another format, or measured on another CPU class than the build targets.
    #[error("{path}: device profile: {reason}")]
    DeviceProfile {
        /// The profile.
        path: PathBuf,
        /// What is wrong.
        reason: String,
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

/// Shorthand for `Result<T, kenosis_request::Error>`.
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
    /// [`Error::Io`] for the file or folder `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// [`Error::Runtime`] for the model at `path`.
    pub fn runtime(path: impl Into<PathBuf>, source: impl Into<OrtFailure>) -> Self {
        Error::Runtime {
            path: path.into(),
            source: source.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
