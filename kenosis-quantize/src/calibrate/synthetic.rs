//! Synthetic calibration samples for models given without data: image-like fields for
//! photographs, token ids, masks and sample rates for integer inputs, noise otherwise.

use std::path::Path;

use kenosis_numerics::synthetic::image_like;
use ndarray::{ArrayD, IxDyn};
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

use super::data::{CalibrationData, InputSpec, SampleValue};
use crate::error::{Error, Result};
use crate::onnx::DataType;

/// Value range of a synthetic image input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ImageRange {
    /// `[-2.118, 2.64]`: normalized photographs. The range of ImageNet mean/std
    /// standardization (`(0 - 0.485) / 0.229` to `(1 - 0.406) / 0.225`), which contains the
    /// `[-1, 1]` of `(x - 127.5) / 127.5`.
    Normalized,
    /// `[0, 255]`: raw 8-bit pixel values.
    Pixel,
    /// `[low, high]` as the user gave it (`synthetic_image_range`), e.g. `[0, 1]` or
    /// SqueezeNet's mean-subtracted pixels `[-123, 151]`.
    Given {
        /// Lower bound.
        low: f32,
        /// Upper bound, above `low`.
        high: f32,
    },
}

impl ImageRange {
    /// `(low, high)` of the range.
    pub fn bounds(self) -> (f32, f32) {
        match self {
            ImageRange::Normalized => (-2.118, 2.64),
            ImageRange::Pixel => (0.0, 255.0),
            ImageRange::Given { low, high } => (low, high),
        }
    }

    /// Name for reports, e.g. `"[-2.118, 2.64]"`, `"[0, 255]"`, `"[0, 0.5]"`.
    pub fn label(self) -> String {
        let (low, high) = self.bounds();
        format!("[{low}, {high}]")
    }
}

/// Largest synthetic input (elements), so that absurd declared dims fail instead of
/// exhausting memory (2^26 f32 = 256 MiB).
pub const MAX_SYNTHETIC_ELEMENTS: usize = 1 << 26;

/// Largest total of synthetic elements over all samples and inputs (2^28: 1 GiB of f32,
/// 2 GiB of int64), since every sample is generated and held in memory at once.
pub const MAX_SYNTHETIC_TOTAL_ELEMENTS: usize = 1 << 28;

/// Whether `dims` look like a batch of photographs: `[N, 3, H, W]` with H, W >= 32. Smaller
/// "images" (test fixtures, patches) keep white noise, which covers high-frequency inputs
/// that smooth fields would leave out of range.
fn is_image(dims: &[usize]) -> bool {
    matches!(dims, [_, 3, h, w] if *h >= 32 && *w >= 32)
}

/// Whether synthetic samples of input `spec` with concrete `dims` are image-like fields
/// (float `[N, 3, H, W]`, H and W >= 32) rather than noise or token data.
pub fn synthesizes_image(spec: &InputSpec, dims: &[usize]) -> bool {
    spec.elem_type == DataType::Float && is_image(dims)
}

/// Synthetic token ids: past the special tokens and common subwords of a BERT-style vocabulary.
const TOKEN_IDS: std::ops::Range<i64> = 1000..3000;

/// The values an integer element type holds; `None` for a non-integer type.
fn integer_range(elem_type: DataType) -> Option<std::ops::RangeInclusive<i64>> {
    Some(match elem_type {
        DataType::Int64 => i64::MIN..=i64::MAX,
        DataType::Int32 => i32::MIN.into()..=i32::MAX.into(),
        DataType::Int16 => i16::MIN.into()..=i16::MAX.into(),
        DataType::Int8 => i8::MIN.into()..=i8::MAX.into(),
        DataType::Uint8 => 0..=u8::MAX.into(),
        _ => return None,
    })
}

