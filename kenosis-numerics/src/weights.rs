//! Symmetric int8 weight quantization, per-channel or per-tensor.

use crate::params;

/// An int8 weight tensor with its scales.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedWeight {
    /// Codes in the original layout (row-major, same dims as the float weight).
    pub codes: Vec<i8>,
    /// One scale per channel along the quantization axis, or one scale for per-tensor.
    pub scales: Vec<f32>,
}

impl QuantizedWeight {
    /// The scale of channel `c` along the quantization axis (the single scale per tensor).
    pub fn channel_scale(&self, c: usize) -> f32 {
        self.scales[if self.scales.len() == 1 { 0 } else { c }]
    }
}

/// `(channels, inner)` of a row-major tensor with `dims` along `axis`: the length of that
/// axis and the number of elements per step along it. Dims that no validated tensor has
/// (negative, overflowing, an axis past the end) fall back to 1 for the part they spoil, so
/// indexing stays in bounds and nothing huge is allocated; tensors read with `onnx::tensor`
/// always match their dims.
fn channel_layout(dims: &[i64], axis: Option<usize>) -> (usize, usize) {
    let Some(a) = axis.filter(|&a| a < dims.len()) else {
        return (1, 1);
    };
    let channels = usize::try_from(dims[a]).unwrap_or(0).max(1);
    // The product of the dims after `axis` (`kenosis-build`'s `onnx::tensor::inner_size`,
    // which its front end uses without this crate).
    let inner = dims[a + 1..]
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
        .unwrap_or(1)
        .max(1);
    (channels, inner)
}

/// Index of the channel each element of a row-major tensor with `dims` belongs to, along
/// `axis` (ONNX DequantizeLinear-13 `axis` semantics); always 0 per tensor.
fn channel_of(dims: &[i64], axis: Option<usize>) -> impl Fn(usize) -> usize {
    let (channels, inner) = channel_layout(dims, axis);
    move |k| (k / inner) % channels
}

/// Largest magnitude of `values` per slice along `axis` of a row-major tensor with `dims`
/// (`axis = None`: one value for the whole tensor).
pub fn abs_max_per_channel(values: &[f32], dims: &[i64], axis: Option<usize>) -> Vec<f64> {
    let channel = channel_of(dims, axis);
    let mut out = vec![0f64; channel_layout(dims, axis).0];
    for (k, v) in values.iter().enumerate() {
        let c = channel(k);
        out[c] = out[c].max(f64::from(v.abs()));
    }
    out
}

/// Quantizes `values` with the given per-channel (or single) `scales` along `axis`.
pub fn quantize_with_scales(
    values: &[f32],
    dims: &[i64],
    axis: Option<usize>,
    scales: &[f32],
    reduce_range: bool,
) -> Vec<i8> {
    let channel = channel_of(dims, axis);
    values
        .iter()
        .enumerate()
        .map(|(k, &v)| params::quantize_weight(v, scales[channel(k)], reduce_range))
        .collect()
}

/// Quantizes a float weight symmetrically to int8: per channel along `axis` (ONNX
/// DequantizeLinear-13 `axis` semantics) or per tensor when `axis` is `None`.
/// `min_scales` raises individual channel scales (bias headroom), when given.
pub fn quantize(
    values: &[f32],
    dims: &[i64],
    axis: Option<usize>,
    reduce_range: bool,
    min_scales: Option<&[f32]>,
) -> QuantizedWeight {
    let mut scales: Vec<f32> = abs_max_per_channel(values, dims, axis)
        .into_iter()
        .map(|m| params::weight_scale(m, reduce_range))
        .collect();
    if let Some(mins) = min_scales {
        for (s, &m) in scales.iter_mut().zip(mins) {
            *s = s.max(m);
        }
    }
    let codes = quantize_with_scales(values, dims, axis, &scales, reduce_range);
    QuantizedWeight { codes, scales }
}

