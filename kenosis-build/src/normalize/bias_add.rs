//! Folds a constant per-channel Add after a Conv/ConvTranspose into the op's bias.
//!
//! PaddlePaddle's exporter writes a convolution's bias as a separate `Add` of a `[1, C, 1, 1]`
//! constant (PP-OCR's upsampling ConvTransposes). Left apart, the convolution's output is
//! quantized *before* the bias is added, so a Q/DQ sits where no integer kernel wants it, a
//! following BatchNormalization cannot fold, and the range of the pre-bias tensor is what
//! gets clipped. Folded, the bias is quantized as int32 like any other (ONNX `Conv`: `B` is
//! added per output channel).

use std::collections::HashSet;

use super::conv;
use crate::graph::{GraphIndex, NameGen};
use crate::onnx::{tensor, GraphProto};

/// Folds every `Add(conv_out, c)` (either operand order) where `conv_out` is the only use of
/// a Conv/ConvTranspose output with a constant weight and bias, and `c` is a float
/// initializer broadcasting one value per output channel (`[1, C, 1, 1]`, `[C, 1, 1]`, or a
/// single value). Returns the number folded.
///
/// # Errors
/// When a constant's payload is unreadable.
pub fn fold(graph: &mut GraphProto, names: &mut NameGen) -> Result<usize, String> {
    let index = GraphIndex::new(graph);
    let mut folds = Vec::new();
    for (add_idx, add) in graph.node.iter().enumerate() {
        if add.op_type() != "Add"
            || !crate::onnx::is_default_domain(add.domain())
            || index.outputs.contains(&add.output[0])
        {
            continue;
        }
        let [a, b] = add.input.as_slice() else {
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
            c.data_type() == crate::onnx::dtype::FLOAT
                && per_channel_shape(&c.dims, conv.rank, conv.channels)
        });
        if per_channel {
            folds.push((conv, add_idx, constant.clone()));
        }
    }
    let mut removed = HashSet::new();
    for (conv, add_idx, constant) in folds {
        let read = |name: &str| tensor::to_f32(&graph.initializer[index.initializer[name]]);
        let added = read(&constant)?;
        let mut bias = match graph.node[conv.node].input.get(2).filter(|b| !b.is_empty()) {
            Some(b) => read(b)?,
            None => vec![0.0; conv.channels],
        };
        if bias.len() != conv.channels {
            continue;
        }
        for (c, v) in bias.iter_mut().enumerate() {
            *v += added[if added.len() == 1 { 0 } else { c }];
        }
        let output = graph.node[add_idx].output[0].clone();
        conv::set_folded_bias(graph, names, conv.node, &bias, output);
        removed.insert(add_idx);
    }
    super::remove_nodes(graph, &removed);
    super::prune_unused_initializers(graph);
    Ok(removed.len())
}

/// Whether a constant of `dims` adds one value per channel (axis 1) to an output of rank
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
    use super::per_channel_shape;

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
