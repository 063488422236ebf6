//! Fuses a HardSwish written out in elementary ops back into ONNX `HardSwish` (opset 14:
//! `y = x · max(0, min(1, x/6 + 1/2))`).
//!
//! Exporters targeting opsets before 14 spell it out: PaddlePaddle (PP-OCR) as
//! `Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)`, PyTorch as `Mul(x, HardSigmoid(x))`. Quantized as
//! written, every step is its own Q/DQ point: PP-OCRv4 det rounds each activation four
//! times (Add, Clip, Mul, then the Div that runs in float between a DQ and a Q). As one
//! `HardSwish` it runs in float between one DequantizeLinear and one QuantizeLinear (ONNX
//! Runtime 1.31's CPU provider has no integer kernel for it and expands it to
//! `HardSigmoid` + `Mul`): three roundings and three integer kernels fewer per HardSwish.
//!
//! `HardSwish` needs default-domain opset 14. Normalization leaves models at opset >= 13;
//! when a fusion needs it the import is raised to 14 (see `normalize::opset::can_raise`),
//! unless a BatchNormalization writes training outputs, whose meaning did change; then
//! nothing is fused.

use super::pattern::{close, fuse_written_out, is, operands, other_operand, Found, Matcher};
use crate::onnx::{self, ModelProto, NodeProto};

/// The default-domain opset that introduced `HardSwish`.
pub const HARD_SWISH_OPSET: i64 = 14;

/// Replaces every HardSwish spelled as one of
/// - `Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)` or the same with `Mul(…, 1/6)` for the Div,
/// - `Mul(x, Div(Clip(Add(x, 3), 0, 6), 6))` or with `Mul(…, 1/6)` for the Div,
/// - `Mul(x, HardSigmoid(x, alpha = 1/6, beta = 1/2))`,
///
/// (any operand order of Add and Mul; constants are single-value float initializers; every
/// intermediate has one reader and is not a graph output; `x` is float32) by one
/// `HardSwish(x)` that keeps the last node's name and output. Raises the default-domain
/// opset import to 14 when anything was fused. The graph must be topologically sorted and
/// its default-domain opset >= 13 (normalization does both first). Returns the number
/// fused.
pub fn fuse(model: &mut ModelProto) -> usize {
    fuse_written_out(model, HARD_SWISH_OPSET, false, |m, tail| {
        let (x, inner) = m.hard_swish(tail)?;
        let fused = NodeProto {
            op_type: Some("HardSwish".into()),
            input: vec![x.clone()],
            ..Default::default()
        };
        Some(Found {
            tail,
            inner,
            x,
            fused,
        })
    })
}

