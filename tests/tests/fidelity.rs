//! INT8 models against their FP32 originals in ONNX Runtime, on real ImageNet images:
//! calibration on the first 100 images of `imagenet-224` (sorted file order), evaluation on
//! the last 200. Also checks that ORT fuses every Conv into QLinearConv and that the fused
//! integer kernels compute what the QDQ graph means (optimized vs unoptimized outputs).

use kenosis_eval::*;
use kenosis_quantize::quantize::rewrite::RewriteSummary;
use kenosis_quantize::{quantize, Calibration, QuantizeOptions};
use ort::session::builder::GraphOptimizationLevel;

struct Expect {
    model: &'static str,
    pre: Preprocess,
    min_agreement: f64,
    min_mean_cosine: f64,
}

fn check(expect: Expect) {
    let Some(shared) = shared_dir() else { return };
    let model_path = shared.join("models").join(expect.model);
    let fp32 = std::fs::read(&model_path).expect("model file");
    let files = imagenet_files(&shared);
    assert!(
        files.len() >= 300,
        "need at least 300 images, found {}",
        files.len()
    );
    let calib = load_batch(&files[..100], expect.pre);
    let eval = load_batch(&files[files.len() - 200..], expect.pre);

    // Default options on this machine's target (x86-64: reduce-range).
    let q = quantize(
        &model_path,
        &fp32,
        &Calibration::Data(calibration(&calib)),
        &QuantizeOptions::default(),
    )
    .expect("quantizes");

    let tmp = tempfile::tempdir().expect("tempdir");
    let optimized = tmp.path().join("optimized.onnx");
    let mut reference = session(&fp32, GraphOptimizationLevel::All, None);
    let mut int8 = session(&q.bytes, GraphOptimizationLevel::All, Some(&optimized));
    let mut int8_plain = session(&q.bytes, GraphOptimizationLevel::Disable, None);

    // Every Conv fused: QLinearConv only, no float Conv (plain, fused or NCHWc) left.
    let ops = op_types(&optimized);
    let convs = q.report.ops_quantized.get("Conv").copied().unwrap_or(0);
    let (qlinear, float_convs) = conv_counts(&ops);
    assert!(convs > 0);
    assert_eq!(
        qlinear, convs,
        "{}: {qlinear} QLinearConv for {convs} quantized Convs; ops: {ops:?}",
        expect.model
    );
    assert_eq!(
        float_convs, 0,
        "{}: float convs remain; ops: {ops:?}",
        expect.model
    );

    // Every fused Concat copies bytes: each input already has the output's scale and zero
    // point (SqueezeNet's fire modules: eight Concats whose inputs have no other reader).
    let requantizing = requantizing_concats(&optimized);
    assert!(
        requantizing.is_empty(),
        "{}: QLinearConcat requantizes: {requantizing:?}",
        expect.model
    );

    // Reduce-range where the kernel needs it: the image stem, whose uint8 input codes span the
    // whole range, keeps 7-bit codes; depthwise Convs (ORT's kernel for them has no int16 pair
    // sums) get 8 bits, and so do the dense Convs whose simulated pair saturation costs less
    // than the extra bit saves: on these networks, some.
    let peaks = weight_code_peaks(&q.bytes);
    if QuantizeOptions::default().reduce_range {
        assert!(
            (1..=64).contains(&peaks.stem),
            "{}: {peaks:?}",
            expect.model
        );
        assert!(
            peaks.depthwise.is_none_or(|d| d == 127),
            "{}: {peaks:?}",
            expect.model
        );
        assert_eq!(peaks.other_dense, 127, "{}: {peaks:?}", expect.model);
        let full_range = q.report.rewrite.weights_full_range;
        assert!(full_range > 0, "{}: {full_range}", expect.model);
    }

    let f = compare(&mut reference, &mut int8, &eval);
    eprintln!(
        "{}: top-1 agreement {:.1}%, mean cosine {:.4}, min cosine {:.4}",
        expect.model,
        f.top1_agreement * 100.0,
        f.mean_cosine,
        f.min_cosine
    );
    assert!(
        f.top1_agreement >= expect.min_agreement,
        "{}: agreement {:.3} < {}",
        expect.model,
        f.top1_agreement,
        expect.min_agreement
    );
    assert!(
        f.mean_cosine >= expect.min_mean_cosine,
        "{}: mean cosine {:.4} < {}",
        expect.model,
        f.mean_cosine,
        expect.min_mean_cosine
    );

    // Fused integer kernels vs the QDQ graph evaluated literally: a wrong bias scale, kernel
    // saturation or a placement that only breaks once kernels fuse shows up here.
    let k = compare(&mut int8_plain, &mut int8, &eval);
    eprintln!(
        "{}: optimized vs unoptimized INT8 mean cosine {:.5}",
        expect.model, k.mean_cosine
    );
    assert!(
        k.mean_cosine >= 0.995,
        "{}: fused kernels diverge from QDQ semantics: {:.4}",
        expect.model,
        k.mean_cosine
    );
}

