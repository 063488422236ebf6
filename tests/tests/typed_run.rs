//! The typed `run` that `include_quantized!` generates from the build-time manifest: element
//! types and ranks are part of the signature, static dimensions are checked at run time, and
//! the untyped `EmbeddedModel` stays reachable.

use kenosis_runtime::{include_quantized, EmbeddedModel, Error};
use ndarray::{Array2, Array4, ArrayView4};

// Item form: nameable wrapper, inputs and outputs types for the two-input, two-output model.
include_quantized!(struct TinyIo = "../kenosis-runtime/testdata/tiny_io.onnx");

fn input() -> Array4<f32> {
    Array4::from_shape_fn((1, 3, 8, 8), |(_, c, i, j)| {
        ((c * 64 + i * 8 + j) as f32 * 0.37).sin()
    })
}

#[test]
fn single_input_takes_a_view_of_the_right_rank_and_returns_a_typed_array() {
    let model = include_quantized!("fixtures/tiny/tiny_conv.onnx");
    let x = input();
    let view: ArrayView4<'_, f32> = x.view();
    let y: ndarray::Array4<f32> = model.run(view).unwrap();
    assert_eq!(y.shape(), [1, 4, 8, 8]);
    // It agrees with the untyped run of the same model.
    let untyped = model.untyped().run([x.view()]).unwrap()["y"]
        .clone()
        .into_f32()
        .unwrap();
    assert_eq!(y.into_dyn(), untyped);
    // The wrapper derefs to the untyped model, and coerces to it.
    assert_eq!(model.source(), "fixtures/tiny/tiny_conv.onnx");
    let as_model: &'static EmbeddedModel = include_quantized!("fixtures/tiny/tiny_conv.onnx");
    assert_eq!(as_model.bytes(), model.bytes());
}

#[test]
fn wrong_static_dimension_is_a_typed_error_naming_input_and_shapes() {
    let model = include_quantized!("fixtures/tiny/tiny_conv.onnx");
    let wrong = Array4::<f32>::zeros((1, 3, 8, 7));
    let err = model.run(wrong.view()).unwrap_err();
    assert_eq!(
        err,
        Error::InputShape {
            model: "fixtures/tiny/tiny_conv.onnx",
            input: "x".into(),
            expected: vec![Some(1), Some(3), Some(8), Some(8)],
            actual: vec![1, 3, 8, 7],
        }
    );
}

#[test]
fn multi_input_model_takes_a_struct_with_one_field_per_input() {
    let a = Array2::from_shape_fn((2, 5), |(i, j)| (i * 5 + j) as f32 * 0.5);
    let b = Array2::from_shape_fn((2, 5), |(i, j)| (i as i64) - (j as i64));
    let out: TinyIoOutputs = TinyIo
        .run(TinyIoInputs {
            a: a.view(),
            b: b.view(),
        })
        .unwrap();
    let sum: Array2<f32> = out.sum;
    let twice: Array2<i64> = out.twice;
    assert_eq!(twice, &b * 2);
    let expected = &a + &b.mapv(|v| v as f32);
    let err = (&sum - &expected)
        .mapv(f32::abs)
        .fold(0.0f32, |m, &v| m.max(v));
    assert!(
        err < 0.1,
        "INT8 sum within a quantization step: max error {err}"
    );
    // The dynamic dimension accepts any size; the static one is checked.
    let short_a = Array2::<f32>::zeros((3, 1));
    let short_b = Array2::<i64>::zeros((3, 1));
    let err = TinyIo
        .run(TinyIoInputs {
            a: short_a.view(),
            b: short_b.view(),
        })
        .unwrap_err();
    assert!(
        matches!(&err, Error::InputShape { input, .. } if input == "a"),
        "{err}"
    );
}
