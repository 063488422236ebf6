//! CSP blocks as YOLOv8 writes them (`C2f`: a Conv's output `Split` in two halves, bottlenecks
//! with shortcuts on the second, every part concatenated and mixed by a Conv; SiLU
//! activations), built here with seeded random weights.
//!
//! What it pins is the graph ONNX Runtime runs: each Split works on uint8 straight from a
//! QuantizeLinear and every Conv reading it still fuses into QLinearConv. Left as a Split,
//! it ran on a dequantized copy with one QuantizeLinear per output; quantized with its
//! input's parameters, the Convs after it stopped fusing.

use kenosis_build::onnx::{
    self, attr, tensor, tensor_shape_proto, type_proto, GraphProto, ModelProto, OperatorSetIdProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use kenosis_build::{quantize, Calibration, QuantizeOptions};
use kenosis_eval::*;
use ndarray::Array4;
use ort::session::builder::GraphOptimizationLevel;
use prost::Message;
use std::path::Path;

/// Side of the square input image.
const SIDE: i64 = 128;

/// A float32 tensor value info; `dims` empty for an unknown shape.
fn float_value(name: &str, dims: &[i64]) -> ValueInfoProto {
    let shape = (!dims.is_empty()).then(|| TensorShapeProto {
        dim: dims
            .iter()
            .map(|&d| tensor_shape_proto::Dimension {
                value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                ..Default::default()
            })
            .collect(),
    });
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(onnx::dtype::FLOAT),
                shape,
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Uniform values in [-1, 1) from a fixed xorshift sequence.
struct Uniform(u64);

impl Uniform {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Builds a YOLOv8-style backbone node by node, with seeded random weights.
struct Net {
    graph: GraphProto,
    rng: Uniform,
    count: usize,
}

impl Net {
    fn fresh(&mut self, base: &str) -> String {
        self.count += 1;
        format!("{base}{}", self.count)
    }

    fn push(
        &mut self,
        op: &str,
        inputs: Vec<String>,
        outputs: Vec<String>,
        attrs: Vec<onnx::AttributeProto>,
    ) {
        let name = outputs[0].clone();
        self.graph
            .node
            .push(onnx::make_node(op, name, inputs, outputs, attrs));
    }

    /// `k x k` Conv with stride `s` (He-scaled weights, small biases), then SiLU as
    /// `x * Sigmoid(x)`. Returns the SiLU's output.
    fn conv_silu(&mut self, x: &str, cin: i64, cout: i64, k: i64, s: i64) -> String {
        let conv = self.fresh("conv");
        let bound = (6.0 / (cin * k * k) as f32).sqrt();
        let w: Vec<f32> = (0..cout * cin * k * k)
            .map(|_| self.rng.next() * bound)
            .collect();
        let b: Vec<f32> = (0..cout).map(|_| 0.1 * self.rng.next()).collect();
        let (wn, bn) = (format!("{conv}_w"), format!("{conv}_b"));
        self.graph
            .initializer
            .push(tensor::from_f32(&wn, &[cout, cin, k, k], &w));
        self.graph
            .initializer
            .push(tensor::from_f32(&bn, &[cout], &b));
        let attrs = vec![
            attr::make_ints("kernel_shape", &[k, k]),
            attr::make_ints("strides", &[s, s]),
            attr::make_ints("pads", &[k / 2; 4]),
        ];
        self.push("Conv", vec![x.into(), wn, bn], vec![conv.clone()], attrs);
        let gate = self.fresh("sigmoid");
        self.push("Sigmoid", vec![conv.clone()], vec![gate.clone()], vec![]);
        let silu = self.fresh("silu");
        self.push("Mul", vec![conv, gate], vec![silu.clone()], vec![]);
        silu
    }

    /// YOLOv8's C2f with `n` bottlenecks on `c` channels.
    fn c2f(&mut self, x: &str, c: i64, n: usize) -> String {
        let y = self.conv_silu(x, c, c, 1, 1);
        let split = self.fresh("split");
        let sizes = format!("{split}_sizes");
        self.graph
            .initializer
            .push(tensor::from_i64(&sizes, &[2], &[c / 2, c / 2]));
        let halves = vec![format!("{split}_a"), format!("{split}_b")];
        self.push(
            "Split",
            vec![y, sizes],
            halves.clone(),
            vec![attr::make_int("axis", 1)],
        );
        let mut parts = halves;
        for _ in 0..n {
            let last = parts.last().expect("halves").clone();
            let inner = self.conv_silu(&last, c / 2, c / 2, 3, 1);
            let b = self.conv_silu(&inner, c / 2, c / 2, 3, 1);
            let sum = self.fresh("add");
            self.push("Add", vec![last, b], vec![sum.clone()], vec![]);
            parts.push(sum);
        }
        let cat = self.fresh("concat");
        let width = parts.len() as i64 * c / 2;
        self.push(
            "Concat",
            parts,
            vec![cat.clone()],
            vec![attr::make_int("axis", 1)],
        );
        self.conv_silu(&cat, width, c, 1, 1)
    }
}

/// Stem, three C2f stages at strides 4, 8 and 16, and a 1x1 Conv head writing `y`.
fn c2f_backbone() -> ModelProto {
    let mut net = Net {
        graph: GraphProto::default(),
        rng: Uniform(0x5eed_c2f0),
        count: 0,
    };
    let mut x = net.conv_silu("x", 3, 16, 3, 2);
    x = net.conv_silu(&x, 16, 32, 3, 2);
    x = net.c2f(&x, 32, 1);
    x = net.conv_silu(&x, 32, 64, 3, 2);
    x = net.c2f(&x, 64, 2);
    x = net.conv_silu(&x, 64, 128, 3, 2);
    x = net.c2f(&x, 128, 1);
    let w: Vec<f32> = (0..16 * 128).map(|_| 0.1 * net.rng.next()).collect();
    net.graph
        .initializer
        .push(tensor::from_f32("head_w", &[16, 128, 1, 1], &w));
    net.push("Conv", vec![x, "head_w".into()], vec!["y".into()], vec![]);
    net.graph.input = vec![float_value("x", &[1, 3, SIDE, SIDE])];
    net.graph.output = vec![float_value("y", &[])];
    net.graph.name = Some("c2f".into());
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: None,
            version: Some(13),
        }],
        graph: Some(net.graph),
        ..Default::default()
    }
}

