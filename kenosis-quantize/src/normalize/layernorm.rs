//! Fuses a layer normalization written out in elementary ops into ONNX
//! `LayerNormalization` (opset 17).
//!
//! Exporters targeting opsets before 17 spell it out (PyTorch's `nn.LayerNorm`, PaddlePaddle's
//! SVTR blocks in PP-OCR rec):
//! `d = x − ReduceMean(x)`, `y = d / Sqrt(ReduceMean(d²) + ε) · γ + β`, over the last axis.
//! Quantized as written, the normalized value, its product with γ and the sum with β are
//! each rounded to uint8 (QLinearMul, QLinearAdd with γ and β as "activations"), and ONNX
//! Runtime can no longer fuse the nine ops into its LayerNormalization kernel. Fused, the
//! normalization runs in float between one DequantizeLinear and one QuantizeLinear: three
//! roundings fewer, and one kernel instead of nine.
//!
//! The fused op computes the same function (ONNX `LayerNormalization` with `axis = −1`,
//! `stash_type` float: mean and variance over the last axis, population variance). Only the
//! last-axis form is matched, with `γ` and `β` constant 1-D tensors (one value per element
//! of that axis); `β` may be absent. The default-domain import is raised to 17 (see
//! `normalize::opset::can_raise`); when it cannot be, nothing is fused.

use std::collections::HashSet;

use super::pattern::{fuse_written_out, is, operands, other_operand, Found, Matcher};
use crate::onnx::{attr, tensor, DataType, ModelProto, NodeProto};

/// The default-domain opset that introduced `LayerNormalization`.
pub const LAYER_NORM_OPSET: i64 = 17;

/// Replaces every layer normalization written as
/// `Add(Mul(Div(d, Sqrt(Add(ReduceMean(Pow(d, 2)), ε))), γ), β)` with
/// `d = Sub(x, ReduceMean(x))` (both ReduceMeans over axis −1 with `keepdims`; `d · d` for
/// the Pow; any operand order of the commutative ops; the β Add optional; every
/// intermediate read only inside the pattern and not a graph output; `x` float32) by one
/// `LayerNormalization(x, γ, β)` that keeps the last node's name and output. Raises the
/// default-domain opset import to 17 when anything was fused. The graph must be
/// topologically sorted and its default-domain opset >= 13. Returns the number fused.
pub fn fuse(model: &mut ModelProto) -> usize {
    // Last nodes first, so that a γ Mul followed by a β Add is matched with the Add.
    fuse_written_out(model, LAYER_NORM_OPSET, true, |m, tail| m.layer_norm(tail))
}

