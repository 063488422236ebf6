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
//! This crate is the build script's front end only: discovery, options, the cache key, the
//! cache and the manifest. On a cache miss it runs the `kenosis` quantizer (crate
//! `kenosis-cli`, over the library `kenosis-quantize`): from `KENOSIS_QUANTIZER`, from `PATH`
//! when it is this version, or built from source once per machine and version into the
//! per-user cache folder. With the `quantizer` feature, `kenosis-quantize` is linked in and
//! runs in the build script instead. `calibration_images` needs the `images` feature. What
//! both sides read (the request, the options resolved, the outline of a model, the cache,
//! the error type) is crate `kenosis-request`.

// The examples above are whole `build.rs` files, so they show their `main`.
#![allow(clippy::needless_doctest_main)]

// The modules, in layering order, each using only those before it (`cargo xtask layers`
// checks it), one group each so that rustfmt keeps it: what cargo gives a build script, the
// calibration helper, discovery of `include_quantized!` calls, the builder `build.rs`
// fills, the files written for a model, where the quantizer comes from and how it is run,
// the calibration data a build names, and `Config::compile`, which drives it all. The public ones are hidden from the docs: the
// `kenosis` command and Kenosis's own tests use them, not a public API.
#[doc(hidden)]
pub mod cargo;

#[cfg(feature = "images")]
mod images;

#[doc(hidden)]
pub mod discover;

mod config;

mod artifact;

#[doc(hidden)]
pub mod quantizer;

mod calibration;

// The device profile a model's build prices with.
mod device;

mod compile;

// What both sides read, from `kenosis-request`, under the names this crate's modules use.
use kenosis_request::{cache, device_profile, error, model_files, onnx, options, request};

pub use config::{discover, Config};
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
pub use kenosis_request::kernels::Evaluation;
pub use kenosis_request::{Error, OrtFailure, Result};