#[test]
fn c2f_splits_run_on_uint8_and_every_conv_after_them_fuses() {
    let fp32 = c2f_backbone().encode_to_vec();
    let path = Path::new("c2f.onnx");
    let q = quantize(
        path,
        &fp32,
        &Calibration::Synthetic,
        &QuantizeOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.report.normalize.splits_as_slices, 3);

    let dir = tempfile::tempdir().expect("tempdir");
    let optimized = dir.path().join("c2f.int8.optimized.onnx");
    let mut int8 = session(&q.bytes, GraphOptimizationLevel::All, Some(&optimized));
    let ran = kenosis_build::pipeline::decode(&optimized, &std::fs::read(&optimized).unwrap())
        .expect("optimized graph decodes");
    let nodes = &ran.graph.as_ref().expect("graph").node;
    let producer = |t: &str| nodes.iter().find(|n| n.output.iter().any(|o| o == t));
    let cuts: Vec<_> = nodes
        .iter()
        .filter(|n| matches!(n.op_type(), "Split" | "Slice"))
        .collect();
    assert_eq!(cuts.len(), 3, "one cut per C2f");
    for cut in cuts {
        let from = producer(&cut.input[0]).map(|p| p.op_type());
        assert_eq!(
            from,
            Some("QuantizeLinear"),
            "{} reads {from:?}",
            cut.name()
        );
    }
    let ops: Vec<String> = nodes.iter().map(|n| n.op_type().to_owned()).collect();
    // 19 Convs: all but the head, which writes the graph output and stays FP32 by design.
    assert_eq!(conv_counts(&ops), (18, 1), "{ops:?}");

    // The rewrite is exact, so the INT8 model stays as close to FP32 as without Splits.
    let mut reference = session(&fp32, GraphOptimizationLevel::All, None);
    let mut rng = Uniform(0xfeed);
    let inputs: Vec<Array4<f32>> = (0..4)
        .map(|_| {
            let side = SIDE as usize;
            Array4::from_shape_simple_fn((1, 3, side, side), || 2.0 * rng.next())
        })
        .collect();
    let fidelity = compare(&mut reference, &mut int8, &inputs);
    eprintln!("C2f backbone (random weights), 4 random images: {fidelity:?}");
    assert!(fidelity.mean_cosine >= 0.99, "{fidelity:?}");
}
