// Non-test code states why each unwrap, expect or panic cannot fire, where it stands.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
//! Kenosis's quantizer: FP32 ONNX models to static INT8 QDQ models, calibrated in ONNX
//! Runtime, as a library.
//!
//! ```no_run
//! use std::path::Path;
//!
//! use kenosis_quantize::{quantize_file, Calibration, QuantizeOptions};
//!
//! let options = QuantizeOptions::default(); // every option at its default, for this machine
//! let calibration = Calibration::NpyDir("calibration".into()); // or Calibration::Synthetic
//! let quantized = quantize_file(Path::new("models/net.onnx"), &calibration, &options)?;
//! std::fs::write("net.int8.onnx", &quantized.bytes).map_err(|e| kenosis_quantize::Error::io("net.int8.onnx", e))?;
//! println!("{}", quantized.report.summary_line());
//! # Ok::<(), kenosis_quantize::Error>(())
//! ```
//!
//! A model is decoded, normalized (Constant → initializer, Dropout removed, opset raised to
//! 13, BatchNormalization folded), calibrated in ONNX Runtime, and rewritten with
//! QuantizeLinear/DequantizeLinear pairs placed so that ONNX Runtime fuses the quantized ops
//! into its integer kernels (QLinearConv, QGemm, ...). The [`Report`] says what was done and
//! how the INT8 model compares with FP32: fidelity on held-out samples, speed on this
//! machine.
//!
//! `kenosis-build` runs this crate from a build script (through the `kenosis` binary of crate
//! `kenosis-cli`, or linked in with its `quantizer` feature); the options are those of
//! `include_quantized!`, resolved ([`QuantizeOptions`]).
//!
//! ONNX Runtime is linked through `ort`: the default `download-ort` feature downloads it
//! where `ORT_LIB_PATH` is unset; offline builds turn default features off and set
//! `ORT_LIB_PATH` (see the Kenosis README).
//!
//! Beyond quantizing, the public modules serve tools of their own as they serve the `kenosis`
//! command: [`model`] (ONNX's types, decoding), [`samples`] (inputs made from `.npy` files,
//! images or text), [`compare`] (a model against its FP32 original: agreement, the ops
//! losing fidelity, latency) and [`cast`] (16-bit weights).

// Public items are documented; hidden modules are not part of the API.
#![warn(missing_docs)]

// The modules, in layering order: leaves, then the stages of one model's way through the
// crate, each using only those before it (`cargo xtask layers` checks it), then `serve`,
// which answers a build's request, then the public modules that re-export what users need.
// The stages are public but hidden from the docs, for Kenosis's tests, benchmark and fuzz
// targets: not a public API, anything they hold changes without notice (the `kenosis`
// command uses only the public API; `cargo xtask layers` checks that too). One group each,
// so that rustfmt keeps this order.

// Leaves.
mod parallel;

#[doc(hidden)]
pub mod onnx;

#[doc(hidden)]
pub mod graph;

#[doc(hidden)]
pub mod types;

#[doc(hidden)]
pub mod ops;

// Last of the leaves: its reasons name nodes, tensors and element types, and wrap the
// reasons `onnx` and `graph` give.
#[doc(hidden)]
pub mod error;

// The stages.
#[doc(hidden)]
pub mod normalize;

#[doc(hidden)]
pub mod calibrate;

#[doc(hidden)]
pub mod quantize;

#[doc(hidden)]
pub mod fidelity;

#[doc(hidden)]
pub mod speed;

pub mod compare;

#[doc(hidden)]
pub mod report;

#[doc(hidden)]
pub mod pipeline;

// `kenosis cast`: decodes and reads external data as the pipeline does.
pub mod cast;

#[doc(hidden)]
pub mod kernel_bench;

#[doc(hidden)]
pub mod serve;

// The public faces of the stages.
pub mod model;

pub mod samples;

#[cfg(test)]
mod test_support;

// What the quantizer reads from kenosis-request, under the names its modules use.
use kenosis_request::{
    cache, device_profile, kernel_costs, kernels, model_files, options, request,
};

pub use fidelity::{FidelityReport, Floor, Measured, OutputFidelity, OutputKind, SampleSource};
pub use kenosis_options::{Activations, Method, Weights};
pub use kenosis_request::device_profile::DeviceProfile;
pub use kenosis_request::kernel_costs::{KernelCosts, Pricing};
pub use kenosis_request::kernels::Evaluation;
pub use kenosis_request::options::QuantizeOptions;
pub use kenosis_request::{Error, OrtFailure, Result, IDENTITY};
pub use kernel_bench::{probe, Effort};
pub use normalize::NormalizeSummary;
pub use normalize::Normalized;
pub use pipeline::{
    normalize_decoded, quantize, quantize_decoded, quantize_decoded_with_progress, quantize_file,
    quantize_with_progress, Calibration, Quantized, Stage,
};
pub use quantize::plan::FloatNode;
pub use quantize::reason::FloatReason;
pub use quantize::rewrite::RewriteSummary;
pub use report::Report;
pub use serve::serve;
pub use speed::{SpeedCheck, SpeedReport, Timing};