impl Matcher<'_> {
    /// If node `tail` ends a HardSwish pattern: its input `x` and the other nodes of the
    /// pattern (to remove).
    fn hard_swish(&self, tail: usize) -> Option<(String, Vec<usize>)> {
        let node = &self.graph.node[tail];
        // `x · hard_sigmoid(x)`.
        if is(node, "Mul") {
            let [a, b] = node.input.as_slice() else {
                return None;
            };
            for (x, gate) in [(a, b), (b, a)] {
                if let Some(mut inner) = self
                    .inner(gate)
                    .and_then(|g| self.hard_sigmoid(g, x).map(|n| [vec![g], n].concat()))
                {
                    inner.sort_unstable();
                    return Some((x.clone(), inner));
                }
            }
        }
        // `(x · relu6(x + 3)) / 6`.
        let product = self.divided_by_six(node)?;
        let mul_idx = self.inner(product)?;
        let (a, b) = operands(&self.graph.node[mul_idx], "Mul")?;
        [(a, b), (b, a)].into_iter().find_map(|(x, r)| {
            let r_idx = self.inner(r)?;
            let rest = self.relu6_of_x_plus_3(r_idx, x)?;
            Some((x.clone(), [vec![mul_idx, r_idx], rest].concat()))
        })
    }

    /// If `node` (HardSigmoid or `relu6(x + 3) / 6`) computes `clip(x/6 + 1/2, 0, 1)`: the
    /// nodes it uses besides itself.
    fn hard_sigmoid(&self, node: usize, x: &str) -> Option<Vec<usize>> {
        let n = &self.graph.node[node];
        if is(n, "HardSigmoid") {
            let alpha = onnx::attr::float(n, "alpha", 0.2);
            let beta = onnx::attr::float(n, "beta", 0.5);
            return (n.input.first().map(String::as_str) == Some(x)
                && close(alpha, 1.0 / 6.0)
                && close(beta, 0.5))
            .then(Vec::new);
        }
        let r = self.divided_by_six(n)?;
        let r_idx = self.inner(r)?;
        let rest = self.relu6_of_x_plus_3(r_idx, x)?;
        Some([vec![r_idx], rest].concat())
    }

    /// If `node` is `Clip(Add(x, 3), 0, 6)` (either Add operand order): the Add's index.
    fn relu6_of_x_plus_3(&self, node: usize, x: &str) -> Option<Vec<usize>> {
        let clip = &self.graph.node[node];
        if !is(clip, "Clip")
            || clip.input.len() != 3
            || self.scalar(&clip.input[1]) != Some(0.0)
            || self.scalar(&clip.input[2]) != Some(6.0)
        {
            return None;
        }
        let add_idx = self.inner(&clip.input[0])?;
        let add = &self.graph.node[add_idx];
        let [a, b] = add.input.as_slice() else {
            return None;
        };
        let plus_three = |v: &str, c: &str| v == x && self.scalar(c) == Some(3.0);
        (is(add, "Add") && (plus_three(a, b) || plus_three(b, a))).then(|| vec![add_idx])
    }

    /// If `node` is `Div(t, 6)` or `Mul(t, 1/6)` (either order): `t`.
    fn divided_by_six<'n>(&self, node: &'n NodeProto) -> Option<&'n String> {
        let [a, b] = node.input.as_slice() else {
            return None;
        };
        if is(node, "Div") {
            return (self.scalar(b) == Some(6.0)).then_some(a);
        }
        other_operand(node, "Mul", |c| self.scalar_close(c, 1.0 / 6.0)).map(|(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::attr;
    use crate::test_support::{self, node};

    /// A model at opset 13 over input `x` with the scalar constants the patterns use.
    fn model(nodes: Vec<NodeProto>, outputs: &[&str]) -> ModelProto {
        let scalars = [
            ("three", 3.0),
            ("zero", 0.0),
            ("six", 6.0),
            ("sixth", 1.0 / 6.0),
            ("two", 2.0),
        ];
        test_support::model(nodes, outputs, test_support::scalars(&scalars))
    }

    fn ops(m: &ModelProto) -> Vec<(String, Vec<String>, Vec<String>)> {
        m.graph
            .as_ref()
            .unwrap()
            .node
            .iter()
            .map(|n| (n.op_type().to_owned(), n.input.clone(), n.output.clone()))
            .collect()
    }

    fn hard_swish(input: &str, output: &str) -> (String, Vec<String>, Vec<String>) {
        ("HardSwish".into(), vec![input.into()], vec![output.into()])
    }

    #[test]
    fn paddle_and_pytorch_spellings_become_one_hard_swish_at_opset_14() {
        let mut hs = node("HardSigmoid", &["c"], "g3");
        hs.attribute = vec![
            attr::make_float("alpha", 0.16666667),
            attr::make_float("beta", 0.5),
        ];
        let mut m = model(
            vec![
                // PaddlePaddle: Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6).
                node("Add", &["x", "three"], "a1"),
                node("Clip", &["a1", "zero", "six"], "r1"),
                node("Mul", &["x", "r1"], "m1"),
                node("Div", &["m1", "six"], "b"),
                // x · (relu6(x + 3) · 1/6), operands swapped.
                node("Add", &["three", "b"], "a2"),
                node("Clip", &["a2", "zero", "six"], "r2"),
                node("Mul", &["sixth", "r2"], "g2"),
                node("Mul", &["g2", "b"], "c"),
                // PyTorch before opset 14: x · HardSigmoid(x).
                hs,
                node("Mul", &["c", "g3"], "y"),
            ],
            &["y"],
        );
        assert_eq!(fuse(&mut m), 3);
        assert_eq!(
            ops(&m),
            [
                hard_swish("x", "b"),
                hard_swish("b", "c"),
                hard_swish("c", "y")
            ]
        );
        assert_eq!(m.graph.as_ref().unwrap().node[0].name(), "Div_b");
        assert_eq!(onnx::default_opset(&m), Some(HARD_SWISH_OPSET));
        // The constants only the patterns read are gone.
        assert!(m.graph.as_ref().unwrap().initializer.is_empty());
    }

    #[test]
    fn near_misses_stay_as_written() {
        let mut m = model(
            vec![
                // Shifted by 2, not 3.
                node("Add", &["x", "two"], "a1"),
                node("Clip", &["a1", "zero", "six"], "r1"),
                node("Mul", &["x", "r1"], "m1"),
                node("Div", &["m1", "six"], "b"),
                // Gated by another tensor: x · relu6(b + 3) / 6 is not a HardSwish of x or b.
                node("Add", &["b", "three"], "a2"),
                node("Clip", &["a2", "zero", "six"], "r2"),
                node("Mul", &["x", "r2"], "m2"),
                node("Div", &["m2", "six"], "c"),
                // Its intermediate is also a graph output.
                node("Add", &["c", "three"], "a3"),
                node("Clip", &["a3", "zero", "six"], "r3"),
                node("Mul", &["c", "r3"], "m3"),
                node("Div", &["m3", "six"], "y"),
            ],
            &["y", "m3"],
        );
        assert_eq!(fuse(&mut m), 0);
        assert_eq!(m.graph.as_ref().unwrap().node.len(), 12);
        assert_eq!(onnx::default_opset(&m), Some(13));
    }

    #[test]
    fn a_training_batchnorm_blocks_the_opset_raise() {
        let mut bn = node("BatchNormalization", &["y", "s", "b", "m", "v"], "z");
        bn.output.push("running_mean".into());
        let mut m = model(
            vec![
                node("Add", &["x", "three"], "a1"),
                node("Clip", &["a1", "zero", "six"], "r1"),
                node("Mul", &["x", "r1"], "m1"),
                node("Div", &["m1", "six"], "y"),
                bn,
            ],
            &["z"],
        );
        assert_eq!(fuse(&mut m), 0);
        assert_eq!(onnx::default_opset(&m), Some(13));
    }
}
