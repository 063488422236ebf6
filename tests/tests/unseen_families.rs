//! Model families Kenosis was not tuned on, built here as their exporters write them, with
//! default options and real-ish calibration data: the build must never ship a silently
//! worse model.
//! - An audio model that computes its own spectrogram from raw 16 kHz speech (a MatMul DFT,
//!   `Pow`, `Log` of small values) and regresses three scores: INT8 of the spectral front
//!   end is far off, and only the held-out, task-shaped judge (error relative to the
//!   scores' range) says so. The default floor must send what breaks it back to FP32, or
//!   ship FP32 with a warning, without a rule naming the pattern.
//! - An attention block whose mask comes from a distance table with `-inf` in row 0: the
//!   mask must survive exactly, and no line may print `inf` or `NaN`.
//!
//! The speech is `tests/data/speech_16k.npy`: espeak-ng reading the MIT licence, 16 kHz
//! int16 mono (see tests/data/README.md).

use std::path::Path;

use kenosis_eval::audio::{audio_scorer, WINDOW};
use kenosis_eval::graph::{model, node, node_with};
use kenosis_eval::*;
use kenosis_quantize::calibrate::{CalibrationData, SampleValue};
use kenosis_quantize::onnx::{self, attr, tensor, GraphProto};
use kenosis_quantize::{quantize, Calibration, QuantizeOptions};
use ndarray::{ArrayD, IxDyn};
use ort::session::builder::GraphOptimizationLevel;

/// Windows of [`WINDOW`] samples of the committed speech, scaled to [-1, 1), hopping half
/// a window.
fn speech_windows() -> Vec<ArrayD<f32>> {
    let path = workspace_root().join("tests/data/speech_16k.npy");
    let pcm: ndarray::Array1<i16> = ndarray_npy::read_npy(&path).expect("speech_16k.npy");
    let pcm: Vec<f32> = pcm.iter().map(|&s| f32::from(s) / 32768.0).collect();
    (0..)
        .map(|k| k * WINDOW / 2)
        .take_while(|start| start + WINDOW <= pcm.len())
        .map(|start| {
            ArrayD::from_shape_vec(IxDyn(&[1, WINDOW]), pcm[start..start + WINDOW].to_vec())
                .expect("one window")
        })
        .collect()
}

fn data(samples: &[ArrayD<f32>]) -> CalibrationData {
    CalibrationData {
        samples: samples
            .iter()
            .map(|s| vec![SampleValue::F32(s.clone())])
            .collect(),
        files: Vec::new(),
        synthetic: false,
    }
}

/// The first output of `bytes` on each single-input sample.
fn outputs(bytes: &[u8], samples: &[ArrayD<f32>]) -> Vec<Vec<f32>> {
    let mut s = session(bytes, GraphOptimizationLevel::All, None);
    samples
        .iter()
        .map(|x| {
            let input = ort::value::Tensor::from_array(x.clone()).expect("tensor");
            let out = s.run(ort::inputs![input]).expect("runs");
            let (_, v) = out[0].try_extract_tensor::<f32>().expect("float output");
            v.to_vec()
        })
        .collect()
}

#[test]
fn a_spectral_front_end_is_caught_by_the_default_floor() {
    let fp32 = audio_scorer();
    let windows = speech_windows();
    assert!(windows.len() >= 40, "{} windows", windows.len());
    // 30 calibrate (6 of them held out by default), the rest evaluate.
    let (calib, eval) = windows.split_at(30);
    let path = Path::new("audio_scorer.onnx");
    let q = quantize(
        path,
        &fp32,
        &Calibration::Data(data(calib)),
        &QuantizeOptions::default(),
    )
    .expect("quantizes");
    let line = q.report.summary_line();
    println!("{line}");
    let f = q.report.fidelity.as_ref().expect("fidelity measured");
    println!(
        "fully quantized {:?}; kept {:?}; most sensitive {:?}",
        f.fully_quantized, f.kept_fp32, f.most_sensitive
    );
    assert!(f.held_out && f.samples == 6, "{line}");
    assert!(line.contains("on 6 held-out samples"), "{line}");
    assert!(!line.contains("inf") && !line.contains("NaN"), "{line}");
    let floor = f.default_floor.expect("the default floor applies");
    // The front end is what INT8 breaks here: fully quantized, the scores are off by more
    // than the floor allows.
    let fully = f.fully_quantized.relative_error.expect("a value output");
    assert!(
        fully > floor.max_relative_error,
        "fully quantized: {fully}; {line}"
    );
    if f.floor_missed {
        assert!(line.contains("warning") && line.contains("FP32"), "{line}");
    } else {
        let held = f.measured.relative_error.expect("a value output");
        assert!(held <= floor.max_relative_error, "{held}; {line}");
        assert!(!f.kept_fp32.is_empty(), "{line}");
    }

    // On windows the build never saw: the scores stay within 2% of their range (the floor
    // is 1% on 6 held-out windows; twice that allows for their sampling error).
    let reference = outputs(&fp32, eval);
    let shipped = outputs(&q.bytes, eval);
    let all: Vec<f32> = reference.iter().flatten().copied().collect();
    let range =
        all.iter().copied().fold(f32::MIN, f32::max) - all.iter().copied().fold(f32::MAX, f32::min);
    let error: f64 = (reference.iter().flatten().zip(shipped.iter().flatten()))
        .map(|(a, b)| f64::from((a - b).abs()))
        .sum::<f64>()
        / all.len() as f64
        / f64::from(range);
    println!(
        "evaluation: mean error {:.4} of the range {range:.3}",
        error
    );
    assert!(
        error <= 0.02,
        "{error} of range on {} windows; {line}",
        eval.len()
    );
}

