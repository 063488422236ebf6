// Non-test code states why each unwrap, expect or panic cannot fire, where it stands.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
//! Quantize FP32 ONNX models to static INT8 QDQ models from a `build.rs`.
//!
//! The whole `build.rs` of a crate that embeds models with `include_quantized!`:
//!
//! ```no_run
//! fn main() {
//!     kenosis_build::discover().expect("kenosis: quantization failed");
//! }
//! ```
//! [`discover()`] finds every `include_quantized!("models/x.onnx", options...)` call in the
//! package's targets (see `discover`) and quantizes each model with its call site's
//! options. Models can also be registered explicitly, alone or next to discovery:
//!
//! ```no_run
//! // build.rs
//! fn main() {
//!     kenosis_build::Config::new()
//!         .model("models/efficientnet_lite0.onnx") // relative to CARGO_MANIFEST_DIR
//!         .calibration_npy_dir("calib")           // optional; default: synthetic inputs
//!         .compile()
//!         .expect("kenosis: quantization failed");
//! }
//! ```
//! Each model is decoded, normalized (Constant → initializer, Dropout removed, opset raised to
//! 13, BatchNormalization folded), calibrated in ONNX Runtime, and rewritten with
//! QuantizeLinear/DequantizeLinear pairs placed so that ONNX Runtime fuses the quantized ops
//! into its integer kernels (QLinearConv, QGemm, ...). Artifacts are cached under the target
//! directory by a content hash, copied into `OUT_DIR`, and listed in a manifest that
//! `kenosis_runtime::include_quantized!` reads.
//!
//! The build script compiles only the front end (discovery, options, the cache key, the
//! cache, the manifest). On a cache miss it runs the `kenosis` quantizer (crate
//! `kenosis-cli`): from `KENOSIS_QUANTIZER`, from `PATH` when it is this version, or built
//! from source once per machine and version into the per-user cache folder. With the
//! `quantizer` feature the quantizer is linked in and runs in the build script instead.
//! `calibration_images` needs the `images` feature.

// The examples above are whole `build.rs` files, so they show their `main`.
#![allow(clippy::needless_doctest_main)]
// Some stage functions serve only Kenosis's tests and benchmark, through the `internals`
// feature; builds with that feature (CI's clippy) still report real dead code.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

// The modules, in layering order: leaves, then the front end's stages, then the quantizer's
// (feature `quantizer`), then the front end's driver, each using only those before it
// (`cargo xtask layers` checks it). Without `quantizer` this crate is the build script's
// front end, which runs the `kenosis` binary on a cache miss (see `quantizer`). The modules
// are private, or public and hidden from the docs with the non-default `internals` feature,
// which Kenosis's own tests, benchmark, fuzz targets and the `kenosis` binary enable: not a
// public API, anything they hold changes without notice. Each such module is declared twice,
// once per side of the feature, with plain `mod` lines that rustfmt follows (one group each,
// so that it keeps this order).

// Leaves.
#[cfg(feature = "quantizer")]
mod parallel;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod error;
#[cfg(not(feature = "internals"))]
mod error;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod onnx;
#[cfg(not(feature = "internals"))]
mod onnx;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod graph;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod graph;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod types;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod types;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod ops;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod ops;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod kernels;
#[cfg(not(feature = "internals"))]
mod kernels;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod kernel_costs;
#[cfg(not(feature = "internals"))]
mod kernel_costs;

// The front end's stages: the files a model's build reads, options and the cache key's
// lines, the request a cache miss sends to the quantizer, the cache, cargo, the calibration
// helper, discovery.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod model_files;
#[cfg(not(feature = "internals"))]
mod model_files;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod options;
#[cfg(not(feature = "internals"))]
mod options;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod request;
#[cfg(not(feature = "internals"))]
mod request;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod cache;
#[cfg(not(feature = "internals"))]
mod cache;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod cargo;
#[cfg(not(feature = "internals"))]
mod cargo;

#[cfg(feature = "images")]
mod images;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod discover;
#[cfg(not(feature = "internals"))]
mod discover;

// The quantizer's stages (feature `quantizer`), then `serve`, which answers a request.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod normalize;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod normalize;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod calibrate;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod calibrate;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod quantize;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod quantize;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod fidelity;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod fidelity;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod speed;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod speed;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod report;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod report;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod pipeline;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod pipeline;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod cast;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod cast;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod kernel_bench;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod kernel_bench;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod serve;
#[cfg(all(feature = "quantizer", not(feature = "internals")))]
mod serve;

// The front end's driver: the builder `build.rs` fills, the files written for a model, where
// the quantizer comes from and how it is run, and `Config::compile`, which drives it all.
mod config;

mod artifact;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod quantizer;
#[cfg(not(feature = "internals"))]
mod quantizer;

mod compile;

#[cfg(test)]
mod test_support;

pub use config::{discover, Config};
pub use error::{Error, OrtFailure, Result};
/// Images turned into calibration samples, with the `images` feature.
#[cfg(feature = "images")]
pub use images::{calibration_images, IMAGE_EXTENSIONS};
/// Images decoded and resized by a preprocessing spec, with the `image-preprocess` feature.
#[cfg(feature = "image-preprocess")]
pub use images::{image_preprocessor, preprocess_image};
pub use kenosis_manifest::TensorInfo;
/// The image preprocessing spec (`"rgb,224x224,mean=127,std=128"`) and its parser, for
/// [`image_preprocessor`].
#[cfg(feature = "image-preprocess")]
pub use kenosis_options::preprocess;
pub use kenosis_options::{Activations, Method, Weights};
pub use kernels::Evaluation;

/// The report a build writes beside each artifact (`<artifact>.json`), as types: with the
/// `quantizer` feature, which links the quantizer into the program.
#[cfg(feature = "quantizer")]
pub use {
    fidelity::{FidelityReport, Floor, Measured, OutputFidelity, OutputKind, SampleSource},
    normalize::NormalizeSummary,
    quantize::plan::FloatNode,
    quantize::reason::FloatReason,
    quantize::rewrite::RewriteSummary,
    report::Report,
};

/// The offline entry point (no cargo, no manifest), with the `internals` feature.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use pipeline::{quantize, Calibration, QuantizeOptions, Quantized};
