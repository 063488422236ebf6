//! Fuses GELUs written out in elementary ops into ONNX Runtime's `com.microsoft` contrib
//! ops (ONNX's own `Gelu` needs opset 20): the exact `x · ½ · (1 + erf(x / √2))` into `Gelu`,
//! and the tanh approximation `x · ½ · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))` (Hendrycks &
//! Gimpel 2016, GPT-2's and BERT-TF's `gelu_new`, PyTorch's `approximate="tanh"`) into
//! `FastGelu`.
//!
//! Exporters before opset 20 spell them out (PyTorch's `nn.GELU`, BERT-family models such as
//! paraphrase-MiniLM-L3-v2). ORT fuses the patterns itself in FP32 (`GeluFusion` and
//! `FastGeluFusion`, then their bias fusions), but not once they are quantized: the `1 + erf`,
//! the product with `x` and the halving each became QLinearAdd or QLinearMul with their own
//! rounding. As one op a GELU runs in float between one DequantizeLinear and one
//! QuantizeLinear, like the SiLUs of [`super::silu`], with two roundings fewer.

use super::pattern::{fuse_written_out, is, operands, other_operand, other_than, Found, Matcher};
use super::silu::{import_ort_domain, ORT_DOMAIN};
use crate::onnx::{ModelProto, NodeProto};

/// The exact GELU's op type in [`ORT_DOMAIN`].
pub const GELU: &str = "Gelu";

/// The tanh approximation's op type in [`ORT_DOMAIN`].
pub const FAST_GELU: &str = "FastGelu";

/// `√(2/π)`, the tanh form's inner scale.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// The tanh form's cubic coefficient.
const CUBIC: f32 = 0.044_715;

/// Replaces every GELU written as `Mul(Mul(x, Add(g, 1)), ½)` or `Mul(Mul(x, ½), Add(g, 1))`
/// by one `com.microsoft` op of `x` that keeps the last node's name and output:
/// - `Gelu` for `g = Erf(Div(x, √2))` (or `Mul(x, 1/√2)`);
/// - `FastGelu` for `g = Tanh(Mul(Add(x, Mul(x³, 0.044715)), √(2/π)))`, with `x³` written
///   `Pow(x, 3)`, `Mul(Mul(x, x), x)` or `Mul(x, Mul(x, x))`.
///
/// Any operand order of Add and Mul; constants single-value float initializers; every
/// intermediate read only inside the pattern and not a graph output; `x` float32. Imports
/// [`ORT_DOMAIN`] when anything was fused. The graph must be topologically sorted. Returns
/// the number fused.
pub fn fuse(model: &mut ModelProto) -> usize {
    let fused = fuse_written_out(model, super::TARGET_OPSET, false, |m, tail| m.gelu(tail));
    if fused > 0 {
        import_ort_domain(model);
    }
    fused
}

/// Whether `node` is ONNX Runtime's `Gelu` or `FastGelu`, as this pass writes them.
pub fn is_gelu(node: &NodeProto) -> bool {
    node.domain() == ORT_DOMAIN && (node.op_type() == GELU || node.op_type() == FAST_GELU)
}

