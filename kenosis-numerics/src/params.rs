//! All scale and zero-point arithmetic, in one place, in f64.
//!
//! Conventions follow the ONNX QuantizeLinear spec
//! (`y = saturate(round(x / scale) + zero_point)`, round half to even) and ONNX Runtime's
//! quantizer (`onnxruntime.quantization.quant_utils`): activations are asymmetric uint8 over
//! a range widened to include 0 so that 0.0 is exactly representable (zero padding and ReLU
//! outputs stay exact); weights are symmetric int8 (`zero_point = 0`), optionally with a
//! 7-bit "reduce-range" grid; biases are int32 with scale `x_scale · w_scale` and zero point
//! 0, the layout QLinearConv/QGemm consume directly.

/// Largest int8 magnitude used for full-range symmetric weights (`[-127, 127]`, keeping the
/// grid symmetric as ONNX Runtime does).
pub const WEIGHT_QMAX_FULL: i32 = 127;
/// Largest int8 magnitude for reduce-range weights (`[-64, 64]`): with uint8 activations the
/// pairwise sums of u8·s8 products then fit int16 (255·64·2 = 32640), so AVX2 `VPMADDUBSW`
/// kernels cannot saturate (ONNX Runtime docs, "quantization on x86 without VNNI").
pub const WEIGHT_QMAX_REDUCED: i32 = 64;
/// Bias values are kept within ±2^30 so that accumulating them with int32 products keeps
/// headroom; weight scales are raised where a bias would not fit (see [`bias_safe_weight_scale`]).
pub const BIAS_LIMIT: f64 = (1u64 << 30) as f64;

/// Asymmetric uint8 parameters of an activation tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActivationParams {
    /// Real value of one quantization step (f32, as stored in the model).
    pub scale: f32,
    /// uint8 code of real 0.0.
    pub zero_point: u8,
}

impl ActivationParams {
    /// Parameters for real range `[min, max]` (any order of magnitude; NaN-free).
    ///
    /// The range is first widened to include 0, then `scale = (max − min) / 255` and
    /// `zero_point = round(−min / scale)` clamped to `[0, 255]`. An all-zero range gets scale 1.
    pub fn from_range(min: f32, max: f32) -> Self {
        let min = f64::from(min.min(0.0));
        let max = f64::from(max.max(0.0));
        if max - min <= f64::from(f32::MIN_POSITIVE) {
            return Self {
                scale: 1.0,
                zero_point: 0,
            };
        }
        let scale = ((max - min) / 255.0) as f32;
        let zero_point = round_half_even(-min / f64::from(scale)).clamp(0.0, 255.0) as u8;
        Self { scale, zero_point }
    }

    /// Like [`Self::from_range`] for a tensor that feeds straight into a Clip/Relu absorbed by
    /// ONNX Runtime's `ClipQuantFusion`/`ReluQuantFusion`: the range is cut to
    /// `[clip_min, clip_max]` and the scale nudged down until the quantized domain
    /// `[scale·(0−zero_point), scale·(255−zero_point)]`, evaluated in f32 as ORT does, lies
    /// inside the clip range; otherwise ORT keeps the Clip and the producing Conv cannot fuse.
    ///
    /// A clip range that is empty or not positive (`clip_max <= clip_min`, `clip_max <= 0`,
    /// or a NaN bound) gives [`Self::from_range`] of `[min, max]` unchanged: no positive
    /// scale fits it, and a zero scale is never written.
    pub fn for_clipped_range(min: f32, max: f32, clip_min: f32, clip_max: f32) -> Self {
        // NaN bounds fail both comparisons.
        if !(clip_max > clip_min && clip_max > 0.0) {
            return Self::from_range(min, max);
        }
        let mut p = Self::from_range(min.max(clip_min), max.min(clip_max));
        if p.zero_point == 0 && clip_min >= 0.0 {
            let bound = clip_max + f32::EPSILON;
            // The largest scale the loop below accepts is within a few ulps of bound / 255
            // (f32 rounding of the product): start there instead of stepping down one ulp
            // at a time from a scale that may be orders of magnitude larger.
            if bound.is_finite() {
                let near = f32::from_bits((bound / 255.0).to_bits() + 4);
                p.scale = p.scale.min(near);
            }
            while p.scale * 255.0 > bound && p.scale > 0.0 {
                p.scale = f32::from_bits(p.scale.to_bits() - 1);
            }
        }
        p
    }

    /// `round(x / scale) + zero_point`, saturated to uint8 (ONNX QuantizeLinear).
    pub fn quantize(&self, x: f32) -> u8 {
        (round_half_even(f64::from(x) / f64::from(self.scale)) + f64::from(self.zero_point))
            .clamp(0.0, 255.0) as u8
    }

    /// `(q − zero_point) · scale` (ONNX DequantizeLinear).
    pub fn dequantize(&self, q: u8) -> f32 {
        (f64::from(q) - f64::from(self.zero_point)) as f32 * self.scale
    }
}