/// The real values a [`QuantizedWeight`] stands for (`code · scale` per channel).
pub fn dequantize(q: &QuantizedWeight, dims: &[i64], axis: Option<usize>) -> Vec<f32> {
    let channel = channel_of(dims, axis);
    q.codes
        .iter()
        .enumerate()
        .map(|(k, &c)| f32::from(c) * q.scales[channel(k)])
        .collect()
}

/// Quantizes a 2-D weight `[rows, cols]` (row-major) per channel along `axis` (0 or 1) for
/// integer kernels whose `VPMADDUBSW` pairs saturate (x86 without VNNI; see
/// `kenosis-build`'s `quantize::saturation`), with the largest grid that cannot saturate on any input.
///
/// The kernel adds the products of two adjacent K entries (the axis other than `axis`;
/// pairs `(2j, 2j+1)`, as MLAS packs four consecutive K bytes per 32-bit lane) in a
/// saturating int16. With u8 input codes in `[0, 255]`, a pair of weight codes `(a, b)`
/// cannot saturate when `|a + b| ≤ 128` (255·128 = 32640); pairs of opposite sign never
/// can (255·127 < 32767). Reduce-range (`|code| ≤ 64`,
/// [`params::WEIGHT_QMAX_REDUCED`]) is the special case that bounds every pair by its
/// worst member. Here each channel's scale is instead chosen, among a geometric grid from
/// `abs_max / 127` to the reduce-range scale, to minimise the squared weight error after
/// rounding to nearest and moving the codes of the pairs over the limit one step towards
/// zero (the member whose move costs less). The reduce-range scale is on the grid, so the
/// error is never above reduce-range's; on trained weights, where large same-signed
/// neighbours are rare, the chosen scale is near the full 8-bit one.
///
/// `min_scales` raises channel scales (bias headroom), as in [`quantize`]. Dims that are not
/// 2-D, or an axis past 1, fall back to [`quantize`] with reduce-range.
pub fn quantize_pair_safe(
    values: &[f32],
    dims: &[i64],
    axis: usize,
    min_scales: Option<&[f32]>,
) -> QuantizedWeight {
    let shape = match dims {
        &[r, c] => usize::try_from(r).ok().zip(usize::try_from(c).ok()),
        _ => None,
    };
    let Some((rows, cols)) = shape.filter(|&(r, c)| axis < 2 && r * c == values.len()) else {
        return quantize(values, dims, Some(axis), true, min_scales);
    };
    let (channels, k) = if axis == 0 {
        (rows, cols)
    } else {
        (cols, rows)
    };
    let at = |c: usize, j: usize| {
        if axis == 0 {
            c * cols + j
        } else {
            j * cols + c
        }
    };
    let mut codes = vec![0i8; values.len()];
    let mut scales = Vec::with_capacity(channels);
    let mut channel = Vec::with_capacity(k);
    for c in 0..channels {
        channel.clear();
        channel.extend((0..k).map(|j| values[at(c, j)]));
        let floor = min_scales.and_then(|m| m.get(c)).copied().unwrap_or(0.0);
        let (scale, q) = pair_safe_channel(&channel, floor);
        for (j, code) in q.into_iter().enumerate() {
            codes[at(c, j)] = code;
        }
        scales.push(scale);
    }
    QuantizedWeight { codes, scales }
}

/// Largest `|a + b|` of a pair of same-signed codes whose u8 products fit int16.
const PAIR_CODE_LIMIT: i32 = 128;
/// Scales tried per channel by [`pair_safe_channel`], including both ends of the grid.
const PAIR_SAFE_GRID: usize = 24;

