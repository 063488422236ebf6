//! The fidelity target keeps the op that causes the error in FP32, found by measurement.

use std::path::Path;

use kenosis_quantize::onnx::{self, tensor, ModelProto};
use kenosis_quantize::{quantize, Calibration, FloatReason, QuantizeOptions};
use prost::Message;
use rand::{Rng, SeedableRng};

/// Whether `reason` is one the fidelity target gives: a node it returned to FP32, one around
/// an activation it left unquantized, or a MatMul it gave int8 weights instead of 4-bit.
fn for_the_target(reason: &FloatReason) -> bool {
    matches!(
        reason,
        FloatReason::FidelityTarget | FloatReason::TargetTensor { .. } | FloatReason::Int8Fallback
    )
}

/// x[1,4,8,8] → Conv `head` (4→8, 3x3) → Relu → Conv `culprit` (8→8, 1x1) → Relu →
/// Conv `tail` (8→4, 1x1) → y (`tail` feeds the output, so placement keeps it FP32).
///
/// `head`'s output channel 7 is always 0 (zero weights, negative bias, ReLU). `culprit`
/// gives that dead channel a weight of 200 in every output channel: harmless in FP32, but
/// each per-channel int8 scale then spans ±200 and the real weights (|w| < 1) round to 0,
/// with 7-bit or 8-bit codes alike (the dead input cannot saturate the kernel, so the
/// reduce-range rule may pick either).
fn model_with_a_culprit() -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut normal = |n: usize, s: f32| -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0f32..1.0) * s).collect()
    };
    let mut head_w = normal(8 * 4 * 9, 0.5);
    head_w[7 * 36..].iter_mut().for_each(|w| *w = 0.0);
    let mut head_b = normal(8, 0.1);
    head_b[7] = -1.0;
    let mut culprit_w = normal(8 * 8, 0.5);
    for o in 0..8 {
        culprit_w[o * 8 + 7] = 200.0;
    }
    let inits = vec![
        tensor::from_f32("head_w", &[8, 4, 3, 3], &head_w),
        tensor::from_f32("head_b", &[8], &head_b),
        tensor::from_f32("culprit_w", &[8, 8, 1, 1], &culprit_w),
        tensor::from_f32("culprit_b", &[8], &normal(8, 0.1)),
        tensor::from_f32("tail_w", &[4, 8, 1, 1], &normal(32, 0.5)),
        tensor::from_f32("tail_b", &[4], &normal(4, 0.1)),
    ];
    let nodes = vec![
        conv("head", "x", "head_w", "head_b", "h", 1),
        relu("head_relu", "h", "hr"),
        conv("culprit", "hr", "culprit_w", "culprit_b", "c", 0),
        relu("culprit_relu", "c", "cr"),
        conv("tail", "cr", "tail_w", "tail_b", "y", 0),
    ];
    four_channel_model("culprit", nodes, inits, 8)
}

/// `nodes` from x[1,4,`side`,`side`] to y of the same shape, as an encoded opset-13 model.
fn four_channel_model(
    name: &str,
    nodes: Vec<onnx::NodeProto>,
    initializer: Vec<onnx::TensorProto>,
    side: i64,
) -> Vec<u8> {
    let shape = [1, 4, side, side];
    opset13_model(onnx::GraphProto {
        name: Some(name.into()),
        node: nodes,
        initializer,
        input: vec![onnx::tensor_info("x", onnx::DataType::Float, Some(&shape))],
        output: vec![onnx::tensor_info("y", onnx::DataType::Float, Some(&shape))],
        ..Default::default()
    })
}

/// Conv `name`: `x` * `w` + `b` → `y`, with `pad` zeros on every side.
fn conv(name: &str, x: &str, w: &str, b: &str, y: &str, pad: i64) -> onnx::NodeProto {
    let mut n = onnx::make_node(
        "Conv",
        name.into(),
        vec![x.into(), w.into(), b.into()],
        vec![y.into()],
        vec![],
    );
    if pad > 0 {
        n.attribute.push(onnx::AttributeProto {
            name: Some("pads".into()),
            r#type: Some(onnx::attribute_proto::AttributeType::Ints as i32),
            ints: vec![pad; 4],
            ..Default::default()
        });
    }
    n
}

fn relu(name: &str, x: &str, y: &str) -> onnx::NodeProto {
    onnx::make_node("Relu", name.into(), vec![x.into()], vec![y.into()], vec![])
}

