//! Run ONNX models that Kenosis quantized to INT8 at build time and embedded in the binary.
//!
//! A crate's `build.rs` registers FP32 ONNX models with `kenosis-build`, which quantizes them
//! to INT8 QDQ models in `OUT_DIR` and records them in a manifest. In the crate's code,
//! [`include_quantized!`] embeds the quantized model (`include_bytes!`) together with its
//! input/output metadata and yields a `&'static` [`EmbeddedModel`]:
//!
//! ```ignore
//! // build.rs
//! fn main() {
//!     kenosis_build::Config::new()
//!         .model("models/net.onnx")
//!         .compile()
//!         .expect("kenosis: quantization failed");
//! }
//! ```
//!
//! ```ignore
//! // src/main.rs
//! static NET: &kenosis_runtime::EmbeddedModel = kenosis_runtime::include_quantized!("models/net.onnx");
//!
//! fn main() -> Result<(), kenosis_runtime::Error> {
//!     let x = ndarray::Array4::<f32>::zeros((1, 3, 224, 224));
//!     let outputs = NET.run([x.view()])?;
//!     let logits = outputs[0].as_f32().expect("f32 logits");
//!     println!("{logits}");
//!     Ok(())
//! }
//! ```
//!
//! [`EmbeddedModel::from_static_bytes`] wraps any other ONNX model compiled into the binary,
//! for example the FP32 original, to compare it with the quantized one.
//!
//! Models run on the CPU with ONNX Runtime through the [`ort`] crate; sessions are created
//! from memory on first use, under one process-wide environment (see [`set_environment`]).

#![warn(missing_docs)]

mod error;
mod io;
mod model;

pub use kenosis_macros::include_quantized;

pub use error::Error;
pub use io::{Input, Output, Outputs, TensorInfo};
pub use kenosis_manifest::ElementType;
pub use model::{set_environment, EmbeddedModel};

/// The `ort` crate this runtime is built on, for [`set_environment`] and
/// [`EmbeddedModel::with_session`].
pub use ort;

#[cfg(test)]
mod tests;
