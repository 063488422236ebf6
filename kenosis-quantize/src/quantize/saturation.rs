//! Whether a Conv's weights may keep 8 bits under reduce-range, judged by simulating ONNX
//! Runtime's u8×s8 integer kernel on real input patches.
//!
//! Without VNNI, MLAS's u8s8 GEMM on x86 multiplies with `VPMADDUBSW`: each pair of adjacent
//! products along K, `a[2j]·b[2j] + a[2j+1]·b[2j+1]` (u8 activation codes, zero point
//! included, times s8 weight codes), lands in a saturating int16 before the int32
//! accumulation. 7-bit weights (|code| ≤ 64) keep every pair inside ±32767
//! ([`super::params::WEIGHT_QMAX_REDUCED`]); 8-bit weights halve the rounding error, but a
//! pair of large same-signed weights meeting large input codes clips. ORT runs QLinearConv
//! in NHWC on x86, so K runs over (kernel row, kernel column, input channel), input channel
//! fastest, and a pair is two adjacent input channels at one kernel tap.
//!
//! The rule: keep 8 bits where, on the patches kept during calibration
//! ([`crate::calibrate::gram::PatchGram::kept_patches`]), the output error energy of 8-bit
//! rounding plus the simulated clipping is below that of 7-bit rounding. Image stems, whose
//! input codes span the whole u8 range, typically stay 7-bit; so do Convs whose inputs are
//! dense in large codes.

use ndarray::{Array2, ArrayView2};

use super::params::ActivationParams;
use super::weights::QuantizedWeight;
use crate::onnx::tensor::element_count;

/// Largest value an int16 pair sum keeps (`VPMADDUBSW` saturates to `[-32768, 32767]`).
const PAIR_MAX: i32 = i16::MAX as i32;

/// True when 8-bit weights `full` cost less output error than 7-bit weights `reduced` on a
/// Conv with weight `weight` of dims `[O, C, kh, kw]` (row-major f32), counting the simulated
/// `VPMADDUBSW` clipping (see the module docs).
///
/// `patches` holds `len = C·kh·kw` real input values per row, in the order (input channel,
/// kernel row, kernel column); `input` quantizes them to the u8 codes the kernel sees. Both
/// candidates share `weight`'s layout, with one scale per output channel or a single scale.
/// Anything inconsistent (sizes, no patches) answers `false`: 7-bit stays the safe choice.
pub fn full_range_pays(
    patches: &[f32],
    len: usize,
    dims: &[i64],
    input: &ActivationParams,
    weight: &[f32],
    reduced: &QuantizedWeight,
    full: &QuantizedWeight,
) -> bool {
    let Some(&[o, c, kh, kw]) = dims
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Vec<usize>>>()
        .as_deref()
    else {
        return false;
    };
    let consistent = len > 0
        && element_count(&dims[1..]) == Some(len)
        && patches.len().is_multiple_of(len)
        && element_count(dims) == Some(weight.len())
        && [reduced, full]
            .iter()
            .all(|q| q.codes.len() == weight.len() && (q.scales.len() == 1 || q.scales.len() == o));
    if !consistent || patches.is_empty() {
        return false;
    }
    let rows = patches.len() / len;
    let codes: Vec<u8> = patches.iter().map(|&v| input.quantize(v)).collect();
    let x = Array2::from_shape_fn((rows, len), |(r, k)| input.dequantize(codes[r * len + k]));
    #[allow(
        clippy::expect_used,
        reason = "the weight length was checked to be o * len by the caller"
    )]
    let w = ArrayView2::from_shape((o, len), weight).expect("checked size");

    let rounding_energy = |q: &QuantizedWeight| -> f64 {
        let err = Array2::from_shape_fn((o, len), |(r, k)| {
            w[(r, k)] - f32::from(q.codes[r * len + k]) * q.channel_scale(r)
        });
        x.dot(&err.t()).iter().map(|&v| f64::from(v).powi(2)).sum()
    };
    let reduced_energy = rounding_energy(reduced);
    let full_energy = rounding_energy(full);
    if full_energy >= reduced_energy {
        return false;
    }
    let clip_energy = clipping_energy(&codes, len, [c, kh, kw], input.scale, full);
    full_energy + clip_energy < reduced_energy
}