impl Matcher<'_> {
    /// If node `tail` ends a written-out GELU: what replaces it.
    fn gelu(&self, tail: usize) -> Option<Found> {
        let node = &self.graph.node[tail];
        let (a, b) = operands(node, "Mul")?;
        // `(x · (1 + gate)) · ½`: the halving last.
        if let Some((product, _)) = other_operand(node, "Mul", |c| self.scalar_close(c, 0.5)) {
            let mul_idx = self.inner(product)?;
            let (p, q) = operands(&self.graph.node[mul_idx], "Mul")?;
            for (x, gate) in [(p, q), (q, p)] {
                if let Some((op, rest)) = self.one_plus_gate(gate, x) {
                    return Some(found(op, tail, x, [vec![mul_idx], rest].concat()));
                }
            }
            return None;
        }
        // `(x · ½) · (1 + gate)`: the halving first.
        for (halved, gate) in [(a, b), (b, a)] {
            let Some((half_idx, x)) = self.product_with(halved, 0.5) else {
                continue;
            };
            if let Some((op, rest)) = self.one_plus_gate(gate, x) {
                return Some(found(op, tail, x, [vec![half_idx], rest].concat()));
            }
        }
        None
    }

    /// If `t` is `Add(g, 1)` with `g` the erf or tanh gate of `x` (see [`fuse`]), owned by
    /// the pattern: the fused op's type and the indices of the gate's nodes.
    fn one_plus_gate(&self, t: &str, x: &str) -> Option<(&'static str, Vec<usize>)> {
        let add_idx = self.inner(t)?;
        let (g, _) = other_operand(&self.graph.node[add_idx], "Add", |c| {
            self.scalar(c) == Some(1.0)
        })?;
        let gate_idx = self.inner(g)?;
        let gate = &self.graph.node[gate_idx];
        let argument = gate.input.first()?;
        let (op, rest) = if is(gate, "Erf") {
            (GELU, self.erf_argument(argument, x)?)
        } else if is(gate, "Tanh") {
            (FAST_GELU, self.tanh_argument(argument, x)?)
        } else {
            return None;
        };
        Some((op, [vec![add_idx, gate_idx], rest].concat()))
    }

    /// If `t` is `Div(x, √2)` or `Mul(x, 1/√2)`, owned by the pattern: its index.
    fn erf_argument(&self, t: &str, x: &str) -> Option<Vec<usize>> {
        let scale_idx = self.inner(t)?;
        let scale = &self.graph.node[scale_idx];
        let [p, q] = scale.input.as_slice() else {
            return None;
        };
        let by = |c: &str, v: f32| self.scalar_close(c, v);
        let scales_x = (is(scale, "Div") && p == x && by(q, std::f32::consts::SQRT_2))
            || (is(scale, "Mul")
                && ((p == x && by(q, std::f32::consts::FRAC_1_SQRT_2))
                    || (q == x && by(p, std::f32::consts::FRAC_1_SQRT_2))));
        scales_x.then(|| vec![scale_idx])
    }

    /// If `t` is `Mul(Add(x, Mul(x³, 0.044715)), √(2/π))`, owned by the pattern: its nodes.
    fn tanh_argument(&self, t: &str, x: &str) -> Option<Vec<usize>> {
        let (scale_idx, sum) = self.product_with(t, SQRT_2_OVER_PI)?;
        let sum_idx = self.inner(sum)?;
        let cubic = other_than(&self.graph.node[sum_idx], "Add", x)?;
        let (cubic_idx, cube) = self.product_with(cubic, CUBIC)?;
        let cube = self.cube(cube, x)?;
        Some([vec![scale_idx, sum_idx, cubic_idx], cube].concat())
    }

    /// If `t` is `Mul(u, c)` or `Mul(c, u)` with `c` a constant close to `value`, owned by
    /// the pattern: its index and `u`.
    fn product_with(&self, t: &str, value: f32) -> Option<(usize, &str)> {
        let idx = self.inner(t)?;
        let (u, _) = other_operand(&self.graph.node[idx], "Mul", |c| {
            self.scalar_close(c, value)
        })?;
        Some((idx, u))
    }

    /// If `t` is `x³` (`Pow(x, 3)`, `Mul(Mul(x, x), x)` or `Mul(x, Mul(x, x))`), owned by the
    /// pattern: its nodes.
    fn cube(&self, t: &str, x: &str) -> Option<Vec<usize>> {
        let idx = self.inner(t)?;
        let node = &self.graph.node[idx];
        let [p, q] = node.input.as_slice() else {
            return None;
        };
        if is(node, "Pow") {
            return (p == x && self.scalar(q) == Some(3.0)).then(|| vec![idx]);
        }
        let square = other_than(node, "Mul", x)?;
        let square_idx = self.inner(square)?;
        let sq = &self.graph.node[square_idx];
        (is(sq, "Mul") && sq.input.iter().all(|i| i == x) && sq.input.len() == 2)
            .then(|| vec![idx, square_idx])
    }
}

