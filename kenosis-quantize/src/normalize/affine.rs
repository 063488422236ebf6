//! Folds a constant per-channel Mul or Add after a Conv/ConvTranspose into the op's weight
//! and bias: `(W∗x + b)·s = (W·s)∗x + b·s` and `(W∗x + b) + d = W∗x + (b + d)`, per output
//! channel.
//!
//! PaddlePaddle's exporter writes a convolution's bias as a separate `Add` of a `[1, C, 1, 1]`
//! constant (PP-OCR's upsampling ConvTransposes), and PP-LCNetV3's "learnable affine blocks"
//! (PP-OCRv4 det/rec) as a scalar `Mul` then `Add` after every Conv. Left apart, the
//! convolution's output is quantized *before* the affine step, so each step adds a Q/DQ
//! (a rounding) where no integer kernel wants it, a following BatchNormalization cannot
//! fold, and the range of the pre-affine tensor is what gets clipped. Folded, the scale
//! lands in the per-channel weight scales and the bias is quantized as int32 like any other
//! (ONNX `Conv`: `B` is added per output channel). ONNX Runtime's own `ConvMulFusion` and
//! `ConvAddFusion` do the same for FP32 graphs, which is why the FP32 baseline never pays
//! for these ops.

use std::collections::HashSet;

use super::conv;
use crate::error::BadTensor;
use crate::graph::{GraphIndex, NameGen};
use crate::onnx::{tensor, GraphProto};

/// How many per-channel ops [`fold`] folded, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Folded {
    /// `Mul`s folded into weight and bias.
    pub muls: usize,
    /// `Add`s folded into the bias.
    pub adds: usize,
}

/// Folds every `Mul(conv_out, c)` and `Add(conv_out, c)` (either operand order) where
/// `conv_out` is the only use of a Conv/ConvTranspose output with a constant weight and
/// bias, and `c` is a float initializer broadcasting one value per output channel
/// (`[1, C, 1, 1]`, `[C, 1, 1]`, or a single value). Chains (`Conv → Mul → Add`) fold
/// completely.
///
/// # Errors
/// [`BadTensor`] when a constant's payload is unreadable.
pub fn fold(graph: &mut GraphProto, names: &mut NameGen) -> Result<Folded, BadTensor> {
    let mut total = Folded::default();
    // One pass folds one op per Conv (the index is built once); the next sees the Conv
    // writing the folded op's output.
    loop {
        let once = fold_once(graph, names)?;
        if once == Folded::default() {
            return Ok(total);
        }
        total.muls += once.muls;
        total.adds += once.adds;
    }
}

fn fold_once(graph: &mut GraphProto, names: &mut NameGen) -> Result<Folded, BadTensor> {
    let index = GraphIndex::new(graph);
    let mut folds = Vec::new();
    for (op_idx, op) in graph.node.iter().enumerate() {
        if !matches!(op.op_type(), "Add" | "Mul")
            || !crate::onnx::is_default_domain(op.domain())
            || op.output.first().is_none_or(|o| index.outputs.contains(o))
        {
            continue;
        }
        let [a, b] = op.input.as_slice() else {
            continue;
        };
        let (conv_out, constant) = if index.is_initializer(b) {
            (a, b)
        } else {
            (b, a)
        };
        let Some(conv) = conv::foldable_producer(graph, &index, conv_out) else {
            continue;
        };
        let per_channel = index.initializer.get(constant).is_some_and(|&k| {
            let c = &graph.initializer[k];
            c.elem_type() == crate::onnx::DataType::Float
                && per_channel_shape(&c.dims, conv.rank, conv.channels)
        });
        if per_channel {
            folds.push((conv, op_idx, constant.clone()));
        }
    }
    let mut folded = Folded::default();
    let mut removed = HashSet::new();
    for (conv, op_idx, constant) in folds {
        let read = |name: &str| tensor::to_f32(&graph.initializer[index.initializer[name]]);
        let c = read(&constant)?;
        let at = |ch: usize| c[if c.len() == 1 { 0 } else { ch }];
        let mut bias = match graph.node[conv.node].input.get(2).filter(|b| !b.is_empty()) {
            Some(b) => read(b)?,
            None => vec![0.0; conv.channels],
        };
        if bias.len() != conv.channels || (c.len() != 1 && c.len() != conv.channels) {
            continue;
        }
        if graph.node[op_idx].op_type() == "Mul" {
            conv::scale_weight(graph, &index, names, &conv, |ch| f64::from(at(ch)))?;
            for (ch, v) in bias.iter_mut().enumerate() {
                *v *= at(ch);
            }
            folded.muls += 1;
        } else {
            for (ch, v) in bias.iter_mut().enumerate() {
                *v += at(ch);
            }
            folded.adds += 1;
        }
        let output = graph.node[op_idx].output[0].clone();
        conv::set_folded_bias(graph, names, conv.node, &bias, output);
        removed.insert(op_idx);
    }
    super::remove_nodes(graph, &removed);
    super::prune_unused_initializers(graph);
    Ok(folded)
}

