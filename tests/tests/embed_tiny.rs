//! `include_quantized!` end to end on the tiny fixture that `tests/build.rs` quantizes: the
//! embedded INT8 artifact loads, carries the right metadata, and stays close to the FP32
//! original.

use kenosis_runtime::{include_quantized, ElementType, EmbeddedModel, TensorInfo};
use ndarray::{Array4, ArrayD};

static QUANTIZED: &EmbeddedModel = include_quantized!("fixtures/tiny/tiny_conv.onnx").untyped();

static FP32: EmbeddedModel = EmbeddedModel::from_static_bytes(
    "fixtures/tiny/tiny_conv.onnx (FP32)",
    include_bytes!("../fixtures/tiny/tiny_conv.onnx"),
);

/// Deterministic input in [-1, 1] with some structure across channels and pixels.
fn input() -> Array4<f32> {
    Array4::from_shape_fn((1, 3, 8, 8), |(_, c, i, j)| {
        ((c * 64 + i * 8 + j) as f32 * 0.37).sin()
    })
}

#[test]
fn embedded_artifact_is_a_loadable_int8_model() {
    let bytes = QUANTIZED.bytes();
    assert!(!bytes.is_empty());
    assert!(
        bytes != FP32.bytes(),
        "the embedded model should be the quantized artifact, not the FP32 original"
    );
    assert!(
        bytes
            .windows(b"QuantizeLinear".len())
            .any(|w| w == b"QuantizeLinear"),
        "the artifact should be a QDQ model"
    );
    assert_eq!(QUANTIZED.source(), "fixtures/tiny/tiny_conv.onnx");
    QUANTIZED
        .load()
        .expect("ONNX Runtime loads the embedded artifact");

    // Compile-time metadata from the manifest...
    let inputs = QUANTIZED.inputs().unwrap();
    let outputs = QUANTIZED.outputs().unwrap();
    assert_eq!(
        inputs,
        [TensorInfo::from_static(
            "x",
            ElementType::F32,
            &[Some(1), Some(3), Some(8), Some(8)]
        )]
    );
    assert_eq!(
        outputs,
        [TensorInfo::from_static(
            "y",
            ElementType::F32,
            &[Some(1), Some(4), Some(8), Some(8)]
        )]
    );
    // ...agrees with what ONNX Runtime reads from the artifact itself.
    let reread = EmbeddedModel::from_static_bytes("artifact", bytes);
    assert_eq!(reread.inputs().unwrap(), inputs);
    assert_eq!(reread.outputs().unwrap(), outputs);
}

#[test]
fn quantized_output_is_close_to_fp32() {
    let x = input();
    let quantized = QUANTIZED.run([x.view()]).unwrap()["y"]
        .clone()
        .into_f32()
        .unwrap();
    let reference = FP32.run([x.view()]).unwrap()["y"]
        .clone()
        .into_f32()
        .unwrap();
    assert_eq!(quantized.shape(), [1, 4, 8, 8]);
    assert_eq!(quantized.shape(), reference.shape());
    let values = |v: &ArrayD<f32>| v.iter().copied().collect::<Vec<f32>>();
    let cos = kenosis_eval::cosine(&values(&quantized), &values(&reference));
    let max_abs = |v: &ArrayD<f32>| v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    assert!(
        cos >= 0.99,
        "cosine similarity INT8 vs FP32 is {cos} (max |y|: INT8 {}, FP32 {})",
        max_abs(&quantized),
        max_abs(&reference)
    );
}

#[test]
fn invalid_input_is_rejected_before_running() {
    let wrong = Array4::<f32>::zeros((1, 3, 8, 7));
    let err = QUANTIZED.run([&wrong]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `fixtures/tiny/tiny_conv.onnx` input `x` expects shape [1, 3, 8, 8] (`?` = any size), got [1, 3, 8, 7]"
    );
}
