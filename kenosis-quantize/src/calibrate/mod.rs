//! Calibration: input samples, running the FP32 model in ONNX Runtime with the planned
//! tensors exposed, and streaming statistics over them.

pub mod activation;
pub mod data;
pub mod gram;
pub mod image_range;
#[cfg(feature = "images")]
pub mod images;
pub mod npy;
pub mod range;
pub mod rules;
pub mod runnable;
pub mod session;
pub mod shapes;
pub mod synthetic;
#[cfg(feature = "text")]
pub mod text;

// The streaming statistics run per activation value: they are `kenosis-numerics`'s, which
// the quantizer binary optimizes (see that crate's docs).
pub use kenosis_numerics::stats;

pub use data::{CalibrationData, InputSpec, SampleValue};
pub use range::Method;
