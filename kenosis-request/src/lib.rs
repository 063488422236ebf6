// Non-test code states why each unwrap, expect or panic cannot fire, where it stands.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
//! What a Kenosis build asks of its quantizer, and what both read to ask it.
//!
//! A build script's front end (`kenosis-build`) reads each model's outline, resolves its
//! options, hashes its files into the cache key and, on a cache miss, sends a [`Request`] to
//! the quantizer (`kenosis-quantize`, in the `kenosis` binary or linked in). Both sides
//! depend on this crate and on nothing of each other, so each one's dependencies show its
//! role:
//! - [`onnx`]: the fields of a model the front end reads without decoding it, and where its
//!   external tensors are;
//! - [`model_files`]: the files a model's build reads besides the model;
//! - `images` (feature `images`): image files decoded by a preprocessing spec;
//! - [`kernels`], [`kernel_costs`], [`options`]: the target's CPU class and the resolved
//!   options, whose text is the cache key's;
//! - [`request`]: the request and the head of the report the cache reads back;
//! - [`cache`]: the artifact cache and its file locks;
//! - [`error`]: the one error type both sides return.
//!
//! [`IDENTITY`] names the quantizer's sources: the front end accepts only a `kenosis`
//! binary that prints the same.

// The modules, in layering order (`cargo xtask layers` checks it), one group each so that
// rustfmt keeps it: the leaves, then the stages.
pub mod onnx;

pub mod error;

pub mod kernels;

pub mod kernel_costs;

// Kernel costs measured on a device (`kenosis probe`), for builds on another machine.
pub mod device_profile;

pub mod model_files;

#[cfg(feature = "images")]
pub mod images;

pub mod options;

pub mod request;

pub mod cache;

pub use error::{Error, OrtFailure, Result};
pub use request::Request;

/// What `kenosis --version` prints after `kenosis `: the version and the hash of the
/// quantizer's sources (this crate's, kenosis-quantize's and kenosis-numerics', see
/// `build.rs`), which the front end and the quantizer must share: the cache key and the
/// request format are theirs.
pub const IDENTITY: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (source ",
    env!("KENOSIS_SOURCE_HASH"),
    ")"
);