fn found(op: &str, tail: usize, x: &str, inner: Vec<usize>) -> Found {
    Found {
        tail,
        inner,
        x: x.to_owned(),
        fused: NodeProto {
            op_type: Some(op.into()),
            domain: Some(ORT_DOMAIN.into()),
            input: vec![x.to_owned()],
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{self, max_difference_y, node};

    /// A model over input `x` with the scalar constants the patterns use.
    fn model(nodes: Vec<NodeProto>, outputs: &[&str]) -> ModelProto {
        let scalars = [
            ("sqrt2", std::f32::consts::SQRT_2),
            ("inv_sqrt2", std::f32::consts::FRAC_1_SQRT_2),
            ("one", 1.0),
            ("half", 0.5),
            ("sqrt3", 3f32.sqrt()),
            ("sqrt_2_pi", SQRT_2_OVER_PI),
            ("cubic", CUBIC),
            ("three", 3.0),
            ("cubic_bert", 0.0447),
        ];
        test_support::model(nodes, outputs, test_support::scalars(&scalars))
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

    /// Fuses the one GELU of `original` and compares both in ONNX Runtime on `[-3, 3]`.
    fn assert_fused_computes_the_same(original: ModelProto) {
        let mut fused = original.clone();
        assert_eq!(fuse(&mut fused), 1);
        let x = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[3, 8]), |i| {
            (i[0] * 8 + i[1]) as f32 * 0.25 - 3.0
        });
        let worst = max_difference_y(&original, &fused, &x);
        assert!(worst < 1e-5, "max |difference| {worst}");
    }

    #[test]
    fn the_fused_gelu_computes_what_the_written_out_one_did_in_onnx_runtime() {
        assert_fused_computes_the_same(model(gelu("x", "y", "", ("Div", "sqrt2"), true), &["y"]));
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

    /// How a tanh GELU writes `x³`.
    #[derive(Clone, Copy)]
    enum Cube {
        Pow,
        SquareFirst,
        SquareLast,
    }

    /// `x · ½ · (1 + tanh(√(2/π) · (x + c · x³)))` into `out` with `c` the initializer `cubic`,
    /// nodes suffixed `k`, halving last or first.
    fn tanh_gelu(
        x: &str,
        out: &str,
        k: &str,
        cube: Cube,
        cubic: &str,
        halving_last: bool,
    ) -> Vec<NodeProto> {
        let t = |s: &str| format!("{s}{k}");
        let mut nodes = match cube {
            Cube::Pow => vec![node("Pow", &[x, "three"], &t("x3"))],
            Cube::SquareFirst => vec![
                node("Mul", &[x, x], &t("x2")),
                node("Mul", &[&t("x2"), x], &t("x3")),
            ],
            Cube::SquareLast => vec![
                node("Mul", &[x, x], &t("x2")),
                node("Mul", &[x, &t("x2")], &t("x3")),
            ],
        };
        nodes.extend([
            node("Mul", &[cubic, &t("x3")], &t("c")),
            node("Add", &[x, &t("c")], &t("s")),
            node("Mul", &[&t("s"), "sqrt_2_pi"], &t("i")),
            node("Tanh", &[&t("i")], &t("th")),
            node("Add", &[&t("th"), "one"], &t("a")),
        ]);
        if halving_last {
            nodes.push(node("Mul", &[x, &t("a")], &t("m")));
            nodes.push(node("Mul", &["half", &t("m")], out));
        } else {
            nodes.push(node("Mul", &[x, "half"], &t("h")));
            nodes.push(node("Mul", &[&t("a"), &t("h")], out));
        }
        nodes
    }

    #[test]
    fn every_spelling_of_the_tanh_form_becomes_one_fast_gelu() {
        let spellings = [
            (Cube::Pow, true),
            (Cube::SquareFirst, false),
            (Cube::SquareLast, true),
        ];
        let mut nodes = Vec::new();
        let mut x = "x".to_owned();
        for (k, (cube, halving_last)) in spellings.into_iter().enumerate() {
            let y = if k == 2 {
                "y".to_owned()
            } else {
                format!("g{k}")
            };
            nodes.extend(tanh_gelu(
                &x,
                &y,
                &k.to_string(),
                cube,
                "cubic",
                halving_last,
            ));
            x = y;
        }
        let mut m = model(nodes, &["y"]);
        assert_eq!(fuse(&mut m), 3);
        let g = m.graph.as_ref().unwrap();
        let ops: Vec<(String, Vec<String>)> = g
            .node
            .iter()
            .map(|n| {
                assert!(is_gelu(n), "{n:?}");
                (n.op_type().to_owned(), n.input.clone())
            })
            .collect();
        let fast = |x: &str| (FAST_GELU.to_owned(), vec![x.to_owned()]);
        assert_eq!(ops, [fast("x"), fast("g0"), fast("g1")]);
        assert!(g.initializer.is_empty(), "constants pruned");
    }

    #[test]
    fn the_fused_fast_gelu_computes_what_the_tanh_form_did_in_onnx_runtime() {
        for cube in [Cube::Pow, Cube::SquareFirst] {
            let nodes = tanh_gelu("x", "y", "", cube, "cubic", false);
            assert_fused_computes_the_same(model(nodes, &["y"]));
        }
    }

    #[test]
    fn tanh_near_misses_stay_as_written() {
        // A cubic coefficient rounded to 0.0447: another function.
        let mut m = model(
            tanh_gelu("x", "y", "", Cube::Pow, "cubic_bert", true),
            &["y"],
        );
        assert_eq!(fuse(&mut m), 0);
        // x · x² where the square is also read elsewhere.
        let mut m = model(
            tanh_gelu("x", "y", "", Cube::SquareFirst, "cubic", true),
            &["y", "x2"],
        );
        assert_eq!(fuse(&mut m), 0);
        // The cube of another tensor.
        let mut nodes = tanh_gelu("x", "y", "", Cube::Pow, "cubic", true);
        nodes.insert(0, node("Relu", &["x"], "r"));
        nodes[1].input[0] = "r".into();
        let mut m = model(nodes, &["y"]);
        assert_eq!(fuse(&mut m), 0);
    }
}