/// `graph` as an encoded IR-8, opset-13 model.
fn opset13_model(graph: onnx::GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![onnx::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(13),
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Quantizes `bytes` with 20 synthetic samples and, if given, a `min_cosine` target.
fn quantize_synthetic(
    name: &str,
    bytes: &[u8],
    min_cosine: Option<f64>,
) -> kenosis_quantize::Result<kenosis_quantize::Quantized> {
    let options = QuantizeOptions {
        synthetic_samples: 20,
        min_cosine,
        // Layers this small never repay their conversions: without this the time estimate
        // would keep them all FP32.
        fp32_where_faster: false,
        // The search over the static placement (QDQ ops, tables stored as uint8, activation
        // tensors) is under test: `auto` would run the MatMul-only models dynamically.
        activations: kenosis_quantize::Activations::Static,
        ..QuantizeOptions::default()
    };
    quantize(Path::new(name), bytes, &Calibration::Synthetic, &options)
}

/// The mean cosine every build measures on its held-out samples (no target needed).
fn measured_cosine(q: &kenosis_quantize::Quantized) -> f64 {
    let fidelity = q.report.fidelity.as_ref().expect("always measured");
    fidelity.measured.mean_cosine
}

#[test]
fn the_measured_culprit_is_kept_in_fp32() {
    let bytes = model_with_a_culprit();

    // Without a target the damage is visible in the report's own measurement.
    let plain = quantize_synthetic("culprit.onnx", &bytes, None).expect("quantizes");
    let fully = measured_cosine(&plain);
    assert!(fully < 0.9, "the culprit should hurt: cosine {fully}");

    let q = quantize_synthetic("culprit.onnx", &bytes, Some(0.98)).expect("target reachable");
    let f = q.report.fidelity.expect("fidelity report");
    assert_eq!(
        f.kept_fp32,
        vec!["culprit".to_string()],
        "most sensitive: {:?}",
        f.most_sensitive
    );
    assert_eq!(f.most_sensitive[0].0, "culprit");
    // The target is checked on the 95% lower confidence bound, which sits below the mean.
    assert!(
        f.held_out
            && f.measured.cosine_lower_bound >= 0.98
            && f.measured.cosine_lower_bound < f.measured.mean_cosine,
        "{f:?}"
    );
    let kept = q
        .report
        .nodes_fp32
        .iter()
        .find(|n| n.name == "culprit")
        .expect("reported as FP32");
    assert_eq!(kept.reason, FloatReason::FidelityTarget, "{kept:?}");
    // `tail` writes the graph output, so it stays FP32 by placement, not by the target;
    // only `head` remains quantized.
    let tail = q
        .report
        .nodes_fp32
        .iter()
        .find(|n| n.name == "tail")
        .expect("tail reported");
    assert_eq!(tail.reason, FloatReason::OutputConv, "{tail:?}");
    assert_eq!(q.report.ops_quantized.get("Conv"), Some(&1));
}

/// int64 `ids` [1, 8] → Gather `embedding` from a 64x32 table → MatMul `projection`
/// (32→128) → Relu → y. The table's values are about 0.05 but one is 20, so its uint8 step
/// (about 0.08) rounds most of the table to its zero point: the error is the table's, and
/// only keeping `embedding` in FP32 removes it.
fn model_with_an_outlier_embedding() -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let mut table: Vec<f32> = (0..64 * 32)
        .map(|_| rng.random_range(-1.0f32..1.0) * 0.05)
        .collect();
    table[0] = 20.0;
    let projection: Vec<f32> = (0..32 * 128)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let node = |op: &str, name: &str, inputs: &[&str], output: &str| {
        onnx::make_node(
            op,
            name.into(),
            inputs.iter().map(|&i| i.into()).collect(),
            vec![output.into()],
            vec![],
        )
    };
    let graph = onnx::GraphProto {
        name: Some("embedding".into()),
        node: vec![
            node("Gather", "embedding", &["table", "ids"], "e"),
            node("MatMul", "projection", &["e", "w"], "m"),
            node("Relu", "relu", &["m"], "y"),
        ],
        initializer: vec![
            tensor::from_f32("table", &[64, 32], &table),
            tensor::from_f32("w", &[32, 128], &projection),
        ],
        input: vec![onnx::tensor_info(
            "ids",
            onnx::DataType::Int64,
            Some(&[1, 8]),
        )],
        output: vec![onnx::tensor_info(
            "y",
            onnx::DataType::Float,
            Some(&[1, 8, 128]),
        )],
        ..Default::default()
    };
    opset13_model(graph)
}

/// A Gather from a constant table is a candidate of the search: its table is stored as
/// uint8, so its error is its own. Synthetic ids stay below the table's 64 rows.
#[test]
fn an_embedding_table_that_causes_the_error_is_kept_in_fp32() {
    let bytes = model_with_an_outlier_embedding();
    let plain = quantize_synthetic("embedding.onnx", &bytes, None).expect("quantizes");
    assert_eq!(plain.report.ops_quantized.get("Gather"), Some(&1));
    let fully = measured_cosine(&plain);
    assert!(fully < 0.95, "the table should hurt: cosine {fully}");

    let q = quantize_synthetic("embedding.onnx", &bytes, Some(0.99)).expect("target reachable");
    let fidelity = q.report.fidelity.as_ref().expect("measured");
    // The table's output is observed in calibration too (while the Gather is quantized it
    // shares the table's parameters), so keeping the Gather FP32 leaves `projection` a range:
    // everything the search keeps, it keeps for the target.
    assert!(
        fidelity.kept_fp32.iter().any(|n| n == "embedding"),
        "{fidelity:?}"
    );
    for name in &fidelity.kept_fp32 {
        let node = q.report.nodes_fp32.iter().find(|n| &n.name == name);
        assert!(node.is_some_and(|n| for_the_target(&n.reason)), "{node:?}");
    }
    assert!(fidelity.measured.cosine_lower_bound >= 0.99, "{fidelity:?}");
    assert_eq!(q.report.ops_quantized.get("Gather"), None);
    let kept = q
        .report
        .nodes_fp32
        .iter()
        .find(|n| n.name == "embedding")
        .expect("reported as FP32");
    assert_eq!(kept.reason, FloatReason::FidelityTarget, "{kept:?}");
}

/// x[1,4,16,16] → Conv `head` (4→4, 3x3) → Relu → Conv `wide` (4→8, 1x1) → Relu → `t` →
/// Conv `mixer` (8→8, 1x1) → Relu → Conv `tail` (8→4, 1x1) → y.
///
/// `t`'s channel 0 is about 1000 times larger than its other seven, and `mixer` reads it
/// with weights 1000 times smaller, in output channels of its own: every weight scale fits,
/// but one uint8 scale for all of `t` rounds channels 1-7 to zero. Keeping `wide` or
/// `mixer` alone in FP32 leaves that QuantizeLinear in place (a weighted writer still
/// writes uint8; a float reader reads it dequantized), so only both together, the
/// activation `t` kept float, help.
fn model_with_a_culprit_activation() -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut normal = |n: usize, s: f32| -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0f32..1.0) * s).collect()
    };
    let mut wide_w = normal(8 * 4, 0.5);
    let mut wide_b = normal(8, 0.1);
    wide_w[..4].iter_mut().for_each(|w| *w = w.abs() * 1000.0);
    wide_b[0] = 500.0;
    // mixer outputs 0-3 read channels 1-7, outputs 4-7 read channel 0 only.
    let mut mixer_w = normal(8 * 8, 0.5);
    for o in 0..8 {
        for i in 0..8 {
            let w = &mut mixer_w[o * 8 + i];
            if (o < 4) == (i == 0) {
                *w = 0.0;
            } else if i == 0 {
                *w *= 1e-3;
            }
        }
    }
    // Outputs 4-7 only inflate `t`'s range: `tail` reads them faintly.
    let mut tail_w = normal(4 * 8, 0.5);
    for o in 0..4 {
        tail_w[o * 8 + 4..o * 8 + 8]
            .iter_mut()
            .for_each(|w| *w *= 0.1);
    }
    let nodes = vec![
        conv("head", "x", "head_w", "head_b", "h", 1),
        relu("head_relu", "h", "hr"),
        conv("wide", "hr", "wide_w", "wide_b", "w", 0),
        relu("wide_relu", "w", "t"),
        conv("mixer", "t", "mixer_w", "mixer_b", "m", 0),
        relu("mixer_relu", "m", "mr"),
        conv("tail", "mr", "tail_w", "tail_b", "y", 0),
    ];
    let inits = vec![
        tensor::from_f32("head_w", &[4, 4, 3, 3], &normal(4 * 4 * 9, 0.5)),
        tensor::from_f32("head_b", &[4], &normal(4, 0.1)),
        tensor::from_f32("wide_w", &[8, 4, 1, 1], &wide_w),
        tensor::from_f32("wide_b", &[8], &wide_b),
        tensor::from_f32("mixer_w", &[8, 8, 1, 1], &mixer_w),
        tensor::from_f32("mixer_b", &[8], &[0.0; 8]),
        tensor::from_f32("tail_w", &[4, 8, 1, 1], &tail_w),
        tensor::from_f32("tail_b", &[4], &[0.0; 4]),
    ];
    four_channel_model("culprit_activation", nodes, inits, 16)
}

