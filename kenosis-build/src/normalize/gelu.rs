//! Fuses the exact GELU written out in elementary ops, `x · ½ · (1 + erf(x / √2))`, into
//! ONNX Runtime's `com.microsoft` `Gelu` (ONNX's own `Gelu` needs opset 20).
//!
//! Exporters before opset 20 spell it out (PyTorch's `nn.GELU`, BERT-family models such as
//! paraphrase-MiniLM-L3-v2). ORT fuses the pattern itself in FP32 (`GeluFusion`, then
//! `BiasGeluFusion`), but not once it is quantized: the `1 + erf`, the product with `x` and
//! the halving each became QLinearAdd or QLinearMul with their own rounding. As one `Gelu`
//! it runs in float between one DequantizeLinear and one QuantizeLinear, like the SiLUs of
//! [`super::silu`]. Measured on MiniLM (the first of its 3 GELUs stays FP32 anyway, see the
//! plan's outlier rule): sentence-embedding cosine 0.9963 → 0.9966, 0.83 → 0.79 ms on 19
//! tokens (1 thread).

use super::pattern::{close, fuse_written_out, is, Found, Matcher};
use super::silu::{import_ort_domain, ORT_DOMAIN};
use crate::onnx::{ModelProto, NodeProto};

/// The fused op's type in [`ORT_DOMAIN`].
pub const GELU: &str = "Gelu";

/// Replaces every GELU written as `Mul(Mul(x, Add(Erf(Div(x, √2)), 1)), ½)` or
/// `Mul(Mul(x, ½), Add(Erf(Div(x, √2)), 1))` (`Mul(x, 1/√2)` for the Div; any operand order
/// of Add and Mul; constants single-value float initializers; every intermediate read only
/// inside the pattern and not a graph output; `x` float32) by one `com.microsoft` `Gelu(x)`
/// that keeps the last node's name and output, and imports [`ORT_DOMAIN`] when anything was
/// fused. The graph must be topologically sorted. Returns the number fused.
pub fn fuse(model: &mut ModelProto) -> usize {
    let fused = fuse_written_out(model, super::TARGET_OPSET, false, |m, tail| m.gelu(tail));
    if fused > 0 {
        import_ort_domain(model);
    }
    fused
}

/// Whether `node` is ONNX Runtime's `Gelu`, as this pass writes it.
pub fn is_gelu(node: &NodeProto) -> bool {
    node.domain() == ORT_DOMAIN && node.op_type() == GELU
}

impl Matcher<'_> {
    /// If node `tail` ends a written-out GELU: what replaces it.
    fn gelu(&self, tail: usize) -> Option<Found> {
        let node = &self.graph.node[tail];
        let [a, b] = node.input.as_slice() else {
            return None;
        };
        if !is(node, "Mul") {
            return None;
        }
        // `(x · (1 + erf)) · ½`: the halving last.
        for (product, half) in [(a, b), (b, a)] {
            if !self.scalar(half).is_some_and(|v| close(v, 0.5)) {
                continue;
            }
            let mul_idx = self.inner(product)?;
            let mul = &self.graph.node[mul_idx];
            let [p, q] = mul.input.as_slice() else {
                return None;
            };
            if !is(mul, "Mul") {
                return None;
            }
            for (x, gate) in [(p, q), (q, p)] {
                if let Some(rest) = self.one_plus_erf(gate, x) {
                    return Some(found(tail, x, [vec![mul_idx], rest].concat()));
                }
            }
            return None;
        }
        // `(x · ½) · (1 + erf)`: the halving first.
        for (halved, gate) in [(a, b), (b, a)] {
            let Some(half_idx) = self.inner(halved) else {
                continue;
            };
            let half = &self.graph.node[half_idx];
            let [p, q] = half.input.as_slice() else {
                continue;
            };
            let halves = |c: &str| self.scalar(c).is_some_and(|v| close(v, 0.5));
            let x = match (is(half, "Mul"), halves(q), halves(p)) {
                (true, true, _) => p,
                (true, false, true) => q,
                _ => continue,
            };
            if let Some(rest) = self.one_plus_erf(gate, x) {
                return Some(found(tail, x, [vec![half_idx], rest].concat()));
            }
        }
        None
    }

    /// If `t` is `Add(Erf(Div(x, √2)), 1)` (or `Mul(x, 1/√2)` for the Div), owned by the
    /// pattern: the indices of those three nodes.
    fn one_plus_erf(&self, t: &str, x: &str) -> Option<Vec<usize>> {
        let add_idx = self.inner(t)?;
        let add = &self.graph.node[add_idx];
        let [p, q] = add.input.as_slice() else {
            return None;
        };
        if !is(add, "Add") {
            return None;
        }
        let one = |c: &str| self.scalar(c) == Some(1.0);
        let e = match (one(q), one(p)) {
            (true, _) => p,
            (false, true) => q,
            _ => return None,
        };
        let erf_idx = self.inner(e)?;
        let erf = &self.graph.node[erf_idx];
        if !is(erf, "Erf") {
            return None;
        }
        let scale_idx = self.inner(erf.input.first()?)?;
        let scale = &self.graph.node[scale_idx];
        let [p, q] = scale.input.as_slice() else {
            return None;
        };
        let by = |c: &str, v: f32| self.scalar(c).is_some_and(|s| close(s, v));
        let scales_x = (is(scale, "Div") && p == x && by(q, std::f32::consts::SQRT_2))
            || (is(scale, "Mul")
                && ((p == x && by(q, std::f32::consts::FRAC_1_SQRT_2))
                    || (q == x && by(p, std::f32::consts::FRAC_1_SQRT_2))));
        scales_x.then(|| vec![add_idx, erf_idx, scale_idx])
    }
}

