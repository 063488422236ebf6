//! Arbitrary bytes as a calibration `.npy` file for a float32, int64, int32, int16, int8,
//! uint8 or bool input (see
//! `kenosis_quantize::calibrate::data::read_sample`): any panic, hang, or allocation larger
//! than the file (libFuzzer's `-malloc_limit_mb`) is a bug. The first byte picks the
//! input's element type and declared dims; the rest is the file. Run with `cargo xtask fuzz`.
#![no_main]

use kenosis_quantize::calibrate::data::{read_sample, InputSpec};
use kenosis_quantize::onnx::DataType;
use libfuzzer_sys::fuzz_target;

/// Declared dims of the input, as models declare them (`None` is a symbolic dim).
const SHAPES: [&[Option<i64>]; 8] = [
    &[Some(1), Some(3), Some(8), Some(8)],
    &[None, Some(3), Some(8), Some(8)],
    &[Some(2), Some(4)],
    &[None, None],
    &[Some(1), None, Some(16)],
    &[Some(4)],
    &[],
    &[Some(1), Some(1 << 40)],
];

/// Element types of the input: every type `read_sample` reads, float twice.
const TYPES: [DataType; 8] = [
    DataType::Float,
    DataType::Int64,
    DataType::Int32,
    DataType::Int16,
    DataType::Int8,
    DataType::Uint8,
    DataType::Bool,
    DataType::Float,
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, npy)) = data.split_first() else {
        return;
    };
    let dims = SHAPES[usize::from(pick & 7)].to_vec();
    let spec = InputSpec {
        name: "x".into(),
        elem_type: TYPES[usize::from((pick >> 3) & 7)].into(),
        dim_names: vec![None; dims.len()],
        dims,
        token_rows: None,
    };
    if let Ok(value) = read_sample(npy, &spec) {
        // A sample that is accepted fits its input: the declared rank, and every fixed dim.
        let shape = value.shape().to_vec();
        if !spec.dims.is_empty() {
            assert_eq!(shape.len(), spec.dims.len(), "{shape:?} for {:?}", spec.dims);
            for (&n, d) in shape.iter().zip(&spec.dims) {
                assert!(d.is_none_or(|d| d as usize == n), "{shape:?} for {:?}", spec.dims);
            }
        }
    }
});