/// The search measures activations as well as ops: the tensor whose rounding does the
/// damage is kept float with its writer and reader, and nothing else leaves INT8.
#[test]
fn the_measured_culprit_activation_is_kept_float() {
    let bytes = model_with_a_culprit_activation();
    let plain = quantize_synthetic("activation.onnx", &bytes, None).expect("quantizes");
    let fully = measured_cosine(&plain);
    assert!(fully < 0.9, "the activation should hurt: cosine {fully}");
    assert_eq!(plain.report.ops_quantized.get("Conv"), Some(&3));

    let q = quantize_synthetic("activation.onnx", &bytes, Some(0.98)).expect("target reachable");
    let f = q.report.fidelity.expect("fidelity report");
    assert_eq!(f.kept_fp32_tensors, ["t"], "{f:?}");
    assert_eq!(f.most_sensitive[0].0, "activation t", "{f:?}");
    let mut kept = f.kept_fp32.clone();
    kept.sort();
    assert_eq!(kept, ["mixer", "wide"], "{f:?}");
    assert!(f.measured.cosine_lower_bound >= 0.98, "{f:?}");
    // `head` stays INT8: the only Conv left quantized.
    assert_eq!(q.report.ops_quantized.get("Conv"), Some(&1));
    for name in ["wide", "mixer"] {
        let node = q.report.nodes_fp32.iter().find(|n| n.name == name);
        assert!(node.is_some_and(|n| for_the_target(&n.reason)), "{node:?}");
    }
}
