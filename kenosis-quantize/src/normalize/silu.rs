//! Fuses SiLU, `Mul(x, Sigmoid(x))`, into ONNX Runtime's `com.microsoft` `QuickGelu`
//! (`x * sigmoid(alpha * x)` with `alpha = 1`).
//!
//! ORT fuses this pattern itself in FP32 (`QuickGeluFusion`), but not in a QDQ model: its
//! `EnsureUniqueDQForNodeUnit` gives the Sigmoid and the Mul separate DequantizeLinear
//! nodes, so the shared input the fusion needs is gone. Quantized as two ops, each SiLU runs
//! as QLinearSigmoid + QLinearMul, slower than FP32's single QuickGelu, enough to make a
//! SiLU network (YOLOX) slower in INT8 than in FP32. Written as one `QuickGelu` before
//! quantization, a SiLU runs in float between one DequantizeLinear and one QuantizeLinear,
//! with one rounding fewer.
//!
//! The artifact then needs ORT's contrib ops (present in every standard ORT build, which is
//! what `kenosis-runtime` loads it with).

use std::collections::HashSet;

use crate::graph::GraphIndex;
use crate::onnx::{attr, DataType, ModelProto, NodeProto, OperatorSetIdProto};

/// Domain of ONNX Runtime's contrib operators.
pub const ORT_DOMAIN: &str = "com.microsoft";
/// `QuickGelu`'s `alpha` when the attribute is absent (ONNX Runtime's contrib op spec: the
/// GELU approximation `x · sigmoid(1.702 x)`).
pub const QUICK_GELU_DEFAULT_ALPHA: f32 = 1.702;
/// The fused op's type in [`ORT_DOMAIN`].
pub const QUICK_GELU: &str = "QuickGelu";

/// Replaces every `Mul(x, s)` (either operand order) with `s = Sigmoid(x)`, where `s` has no
/// other reader and is not a graph output and `x` is float32, by `QuickGelu(x)` writing the
/// Mul's output under the Mul's name, and imports [`ORT_DOMAIN`] when anything was fused.
/// The graph must be topologically sorted (normalization sorts it first). Returns the number
/// fused.
pub fn fuse(model: &mut ModelProto) -> usize {
    let Some(graph) = model.graph.as_mut() else {
        return 0;
    };
    let types = crate::types::infer_elem_types(graph);
    let index = GraphIndex::new(graph);
    let mut fused = Vec::new();
    for (mul_idx, mul) in graph.node.iter().enumerate() {
        if mul.op_type() != "Mul" || !crate::onnx::is_default_domain(mul.domain()) {
            continue;
        }
        let [a, b] = mul.input.as_slice() else {
            continue;
        };
        let sigmoid_of = |s: &str, x: &str| {
            let &p = index.producer.get(s)?;
            let sig = &graph.node[p];
            let single_reader = index.consumers_of(s) == [mul_idx] && !index.outputs.contains(s);
            (sig.op_type() == "Sigmoid"
                && crate::onnx::is_default_domain(sig.domain())
                && sig.input.first().map(String::as_str) == Some(x)
                && single_reader
                && types.get(x) == Some(&DataType::Float))
            .then_some(p)
        };
        if let Some((sig, x)) = sigmoid_of(b, a)
            .map(|p| (p, a))
            .or_else(|| sigmoid_of(a, b).map(|p| (p, b)))
        {
            fused.push((mul_idx, sig, x.clone()));
        }
    }
    let mut removed = HashSet::new();
    for (mul_idx, sig, x) in &fused {
        let mul = &mut graph.node[*mul_idx];
        *mul = NodeProto {
            op_type: Some(QUICK_GELU.into()),
            domain: Some(ORT_DOMAIN.into()),
            name: mul.name.take(),
            input: vec![x.clone()],
            output: std::mem::take(&mut mul.output),
            attribute: vec![attr::make_float("alpha", 1.0)],
            ..Default::default()
        };
        removed.insert(*sig);
    }
    super::remove_nodes(graph, &removed);
    if !fused.is_empty() {
        import_ort_domain(model);
    }
    fused.len()
}