/// The scale (at least `floor`) and pair-safe codes of one channel `w`, in K order (see
/// [`quantize_pair_safe`]).
fn pair_safe_channel(w: &[f32], floor: f32) -> (f32, Vec<i8>) {
    let abs_max = w.iter().fold(0f64, |m, &v| m.max(f64::from(v.abs())));
    let reduced = params::weight_scale(abs_max, true).max(floor);
    let full = params::weight_scale(abs_max, false).max(floor);
    let mut best: Option<(f64, f32, Vec<i8>)> = None;
    for i in 0..PAIR_SAFE_GRID {
        let t = i as f64 / (PAIR_SAFE_GRID - 1) as f64;
        let scale = if i + 1 == PAIR_SAFE_GRID {
            reduced
        } else {
            (f64::from(full) * (f64::from(reduced) / f64::from(full)).powf(t)) as f32
        };
        let codes = pair_safe_codes(w, scale);
        let error: f64 = (w.iter().zip(&codes))
            .map(|(&v, &q)| (f64::from(v) - f64::from(q) * f64::from(scale)).powi(2))
            .sum();
        if best.as_ref().is_none_or(|b| error < b.0) {
            best = Some((error, scale, codes));
        }
    }
    #[allow(clippy::expect_used, reason = "the grid has PAIR_SAFE_GRID > 0 points")]
    let (_, scale, codes) = best.expect("one scale tried");
    (scale, codes)
}