/// Synthetic ids for an integer input: below [`InputSpec::token_rows`] when the table is
/// smaller than [`TOKEN_IDS`], else [`TOKEN_IDS`]; either cut to the non-negative values
/// of the element type, or all of them when [`TOKEN_IDS`] lies above it (int8, uint8).
fn synthetic_ids(spec: &InputSpec, values: &std::ops::RangeInclusive<i64>) -> std::ops::Range<i64> {
    let ids = match spec.token_rows {
        Some(rows) if rows > 0 && rows < TOKEN_IDS.end as usize => 0..rows as i64,
        _ => TOKEN_IDS,
    };
    let end = ids.end.min(values.end().saturating_add(1));
    if ids.start < end {
        ids.start..end
    } else {
        0..end
    }
}

/// `a` as a sample of integer type `elem_type` (see [`integer_range`]); the values must fit.
fn integer_sample(elem_type: DataType, a: ArrayD<i64>) -> SampleValue {
    match elem_type {
        DataType::Int32 => SampleValue::I32(a.mapv(|v| v as i32)),
        DataType::Int16 => SampleValue::I16(a.mapv(|v| v as i16)),
        DataType::Int8 => SampleValue::I8(a.mapv(|v| v as i8)),
        DataType::Uint8 => SampleValue::U8(a.mapv(|v| v as u8)),
        _ => SampleValue::I64(a),
    }
}

