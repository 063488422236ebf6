//! The numeric kernels of Kenosis's quantizer (crate `kenosis-build`, feature `quantizer`):
//! streaming calibration statistics, scale and zero-point arithmetic, weight quantization,
//! input-patch second moments, GPTQ rounding, synthetic calibration images and FLOAT payload
//! decoding. Plain functions over slices and arrays, with no ONNX types.
//!
//! They live apart from `kenosis-build` for its build cost. The `kenosis` quantizer binary is
//! compiled once per machine by a nested `cargo install` that optimizes only the crates its
//! hot loops run in and compiles the rest, `kenosis-build` included, at opt-level 0
//! (`docs/design.md`, "The build script and the quantizer"). Every loop that runs per value
//! of an activation or a weight belongs here, in non-generic code (a generic function is
//! compiled, and optimized or not, in the crate that instantiates it).
//!
//! An internal crate of Kenosis: its API follows `kenosis-build`'s needs and changes without
//! notice.

pub mod bytes;
pub mod gptq;
pub mod gram;
pub mod params;
pub mod stats;
pub mod synthetic;
pub mod weights;
