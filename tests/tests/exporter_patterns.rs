//! Graph patterns exporters write around convolutions, in small networks built here with
//! seeded random weights, and the graph ONNX Runtime then runs from the INT8 model:
//! - CSP blocks as YOLOv8 writes them (`C2f`: a Conv's output `Split` in two halves,
//!   bottlenecks with shortcuts on the second, every part concatenated and mixed by a Conv;
//!   SiLU activations). Each Split must work on uint8 straight from a QuantizeLinear with every
//!   Conv reading it fused into QLinearConv. Left as a Split, it ran on a dequantized copy
//!   with one QuantizeLinear per output; quantized with its input's parameters, the Convs
//!   after it stopped fusing.
//! - MobileNet blocks as tf2onnx writes TensorFlow's "SAME" padding of strided depthwise
//!   Convs: an explicit `Pad` before the Conv. No Pad may be left: in the QDQ model ORT could
//!   no longer fold it into the Conv and ran it on a dequantized copy.

use kenosis_eval::*;
use kenosis_quantize::onnx::{self, attr, tensor, GraphProto, ModelProto, OperatorSetIdProto};
use kenosis_quantize::{quantize, Calibration, QuantizeOptions};
use ndarray::Array4;
use ort::session::builder::GraphOptimizationLevel;
use prost::Message;
use std::path::Path;

/// Side of the square input image.
const SIDE: i64 = 128;

/// Channels, square kernel side, stride and groups of a Conv.
struct ConvShape {
    cin: i64,
    cout: i64,
    k: i64,
    stride: i64,
    group: i64,
}

/// Builds a network node by node, with seeded random weights.
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

    /// A Conv of `shape` (He-scaled weights, small biases), zero-padded by `pads`
    /// (`[top, left, bottom, right]`). Returns its output.
    fn conv(&mut self, x: &str, shape: ConvShape, pads: [i64; 4]) -> String {
        let ConvShape {
            cin,
            cout,
            k,
            stride,
            group,
        } = shape;
        let conv = self.fresh("conv");
        let fan_in = cin / group * k * k;
        let bound = (6.0 / fan_in as f32).sqrt();
        let w: Vec<f32> = (0..cout * fan_in)
            .map(|_| self.rng.draw() * bound)
            .collect();
        let b: Vec<f32> = (0..cout).map(|_| 0.1 * self.rng.draw()).collect();
        let (wn, bn) = (format!("{conv}_w"), format!("{conv}_b"));
        self.graph
            .initializer
            .push(tensor::from_f32(&wn, &[cout, cin / group, k, k], &w));
        self.graph
            .initializer
            .push(tensor::from_f32(&bn, &[cout], &b));
        let attrs = vec![
            attr::make_ints("kernel_shape", &[k, k]),
            attr::make_ints("strides", &[stride, stride]),
            attr::make_ints("pads", &pads),
            attr::make_int("group", group),
        ];
        self.push("Conv", vec![x.into(), wn, bn], vec![conv.clone()], attrs);
        conv
    }

    /// [`Net::conv`] with "same" padding, then SiLU as `x * Sigmoid(x)`. Returns the SiLU's
    /// output.
    fn conv_silu(&mut self, x: &str, cin: i64, cout: i64, k: i64, s: i64) -> String {
        let shape = ConvShape {
            cin,
            cout,
            k,
            stride: s,
            group: 1,
        };
        let conv = self.conv(x, shape, [k / 2; 4]);
        let gate = self.fresh("sigmoid");
        self.push("Sigmoid", vec![conv.clone()], vec![gate.clone()], vec![]);
        let silu = self.fresh("silu");
        self.push("Mul", vec![conv, gate], vec![silu.clone()], vec![]);
        silu
    }

    /// ReLU6 as TensorFlow exports it: `Clip(x, 0, 6)`.
    fn relu6(&mut self, x: &str) -> String {
        if !self.graph.initializer.iter().any(|t| t.name() == "zero") {
            self.graph
                .initializer
                .push(tensor::from_f32("zero", &[], &[0.0]));
            self.graph
                .initializer
                .push(tensor::from_f32("six", &[], &[6.0]));
        }
        let y = self.fresh("relu6");
        self.push(
            "Clip",
            vec![x.into(), "zero".into(), "six".into()],
            vec![y.clone()],
            vec![],
        );
        y
    }

    /// MobileNet's depthwise-separable block as tf2onnx writes a stride-2 one: `Pad` (bottom
    /// and right, TensorFlow's "SAME" on even sizes), unpadded 3x3 depthwise Conv, ReLU6,
    /// 1x1 Conv, ReLU6.
    fn separable_s2(&mut self, x: &str, cin: i64, cout: i64) -> String {
        let amounts = self.fresh("pad_amounts");
        self.graph
            .initializer
            .push(tensor::from_i64(&amounts, &[8], &[0, 0, 0, 0, 0, 0, 1, 1]));
        let padded = self.fresh("pad");
        self.push("Pad", vec![x.into(), amounts], vec![padded.clone()], vec![]);
        let depthwise = ConvShape {
            cin,
            cout: cin,
            k: 3,
            stride: 2,
            group: cin,
        };
        let dw = self.conv(&padded, depthwise, [0; 4]);
        let dw = self.relu6(&dw);
        let pointwise = ConvShape {
            cin,
            cout,
            k: 1,
            stride: 1,
            group: 1,
        };
        let pw = self.conv(&dw, pointwise, [0; 4]);
        self.relu6(&pw)
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

impl Net {
    fn new(seed: u64) -> Self {
        Net {
            graph: GraphProto::default(),
            rng: Uniform(seed),
            count: 0,
        }
    }

    /// The model: input `x` of `[1, 3, SIDE, SIDE]`, and a 1x1 Conv head from `x`'s
    /// `channels` to 16 writing `y`.
    fn finish(mut self, x: String, channels: i64) -> Vec<u8> {
        let w: Vec<f32> = (0..16 * channels).map(|_| 0.1 * self.rng.draw()).collect();
        self.graph
            .initializer
            .push(tensor::from_f32("head_w", &[16, channels, 1, 1], &w));
        self.push("Conv", vec![x, "head_w".into()], vec!["y".into()], vec![]);
        self.graph.input = vec![onnx::tensor_info(
            "x",
            onnx::DataType::Float,
            Some(&[1, 3, SIDE, SIDE]),
        )];
        self.graph.output = vec![onnx::tensor_info("y", onnx::DataType::Float, None)];
        self.graph.name = Some("net".into());
        ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto {
                domain: None,
                version: Some(13),
            }],
            graph: Some(self.graph),
            ..Default::default()
        }
        .encode_to_vec()
    }
}