/// Nearest codes of `w` on `scale` (±127), then every pair `(2j, 2j+1)` whose sum exceeds
/// [`PAIR_CODE_LIMIT`] moved towards zero one step at a time, on the member whose move adds
/// the least squared error.
fn pair_safe_codes(w: &[f32], scale: f32) -> Vec<i8> {
    let mut codes: Vec<i32> = w
        .iter()
        .map(|&v| i32::from(params::quantize_weight(v, scale, false)))
        .collect();
    let s = f64::from(scale);
    // Added squared error of moving code `q` of value `v` one step towards zero.
    let cost = |v: f32, q: i32| {
        let v = f64::from(v);
        let moved = f64::from(q - q.signum()) * s;
        (v - moved).powi(2) - (v - f64::from(q) * s).powi(2)
    };
    for j in (0..w.len().saturating_sub(1)).step_by(2) {
        while (codes[j] + codes[j + 1]).abs() > PAIR_CODE_LIMIT {
            let m = if cost(w[j], codes[j]) <= cost(w[j + 1], codes[j + 1]) {
                j
            } else {
                j + 1
            };
            codes[m] -= codes[m].signum();
        }
    }
    // Every code came from an i8 and only moved towards zero.
    codes.into_iter().map(|q| q as i8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_no_valid_tensor_has_index_in_bounds_instead_of_panicking() {
        let values = [1.0f32, -3.0, 2.0];
        // A negative channel count and an axis past the end: one channel.
        assert_eq!(abs_max_per_channel(&values, &[-1, 3], Some(0)), [3.0]);
        assert_eq!(abs_max_per_channel(&values, &[3], Some(1)), [3.0]);
        // Inner dims whose product overflows: one element per step.
        let huge = [3, i64::MAX, i64::MAX];
        assert_eq!(
            abs_max_per_channel(&values, &huge, Some(0)),
            [1.0, 3.0, 2.0]
        );
    }

    #[test]
    fn per_channel_scales_follow_each_output_channel() {
        // Conv weight [2, 1, 1, 2]: channel 0 small, channel 1 large.
        let w = [0.1f32, -0.5, 0.5, -2.0];
        let q = quantize(&w, &[2, 1, 1, 2], Some(0), false, None);
        assert_eq!(
            q.scales,
            vec![(0.5f64 / 127.0) as f32, (2.0f64 / 127.0) as f32]
        );
        assert_eq!(q.codes, vec![25, -127, 32, -127]);
        let per_tensor = quantize(&w, &[2, 1, 1, 2], None, false, None);
        assert_eq!(per_tensor.scales.len(), 1);
        assert_eq!(
            &per_tensor.codes[..2],
            &[6, -32],
            "per-tensor: the small channel gets a coarse grid"
        );
    }

    #[test]
    fn axis_one_for_matmul_weights() {
        // MatMul B [K=2, N=3]: per-channel along N (axis 1).
        let b = [1.0f32, 0.1, -4.0, -0.5, 0.2, 2.0];
        let q = quantize(&b, &[2, 3], Some(1), true, None);
        assert_eq!(
            q.scales,
            vec![
                (1.0f64 / 64.0) as f32,
                (0.2f64 / 64.0) as f32,
                (4.0f64 / 64.0) as f32
            ]
        );
        assert_eq!(q.codes, vec![64, 32, -64, -32, 64, 32]);
    }

    /// Squared error of `q` against `w` laid out `[k, n]` with per-column scales.
    fn column_error(w: &[f32], q: &QuantizedWeight, n: usize) -> f64 {
        (w.iter().zip(&q.codes).enumerate())
            .map(|(i, (&v, &c))| (f64::from(v) - f64::from(c) * f64::from(q.scales[i % n])).powi(2))
            .sum()
    }

    #[test]
    fn pair_safe_codes_never_saturate_and_beat_reduce_range() {
        // MatMul B [K=64, N=3]: a column of scattered values, one whose largest weights are
        // neighbours of the same sign along K, and one whose largest weights have opposite
        // signs.
        let (k, n) = (64usize, 3usize);
        let mut w = vec![0f32; k * n];
        for j in 0..k {
            let x = j as f32 / k as f32;
            w[j * n] = ((j * 7919 % 101) as f32 / 50.0 - 1.0) * 0.3;
            w[j * n + 1] = (x * 11.0).cos() * 0.05;
            w[j * n + 2] = (x * 5.0).sin() * 0.02;
        }
        (w[10 * n + 1], w[11 * n + 1]) = (0.9, 0.85);
        (w[20 * n + 2], w[21 * n + 2]) = (0.9, -0.9);
        let dims = [k as i64, n as i64];
        let safe = quantize_pair_safe(&w, &dims, 1, None);
        let reduced = quantize(&w, &dims, Some(1), true, None);
        let full = quantize(&w, &dims, Some(1), false, None);
        // No pair of adjacent K entries can make 255 · |a + b| leave int16.
        for j in (0..k).step_by(2) {
            for c in 0..n {
                let pair =
                    i32::from(safe.codes[j * n + c]) + i32::from(safe.codes[(j + 1) * n + c]);
                assert!(
                    255 * pair.abs() <= 32767,
                    "column {c}, rows {j}/{}: {pair}",
                    j + 1
                );
            }
        }
        // Full range would break that on column 1 (0.9 and 0.85 are both near 127).
        assert!(i32::from(full.codes[10 * n + 1]) + i32::from(full.codes[11 * n + 1]) > 128);
        // Less error than 7-bit codes, and full range's grid where no pair is at risk
        // (column 2).
        for c in 0..n {
            let column = |q: &QuantizedWeight| {
                let one = QuantizedWeight {
                    codes: (0..k).map(|j| q.codes[j * n + c]).collect(),
                    scales: vec![q.scales[c]],
                };
                column_error(&(0..k).map(|j| w[j * n + c]).collect::<Vec<_>>(), &one, 1)
            };
            // Column 1's outlier pair needs nearly reduce-range's scale.
            let bound = if c == 1 { 1.0 } else { 0.5 };
            assert!(column(&safe) <= column(&reduced) * bound, "column {c}");
        }
        assert_eq!(safe.scales[2], full.scales[2]);
        assert!(safe.scales[1] > full.scales[1] && safe.scales[1] < reduced.scales[1]);
        // Rows as channels (Gemm with transB): the same codes, transposed.
        let t: Vec<f32> = (0..n * k).map(|i| w[(i % k) * n + i / k]).collect();
        let safe_t = quantize_pair_safe(&t, &[n as i64, k as i64], 0, None);
        assert_eq!(safe_t.scales, safe.scales);
        assert!((0..n * k).all(|i| safe_t.codes[i] == safe.codes[(i % k) * n + i / k]));
    }
}