impl Matcher<'_> {
    /// If node `tail` ends a written-out layer normalization: what replaces it.
    fn layer_norm(&self, tail: usize) -> Option<Found> {
        let node = &self.graph.node[tail];
        // With β: tail is `Add(Mul(..), β)`; without: tail is the γ Mul.
        let (mul_idx, beta) = match self.with_constant(node, "Add") {
            Some((scaled, beta)) => (self.inner(scaled)?, Some(beta.clone())),
            None => (tail, None),
        };
        let (normalized, gamma) = self.with_constant(&self.graph.node[mul_idx], "Mul")?;
        let div_idx = self.inner(normalized)?;
        let (d, std) = operands(&self.graph.node[div_idx], "Div")?;
        let sqrt_idx = self.inner(std)?;
        let sqrt = &self.graph.node[sqrt_idx];
        let add_eps_idx = self
            .inner(sqrt.input.first()?)
            .filter(|_| is(sqrt, "Sqrt"))?;
        let (variance, eps) = self.with_constant(&self.graph.node[add_eps_idx], "Add")?;
        let epsilon = self.scalar(eps)?;
        let var_mean_idx = self.inner(variance)?;
        let squared = self.last_axis_mean(var_mean_idx)?;
        let square_idx = self.inner(squared)?;
        let square = &self.graph.node[square_idx];
        let squares_d = match square.input.as_slice() {
            [a, b] if is(square, "Mul") => a == d && b == d,
            [a, two] if is(square, "Pow") => a == d && self.scalar(two) == Some(2.0),
            _ => false,
        };
        // `d` is read by the square (once or twice) and the Div only.
        let &sub_idx = self.index.producer.get(d)?;
        let d_readers: HashSet<usize> = self.index.consumers_of(d).iter().copied().collect();
        if !squares_d
            || self.index.outputs.contains(d)
            || d_readers != HashSet::from([square_idx, div_idx])
        {
            return None;
        }
        let (x, mean) = operands(&self.graph.node[sub_idx], "Sub")?;
        let mean_idx = self.inner(mean)?;
        if self.last_axis_mean(mean_idx)? != x {
            return None;
        }
        let mut inner = vec![
            mean_idx,
            sub_idx,
            square_idx,
            var_mean_idx,
            add_eps_idx,
            sqrt_idx,
            div_idx,
        ];
        if mul_idx != tail {
            inner.push(mul_idx);
        }
        // γ and β as LayerNormalization takes them: 1-D over the normalized axis.
        let per_element = |t: &str| {
            let dims = &self.constant(t)?.dims;
            (dims.len() == 1 && dims[0] > 1).then_some(())
        };
        per_element(gamma)?;
        if let Some(b) = &beta {
            per_element(b)?;
        }
        let mut inputs = vec![x.clone(), gamma.clone()];
        inputs.extend(beta);
        let fused = NodeProto {
            op_type: Some("LayerNormalization".into()),
            input: inputs,
            attribute: vec![
                attr::make_int("axis", -1),
                attr::make_float("epsilon", epsilon),
            ],
            ..Default::default()
        };
        Some(Found {
            tail,
            inner,
            x: x.clone(),
            fused,
        })
    }

    /// If `node` is `op(t, c)` or `op(c, t)` with `c` a float initializer: `(t, c)`.
    fn with_constant<'n>(&self, node: &'n NodeProto, op: &str) -> Option<(&'n String, &'n String)> {
        other_operand(node, op, |c| {
            self.constant(c)
                .is_some_and(|t| t.elem_type() == DataType::Float)
        })
    }

    /// If node `i` is a ReduceMean over the last axis only, keeping dims: its input.
    fn last_axis_mean(&self, i: usize) -> Option<&String> {
        let node = &self.graph.node[i];
        if !is(node, "ReduceMean") || attr::int(node, "keepdims", 1) != 1 {
            return None;
        }
        // `axes` is an attribute before opset 18 and an input from 18.
        let axes = match node.input.get(1).filter(|a| !a.is_empty()) {
            Some(a) => tensor::to_i64(self.constant(a)?).ok()?,
            None => attr::ints(node, "axes")?,
        };
        (axes == [-1]).then(|| node.input.first()).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx;
    use crate::test_support::{self, max_difference_y, node};

    /// The written-out layer normalization of `x` over its last axis, as PyTorch exports it
    /// before opset 17, into `y`; `square` is "Pow" or "Mul", `beta` whether β is added.
    fn written_out(square: &str, beta: bool) -> Vec<NodeProto> {
        let mut mean = node("ReduceMean", &["x"], "mean");
        mean.attribute.push(attr::make_ints("axes", &[-1]));
        let mut var = node("ReduceMean", &["sq"], "var");
        var.attribute.push(attr::make_ints("axes", &[-1]));
        let square = match square {
            "Pow" => node("Pow", &["d", "two"], "sq"),
            _ => node("Mul", &["d", "d"], "sq"),
        };
        let mut nodes = vec![
            mean,
            node("Sub", &["x", "mean"], "d"),
            square,
            var,
            node("Add", &["eps", "var"], "ve"),
            node("Sqrt", &["ve"], "std"),
            node("Div", &["d", "std"], "n"),
        ];
        if beta {
            nodes.push(node("Mul", &["n", "gamma"], "g"));
            nodes.push(node("Add", &["beta", "g"], "y"));
        } else {
            nodes.push(node("Mul", &["gamma", "n"], "y"));
        }
        nodes
    }

    fn model(nodes: Vec<NodeProto>, outputs: &[&str]) -> ModelProto {
        let initializer = vec![
            tensor::from_f32("two", &[], &[2.0]),
            tensor::from_f32("eps", &[], &[1e-5]),
            tensor::from_f32("gamma", &[4], &[0.5, 1.0, 1.5, 2.0]),
            tensor::from_f32("beta", &[4], &[0.0, 0.1, -0.2, 0.3]),
        ];
        test_support::model(nodes, outputs, initializer)
    }

    #[test]
    fn pytorch_and_paddle_spellings_become_one_layer_normalization_at_opset_17() {
        for (square, beta) in [("Pow", true), ("Mul", false)] {
            let mut m = model(written_out(square, beta), &["y"]);
            assert_eq!(fuse(&mut m), 1, "{square} {beta}");
            let g = m.graph.as_ref().unwrap();
            let [ln] = g.node.as_slice() else {
                panic!("{:?}", g.node)
            };
            assert_eq!(ln.op_type(), "LayerNormalization");
            let mut inputs = vec!["x", "gamma"];
            inputs.extend(beta.then_some("beta"));
            assert_eq!(ln.input, inputs);
            assert_eq!(ln.output, ["y"]);
            assert_eq!(attr::int(ln, "axis", 0), -1);
            assert_eq!(attr::float(ln, "epsilon", 0.0), 1e-5);
            assert_eq!(onnx::default_opset(&m), Some(LAYER_NORM_OPSET));
        }
    }

    #[test]
    fn the_fused_op_computes_what_the_written_out_one_did_in_onnx_runtime() {
        let original = model(written_out("Pow", true), &["y"]);
        let mut fused = original.clone();
        assert_eq!(fuse(&mut fused), 1);
        let x = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[2, 3, 4]), |i| {
            ((i[0] * 12 + i[1] * 4 + i[2]) as f32 * 0.7).sin() * 3.0
        });
        let worst = max_difference_y(&original, &fused, &x);
        assert!(worst < 1e-5, "max |difference| {worst}");
    }

    #[test]
    fn near_misses_stay_as_written() {
        // Mean over the first axis.
        let mut nodes = written_out("Pow", true);
        nodes[0].attribute = vec![attr::make_ints("axes", &[1])];
        let mut m = model(nodes, &["y"]);
        assert_eq!(fuse(&mut m), 0);
        // γ computed, not constant.
        let mut nodes = written_out("Pow", true);
        nodes[7].input[1] = "x".into();
        let mut m = model(nodes, &["y"]);
        assert_eq!(fuse(&mut m), 0);
        // An intermediate is also a graph output.
        let mut m = model(written_out("Pow", true), &["y", "std"]);
        assert_eq!(fuse(&mut m), 0);
        // Squared by 3.
        let mut m = model(written_out("Pow", true), &["y"]);
        m.graph.as_mut().unwrap().initializer[0] = tensor::from_f32("two", &[], &[3.0]);
        assert_eq!(fuse(&mut m), 0);
        // Opset 17 would change a training BatchNormalization's outputs: nothing is fused.
        let mut nodes = written_out("Pow", true);
        let mut bn = node(
            "BatchNormalization",
            &["x", "gamma", "beta", "beta", "gamma"],
            "b",
        );
        bn.output
            .extend(["running_mean".to_owned(), "running_var".to_owned()]);
        nodes.push(bn);
        let mut m = model(nodes, &["y"]);
        assert_eq!(fuse(&mut m), 0);
        assert_eq!(onnx::default_opset(&m), Some(13));
    }
}