/// Whether a constant of `dims` holds one value per channel (axis 1) of an output of rank
/// `rank` with `channels` channels, under numpy broadcasting (dims aligned from the right).
fn per_channel_shape(dims: &[i64], rank: usize, channels: usize) -> bool {
    if dims.len() > rank {
        return false;
    }
    let offset = rank - dims.len();
    dims.iter().enumerate().all(|(k, &d)| {
        let axis = k + offset;
        d == 1 || (axis == 1 && usize::try_from(d) == Ok(channels))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::node;

    /// PP-LCNetV3's learnable affine block after a Conv whose weight a second Conv shares.
    #[test]
    fn conv_mul_add_chain_folds_into_a_new_weight_and_bias() {
        let mut graph = GraphProto {
            node: vec![
                node("Conv", &["x", "w", "b"], "c"),
                node("Mul", &["s", "c"], "m"),
                node("Add", &["m", "d"], "y"),
                node("Conv", &["y", "w"], "z"),
            ],
            initializer: vec![
                tensor::from_f32("w", &[2, 2, 1, 1], &[1.0, 2.0, 3.0, 4.0]),
                tensor::from_f32("b", &[2], &[0.5, -1.0]),
                tensor::from_f32("s", &[], &[3.0]),
                tensor::from_f32("d", &[1, 2, 1, 1], &[10.0, 20.0]),
            ],
            ..Default::default()
        };
        let mut names = NameGen::new(&graph);
        assert_eq!(
            fold(&mut graph, &mut names),
            Ok(Folded { muls: 1, adds: 1 })
        );
        let ops: Vec<&str> = graph.node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, ["Conv", "Conv"]);
        let conv = &graph.node[0];
        assert_eq!(conv.output, ["y"]);
        let value = |name: &str| {
            let t = graph.initializer.iter().find(|t| t.name() == name).unwrap();
            tensor::to_f32(t).unwrap()
        };
        assert_eq!(value(&conv.input[1]), [3.0, 6.0, 9.0, 12.0]);
        assert_eq!(value(&conv.input[2]), [11.5, 17.0]);
        // The second Conv still reads the original weight.
        assert_eq!(graph.node[1].input[1], "w");
        assert_eq!(value("w"), [1.0, 2.0, 3.0, 4.0]);
    }

    /// A Mul that also feeds another reader, or whose constant varies along width, stays.
    #[test]
    fn a_shared_or_non_channel_constant_stays() {
        let mut graph = GraphProto {
            node: vec![
                node("Conv", &["x", "w"], "c"),
                node("Mul", &["c", "s"], "m"),
                node("Relu", &["c"], "r"),
                node("Conv", &["x", "w"], "c2"),
                node("Mul", &["c2", "row"], "m2"),
            ],
            initializer: vec![
                tensor::from_f32("w", &[2, 2, 1, 1], &[1.0; 4]),
                tensor::from_f32("s", &[], &[3.0]),
                tensor::from_f32("row", &[2], &[1.0, 2.0]),
            ],
            ..Default::default()
        };
        let mut names = NameGen::new(&graph);
        assert_eq!(fold(&mut graph, &mut names), Ok(Folded::default()));
        assert_eq!(graph.node.len(), 5);
    }

    #[test]
    fn only_channel_axis_broadcasts_fold() {
        assert!(per_channel_shape(&[1, 24, 1, 1], 4, 24));
        assert!(per_channel_shape(&[24, 1, 1], 4, 24));
        assert!(per_channel_shape(&[1], 4, 24));
        assert!(per_channel_shape(&[], 4, 24));
        // `[C]` aligns with the last (width) axis, not the channels.
        assert!(!per_channel_shape(&[24], 4, 24));
        assert!(!per_channel_shape(&[1, 24, 2, 1], 4, 24));
        assert!(!per_channel_shape(&[2, 24, 1, 1], 4, 24));
    }
}