/// Symmetric int8 weight scale for values whose largest magnitude is `abs_max`:
/// `abs_max / qmax` (qmax 127, or 64 with reduce-range). A zero channel gets scale 1
/// (all its codes are 0 whatever the scale).
pub fn weight_scale(abs_max: f64, reduce_range: bool) -> f32 {
    let qmax = f64::from(if reduce_range {
        WEIGHT_QMAX_REDUCED
    } else {
        WEIGHT_QMAX_FULL
    });
    if abs_max <= f64::from(f32::MIN_POSITIVE) {
        return 1.0;
    }
    (abs_max / qmax) as f32
}

/// `round(w / scale)` clamped to `[−qmax, qmax]`.
pub fn quantize_weight(w: f32, scale: f32, reduce_range: bool) -> i8 {
    let qmax = f64::from(if reduce_range {
        WEIGHT_QMAX_REDUCED
    } else {
        WEIGHT_QMAX_FULL
    });
    round_half_even(f64::from(w) / f64::from(scale)).clamp(-qmax, qmax) as i8
}

/// The scale ONNX Runtime's integer kernels apply to an int32 bias: the f32 product of the
/// input and weight scales (what QLinearConv computes), widened to f64 for the division.
pub fn bias_scale(input_scale: f32, weight_scale: f32) -> f64 {
    f64::from(input_scale * weight_scale)
}

/// `round(b / bias_scale)`, clamped to ±[`BIAS_LIMIT`].
pub fn quantize_bias(b: f32, bias_scale: f64) -> i32 {
    if bias_scale == 0.0 {
        return 0;
    }
    round_half_even(f64::from(b) / bias_scale).clamp(-BIAS_LIMIT, BIAS_LIMIT) as i32
}

/// Raises a weight scale just enough that `bias / (input_scale · weight_scale)` fits
/// ±[`BIAS_LIMIT`]; needed for channels with tiny weights and a large bias (ONNX Runtime's
/// quantizer does the same adjustment since 1.17).
pub fn bias_safe_weight_scale(weight_scale: f32, bias: f32, input_scale: f32) -> f32 {
    let needed = (f64::from(bias.abs()) / (BIAS_LIMIT * f64::from(input_scale))) as f32;
    if needed > weight_scale {
        // One ulp above the bound so that the f32 product cannot round below it.
        f32::from_bits(needed.to_bits() + 1)
    } else {
        weight_scale
    }
}

