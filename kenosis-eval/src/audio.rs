//! A small audio model that computes its own spectrogram, as audio quality scorers and
//! keyword spotters exported from PyTorch do, for the tests of Kenosis on audio (the
//! quantizer's default floor, the `kenosis` command's `--audio`).

use kenosis_quantize::onnx::{self, attr, tensor, GraphProto};

use crate::graph::{model, node, node_with};
use crate::Uniform;

/// Samples per audio window: 32 frames of 256 (16 ms each at 16 kHz).
pub const WINDOW: usize = 32 * FRAME;
pub const FRAME: usize = 256;
/// DFT bins of a 256-sample frame.
pub const BINS: usize = FRAME / 2 + 1;

/// Raw audio `[1, WINDOW]` → frames → |DFT|² by MatMul with cosine and sine bases and `Pow`
/// → `Log(power + 1e-6)` → a per-frame dense layer with ReLU → mean over frames → three
/// scores around 3 (a 1-5 quality scale). Seeded random head.
pub fn audio_scorer() -> Vec<u8> {
    let mut g = GraphProto {
        name: Some("audio_scorer".into()),
        ..Default::default()
    };
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for n in 0..FRAME {
        // Hann window folded into the basis, as torch.stft exports it.
        let hann = 0.5 - 0.5 * (2.0 * std::f64::consts::PI * n as f64 / FRAME as f64).cos();
        for k in 0..BINS {
            let phase = 2.0 * std::f64::consts::PI * (n * k) as f64 / FRAME as f64;
            cos.push((hann * phase.cos()) as f32);
            sin.push((hann * phase.sin()) as f32);
        }
    }
    let mut rng = Uniform(54);
    let hidden = 32;
    let w1: Vec<f32> = (0..BINS * hidden).map(|_| 0.05 * rng.draw()).collect();
    let b1: Vec<f32> = (0..hidden).map(|_| 0.5 * rng.draw()).collect();
    let w2: Vec<f32> = (0..hidden * 3).map(|_| 0.1 * rng.draw()).collect();
    g.initializer.extend([
        tensor::from_i64("frames_shape", &[2], &[32, FRAME as i64]),
        tensor::from_f32("dft_cos", &[FRAME as i64, BINS as i64], &cos),
        tensor::from_f32("dft_sin", &[FRAME as i64, BINS as i64], &sin),
        tensor::from_f32("two", &[], &[2.0]),
        tensor::from_f32("eps", &[], &[1e-6]),
        tensor::from_f32("w1", &[BINS as i64, hidden as i64], &w1),
        tensor::from_f32("b1", &[hidden as i64], &b1),
        tensor::from_f32("w2", &[hidden as i64, 3], &w2),
        tensor::from_f32("center", &[3], &[3.0, 3.0, 3.0]),
    ]);
    node(&mut g, "Reshape", &["audio", "frames_shape"], "frames");
    node(&mut g, "MatMul", &["frames", "dft_cos"], "re");
    node(&mut g, "MatMul", &["frames", "dft_sin"], "im");
    node(&mut g, "Pow", &["re", "two"], "re2");
    node(&mut g, "Pow", &["im", "two"], "im2");
    node(&mut g, "Add", &["re2", "im2"], "power");
    node(&mut g, "Add", &["power", "eps"], "power_eps");
    node(&mut g, "Log", &["power_eps"], "log_power");
    node(&mut g, "MatMul", &["log_power", "w1"], "h0");
    node(&mut g, "Add", &["h0", "b1"], "h1");
    node(&mut g, "Relu", &["h1"], "h");
    node_with(
        &mut g,
        "ReduceMean",
        &["h"],
        "pooled",
        vec![attr::make_ints("axes", &[0]), attr::make_int("keepdims", 1)],
    );
    node(&mut g, "MatMul", &["pooled", "w2"], "s0");
    node(&mut g, "Add", &["s0", "center"], "scores");
    g.input = vec![onnx::tensor_info(
        "audio",
        onnx::DataType::Float,
        Some(&[1, WINDOW as i64]),
    )];
    g.output = vec![onnx::tensor_info("scores", onnx::DataType::Float, None)];
    model(g)
}