/// Largest |int8 weight code| per kind of weighted node in a QDQ model.
#[derive(Debug)]
struct CodePeaks {
    /// Depthwise Convs with multiplier one (`None` when there are none).
    depthwise: Option<i32>,
    /// The Conv whose input is the quantized graph input.
    stem: i32,
    /// Every other Conv/Gemm/MatMul.
    other_dense: i32,
}

fn weight_code_peaks(model: &[u8]) -> CodePeaks {
    use kenosis_quantize::onnx::ModelProto;
    use prost::Message;
    let graph = ModelProto::decode(model)
        .expect("decodes")
        .graph
        .expect("graph");
    let producer = |name: &str| {
        graph
            .node
            .iter()
            .find(|n| n.output.iter().any(|o| o == name))
    };
    // Graph input -> QuantizeLinear -> DequantizeLinear -> Conv.
    let reads_graph_input = |data: &str| {
        producer(data)
            .and_then(|dq| producer(&dq.input[0]))
            .is_some_and(|q| graph.input.iter().any(|i| i.name() == q.input[0]))
    };
    let mut peaks = CodePeaks {
        depthwise: None,
        stem: 0,
        other_dense: 0,
    };
    for node in &graph.node {
        if !matches!(node.op_type(), "Conv" | "Gemm" | "MatMul") {
            continue;
        }
        let Some(dq) = node
            .input
            .get(1)
            .and_then(|w| producer(w))
            .filter(|dq| dq.op_type() == "DequantizeLinear")
        else {
            continue;
        };
        let Some(w) = graph.initializer.iter().find(|t| t.name() == dq.input[0]) else {
            continue;
        };
        let peak = w
            .raw_data()
            .iter()
            .map(|&b| (b as i8 as i32).abs())
            .max()
            .unwrap_or(0);
        let group = node
            .attribute
            .iter()
            .find(|a| a.name() == "group")
            .map_or(1, |a| a.i());
        if group > 1 && w.dims.first() == Some(&group) && w.dims.get(1) == Some(&1) {
            peaks.depthwise = Some(peaks.depthwise.unwrap_or(0).max(peak));
        } else if reads_graph_input(&node.input[0]) {
            peaks.stem = peaks.stem.max(peak);
        } else {
            peaks.other_dense = peaks.other_dense.max(peak);
        }
    }
    peaks
}

/// Names of the QLinearConcat nodes in the ORT-optimized model at `path` with an input whose
/// scale or zero point differs from the output's.
fn requantizing_concats(path: &std::path::Path) -> Vec<String> {
    use kenosis_quantize::onnx::{ModelProto, TensorProto};
    use prost::Message;
    let model = ModelProto::decode(std::fs::read(path).expect("optimized model").as_slice())
        .expect("decodes");
    let graph = model.graph.expect("graph");
    let value = |name: &str| {
        let t: &TensorProto = graph
            .initializer
            .iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("initializer {name}"));
        (
            t.elem_type(),
            t.raw_data().to_vec(),
            t.float_data.clone(),
            t.int32_data.clone(),
        )
    };
    graph
        .node
        .iter()
        .filter(|n| n.op_type() == "QLinearConcat")
        .filter(|n| {
            // Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input.
            n.input[2..]
                .chunks(3)
                .any(|x| value(&x[1]) != value(&n.input[0]) || value(&x[2]) != value(&n.input[1]))
        })
        .map(|n| n.name().to_owned())
        .collect()
}

#[test]
fn efficientnet_lite0_matches_fp32() {
    check(Expect {
        model: "efficientnet_lite0.onnx",
        pre: Preprocess::RgbCentered,
        min_agreement: 0.93,
        min_mean_cosine: 0.975,
    });
}

#[test]
fn squeezenet_opset7_matches_fp32() {
    check(Expect {
        model: "squeezenet1.0.onnx",
        pre: Preprocess::BgrMeanSubtracted,
        min_agreement: 0.92,
        min_mean_cosine: 0.985,
    });
}

/// Quantizes a shared model with one option on and off (calibration on the first 100
/// ImageNet images), lets `check_rewrite` inspect each build's rewrite summary, and asserts
/// that turning the option on cuts the cosine gap to FP32 on the last 100 images by at least
/// 20%.
fn assert_option_cuts_cosine_gap(
    what: &str,
    model: &str,
    preprocess: Preprocess,
    set: fn(&mut QuantizeOptions, bool),
    check_rewrite: fn(bool, &RewriteSummary),
) {
    let Some(shared) = shared_dir() else { return };
    let model_path = shared.join("models").join(model);
    let fp32 = std::fs::read(&model_path).expect("model file");
    let files = imagenet_files(&shared);
    let calib = calibration(&load_batch(&files[..100], preprocess));
    let eval = load_batch(&files[files.len() - 100..], preprocess);
    let mut reference = session(&fp32, GraphOptimizationLevel::All, None);
    let mut fidelity = |on: bool| {
        let mut options = QuantizeOptions::default();
        set(&mut options, on);
        let q = quantize(
            &model_path,
            &fp32,
            &Calibration::Data(calib.clone()),
            &options,
        )
        .expect("quantizes");
        check_rewrite(on, &q.report.rewrite);
        compare(
            &mut reference,
            &mut session(&q.bytes, GraphOptimizationLevel::All, None),
            &eval,
        )
    };
    let (with, without) = (fidelity(true), fidelity(false));
    eprintln!(
        "mean cosine with {what} {:.4}, without {:.4}",
        with.mean_cosine, without.mean_cosine
    );
    assert!(
        1.0 - with.mean_cosine < 0.8 * (1.0 - without.mean_cosine),
        "{what} should cut the cosine gap by at least 20%: {:.4} vs {:.4}",
        with.mean_cosine,
        without.mean_cosine
    );
}

