//! Symmetric int8 weight quantization, per-channel or per-tensor.

use super::params;

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
    (channels, crate::onnx::tensor::inner_size(dims, a))
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
}
