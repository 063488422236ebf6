//! The one error type every fallible `kenosis-build` function returns.

use std::path::PathBuf;

/// Everything that can go wrong while quantizing a model from a build script.
///
/// Every variant names the file it is about, so that a failed `cargo build` tells the user
/// which model or calibration file to look at.
#[derive(Debug, thiserror::Error)]
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
    /// (see [`calibration_images`](crate::calibration_images)).
    #[error("{path}: bad calibration data: {reason}")]
    Calibration {
        /// The calibration file or folder.
        path: PathBuf,
        /// Which input and what mismatched (shape, dtype, count).
        reason: String,
    },
    /// ONNX Runtime refused the model or failed while running it.
    #[error("{path}: ONNX Runtime: {message}")]
    Runtime {
        /// The model file being calibrated or verified.
        path: PathBuf,
        /// ONNX Runtime's message.
        message: String,
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
    /// The build configuration itself is wrong (e.g. no model registered).
    #[error("kenosis-build configuration: {0}")]
    Config(String),
}

/// Shorthand for `Result<T, kenosis_build::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