/// Bias correction must lower the INT8 model's measured output error on a real network
/// (EfficientNet-Lite0's depthwise convs are where weight quantization shifts means most).
#[test]
fn bias_correction_lowers_output_error_on_efficientnet() {
    assert_option_cuts_cosine_gap(
        "bias correction",
        "efficientnet_lite0.onnx",
        Preprocess::RgbCentered,
        |o, on| o.bias_correction = on,
        |on, rewrite| {
            let corrected = rewrite.biases_corrected;
            assert_eq!(corrected > 0, on, "biases corrected: {corrected}");
        },
    );
}

/// GPTQ rounding must lower the INT8 model's measured output error on a network whose
/// convs are all ungrouped (SqueezeNet 1.0: every one of its 26 Conv weights).
#[test]
fn gptq_rounding_lowers_output_error_on_squeezenet() {
    assert_option_cuts_cosine_gap(
        "GPTQ rounding",
        "squeezenet1.0.onnx",
        Preprocess::BgrMeanSubtracted,
        |o, on| o.gptq_rounding = on,
        |on, rewrite| {
            let expected = if on { 26 } else { 0 };
            assert_eq!(rewrite.weights_gptq_rounded, expected);
        },
    );
}

/// An artifact measured on the QDQ reference (what a build machine whose integer kernels
/// saturate uses for an exact-kernel target such as aarch64): ORT runs it with no integer
/// kernel, and the report's cosine is that unfused graph's, on the held-out fifth.
#[test]
fn the_qdq_reference_measures_the_artifact_unfused() {
    let Some(shared) = shared_dir() else { return };
    let model_path = shared.join("models/efficientnet_lite0.onnx");
    let fp32 = std::fs::read(&model_path).expect("model file");
    let files = imagenet_files(&shared);
    let samples = load_batch(&files[..20], Preprocess::RgbCentered);
    let options = QuantizeOptions {
        reduce_range: false,
        evaluation: kenosis_request::kernels::Evaluation::QdqReference,
        // The fidelity report is under test: a build whose speed check ships FP32 has none.
        speed_check: false,
        ..QuantizeOptions::default()
    };
    let q = quantize(
        &model_path,
        &fp32,
        &Calibration::Data(calibration(&samples)),
        &options,
    )
    .expect("quantizes");
    let fidelity = q.report.fidelity.as_ref().expect("measured");
    assert_eq!(
        fidelity.evaluation,
        kenosis_request::kernels::Evaluation::QdqReference
    );
    assert!(
        q.report
            .summary_line()
            .contains("measured on QDQ reference arithmetic"),
        "{}",
        q.report.summary_line()
    );

    // No integer kernel runs the reference.
    let tmp = tempfile::tempdir().expect("tempdir");
    let optimized = tmp.path().join("reference.onnx");
    let mut reference = session_with_config(
        &q.bytes,
        GraphOptimizationLevel::All,
        Some(&optimized),
        kenosis_request::kernels::Evaluation::QdqReference.session_config(),
    );
    let ops = op_types(&optimized);
    assert_eq!(
        conv_counts(&ops).0,
        0,
        "QLinearConv in the reference: {ops:?}"
    );
    assert!(ops.iter().any(|op| op == "DequantizeLinear"), "{ops:?}");

    // The report's cosine is the reference's on the held-out fifth: 4 of the 20, spread
    // over their order.
    let mut fp32_session = session(&fp32, GraphOptimizationLevel::All, None);
    let mut order = samples.clone();
    kenosis_quantize::calibrate::rules::spread_to_end(&mut order, fidelity.samples);
    let held_out = &order[order.len() - fidelity.samples..];
    let cosine: f64 = held_out
        .iter()
        .map(|x| {
            kenosis_quantize::fidelity::cosine(&run(&mut fp32_session, x), &run(&mut reference, x))
        })
        .sum::<f64>()
        / held_out.len() as f64;
    // Tight enough to tell the fused kernels apart: on a VNNI machine, where both are
    // exact, they differ from the reference in the fifth decimal through float rounding.
    assert!(
        (cosine - fidelity.measured.mean_cosine).abs() < 1e-6,
        "report {:.5}, reference {cosine:.5}",
        fidelity.measured.mean_cosine
    );
}
