//! Tensor payloads to values, for the quantizer's reads of model weights.

/// The `f32` values of `raw`, little-endian, 4 bytes each (ONNX `TensorProto.raw_data` of a
/// FLOAT tensor); a trailing partial element is ignored, so callers check the length first.
pub fn f32_from_le(raw: &[u8]) -> Vec<f32> {
    raw.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn little_endian_floats_round_trip_bit_for_bit() {
        let values = [1.5f32, -0.0, f32::NAN, f32::MIN_POSITIVE, -3.25e7];
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let back = f32_from_le(&raw);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&values));
        assert_eq!(
            f32_from_le(&raw[..6]).len(),
            1,
            "a partial element is left out"
        );
    }
}
