//! A Caffe2-era ONNX model zoo architecture: ShuffleNet (v1), in the "light" form the `onnx`
//! package ships for its backend tests (`tests/fixtures/onnx-zoo/light_shufflenet.onnx`,
//! Apache-2.0, opset 9, IR 3). Its weights are `ConstantOfShape` fills; the test gives them
//! seeded random values (He-scaled Conv weights, BatchNorm scales and variances in
//! [0.5, 1.5]) so that every Conv has a constant weight to quantize, and ends at the logits.
//!
//! What it pins is the graph ONNX Runtime runs: its channel shuffles
//! (`Reshape → Transpose [0, 2, 1, 3, 4] → Reshape`) and `Sum` residual joins. Left as
//! written, the INT8 model was 2.1x slower than FP32 (a 5-D uint8 Transpose per shuffle after
//! ORT's NHWC rewrite, float Sums between DequantizeLinear and QuantizeLinear).

use std::collections::HashMap;
use std::path::Path;

use kenosis_eval::*;
use kenosis_quantize::onnx::{tensor, ModelProto};
use kenosis_quantize::{quantize, Calibration, QuantizeOptions};
use ndarray::Array4;
use ort::session::builder::GraphOptimizationLevel;
use prost::Message;

const SHUFFLENET: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/onnx-zoo/light_shufflenet.onnx"
);

/// The fixture with every `ConstantOfShape` of a constant shape replaced by an initializer
/// of random values suited to its reader.
fn shufflenet_with_weights() -> ModelProto {
    let bytes = std::fs::read(SHUFFLENET).expect("fixture");
    let mut model = ModelProto::decode(bytes.as_slice()).expect("fixture decodes");
    let g = model.graph.as_mut().expect("graph");
    let shapes: HashMap<String, Vec<i64>> = g
        .initializer
        .iter()
        .filter_map(|t| Some((t.name().to_owned(), tensor::to_i64(t).ok()?)))
        .collect();
    let mut reader: HashMap<String, (String, usize)> = HashMap::new();
    for n in &g.node {
        for (k, i) in n.input.iter().enumerate() {
            reader
                .entry(i.clone())
                .or_insert((n.op_type().to_owned(), k));
        }
    }
    let mut rng = Uniform(0x5eed_cafe);
    let mut filled = Vec::new();
    g.node.retain(|n| {
        let Some(dims) = (n.op_type() == "ConstantOfShape")
            .then(|| shapes.get(&n.input[0]))
            .flatten()
        else {
            return true;
        };
        let count = dims.iter().product::<i64>() as usize;
        let (op, k) = reader.get(&n.output[0]).cloned().unwrap_or_default();
        let values: Vec<f32> = match (op.as_str(), k) {
            ("Conv" | "Gemm", 1) => {
                let fan_in = dims[1..].iter().product::<i64>().max(1) as f32;
                let bound = (6.0 / fan_in).sqrt();
                (0..count).map(|_| rng.draw() * bound).collect()
            }
            ("BatchNormalization", 1 | 4) => (0..count).map(|_| 1.0 + 0.5 * rng.draw()).collect(),
            _ => (0..count).map(|_| 0.1 * rng.draw()).collect(),
        };
        filled.push(tensor::from_f32(&n.output[0], dims, &values));
        false
    });
    assert_eq!(filled.len(), 243, "ConstantOfShape fills replaced");
    g.initializer.extend(filled);
    // Random weights saturate the final Softmax (one-hot outputs, whose cosine only says
    // whether the argmax moved): compare the logits instead.
    let softmax = g.node.pop().expect("nodes");
    assert_eq!(softmax.op_type(), "Softmax");
    g.output[0].name = Some(softmax.input[0].clone());
    model
}

#[test]
fn shufflenet_runs_its_shuffles_and_residual_sums_in_int8_without_5d_transposes() {
    let fp32 = shufflenet_with_weights().encode_to_vec();
    let path = Path::new("light_shufflenet.onnx");
    // Without the speed check: the placement is what is checked here, and this small
    // network runs faster in FP32 here (a timed build ships FP32).
    let untimed = QuantizeOptions {
        speed_check: false,
        ..QuantizeOptions::default()
    };
    let q =
        quantize(path, &fp32, &Calibration::Synthetic, &untimed).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.report.normalize.channel_shuffles_rewritten, 16);
    assert_eq!(q.report.normalize.sums_as_adds, 13);

    let (mut int8, nodes) = optimized_session(&q.bytes);
    let five_d_transposes = nodes
        .iter()
        .filter(|n| n.op_type() == "Transpose")
        .filter(|n| kenosis_quantize::onnx::attr::ints(n, "perm").is_some_and(|p| p.len() == 5))
        .count();
    assert_eq!(five_d_transposes, 0, "a shuffle is still a 5-D Transpose");
    let ops: Vec<String> = nodes.iter().map(|n| n.op_type().to_owned()).collect();
    assert_eq!(
        conv_counts(&ops),
        (49, 0),
        "every Conv fused into QLinearConv"
    );
    let qlinear_adds = ops.iter().filter(|o| *o == "QLinearAdd").count();
    assert_eq!(qlinear_adds, 13, "every residual Sum fused into QLinearAdd");

    // The rewrites are exact: the INT8 model stays close to FP32 on photographs.
    let Some(shared) = shared_dir() else { return };
    let files = imagenet_files(&shared);
    let photos: Vec<Array4<f32>> = load_batch(&files[..10], Preprocess::RgbCentered);
    let mut reference = session(&fp32, GraphOptimizationLevel::All, None);
    let fidelity = compare(&mut reference, &mut int8, &photos);
    eprintln!("ShuffleNet (random weights), 10 photographs: {fidelity:?}");
    assert!(fidelity.mean_cosine >= 0.99, "{fidelity:?}");
}