/// Output error energy from `VPMADDUBSW` saturation with weight codes `q` (`[O, C, kh, kw]`)
/// on u8 patch `codes` (rows of `len` in (channel, row, column) order), in real units:
/// per output channel the clipped int16 excess times `input_scale · weight scale`, squared.
fn clipping_energy(
    codes: &[u8],
    len: usize,
    [c, kh, kw]: [usize; 3],
    input_scale: f32,
    q: &QuantizedWeight,
) -> f64 {
    // NHWC K order: position t = (dy·kw + dx)·C + ci reads patch index (ci·kh + dy)·kw + dx.
    let nhwc: Vec<usize> = (0..len)
        .map(|t| {
            let (tap, ci) = (t / c, t % c);
            (ci * kh + tap / kw) * kw + tap % kw
        })
        .collect();
    let mut energy = 0.0;
    for (row, weights) in q.codes.chunks_exact(len).enumerate() {
        // Only same-signed pairs whose magnitudes sum past 128 can leave ±32767 (255·128 fits).
        let risky: Vec<(usize, i32, i32)> = (0..len / 2)
            .map(|j| {
                (
                    2 * j,
                    i32::from(weights[nhwc[2 * j]]),
                    i32::from(weights[nhwc[2 * j + 1]]),
                )
            })
            .filter(|&(_, b0, b1)| b0.signum() == b1.signum() && (b0 + b1).abs() > 128)
            .collect();
        if risky.is_empty() {
            continue;
        }
        let step = f64::from(input_scale) * f64::from(q.channel_scale(row));
        for patch in codes.chunks_exact(len) {
            let excess: i64 = risky
                .iter()
                .map(|&(t, b0, b1)| {
                    let sum = i32::from(patch[nhwc[t]]) * b0 + i32::from(patch[nhwc[t + 1]]) * b1;
                    i64::from(sum - sum.clamp(-PAIR_MAX - 1, PAIR_MAX))
                })
                .sum();
            energy += (excess as f64 * step).powi(2);
        }
    }
    energy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantize::weights;

    /// A 1x1 Conv over `c` channels with `o` outputs, weights from `f(output, channel)`.
    fn conv_weight(o: usize, c: usize, f: impl Fn(usize, usize) -> f32) -> Vec<f32> {
        (0..o * c).map(|k| f(k / c, k % c)).collect()
    }

    /// Clipping energy of one-scale weight `codes` on one patch of u8 `inputs`, both in
    /// (channel, kernel row, kernel column) order, input scale 1.
    fn clipped(codes: Vec<i8>, inputs: &[u8], shape: [usize; 3]) -> f64 {
        let q = QuantizedWeight {
            codes,
            scales: vec![1.0],
        };
        clipping_energy(inputs, inputs.len(), shape, 1.0, &q)
    }

    #[test]
    fn pairs_of_large_weights_on_large_codes_clip() {
        // Codes 255 on two channels meeting 8-bit weights 127, 127: 64770, clipped to 32767.
        let energy = clipped(vec![127, 127, 0, 0], &[255, 255, 0, 0], [4, 1, 1]);
        assert_eq!(energy, (64770.0f64 - 32767.0).powi(2));
        // Opposite signs cannot leave the int16 range; neither can 7-bit codes.
        for codes in [vec![127, -127, 0, 0], vec![64, 64, 0, 0]] {
            assert_eq!(clipped(codes, &[255, 255, 0, 0], [4, 1, 1]), 0.0);
        }
    }

    #[test]
    fn pairs_are_adjacent_channels_at_one_kernel_tap() {
        // C = 2, 1x2 kernel: patch order (c0 t0, c0 t1, c1 t0, c1 t1); the NHWC kernel pairs
        // (c0 t0, c1 t0) and (c0 t1, c1 t1).
        let across_channels = clipped(vec![127, 0, 127, 0], &[255, 0, 255, 0], [2, 1, 2]);
        assert!(across_channels > 0.0);
        // Neighbours in the patch order (one channel, two taps) never share a pair.
        let along_taps = clipped(vec![127, 127, 0, 0], &[255, 255, 0, 0], [2, 1, 2]);
        assert_eq!(along_taps, 0.0);
    }

    /// 64 patches of a 1x1 Conv with 16 channels and 4 outputs, inputs `value(row, channel)`.
    fn decide(value: impl Fn(usize, usize) -> f32, input: ActivationParams) -> bool {
        let (o, c) = (4, 16);
        // Two large same-signed weights per output, in adjacent channels, the rest small.
        let w = conv_weight(o, c, |r, k| match k {
            0 | 1 => 1.0,
            _ => 0.013 * ((r * 7 + k * 3) % 11) as f32 - 0.06,
        });
        let dims = [o as i64, c as i64, 1, 1];
        let patches: Vec<f32> = (0..64 * c).map(|k| value(k / c, k % c)).collect();
        let reduced = weights::quantize(&w, &dims, Some(0), true, None);
        let full = weights::quantize(&w, &dims, Some(0), false, None);
        full_range_pays(&patches, c, &dims, &input, &w, &reduced, &full)
    }

    #[test]
    fn eight_bits_where_inputs_stay_small_seven_where_the_pairs_clip() {
        // Inputs in [0, 1] on a [0, 1] grid: codes reach 255 on channels 0 and 1.
        let wide = ActivationParams::from_range(0.0, 1.0);
        let spread = |r: usize, k: usize| ((r * 13 + k * 5) % 17) as f32 / 16.0;
        assert!(
            !decide(spread, wide),
            "full-range codes on the large pair clip"
        );
        // Same grid, but channels 0 and 1 stay below a fifth of it: nothing clips.
        let quiet = |r: usize, k: usize| {
            if k < 2 {
                0.2 * spread(r, k)
            } else {
                spread(r, k)
            }
        };
        assert!(decide(quiet, wide), "no clipping: the finer grid wins");
    }

    #[test]
    fn inconsistent_inputs_keep_seven_bits() {
        let q = weights::quantize(&[0.5; 8], &[2, 4, 1, 1], Some(0), false, None);
        let p = ActivationParams::from_range(0.0, 1.0);
        let pays = |patches: &[f32], dims: &[i64]| {
            full_range_pays(patches, 4, dims, &p, &[0.5; 8], &q, &q)
        };
        assert!(!pays(&[], &[2, 4, 1, 1]), "no patches");
        assert!(!pays(&[0.1; 6], &[2, 4, 1, 1]), "a partial patch");
        assert!(!pays(&[0.1; 8], &[2, 4, 1]), "not a 2-D Conv weight");
        assert!(!pays(&[0.1; 8], &[i64::MAX, 4, 1, 1]), "overflowing dims");
        assert!(!pays(&[0.1; 8], &[2, -4, 1, 1]), "a negative dim");
    }
}
