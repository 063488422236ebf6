//! all-mpnet-base-v2 (MPNet-base, 110M parameters, built into ONNX by `kenosis_eval::mpnet`)
//! quantized with default options, calibrated on 50 windows of English prose and evaluated
//! on 30 windows of other texts (issue 56).
//!
//! The model is fetched by hand and is not in CI: without it the test skips with a note,
//! under `CI=true` too (`kenosis_eval::mpnet::fetched_dir`).

use std::path::Path;

use kenosis_eval::mpnet::{self, SENTENCE_OUTPUT, TOKENS_OUTPUT};
use kenosis_eval::prose::{self, CALIBRATION_TEXTS, EVALUATION_TEXTS};
use kenosis_eval::{run_sample, session};
use kenosis_quantize::calibrate::{CalibrationData, SampleValue};
use kenosis_quantize::fidelity::cosine;
use kenosis_quantize::{quantize, Calibration, QuantizeOptions};
use ort::session::builder::GraphOptimizationLevel;

/// Tokens per window: `<s>`, 62 tokens of running text, `</s>`.
const TOKENS: usize = 64;

/// Width of MPNet-base's embeddings.
const DIM: usize = 768;

/// `count` windows of `texts` framed by MPNet's `<s>` and `</s>`, as model inputs.
fn windows(tokenizer: &Path, texts: &[&str], count: usize) -> Option<Vec<Vec<SampleValue>>> {
    let files = prose::licence_files(texts)?;
    let tok = tokenizers::Tokenizer::from_file(tokenizer).expect("MPNet's tokenizer.json");
    let id = |t: &str| i64::from(tok.token_to_id(t).expect("MPNet's frame tokens"));
    let (open, close) = (id("<s>"), id("</s>"));
    let framed = prose::windows(tokenizer, &files, count, TOKENS)
        .into_iter()
        .map(|mut w| {
            let n = w.len();
            (w[0], w[n - 1]) = (open, close);
            prose::bert_inputs(&w)
        })
        .collect();
    Some(framed)
}

/// With default options MPNet ships INT8 with dynamic activations. Without SmoothQuant's
/// migration its dynamic build measured 0.83 on the held-out windows (the FFN output
/// projections' GELU inputs carry outlier channels that one per-tensor range spends its
/// steps on), below static (0.95) and the default floor (0.98), and the build shipped FP32;
/// with it the dynamic build is the closer one and meets the floor. The per-group choice
/// then keeps only flips that measure closer still.
#[test]
fn mpnet_ships_int8_with_migrated_dynamic_activations() {
    let Some(dir) = mpnet::fetched_dir() else {
        return;
    };
    let models = dir.parent().expect("the fetched-models folder");
    let path = mpnet::ensure_onnx(models).expect("MPNet's ONNX graph");
    let tokenizer = dir.join("tokenizer.json");
    let (Some(calibration), Some(evaluation)) = (
        windows(&tokenizer, &CALIBRATION_TEXTS, 50),
        windows(&tokenizer, &EVALUATION_TEXTS, 30),
    ) else {
        return;
    };
    let fp32 = std::fs::read(&path).expect("the ONNX file");
    let data = CalibrationData {
        samples: calibration,
        files: Vec::new(),
        synthetic: false,
    };
    let q = quantize(
        &path,
        &fp32,
        &Calibration::Data(data),
        &QuantizeOptions::default(),
    )
    .expect("quantizes");
    eprintln!("{}", q.report.summary_line());
    assert!(q.report.shipped_fp32().is_none(), "the floor is met");
    let a = q.report.activations.clone().expect("both modes compared");
    let (st, dy) = (
        a.static_cosine.expect("static built"),
        a.dynamic_cosine.expect("dynamic built"),
    );
    assert_eq!(a.mode, "dynamic", "{a:?}");
    assert!(dy >= 0.98, "{a:?}");
    if let Some(mixed) = a.mixed_cosine {
        assert!(mixed > dy, "{a:?}");
    }
    let migrated = q.report.rewrite.dynamic.smoothed_inputs;
    assert!(migrated >= 24, "{migrated} of 48 inputs migrated");

    // What the artifact does on text it was neither calibrated nor judged on.
    let names: Vec<String> = vec!["input_ids".into(), "attention_mask".into()];
    let mut a32 = session(&fp32, GraphOptimizationLevel::All, None);
    let mut a8 = session(&q.bytes, GraphOptimizationLevel::All, None);
    let (mut pooled, mut tokens) = (Vec::new(), Vec::new());
    for s in &evaluation {
        let (x, y) = (
            run_sample(&mut a32, &names, s),
            run_sample(&mut a8, &names, s),
        );
        pooled.push(cosine(&x[SENTENCE_OUTPUT], &y[SENTENCE_OUTPUT]));
        let rows = x[TOKENS_OUTPUT]
            .chunks(DIM)
            .zip(y[TOKENS_OUTPUT].chunks(DIM));
        tokens.extend(rows.map(|(u, v)| cosine(u, v)));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    eprintln!(
        "MPNet on {} evaluation windows: pooled cosine {:.4} (min {:.4}), token cosine {:.4}, \
         {} bytes (FP32 {}); held-out: static {st:.4}, dynamic {dy:.4}, mixed {:?}",
        evaluation.len(),
        mean(&pooled),
        pooled.iter().copied().fold(1.0, f64::min),
        mean(&tokens),
        q.bytes.len(),
        fp32.len(),
        a.mixed_cosine,
    );
    // Every MatMul int8: a quarter of FP32, and the meaning kept on unseen text.
    assert!(q.bytes.len() < fp32.len() / 3, "{} bytes", q.bytes.len());
    assert!(mean(&pooled) >= 0.98, "pooled cosine {:.4}", mean(&pooled));
}