/// Tokens of the attention test.
const TOKENS: usize = 16;
/// Width of its embeddings.
const WIDTH: usize = 64;

/// Token ids `[1, TOKENS]` and distance buckets `[TOKENS, TOKENS]` (both int64) → embedding
/// lookup → one attention head whose scores get a bias looked up in a distance table whose
/// row 0 is `-inf` (bucket 0 masks a pair out) → Softmax → weighted values → output
/// projection. Seeded random weights.
fn masked_attention() -> Vec<u8> {
    let mut g = GraphProto {
        name: Some("masked_attention".into()),
        ..Default::default()
    };
    let mut rng = Uniform(541);
    let mut weights = |name: &str, dims: &[i64], scale: f32| {
        let n: i64 = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| scale * rng.draw()).collect();
        tensor::from_f32(name, dims, &v)
    };
    let w = WIDTH as i64;
    g.initializer.extend([
        weights("embedding", &[1000, w], 1.0),
        weights("wq", &[w, w], 0.15),
        weights("wk", &[w, w], 0.15),
        weights("wv", &[w, w], 0.15),
        weights("wo", &[w, w], 0.15),
    ]);
    let mut distance: Vec<f32> = (0..8).map(|k| -0.1 * k as f32).collect();
    distance[0] = f32::NEG_INFINITY;
    g.initializer
        .push(tensor::from_f32("distance_table", &[8], &distance));
    node_with(&mut g, "Gather", &["embedding", "ids"], "x", vec![]);
    node(&mut g, "MatMul", &["x", "wq"], "q");
    node(&mut g, "MatMul", &["x", "wk"], "k");
    node(&mut g, "MatMul", &["x", "wv"], "v");
    node_with(
        &mut g,
        "Transpose",
        &["k"],
        "kt",
        vec![attr::make_ints("perm", &[0, 2, 1])],
    );
    node(&mut g, "MatMul", &["q", "kt"], "scores");
    node_with(
        &mut g,
        "Gather",
        &["distance_table", "buckets"],
        "bias",
        vec![],
    );
    node(&mut g, "Add", &["scores", "bias"], "masked");
    node_with(
        &mut g,
        "Softmax",
        &["masked"],
        "attention",
        vec![attr::make_int("axis", -1)],
    );
    node(&mut g, "MatMul", &["attention", "v"], "context");
    node(&mut g, "MatMul", &["context", "wo"], "y");
    g.input = vec![
        onnx::tensor_info("ids", onnx::DataType::Int64, Some(&[1, TOKENS as i64])),
        onnx::tensor_info(
            "buckets",
            onnx::DataType::Int64,
            Some(&[TOKENS as i64, TOKENS as i64]),
        ),
    ];
    g.output = vec![
        onnx::tensor_info("y", onnx::DataType::Float, None),
        onnx::tensor_info("attention", onnx::DataType::Float, None),
    ];
    model(g)
}

#[test]
fn a_minus_inf_mask_table_stays_exact() {
    let fp32 = masked_attention();
    let mut rng = Uniform(7);
    let samples: Vec<Vec<SampleValue>> = (0..20)
        .map(|_| {
            let ids: Vec<i64> = (0..TOKENS)
                .map(|_| ((rng.draw() + 1.0) * 499.0) as i64)
                .collect();
            // Bucket of |i - j| (capped at 7); a random quarter of the pairs, never the
            // diagonal, is masked with bucket 0.
            let buckets: Vec<i64> = (0..TOKENS * TOKENS)
                .map(|k| {
                    let (i, j) = (k / TOKENS, k % TOKENS);
                    if i != j && rng.draw() < -0.5 {
                        0
                    } else {
                        (i.abs_diff(j) as i64).clamp(1, 7)
                    }
                })
                .collect();
            vec![
                SampleValue::I64(ArrayD::from_shape_vec(IxDyn(&[1, TOKENS]), ids).unwrap()),
                SampleValue::I64(
                    ArrayD::from_shape_vec(IxDyn(&[TOKENS, TOKENS]), buckets).unwrap(),
                ),
            ]
        })
        .collect();
    let data = CalibrationData {
        samples,
        files: Vec::new(),
        synthetic: false,
    };
    // One small head runs no faster in INT8: without `fp32_where_faster = false` the speed
    // check would ship FP32, and this test checks what the INT8 build does with the mask.
    let q = quantize(
        Path::new("masked_attention.onnx"),
        &fp32,
        &Calibration::Data(data),
        &QuantizeOptions {
            fp32_where_faster: false,
            ..QuantizeOptions::default()
        },
    )
    .expect("quantizes");
    let line = q.report.summary_line();
    println!("{line}");
    assert!(!line.contains("inf ") && !line.contains("NaN"), "{line}");
    let f = q.report.fidelity.as_ref().expect("fidelity measured");
    assert!(f.held_out, "{line}");
    assert_eq!(f.measured.non_finite_mismatches, 0, "{line}");
    assert!(f.measured.mean_cosine.is_finite(), "{line}");
    // The lookup in the mask table stays FP32, naming the table.
    let lookup = (q.report.nodes_fp32.iter())
        .find(|n| n.name == "bias")
        .expect("the mask lookup is kept FP32");
    assert!(
        lookup.reason.to_string().contains("distance_table")
            && lookup.reason.to_string().contains("non-finite"),
        "{}",
        lookup.reason
    );
    // The attention map is a score output, judged by its rows' arg-max.
    let attention = (f.outputs.iter())
        .find(|o| o.name == "attention")
        .expect("attention judged");
    assert_eq!(attention.kind, kenosis_quantize::OutputKind::Scores);
    assert!(attention.decisive_rows > 0);
}
