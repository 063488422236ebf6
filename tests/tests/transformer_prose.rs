//! Transformer encoders calibrated and evaluated on real English prose (see
//! `kenosis_eval::prose`): the targets of issue 41 for the default `activations = "auto"`.
//!
//! paraphrase-MiniLM-L3-v2 comes from `../shared/fetch-models.sh` (`cargo xtask test`
//! fetches it); without it, or without the licence texts, the test skips with a note, except
//! under `CI=true`.

use std::path::PathBuf;

use kenosis_eval::prose::{self, CALIBRATION_TEXTS, EVALUATION_TEXTS};
use kenosis_eval::{fetched_model, run_sample, session};
use kenosis_quantize::calibrate::{CalibrationData, SampleValue};
use kenosis_quantize::fidelity::cosine;
use kenosis_quantize::quantize::reason::Unplannable;
use kenosis_quantize::{quantize, Calibration, FloatReason, OutputKind, QuantizeOptions};
use kenosis_request::kernels::{IntegerKernels, TargetCpu};
use ort::session::builder::GraphOptimizationLevel;

/// Tokens per window: `[CLS]`, 62 tokens of running text, `[SEP]`.
const TOKENS: usize = 64;

/// The defaults of a build for this machine's CPU class, as `-C target-cpu=native` gives
/// them: on an x86 CPU with VNNI, the VNNI class and 8-bit weights.
fn native_options() -> QuantizeOptions {
    let defaults = QuantizeOptions::default();
    if cfg!(target_arch = "x86_64") && IntegerKernels::of_host() == IntegerKernels::Exact {
        let cpu = TargetCpu::of_target("", "avx512vnni");
        QuantizeOptions {
            target_cpu: cpu,
            reduce_range: cpu.integer_kernels().wants_reduce_range(),
            ..defaults
        }
    } else {
        defaults
    }
}

