//! Samples for calibration and comparison: what a model's inputs are, and samples made from
//! `.npy` files, images, text or synthetic data, as a build makes them.
//!
//! A sample holds one [`SampleValue`] per input of [`input_specs`], in that order. Pass
//! samples made here to [`crate::quantize_decoded`] as [`crate::Calibration::Data`], or to
//! [`crate::compare`].

pub use crate::calibrate::data::input_specs;
#[cfg(feature = "images")]
pub use crate::calibrate::images::samples as from_images;
#[cfg(feature = "text")]
pub use crate::calibrate::text::samples as from_text;
pub use crate::calibrate::{CalibrationData, InputSpec, SampleValue};
pub use crate::pipeline::{calibration_data, ImageRangeLabels};