fn found(tail: usize, x: &str, inner: Vec<usize>) -> Found {
    Found {
        tail,
        inner,
        x: x.to_owned(),
        fused: NodeProto {
            op_type: Some(GELU.into()),
            domain: Some(ORT_DOMAIN.into()),
            input: vec![x.to_owned()],
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::test_graph::{self, max_difference_y, node};
    use crate::onnx::tensor;

    /// A model over input `x` with the scalar constants the patterns use.
    fn model(nodes: Vec<NodeProto>, outputs: &[&str]) -> ModelProto {
        let scalars = [
            ("sqrt2", std::f32::consts::SQRT_2),
            ("inv_sqrt2", std::f32::consts::FRAC_1_SQRT_2),
            ("one", 1.0),
            ("half", 0.5),
            ("sqrt3", 3f32.sqrt()),
        ];
        let initializer = scalars
            .iter()
            .map(|(n, v)| tensor::from_f32(n, &[], &[*v]))
            .collect();
        test_graph::model(nodes, outputs, initializer)
    }

    /// `x · ½ · (1 + erf(x / scale))` into `out`, nodes suffixed `k`, halving last or first.
    fn gelu(
        x: &str,
        out: &str,
        k: &str,
        scale: (&str, &str),
        halving_last: bool,
    ) -> Vec<NodeProto> {
        let t = |s: &str| format!("{s}{k}");
        let mut nodes = vec![
            node(scale.0, &[x, scale.1], &t("s")),
            node("Erf", &[&t("s")], &t("e")),
            node("Add", &["one", &t("e")], &t("a")),
        ];
        if halving_last {
            nodes.push(node("Mul", &[&t("a"), x], &t("m")));
            nodes.push(node("Mul", &[&t("m"), "half"], out));
        } else {
            nodes.push(node("Mul", &["half", x], &t("h")));
            nodes.push(node("Mul", &[&t("h"), &t("a")], out));
        }
        nodes
    }

    #[test]
    fn both_halving_orders_and_scalings_become_one_gelu() {
        let mut nodes = gelu("x", "g1", "1", ("Div", "sqrt2"), true);
        nodes.extend(gelu("g1", "y", "2", ("Mul", "inv_sqrt2"), false));
        let mut m = model(nodes, &["y"]);
        assert_eq!(fuse(&mut m), 2);
        let ops: Vec<(String, Vec<String>, Vec<String>)> = m
            .graph
            .as_ref()
            .unwrap()
            .node
            .iter()
            .map(|n| {
                assert!(is_gelu(n), "{n:?}");
                (n.op_type().to_owned(), n.input.clone(), n.output.clone())
            })
            .collect();
        let gelu = |x: &str, y: &str| (GELU.to_owned(), vec![x.to_owned()], vec![y.to_owned()]);
        assert_eq!(ops, [gelu("x", "g1"), gelu("g1", "y")]);
        assert!(m.opset_import.iter().any(|o| o.domain() == ORT_DOMAIN));
        assert!(m.graph.as_ref().unwrap().initializer.is_empty());
    }

    #[test]
    fn the_fused_gelu_computes_what_the_written_out_one_did_in_onnx_runtime() {
        let original = model(gelu("x", "y", "", ("Div", "sqrt2"), true), &["y"]);
        let mut fused = original.clone();
        assert_eq!(fuse(&mut fused), 1);
        let x = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[3, 8]), |i| {
            (i[0] * 8 + i[1]) as f32 * 0.25 - 3.0
        });
        let worst = max_difference_y(&original, &fused, &x);
        assert!(worst < 1e-5, "max |difference| {worst}");
    }

    #[test]
    fn near_misses_stay_as_written() {
        // Scaled by 1/√3: not a GELU.
        let mut m = model(gelu("x", "y", "", ("Div", "sqrt3"), true), &["y"]);
        assert_eq!(fuse(&mut m), 0);
        // The erf argument of another tensor.
        let mut nodes = gelu("x", "y", "", ("Div", "sqrt2"), true);
        nodes.insert(0, node("Relu", &["x"], "r"));
        nodes[1].input[0] = "r".into();
        let mut m = model(nodes, &["y"]);
        assert_eq!(fuse(&mut m), 0);
        // An intermediate is also a graph output.
        let mut m = model(gelu("x", "y", "", ("Div", "sqrt2"), true), &["y", "e"]);
        assert_eq!(fuse(&mut m), 0);
    }
}