/// Per evaluation window, the cosine of the mean-pooled embedding (output `pooled`), and per
/// token the cosine of its `dim`-wide embedding (output `tokens`).
fn cosines(
    fp32: &[u8],
    int8: &[u8],
    samples: &[Vec<SampleValue>],
    (tokens, pooled, dim): (usize, usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let names: Vec<String> = vec!["input_ids".into(), "attention_mask".into()];
    let mut a = session(fp32, GraphOptimizationLevel::All, None);
    let mut b = session(int8, GraphOptimizationLevel::All, None);
    let (mut pooled_cos, mut token_cos) = (Vec::new(), Vec::new());
    for s in samples {
        let (x, y) = (run_sample(&mut a, &names, s), run_sample(&mut b, &names, s));
        pooled_cos.push(cosine(&x[pooled], &y[pooled]));
        for (u, v) in x[tokens].chunks(dim).zip(y[tokens].chunks(dim)) {
            token_cos.push(cosine(u, v));
        }
    }
    (pooled_cos, token_cos)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// MiniLM-L3 with default options on this CPU class, calibrated on 50 windows of three
/// licences, evaluated on 100 windows of five others. Issue 41's targets: mean-pooled
/// cosine ≥ 0.995 and token cosine ≥ 0.99 (and at least ORT `quantize_dynamic`
/// per-channel's, which `cargo xtask bench` compares), every MatMul with a constant weight
/// and the word and position embedding tables int8, no float weight of 4096 values or more.
#[test]
fn minilm_on_prose_meets_the_transformer_targets() {
    build_and_check(&native_options());
}

/// The same targets for the defaults of a generic x86-64 build (no `-C target-cpu`), whose
/// weights must not saturate the `VPMADDUBSW` pairs of x86 CPUs without VNNI.
#[test]
#[cfg(target_arch = "x86_64")]
fn minilm_generic_x86_build_meets_the_transformer_targets() {
    let options = QuantizeOptions::default();
    assert_eq!(options.target_cpu, TargetCpu::X86);
    assert!(options.reduce_range);
    build_and_check(&options);
}

/// Quantizes MiniLM-L3 with `options`, calibrated on prose, and checks the targets.
fn build_and_check(options: &QuantizeOptions) {
    let Some((path, calibration, evaluation)) = minilm_and_prose() else {
        return;
    };
    let fp32 = std::fs::read(&path).expect("model file");
    let q = quantize(&path, &fp32, &Calibration::Data(calibration), options)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    check_default_build(&fp32, &q, &evaluation);
}

/// The model, 50 calibration windows and 100 evaluation windows; `None` to skip.
fn minilm_and_prose() -> Option<(PathBuf, CalibrationData, Vec<Vec<SampleValue>>)> {
    let path = fetched_model("paraphrase-MiniLM-L3-v2.onnx")?;
    let calib_files = prose::licence_files(&CALIBRATION_TEXTS)?;
    let eval_files = prose::licence_files(&EVALUATION_TEXTS)?;
    let tokenizer = prose::minilm_tokenizer_path();
    let calibration = CalibrationData {
        samples: (prose::windows(&tokenizer, &calib_files, 50, TOKENS).iter())
            .map(|w| prose::bert_inputs(w))
            .collect(),
        files: Vec::new(),
        synthetic: false,
    };
    let evaluation: Vec<Vec<SampleValue>> = (prose::windows(&tokenizer, &eval_files, 100, TOKENS)
        .iter())
    .map(|w| prose::bert_inputs(w))
    .collect();
    Some((path, calibration, evaluation))
}

/// The checks of the default build `q` of MiniLM-L3 (`fp32`).
fn check_default_build(
    fp32: &[u8],
    q: &kenosis_quantize::Quantized,
    evaluation: &[Vec<SampleValue>],
) {
    eprintln!("{}", q.report.summary_line());

    let activations = q
        .report
        .activations
        .as_ref()
        .expect("the choice is reported");
    assert_eq!(activations.mode, "dynamic", "{activations:?}");
    // 3 layers × (query, key, value, attention output, FFN in, FFN out): dynamic, but for
    // the groups the per-group choice measured closer in static mode.
    let flipped = activations.flipped.len();
    assert_eq!(
        q.report.rewrite.dynamic.matmuls + flipped,
        18,
        "{:?}",
        q.report.rewrite
    );
    assert_eq!(
        q.report.rewrite.dynamic.tables, 2,
        "word and position tables"
    );
    assert_eq!(q.report.rewrite.dynamic_nodes.len() + flipped, 18);
    // SmoothQuant's migration lowers the expected error of some groups' outlier channels.
    assert!(
        q.report.rewrite.dynamic.smoothed_inputs > 0,
        "{:?}",
        q.report.rewrite.dynamic
    );
    // The token states and the pooled sentence vector are embeddings, judged by cosine.
    let fidelity = q
        .report
        .fidelity
        .as_ref()
        .expect("measured on held-out windows");
    let kinds: Vec<_> = fidelity
        .outputs
        .iter()
        .map(|o| (o.name.as_str(), o.kind))
        .collect();
    assert!(
        (kinds.iter()).any(|&(n, k)| n == "onnx::Shape_422" && k == OutputKind::Embedding),
        "{kinds:?}"
    );
    // Static MatMuls are exactly the flips the per-group choice measured closer.
    let mut static_matmuls = q.report.rewrite.static_matmuls.clone();
    static_matmuls.sort_unstable();
    assert_eq!(static_matmuls, activations.flipped);
    assert!(
        !(q.report.nodes_fp32.iter()).any(|n| n.op_type == "MatMul"
            && !matches!(
                n.reason,
                FloatReason::Unplannable(Unplannable::ComputedWeight | Unplannable::Bias)
            )),
        "a MatMul with a constant weight left FP32: {:?}",
        q.report.nodes_fp32
    );
    // Size: every weight of 4096 values or more is stored as int8 (ORT's dynamic quantizer
    // stores the same tensors; `cargo xtask bench` compares the bytes).
    let artifact = {
        use prost::Message;
        kenosis_quantize::onnx::ModelProto::decode(q.bytes.as_slice()).expect("artifact decodes")
    };
    let large_float: Vec<(&str, usize)> =
        (artifact.graph.as_ref().expect("graph").initializer.iter())
            .filter(|t| t.elem_type() == kenosis_quantize::onnx::DataType::Float)
            .map(|t| (t.name(), t.dims.iter().product::<i64>() as usize))
            .filter(|&(_, n)| n >= kenosis_quantize::quantize::dynamic::MIN_WEIGHTS)
            .collect();
    assert!(
        large_float.is_empty(),
        "float weights left: {large_float:?}"
    );

    // Output 2 is the token embeddings [1, 64, 384], output 3 the mean-pooled one [1, 384].
    let (pooled, tokens) = cosines(fp32, &q.bytes, evaluation, (2, 3, 384));
    let min = pooled.iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!(
        "MiniLM-L3 on 100 held-out prose windows: pooled cosine {:.4} (min {min:.4}), token cosine {:.4}, {} bytes",
        mean(&pooled),
        mean(&tokens),
        q.bytes.len()
    );
    assert!(mean(&pooled) >= 0.995, "pooled cosine {:.4}", mean(&pooled));
    assert!(mean(&tokens) >= 0.99, "token cosine {:.4}", mean(&tokens));
}

/// `weights = "int4"` end to end on MiniLM-L3: every MatMul with a constant weight becomes a
/// `MatMulNBits` that ONNX Runtime runs, the artifact is smaller than the int8 one, and the
/// embeddings stay close to FP32 (the measured figures are in `docs/benchmarks.md`; 0.96 is
/// a floor against a broken packing, which gives cosines near 0).
#[test]
fn minilm_with_int4_weights_builds_runs_and_stays_close() {
    let Some((path, calibration, evaluation)) = minilm_and_prose() else {
        return;
    };
    let fp32 = std::fs::read(&path).expect("model file");
    let build = |weights| {
        // Untimed: int4 runs at about FP32's speed, so under load the speed check may
        // rightly ship FP32, and this test is about the int4 form, not the placement.
        let options = QuantizeOptions {
            weights,
            speed_check: false,
            ..native_options()
        };
        quantize(
            &path,
            &fp32,
            &Calibration::Data(calibration.clone()),
            &options,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let int4 = build(kenosis_build::Weights::Int4 { block_size: 32 });
    let int8 = build(kenosis_build::Weights::Int8);
    eprintln!("{}", int4.report.summary_line());
    assert_eq!(
        int4.report.rewrite.int4_matmuls, 18,
        "{:?}",
        int4.report.rewrite
    );
    let ops = kenosis_eval::optimized_op_types(&int4.bytes);
    assert_eq!(
        ops.iter().filter(|o| *o == "MatMulNBits").count(),
        18,
        "{ops:?}"
    );
    assert!(
        int4.bytes.len() < int8.bytes.len(),
        "int4 {} bytes, int8 {}",
        int4.bytes.len(),
        int8.bytes.len()
    );
    let (pooled, tokens) = cosines(&fp32, &int4.bytes, &evaluation, (2, 3, 384));
    eprintln!(
        "MiniLM-L3 int4 (block 32): pooled cosine {:.4}, token cosine {:.4}, {} bytes (int8 {})",
        mean(&pooled),
        mean(&tokens),
        int4.bytes.len(),
        int8.bytes.len()
    );
    assert!(mean(&pooled) >= 0.96, "pooled cosine {:.4}", mean(&pooled));
}