/// Round half to even, the rounding ONNX QuantizeLinear specifies (IEEE 754
/// `roundToIntegralTiesToEven`). Every caller casts the result to an integer, so the sign of
/// a zero result does not matter.
pub fn round_half_even(x: f64) -> f64 {
    // One instruction or a libm call; the earlier `round`, `trunc` and `% 2.0` took half of
    // a transformer's quantization time (`%` on f64 is a software `fmod`).
    x.round_ties_even()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_half_to_even() {
        assert_eq!(round_half_even(0.5), 0.0);
        assert_eq!(round_half_even(1.5), 2.0);
        assert_eq!(round_half_even(2.5), 2.0);
        assert_eq!(round_half_even(-0.5), 0.0);
        assert_eq!(round_half_even(-1.5), -2.0);
        assert_eq!(round_half_even(-2.5), -2.0);
        assert_eq!(round_half_even(2.4), 2.0);
        assert_eq!(round_half_even(-2.6), -3.0);
    }

    #[test]
    fn activation_range_is_widened_to_include_zero_and_zero_is_exact() {
        let p = ActivationParams::from_range(0.5, 2.0);
        assert_eq!(p.zero_point, 0);
        assert_eq!(p.scale, (2.0f64 / 255.0) as f32);
        let p = ActivationParams::from_range(-3.0, -1.0);
        assert_eq!(p.zero_point, 255);
        for (min, max) in [(-1.0, 3.0), (-0.37, 5.91), (-100.0, 0.001), (-2.5, 2.5)] {
            let p = ActivationParams::from_range(min, max);
            assert_eq!(
                p.dequantize(p.quantize(0.0)),
                0.0,
                "0.0 must be exact for [{min}, {max}]"
            );
        }
    }

    #[test]
    fn activation_zero_point_and_scale_match_the_formula() {
        let p = ActivationParams::from_range(-1.0, 3.0);
        assert_eq!(p.scale, (4.0f64 / 255.0) as f32);
        assert_eq!(p.zero_point, 64); // round(1 / (4/255)) = round(63.75)
        assert_eq!(p.quantize(3.0), 255);
        assert_eq!(p.quantize(-1.0), 0);
        assert_eq!(p.quantize(100.0), 255, "saturates");
    }

    #[test]
    fn degenerate_range_gets_unit_scale() {
        assert_eq!(
            ActivationParams::from_range(0.0, 0.0),
            ActivationParams {
                scale: 1.0,
                zero_point: 0
            }
        );
    }

    #[test]
    fn clipped_range_keeps_quantized_domain_inside_relu6() {
        let p = ActivationParams::for_clipped_range(0.0, 6.0, 0.0, 6.0);
        assert_eq!(p.zero_point, 0);
        assert!(p.scale * 255.0 <= 6.0 + f32::EPSILON);
        assert!(p.scale * 255.0 > 5.9999);
        let p = ActivationParams::for_clipped_range(-0.1, 9.0, 0.0, 6.0);
        assert_eq!(p.zero_point, 0);
    }

    /// The one-ulp-at-a-time search `for_clipped_range` did before it started near the answer.
    fn clipped_by_stepping(min: f32, max: f32, clip_min: f32, clip_max: f32) -> ActivationParams {
        let mut p = ActivationParams::from_range(min.max(clip_min), max.min(clip_max));
        if p.zero_point == 0 && clip_min >= 0.0 {
            while p.scale * 255.0 > clip_max + f32::EPSILON && p.scale > 0.0 {
                p.scale = f32::from_bits(p.scale.to_bits() - 1);
            }
        }
        p
    }

    #[test]
    fn clipped_range_starts_near_the_answer_and_finds_the_same_scale() {
        let cases = [
            (0.0, 6.0, 0.0, 6.0),
            (-0.1, 9.0, 0.0, 6.0),
            (0.0, 1.0, 0.0, 6.0),
            (0.0, 3.0e-3, 0.0, 1.0e-3),
            (0.5, 200.0, 0.0, 127.5),
            (0.0, 7.0, 0.0, f32::INFINITY),
            (-2.0, 2.0, -1.0, 1.0),
        ];
        for (min, max, lo, hi) in cases {
            assert_eq!(
                ActivationParams::for_clipped_range(min, max, lo, hi),
                clipped_by_stepping(min, max, lo, hi),
                "{min}..{max} clipped to {lo}..{hi}"
            );
        }
    }

    #[test]
    fn an_empty_clip_range_never_gives_a_zero_scale() {
        // Clip(0, -6): the old search stepped the unit scale down ~10^9 ulps to 0.0.
        for (lo, hi) in [(0.0, -6.0), (0.0, 0.0), (0.0, f32::NAN), (f32::NAN, 6.0)] {
            let p = ActivationParams::for_clipped_range(-1.0, 5.0, lo, hi);
            assert_eq!(p, ActivationParams::from_range(-1.0, 5.0), "{lo}..{hi}");
        }
        // A subnormal upper bound: the degenerate range's unit scale is far above it.
        let p = ActivationParams::for_clipped_range(0.0, 1.0, 0.0, 1.0e-39);
        assert!(
            p.scale > 0.0 && p.scale * 255.0 <= 1.0e-39 + f32::EPSILON,
            "{p:?}"
        );
        assert_eq!(p, clipped_by_stepping(0.0, 1.0, 0.0, 1.0e-39));
    }

    #[test]
    fn weight_scales_and_reduce_range() {
        assert_eq!(weight_scale(1.27, false), (1.27f64 / 127.0) as f32);
        assert_eq!(weight_scale(1.28, true), (1.28f64 / 64.0) as f32);
        assert_eq!(quantize_weight(1.27, weight_scale(1.27, false), false), 127);
        assert_eq!(
            quantize_weight(-1.27, weight_scale(1.27, false), false),
            -127
        );
        assert_eq!(quantize_weight(-1.28, weight_scale(1.28, true), true), -64);
        assert_eq!(
            quantize_weight(5.0, weight_scale(1.28, true), true),
            64,
            "clamped to the 7-bit grid"
        );
        assert_eq!(weight_scale(0.0, false), 1.0);
    }

    #[test]
    fn per_channel_bias_uses_the_product_of_scales() {
        let (x_scale, w_scales) = (0.02f32, [0.001f32, 0.5]);
        let q: Vec<i32> = w_scales
            .iter()
            .map(|&w| quantize_bias(0.3, bias_scale(x_scale, w)))
            .collect();
        assert_eq!(q, vec![15000, 30]);
        // Dequantized with each channel's own scale, both come back to 0.3.
        for (&w, &qb) in w_scales.iter().zip(&q) {
            assert!((f64::from(qb) * bias_scale(x_scale, w) - 0.3).abs() < 1e-6);
        }
    }

    #[test]
    fn large_bias_raises_the_weight_scale_instead_of_overflowing() {
        let (x_scale, w_scale, bias) = (1e-3f32, 1e-9f32, 100.0f32);
        let adjusted = bias_safe_weight_scale(w_scale, bias, x_scale);
        assert!(adjusted > w_scale);
        let q = quantize_bias(bias, bias_scale(x_scale, adjusted));
        assert!(f64::from(q).abs() <= BIAS_LIMIT);
        assert!((f64::from(q) * bias_scale(x_scale, adjusted) - 100.0).abs() < 1e-3);
    }
}
