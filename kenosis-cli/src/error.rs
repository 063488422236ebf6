//! The command's errors: Kenosis's own, each naming its file, and the command line's.

use std::path::PathBuf;

/// Why a `kenosis` command failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading, decoding, quantizing or running a model failed (the message names the file).
    #[error(transparent)]
    Kenosis(#[from] kenosis_quantize::Error),
    /// A model cannot be cast to 16-bit weights (a weight out of range names its tensor).
    #[error(transparent)]
    Cast(#[from] kenosis_quantize::cast::CastError),
    /// An option argument does not parse as `include_quantized!` option syntax.
    #[error("option `{arg}`: {message}")]
    Option {
        /// The argument as given.
        arg: String,
        /// The parser's message.
        message: String,
    },
    /// An output file could not be written.
    #[error("{path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `cargo metadata` cannot describe the package (`kenosis report`).
    #[error("cargo metadata: {0}")]
    CargoMetadata(#[from] kenosis_build::cargo::MetadataFailure),
    /// `--images` or `--text` cannot make samples: the folder, file, tokenizer or model
    /// named, and why.
    #[error("{path}: {reason}")]
    Input {
        /// The folder, image or text file, tokenizer or model.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Two models cannot be compared (different inputs, or no float output).
    #[error("{0}")]
    Mismatch(String),
}

/// Shorthand for the command's results.
pub type Result<T> = std::result::Result<T, Error>;