/// Imports [`ORT_DOMAIN`] (version 1) unless `model` already does.
pub(super) fn import_ort_domain(model: &mut ModelProto) {
    if !model.opset_import.iter().any(|o| o.domain() == ORT_DOMAIN) {
        model.opset_import.push(OperatorSetIdProto {
            domain: Some(ORT_DOMAIN.into()),
            version: Some(1),
        });
    }
}

/// Whether `node` is a SiLU as this pass writes it: `QuickGelu` with `alpha = 1`.
pub fn is_fused_silu(node: &NodeProto) -> bool {
    node.domain() == ORT_DOMAIN
        && node.op_type() == QUICK_GELU
        && attr::float(node, "alpha", QUICK_GELU_DEFAULT_ALPHA) == 1.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{self, node};

    fn model(nodes: Vec<NodeProto>, outputs: &[&str]) -> ModelProto {
        test_support::model(nodes, outputs, vec![])
    }

    #[test]
    fn silu_in_either_operand_order_becomes_one_quick_gelu() {
        let mut m = model(
            vec![
                node("Sigmoid", &["x"], "s"),
                node("Mul", &["s", "x"], "y"),
                node("Sigmoid", &["y"], "t"),
                node("Mul", &["y", "t"], "z"),
            ],
            &["z"],
        );
        assert_eq!(fuse(&mut m), 2);
        let g = m.graph.as_ref().unwrap();
        let ops: Vec<(&str, &str, &[String])> = g
            .node
            .iter()
            .map(|n| (n.op_type(), n.domain(), n.input.as_slice()))
            .collect();
        assert_eq!(
            ops,
            [
                ("QuickGelu", "com.microsoft", &["x".to_string()][..]),
                ("QuickGelu", "com.microsoft", &["y".to_string()][..]),
            ]
        );
        assert_eq!(g.node[1].output, ["z"]);
        assert_eq!(g.node[0].name(), "Mul_y");
        assert_eq!(attr::float(&g.node[0], "alpha", 0.0), 1.0);
        assert!(g.node.iter().all(is_fused_silu));
        assert!(m.opset_import.iter().any(|o| o.domain() == ORT_DOMAIN));

        // A model's own QuickGelu of another alpha (GELU approximation) is not a SiLU.
        let mut gelu = g.node[0].clone();
        gelu.attribute = vec![attr::make_float("alpha", 1.702)];
        assert!(!is_fused_silu(&gelu));
        // Nor is one without the attribute: ORT's default alpha is 1.702.
        gelu.attribute.clear();
        assert!(!is_fused_silu(&gelu));
    }

    #[test]
    fn a_sigmoid_with_another_reader_or_a_different_factor_stays() {
        // `s` is also a graph output; `Mul(w, Sigmoid(x))` is a gate, not a SiLU.
        let mut m = model(
            vec![
                node("Sigmoid", &["x"], "s"),
                node("Mul", &["x", "s"], "y"),
                node("Relu", &["x"], "w"),
                node("Sigmoid", &["x"], "u"),
                node("Mul", &["w", "u"], "z"),
            ],
            &["s", "y", "z"],
        );
        assert_eq!(fuse(&mut m), 0);
        assert_eq!(m.graph.as_ref().unwrap().node.len(), 5);
        assert!(!m.opset_import.iter().any(|o| o.domain() == ORT_DOMAIN));
    }

    #[test]
    fn a_float16_silu_stays_because_the_cpu_quick_gelu_is_float32() {
        let mut m = model(
            vec![
                node("Cast", &["x"], "h"),
                node("Sigmoid", &["h"], "s"),
                node("Mul", &["h", "s"], "y"),
            ],
            &["y"],
        );
        m.graph.as_mut().unwrap().node[0]
            .attribute
            .push(attr::make_int("to", i64::from(DataType::Float16 as i32)));
        assert_eq!(fuse(&mut m), 0);
    }
}
