//! The numeric kernels of Kenosis's quantizer (crate `kenosis-build`, feature `quantizer`):
//! streaming calibration statistics, scale and zero-point arithmetic, weight quantization,
//! input-patch second moments, GPTQ rounding, synthetic calibration images, FLOAT payload
//! decoding and the fidelity judge's comparisons. Plain functions over slices and arrays,
//! with no ONNX types.
//!
//! They live apart from `kenosis-build` for its build cost. The `kenosis` quantizer binary is
//! compiled once per machine by a nested `cargo install` that optimizes only the crates its
//! hot loops run in and compiles the rest, `kenosis-build` included, at opt-level 0
//! (`docs/design.md`, "The build script and the quantizer"). Every loop that runs per value
//! of an activation or a weight belongs here, in non-generic code (a generic function is
//! compiled, and optimized or not, in the crate that instantiates it).
//!
//! An internal crate of Kenosis: its API follows `kenosis-build`'s needs and changes without
//! notice. The kernels are behind the default feature `kernels`; without it the crate is empty
//! and only hands its source folder to `kenosis-build`'s build script, which hashes it into
//! the quantizer's identity and every cache key.

#[cfg(feature = "kernels")]
pub mod agreement;
#[cfg(feature = "kernels")]
pub mod bytes;
#[cfg(feature = "kernels")]
pub mod gptq;
#[cfg(feature = "kernels")]
pub mod gram;
#[cfg(feature = "kernels")]
pub mod params;
#[cfg(feature = "kernels")]
pub mod stats;
#[cfg(feature = "kernels")]
pub mod synthetic;
#[cfg(feature = "kernels")]
pub mod weights;
