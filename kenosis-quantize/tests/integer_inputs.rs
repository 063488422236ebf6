//! Models whose inputs are int32, uint8 or bool quantize with calibration data read from
//! `.npy` files and with synthetic data, and their INT8 output follows FP32 on real text.
//!
//! The models are the byte-level classifiers of `tests/fixtures/bytes` (see
//! `make_byte_classifier.py` there): bytes → Gather from a 256-row embedding → MLP with a
//! residual → mean pooling → Gemm to 8 logits.

use std::path::{Path, PathBuf};

use kenosis_quantize::calibrate::SampleValue;
use kenosis_quantize::fidelity::{self, Evaluator, SampleSource};
use kenosis_quantize::{quantize, Calibration, QuantizeOptions, Quantized};
use kenosis_request::kernels::Evaluation;
use ndarray::{Array2, ArrayD};
use ndarray_npy::WriteNpyExt;

const SEQ: usize = 128;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/bytes")
        .join(name)
}

fn workspace_file(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `count` windows of real text from `text`, 97 bytes apart; every third one shorter than
/// [`SEQ`] (`len` bytes, the rest zero padding). Returns (bytes, mask) pairs.
fn windows(text: &[u8], count: usize) -> Vec<(Array2<u8>, Array2<bool>)> {
    (0..count)
        .map(|i| {
            let start = i * 97 % (text.len() - SEQ);
            let len = if i % 3 == 2 { 40 + i % 60 } else { SEQ };
            let mut bytes = Array2::<u8>::zeros((1, SEQ));
            let mut mask = Array2::from_elem((1, SEQ), false);
            for k in 0..len {
                bytes[[0, k]] = text[start + k];
                mask[[0, k]] = true;
            }
            (bytes, mask)
        })
        .collect()
}

/// The int32 classifier's samples for `windows`.
fn int32_samples(windows: &[(Array2<u8>, Array2<bool>)]) -> Vec<Vec<SampleValue>> {
    windows
        .iter()
        .map(|(bytes, mask)| {
            vec![
                SampleValue::I32(bytes.mapv(i32::from).into_dyn()),
                SampleValue::Bool(mask.clone().into_dyn()),
            ]
        })
        .collect()
}

/// Evaluation text: other bytes than the calibration text (the Apache license), real
/// prose and Rust source.
fn evaluation_text() -> Vec<u8> {
    let mut text = workspace_file("LICENSE-MIT");
    text.extend(workspace_file("kenosis-quantize/src/calibrate/data.rs"));
    text
}

/// INT8-vs-FP32 agreement of `q` on `samples`, measured by ONNX Runtime as users run it.
fn agreement(model: &Path, q: &Quantized, samples: &[Vec<SampleValue>], names: &[String]) -> f64 {
    let fp32 = kenosis_quantize::onnx::decode(model, &std::fs::read(model).expect("model"))
        .expect("fp32 decodes");
    let int8 = kenosis_quantize::onnx::decode(model, &q.bytes).expect("int8 decodes");
    let evaluator = Evaluator::new(
        &fp32,
        &fidelity::Compared::FloatOutputs,
        names,
        samples,
        model,
        Evaluation::HostKernels,
    )
    .expect("fp32 runs");
    evaluator.measure(&int8).expect("int8 runs").mean_cosine
}

/// The embedding Gather and both MatMuls run in INT8 (the Gemm feeding the output stays
/// FP32 by placement). The table is uint8 in the static form or int8 in the dynamic one,
/// whichever `activations = "auto"` measured closer to FP32; the MatMuls, below the dynamic
/// form's size, are static either way.
fn assert_quantized(label: &str, q: &Quantized) {
    let ops = &q.report.ops_quantized;
    let table = ops.get("Gather").or(ops.get("embedding table (int8)"));
    assert!(
        table == Some(&1) && ops.get("MatMul") == Some(&2),
        "{label}: {ops:?}"
    );
}

/// Quantizes `model` with `calibration` and with synthetic inputs (default options, without
/// the speed check: this small model runs faster in FP32, so a timed build would ship FP32,
/// and the placement is what is checked here); each build must quantize its integer path and
/// agree with FP32 on `eval` above 0.999 cosine. Returns both builds, calibrated first.
fn quantize_with_and_without_data(
    model: &Path,
    calibration: &Calibration,
    eval: &[Vec<SampleValue>],
    names: &[String],
) -> (Quantized, Quantized) {
    let bytes = std::fs::read(model).expect("fixture");
    let options = QuantizeOptions {
        speed_check: false,
        ..QuantizeOptions::default()
    };
    let calibrated =
        quantize(model, &bytes, calibration, &options).expect("quantizes with calibration data");
    let synthetic = quantize(model, &bytes, &Calibration::Synthetic, &options)
        .expect("quantizes with synthetic inputs");
    for (label, q) in [("calibrated", &calibrated), ("synthetic", &synthetic)] {
        assert_quantized(label, q);
        let cosine = agreement(model, q, eval, names);
        eprintln!(
            "{label}: cosine {cosine:.5} on real text; {}",
            q.report.summary_line()
        );
        assert!(cosine > 0.999, "{label}: INT8 vs FP32 cosine {cosine}");
    }
    (calibrated, synthetic)
}

#[test]
fn an_int32_and_bool_input_model_quantizes_with_and_without_calibration_data() {
    let model = fixture("byte_classifier_int32.onnx");
    let names = ["bytes".to_owned(), "mask".to_owned()];
    let eval = int32_samples(&windows(&evaluation_text(), 24));

    // Calibration data as users give it: one folder per input, int32 and bool `.npy` files.
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in ["bytes", "mask"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
    }
    for (i, (b, m)) in windows(&workspace_file("LICENSE-APACHE"), 20)
        .iter()
        .enumerate()
    {
        // Without the batch dimension, which is optional.
        let ids: ndarray::Array1<i32> = b.row(0).mapv(i32::from);
        let file = |sub: &str| {
            std::fs::File::create(dir.path().join(sub).join(format!("{i:03}.npy"))).expect("file")
        };
        ids.write_npy(file("bytes")).expect("int32 npy");
        m.row(0)
            .to_owned()
            .write_npy(file("mask"))
            .expect("bool npy");
    }
    let (calibrated, synthetic) = quantize_with_and_without_data(
        &model,
        &Calibration::NpyDir(dir.path().to_owned()),
        &eval,
        &names,
    );
    assert!(!calibrated.report.calibration_synthetic);
    let f = calibrated.report.fidelity.as_ref().expect("measured");
    // MatMuls hold most of its weights, so `activations = "auto"` compares both forms on a
    // fifth of the samples, held out of range calibration.
    assert!(f.held_out);
    assert_eq!((calibrated.report.calibration_samples, f.samples), (16, 4));
    assert_eq!((f.inputs, f.predicts_real_data), (SampleSource::Real, true));
    assert!(synthetic.report.calibration_synthetic);
}

/// The report and the warning line say when fidelity was measured on synthetic inputs,
/// which does not predict fidelity on real data, and do not when it was measured on real
/// calibration data.
#[test]
fn synthetic_fidelity_is_labelled_in_the_json_report_and_the_warning() {
    let model = fixture("byte_classifier_int32.onnx");
    let bytes = std::fs::read(&model).expect("fixture");
    // Untimed: this small model often runs faster in FP32, and a build that ships FP32 reports
    // no fidelity (the INT8 model's would describe an artifact that was not shipped).
    let options = QuantizeOptions {
        speed_check: false,
        ..QuantizeOptions::default()
    };
    let synthetic = quantize(&model, &bytes, &Calibration::Synthetic, &options).expect("synthetic");
    let real = quantize(
        &model,
        &bytes,
        &Calibration::Data(kenosis_quantize::calibrate::CalibrationData {
            samples: int32_samples(&windows(&workspace_file("LICENSE-APACHE"), 10)),
            ..Default::default()
        }),
        &options,
    )
    .expect("real");

    let json = |q: &Quantized| serde_json::to_value(&q.report).expect("serializes");
    let s = json(&synthetic);
    assert_eq!(s["fidelity"]["inputs"], "synthetic", "{s}");
    assert_eq!(s["fidelity"]["predicts_real_data"], false, "{s}");
    let r = json(&real);
    assert_eq!(r["fidelity"]["inputs"], "real", "{r}");
    assert_eq!(r["fidelity"]["predicts_real_data"], true, "{r}");
    // The fields survive the cache's round trip through JSON.
    let back: kenosis_quantize::Report = serde_json::from_value(s).expect("deserializes");
    assert_eq!(back, synthetic.report);

    let line = synthetic.report.summary_line();
    assert!(
        line.contains("measured on synthetic inputs: does not predict fidelity on real data"),
        "{line}"
    );
    assert!(
        !real.report.summary_line().contains("synthetic"),
        "{}",
        real.report.summary_line()
    );
}

#[test]
fn a_uint8_input_read_through_a_cast_quantizes_with_and_without_calibration_data() {
    let model = fixture("byte_classifier_uint8.onnx");
    let names = ["bytes".to_owned()];
    let full = |w: Vec<(Array2<u8>, Array2<bool>)>| -> Vec<Vec<SampleValue>> {
        w.into_iter()
            .map(|(b, _)| vec![SampleValue::U8(b.into_dyn())])
            .collect()
    };
    let eval = full(windows(&evaluation_text(), 24));
    let calibration = full(windows(&workspace_file("LICENSE-APACHE"), 20));
    quantize_with_and_without_data(
        &model,
        &Calibration::Data(kenosis_quantize::calibrate::CalibrationData {
            samples: calibration,
            ..Default::default()
        }),
        &eval,
        &names,
    );
}

#[test]
fn integer_calibration_files_of_another_type_are_refused_naming_the_type() {
    let model = fixture("byte_classifier_uint8.onnx");
    let bytes = std::fs::read(&model).expect("fixture");
    let dir = tempfile::tempdir().expect("tempdir");
    let wrong = dir.path().join("a.npy");
    ArrayD::<i64>::zeros(ndarray::IxDyn(&[1, SEQ]))
        .write_npy(std::fs::File::create(&wrong).expect("file"))
        .expect("npy");
    let err = quantize(
        &model,
        &bytes,
        &Calibration::NpyDir(dir.path().to_owned()),
        &QuantizeOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("a.npy"), "{err}");
    assert!(err.contains("expects uint8 (|u1) data"), "{err}");
}
