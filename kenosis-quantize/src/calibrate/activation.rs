//! The saturating activation that is a tensor's only reader, so that its range can be judged
//! by the error that survives the activation (see [`super::range::choose`]).
//!
//! A Conv output feeding a SiLU or a Sigmoid has a long tail that the activation flattens:
//! SiLU maps everything below -8 into (-0.003, 0]. Rounding and clipping error there never
//! reaches the next layer, so a range sized for the raw tensor spends most of its 256 levels
//! where they do not count.
//!
//! HardSwish and HardSigmoid readers are left out: they are linear over most of their input
//! range and flatten only outside `[-3, 3]`, so judging a range after them moves fidelity
//! either way depending on the calibration data, with no consistent gain.

use std::collections::HashMap;

use crate::graph::GraphIndex;
use crate::normalize::silu::{ORT_DOMAIN, QUICK_GELU, QUICK_GELU_DEFAULT_ALPHA};
use crate::onnx::{attr, is_default_domain, GraphProto, NodeProto};

/// A smooth elementwise activation whose slope vanishes on at least one side.
///
/// Formulas from the ONNX operator specs (Sigmoid, Tanh) and ONNX Runtime's `com.microsoft`
/// contrib op spec (QuickGelu).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `x · sigmoid(alpha·x)`; alpha 1 is the SiLU normalization writes (see
    /// [`crate::normalize::silu`]), ORT's default is 1.702.
    QuickGelu {
        /// Sigmoid gain.
        alpha: f64,
    },
}

impl Activation {
    /// The activation `node` computes on its input 0, or `None` for any other op.
    pub fn of(node: &NodeProto) -> Option<Self> {
        if node.domain() == ORT_DOMAIN && node.op_type() == QUICK_GELU {
            let alpha = attr::float(node, "alpha", QUICK_GELU_DEFAULT_ALPHA);
            return Some(Self::QuickGelu {
                alpha: f64::from(alpha),
            });
        }
        if !is_default_domain(node.domain()) {
            return None;
        }
        match node.op_type() {
            "Sigmoid" => Some(Self::Sigmoid),
            "Tanh" => Some(Self::Tanh),
            _ => None,
        }
    }

    /// The activation's value at `x`.
    pub fn apply(self, x: f64) -> f64 {
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        match self {
            Self::Sigmoid => sigmoid(x),
            Self::Tanh => x.tanh(),
            Self::QuickGelu { alpha } => x * sigmoid(alpha * x),
        }
    }
}

/// Tensors of `graph` whose every reader is one and the same [`Activation`] (reading it as
/// input 0), mapped to that activation. Graph outputs are left out: their own values are
/// what the user reads.
pub fn sole_readers(graph: &GraphProto) -> HashMap<String, Activation> {
    let index = GraphIndex::new(graph);
    index
        .consumers
        .iter()
        .filter(|(tensor, _)| !index.outputs.contains(*tensor))
        .filter_map(|(tensor, readers)| {
            let mut activations = readers.iter().map(|&i| {
                let node = &graph.node[i];
                (node.input.len() == 1 && node.input[0] == *tensor)
                    .then(|| Activation::of(node))
                    .flatten()
            });
            let first = activations.next()??;
            activations
                .all(|a| a == Some(first))
                .then(|| (tensor.clone(), first))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{model, node};

    #[test]
    fn activations_match_their_spec_formulas() {
        let silu = Activation::QuickGelu { alpha: 1.0 };
        assert!((silu.apply(2.0) - 2.0 / (1.0 + (-2f64).exp())).abs() < 1e-12);
        assert_eq!(Activation::Sigmoid.apply(0.0), 0.5);
        assert!((Activation::Tanh.apply(-30.0) + 1.0).abs() < 1e-12);
    }

    #[test]
    fn quick_gelu_without_alpha_is_ort_default_not_silu() {
        let mut gelu = node(QUICK_GELU, &["x"], "y");
        gelu.domain = Some(ORT_DOMAIN.into());
        assert_eq!(
            Activation::of(&gelu),
            Some(Activation::QuickGelu {
                alpha: f64::from(QUICK_GELU_DEFAULT_ALPHA)
            })
        );
    }

    #[test]
    fn only_tensors_read_by_one_activation_alone_are_listed() {
        let m = model(
            vec![
                node("Conv", &["x", "w"], "a"),
                node("Sigmoid", &["a"], "a_sig"),
                node("Conv", &["a_sig", "w"], "b"),
                node("Sigmoid", &["b"], "b_sig"),
                node("Add", &["b", "b_sig"], "c"),
                node("Tanh", &["c"], "c_t1"),
                node("Tanh", &["c"], "c_t2"),
                node("Relu", &["c_t1"], "d"),
                node("Sigmoid", &["d"], "out"),
            ],
            &["out", "c_t2"],
            vec![],
        );
        let readers = sole_readers(m.graph.as_ref().unwrap());
        assert_eq!(readers.get("a"), Some(&Activation::Sigmoid));
        // `b` also feeds an Add; `c` feeds two Tanh nodes, which still counts.
        assert_eq!(readers.get("b"), None);
        assert_eq!(readers.get("c"), Some(&Activation::Tanh));
        // Relu is no activation of this kind; graph outputs are never listed.
        assert_eq!(readers.get("c_t1"), None);
        assert_eq!(readers.get("out"), None);
        assert_eq!(readers.get("d"), Some(&Activation::Sigmoid));
    }
}