/// An INT8 build of `fp32` (synthetic calibration, default options but
/// `fp32_where_faster = false`: these small nets test where Q/DQ goes, and the time estimate
/// would keep most of their layers FP32) and the nodes of the graph ONNX Runtime optimized it
/// into; checks that it stays within cosine 0.99 of FP32 on random images.
fn quantize_and_run(
    name: &str,
    fp32: &[u8],
) -> (kenosis_quantize::Quantized, Vec<onnx::NodeProto>) {
    let q = quantize(
        Path::new(name),
        fp32,
        &Calibration::Synthetic,
        &QuantizeOptions {
            fp32_where_faster: false,
            ..QuantizeOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (mut int8, nodes) = optimized_session(&q.bytes);

    // The rewrites are exact, so the INT8 model stays as close to FP32 as without them.
    let mut reference = session(fp32, GraphOptimizationLevel::All, None);
    let mut rng = Uniform(0xfeed);
    let side = SIDE as usize;
    let inputs: Vec<Array4<f32>> = (0..4)
        .map(|_| Array4::from_shape_simple_fn((1, 3, side, side), || 2.0 * rng.draw()))
        .collect();
    let fidelity = compare(&mut reference, &mut int8, &inputs);
    eprintln!("{name} (random weights), 4 random images: {fidelity:?}");
    assert!(fidelity.mean_cosine >= 0.99, "{name}: {fidelity:?}");
    (q, nodes)
}

fn op_list(nodes: &[onnx::NodeProto]) -> Vec<String> {
    nodes.iter().map(|n| n.op_type().to_owned()).collect()
}

#[test]
fn c2f_splits_run_on_uint8_and_every_conv_after_them_fuses() {
    // Stem, three C2f stages at strides 4, 8 and 16, head.
    let mut net = Net::new(0x5eed_c2f0);
    let mut x = net.conv_silu("x", 3, 16, 3, 2);
    x = net.conv_silu(&x, 16, 32, 3, 2);
    x = net.c2f(&x, 32, 1);
    x = net.conv_silu(&x, 32, 64, 3, 2);
    x = net.c2f(&x, 64, 2);
    x = net.conv_silu(&x, 64, 128, 3, 2);
    x = net.c2f(&x, 128, 1);
    let (q, nodes) = quantize_and_run("c2f.onnx", &net.finish(x, 128));
    assert_eq!(q.report.normalize.splits_as_slices, 3);

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
    // 19 Convs: all but the head, which writes the graph output and stays FP32 by design.
    let ops = op_list(&nodes);
    assert_eq!(conv_counts(&ops), (18, 1), "{ops:?}");
}

#[test]
fn tensorflow_same_pads_fold_into_the_depthwise_convs() {
    // Stem, four stride-2 separable blocks, head.
    let mut net = Net::new(0x5eed_9ad0);
    let stem_shape = ConvShape {
        cin: 3,
        cout: 16,
        k: 3,
        stride: 1,
        group: 1,
    };
    let stem = net.conv("x", stem_shape, [1; 4]);
    let mut x = net.relu6(&stem);
    for (cin, cout) in [(16, 32), (32, 64), (64, 64), (64, 128)] {
        x = net.separable_s2(&x, cin, cout);
    }
    let (q, nodes) = quantize_and_run("mobilenet_tf.onnx", &net.finish(x, 128));
    assert_eq!(q.report.normalize.pads_folded, 4);
    let ops = op_list(&nodes);
    assert!(!ops.iter().any(|o| o == "Pad"), "{ops:?}");
    // 10 Convs: all but the head.
    assert_eq!(conv_counts(&ops), (9, 1), "{ops:?}");
}
