//! Quantization proper: parameter math, weight quantization, placement plan, graph rewrite.

pub mod bias_correction;
pub mod build;
pub mod channel_spread;
pub mod domain;
pub mod dynamic;
pub mod int4;
mod min_cut;
pub mod plan;
pub mod reason;
pub mod rewrite;
pub mod saturation;
pub mod size;
pub mod smooth;

// Scale arithmetic, weight quantization and GPTQ rounding run per weight: they are
// `kenosis-numerics`'s, which the quantizer binary optimizes (see that crate's docs).
pub use kenosis_numerics::{gptq, params, weights};
