// Non-test code states why each unwrap, expect or panic cannot fire, where it stands.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
//! Run ONNX models that Kenosis quantized to INT8 at build time and embedded in the binary.
//!
//! A crate's `build.rs` calls `kenosis_build::discover()`, which finds every
//! [`include_quantized!`] call of the crate, quantizes each model to an INT8 QDQ model in
//! `OUT_DIR` with the options written at the call site, and records them in a manifest. In
//! the crate's code, [`include_quantized!`] embeds the quantized model (`include_bytes!`)
//! together with its input/output metadata and yields a wrapper with a typed `run` that derefs
//! to a `&'static` [`EmbeddedModel`]:
//!
//! ```ignore
//! // build.rs
//! fn main() {
//!     kenosis_build::discover().expect("kenosis: quantization failed");
//! }
//! ```
//!
//! ```ignore
//! // src/main.rs
//! kenosis_runtime::include_quantized!(struct Net = "models/net.onnx", method = "mse");
//!
//! fn main() -> Result<(), kenosis_runtime::Error> {
//!     let x = ndarray::Array4::<f32>::zeros((1, 3, 224, 224));
//!     let logits: ndarray::Array2<f32> = Net.run(x.view())?;   // typed from the manifest
//!     println!("{logits}");
//!     let outputs = Net.untyped().run([x.view()])?;            // untyped
//!     Ok(())
//! }
//! ```
//!
//! A `static` of the untyped model: `static NET: &EmbeddedModel =
//! include_quantized!("models/net.onnx").untyped();`.
//!
//! [`EmbeddedModel::from_static_bytes`] wraps any other ONNX model compiled into the binary,
//! for example the FP32 original, to compare it with the quantized one.
//!
//! Models run on the CPU with ONNX Runtime through the [`ort`] crate; sessions are created
//! from memory on first use, under one process-wide environment (see [`set_environment`]).

#![warn(missing_docs)]

#[cfg(feature = "bundled-ort")]
mod bundled;
mod error;
mod io;
#[cfg(all(
    any(feature = "bundled-ort", test),
    any(target_os = "linux", target_os = "android")
))]
mod memfd;
mod model;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod pages;
#[cfg(all(
    any(feature = "bundled-ort", test),
    any(target_os = "linux", target_os = "android")
))]
mod stored;
mod typed;

pub use kenosis_macros::include_quantized;

pub use error::Error;
pub use io::{Input, Output, Outputs, TensorInfo};
pub use kenosis_manifest::ElementType;
pub use model::{default_intra_threads, set_environment, EmbeddedModel, MAX_DEFAULT_INTRA_THREADS};

/// The `ndarray` crate the typed `run` of [`include_quantized!`] wrappers takes and returns
/// arrays of (the same version as `kenosis-runtime`'s own).
pub use ndarray;

/// Used by the code [`include_quantized!`] generates. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::typed::{output, OutputElement};
}

/// Starts building an ONNX Runtime environment, for [`set_environment`]: use it instead of
/// [`ort::init`].
///
/// With the `bundled-ort` feature this first loads the ONNX Runtime library embedded in the
/// binary (the first call only); without it, it is [`ort::init`].
///
/// # Errors
/// [`Error::Environment`] when the bundled library cannot be loaded (see the feature's
/// documentation in docs/cross-compiling.md); never without `bundled-ort`.
pub fn ort_init() -> Result<ort::environment::EnvironmentBuilder, Error> {
    #[cfg(feature = "bundled-ort")]
    {
        static LOADED: std::sync::OnceLock<Result<(), Error>> = std::sync::OnceLock::new();
        LOADED.get_or_init(bundled::load).clone()?;
    }
    Ok(ort::init())
}

/// The `ort` crate this runtime is built on, for [`set_environment`] and
/// [`EmbeddedModel::with_session`].
pub use ort;

#[cfg(test)]
mod tests;