/// `count` deterministic synthetic samples with the given concrete `dims` per input (see
/// [`super::shapes::resolve`]): image-like fields for photograph-sized `[N, 3, H, W]` float
/// inputs (see `is_image`, `image_like`) in `image_ranges[i]` for input `i` (see
/// [`super::image_range::infer`]), standard-normal values for other floats; for integer
/// inputs (int64, int32, int16, int8, uint8) plausible token data (ids in [1000, 3000), or
/// below [`InputSpec::token_rows`] when the table is smaller, within the type's
/// non-negative values; masks of ones, token types of zeros) or, for a scalar sample rate
/// (`sr`, `sample_rate`) of a type that holds it, 16000; for bool inputs all-true masks
/// (names containing `mask`) or fair coin flips. Ranges from synthetic data only
/// approximate real activations; real samples calibrate far better.
///
/// # Errors
/// [`Error::Calibration`] when an input has an element type that cannot be synthesized, a
/// shape above [`MAX_SYNTHETIC_ELEMENTS`], or all samples together would hold more than
/// [`MAX_SYNTHETIC_TOTAL_ELEMENTS`] elements (checked before any is generated).
pub fn synthetic_with_dims(
    inputs: &[InputSpec],
    dims: &[Vec<usize>],
    image_ranges: &[ImageRange],
    count: usize,
    model_path: &Path,
) -> Result<CalibrationData> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6b656e6f736973);
    let mut data = CalibrationData {
        synthetic: true,
        ..Default::default()
    };
    let mut total = 0usize;
    for (spec, dims) in inputs.iter().zip(dims) {
        let elements = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        total = elements
            .and_then(|n| n.checked_mul(count))
            .and_then(|n| n.checked_add(total))
            .unwrap_or(usize::MAX);
        if elements.is_none_or(|n| n > MAX_SYNTHETIC_ELEMENTS) {
            return Err(Error::Calibration {
                path: model_path.to_owned(),
                reason: format!(
                    "input `{}` declares shape {:?}, too large to synthesize (limit {MAX_SYNTHETIC_ELEMENTS} elements); give calibration data",
                    spec.name, spec.dims
                ),
            });
        }
    }
    if total > MAX_SYNTHETIC_TOTAL_ELEMENTS {
        return Err(Error::Calibration {
            path: model_path.to_owned(),
            reason: format!(
                "{count} synthetic samples of inputs {:?} would hold {total} elements, over the \
                 limit of {MAX_SYNTHETIC_TOTAL_ELEMENTS}; ask for fewer synthetic_samples or \
                 give calibration data",
                dims
            ),
        });
    }
    for _ in 0..count {
        let mut sample = Vec::new();
        for ((spec, dims), range) in inputs.iter().zip(dims).zip(image_ranges) {
            let shape = IxDyn(dims);
            let name = spec.name.to_ascii_lowercase();
            sample.push(match spec.elem_type.known() {
                _ if synthesizes_image(spec, dims) => SampleValue::F32(
                    image_like(
                        [dims[0], dims[1], dims[2], dims[3]],
                        range.bounds(),
                        &mut rng,
                    )
                    .into_dyn(),
                ),
                Some(DataType::Float) => {
                    SampleValue::F32(ArrayD::from_shape_simple_fn(shape, || {
                        rng.sample(StandardNormal)
                    }))
                }
                Some(DataType::Bool) if name.contains("mask") => {
                    SampleValue::Bool(ArrayD::from_elem(shape, true))
                }
                Some(DataType::Bool) => {
                    SampleValue::Bool(ArrayD::from_shape_simple_fn(shape, || rng.random_bool(0.5)))
                }
                Some(t) if integer_range(t).is_some() => {
                    #[allow(clippy::expect_used, reason = "the match guard checked it is Some")]
                    let values = integer_range(t).expect("an integer type");
                    let ints = if name.contains("mask") {
                        ArrayD::from_elem(shape, 1)
                    } else if name.contains("type") {
                        ArrayD::from_elem(shape, 0)
                    } else if dims.is_empty()
                        && (name == "sr" || name.contains("sample_rate"))
                        && values.contains(&16000)
                    {
                        ArrayD::from_elem(shape, 16000)
                    } else {
                        // Ids of a table smaller than the usual id range stay within it (an
                        // empty table has no valid id: ONNX Runtime then names the Gather).
                        let ids = synthetic_ids(spec, &values);
                        ArrayD::from_shape_simple_fn(shape, || rng.random_range(ids.clone()))
                    };
                    integer_sample(t, ints)
                }
                _ => {
                    return Err(Error::Calibration {
                        path: model_path.to_owned(),
                        reason: format!(
                            "input `{}` has element type {}; give calibration data for it",
                            spec.name, spec.elem_type
                        ),
                    })
                }
            });
        }
        data.samples.push(sample);
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::input_spec as spec;

    #[test]
    fn an_input_that_cannot_be_synthesized_is_named_with_its_type() {
        let text = InputSpec {
            name: "text".into(),
            elem_type: DataType::String.into(),
            dims: vec![Some(1)],
            dim_names: vec![None],
            token_rows: None,
        };
        let err = synthetic_with_dims(
            &[text],
            &[vec![1]],
            &[ImageRange::Normalized],
            2,
            Path::new("m.onnx"),
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(message.contains("m.onnx"), "{message}");
        assert!(
            message.contains("input `text` has element type STRING (8)"),
            "{message}"
        );
    }

    #[test]
    fn synthetic_ids_stay_below_a_small_table_and_an_empty_table_does_not_panic() {
        let ids = |rows: Option<usize>| -> Vec<i64> {
            let spec = InputSpec {
                name: "ids".into(),
                elem_type: DataType::Int64.into(),
                dims: vec![Some(1), Some(64)],
                dim_names: vec![None, None],
                token_rows: rows,
            };
            let data = synthetic_with_dims(
                &[spec],
                &[vec![1, 64]],
                &[ImageRange::Normalized],
                4,
                Path::new("m.onnx"),
            )
            .expect("synthesized");
            data.samples
                .iter()
                .flat_map(|s| match &s[0] {
                    SampleValue::I64(a) => a.iter().copied().collect::<Vec<_>>(),
                    _ => panic!("int64 input"),
                })
                .collect()
        };
        let small = ids(Some(5));
        assert!(small.iter().all(|&i| (0..5).contains(&i)), "{small:?}");
        assert!(
            (0..5).all(|i| small.contains(&i)),
            "every row is used: {small:?}"
        );
        for rows in [None, Some(0), Some(3000), Some(30522)] {
            let usual = ids(rows);
            assert!(
                usual.iter().all(|i| TOKEN_IDS.contains(i)),
                "{rows:?}: {usual:?}"
            );
        }
    }

    /// The synthetic values of input `spec` (shape [1, 256]) over 4 samples, as i64.
    fn synthesized(spec: &InputSpec, dims: &[usize]) -> (DataType, Vec<i64>) {
        let data = synthetic_with_dims(
            std::slice::from_ref(spec),
            &[dims.to_vec()],
            &[ImageRange::Normalized],
            4,
            Path::new("m.onnx"),
        )
        .expect("synthesized");
        let elem_type = data.samples[0][0].elem_type();
        let values = data
            .samples
            .iter()
            .flat_map(|s| -> Vec<i64> {
                match &s[0] {
                    SampleValue::I64(a) => a.iter().copied().collect(),
                    SampleValue::I32(a) => a.iter().map(|&v| v.into()).collect(),
                    SampleValue::I16(a) => a.iter().map(|&v| v.into()).collect(),
                    SampleValue::I8(a) => a.iter().map(|&v| v.into()).collect(),
                    SampleValue::U8(a) => a.iter().map(|&v| v.into()).collect(),
                    SampleValue::Bool(a) => a.iter().map(|&v| v.into()).collect(),
                    SampleValue::F32(_) => panic!("an integer input"),
                }
            })
            .collect();
        (elem_type, values)
    }

    #[test]
    fn integer_and_bool_inputs_are_synthesized_in_their_type_from_the_same_evidence_as_int64() {
        let dims = [1usize, 256];
        let all_in = |v: &[i64], r: std::ops::Range<i64>| v.iter().all(|i| r.contains(i));
        for t in [DataType::Int64, DataType::Int32, DataType::Int16] {
            let (got, ids) = synthesized(&spec(t, "input_ids", &[1, 256], None), &dims);
            assert_eq!(got, t);
            assert!(all_in(&ids, TOKEN_IDS), "{t:?}: {ids:?}");
            let (_, small) = synthesized(&spec(t, "ids", &[1, 256], Some(7)), &dims);
            assert!(
                all_in(&small, 0..7) && (0..7).all(|i| small.contains(&i)),
                "{small:?}"
            );
            let (_, mask) = synthesized(&spec(t, "attention_mask", &[1, 256], None), &dims);
            assert!(mask.iter().all(|&v| v == 1), "{t:?}: {mask:?}");
            let (_, types) = synthesized(&spec(t, "token_type_ids", &[1, 256], None), &dims);
            assert!(types.iter().all(|&v| v == 0), "{t:?}: {types:?}");
            let (_, sr) = synthesized(&spec(t, "sr", &[], None), &[]);
            assert_eq!(sr, vec![16000; 4], "{t:?}");
        }
        // Token ids do not fit 8 bits: a byte input gets every non-negative value of its
        // type (or the table's rows), and a sample rate it cannot hold is not used.
        for (t, values) in [(DataType::Uint8, 0..256), (DataType::Int8, 0..128)] {
            let (got, bytes) = synthesized(&spec(t, "bytes", &[1, 256], None), &dims);
            assert_eq!(got, t);
            assert!(all_in(&bytes, values.clone()), "{t:?}: {bytes:?}");
            assert!(
                bytes.iter().any(|&b| b >= values.end - 16),
                "{t:?}: {bytes:?}"
            );
            let (_, small) = synthesized(&spec(t, "bytes", &[1, 256], Some(30)), &dims);
            assert!(all_in(&small, 0..30), "{t:?}: {small:?}");
            let (_, sr) = synthesized(&spec(t, "sr", &[], None), &[]);
            assert!(all_in(&sr, values), "{t:?}: {sr:?}");
        }
        let (got, mask) = synthesized(
            &spec(DataType::Bool, "padding_mask", &[1, 256], None),
            &dims,
        );
        assert_eq!(got, DataType::Bool);
        assert!(mask.iter().all(|&v| v == 1), "{mask:?}");
        let (_, flags) = synthesized(&spec(DataType::Bool, "flags", &[1, 256], None), &dims);
        let ones = flags.iter().filter(|&&v| v == 1).count();
        assert!((300..724).contains(&ones), "{ones} of 1024 true");
    }
}
