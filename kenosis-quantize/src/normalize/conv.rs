//! What the convolution folds (per-channel Mul/Add, BatchNormalization) share: which Conv or
//! ConvTranspose can absorb a per-channel op that follows it, and how the scaled weight and
//! the folded bias are written back.

use crate::error::BadTensor;
use crate::graph::{GraphIndex, NameGen};
use crate::onnx::{self, tensor, GraphProto, NodeProto};

/// A convolution a following per-channel op can be folded into.
pub(super) struct Foldable {
    /// Index of the Conv/ConvTranspose node.
    pub node: usize,
    /// Its output channels.
    pub channels: usize,
    /// The weight axis holding them (see [`out_channels`]).
    pub axis: usize,
    /// Rank of the weight, and so of the output.
    pub rank: usize,
}

/// The Conv or ungrouped ConvTranspose that writes `tensor`, when its weight is a constant
/// float initializer whose payload holds the values its dims declare, its bias is absent or constant, and nothing else reads `tensor` (nor is it a
/// graph output): folding then changes no other reader.
pub(super) fn foldable_producer(
    graph: &GraphProto,
    index: &GraphIndex,
    tensor: &str,
) -> Option<Foldable> {
    let &node = index.producer.get(tensor)?;
    let conv = &graph.node[node];
    let w = &graph.initializer[*index.initializer.get(conv.input.get(1)?)?];
    // Buffers are sized from the declared channels: the payload must back them.
    if !tensor::float_payload_matches_dims(w) {
        return None;
    }
    let (channels, axis) = out_channels(conv, &w.dims)?;
    let single_use = index.consumers_of(tensor).len() == 1 && !index.outputs.contains(tensor);
    let bias_constant = conv
        .input
        .get(2)
        .is_none_or(|b| b.is_empty() || index.is_initializer(b));
    (single_use && bias_constant).then_some(Foldable {
        node,
        channels,
        axis,
        rank: w.dims.len(),
    })
}

/// Output channels of a Conv or ConvTranspose with weight dims `w_dims`, and the weight axis
/// that holds them: `[C_out, C_in/group, k...]` (axis 0) for Conv, `[C_in, C_out, k...]`
/// (axis 1) for a ConvTranspose with `group = 1`. `None` for other ops, weights of rank < 3
/// and grouped ConvTranspose (its output channels are split across the weight's axes).
pub(super) fn out_channels(node: &NodeProto, w_dims: &[i64]) -> Option<(usize, usize)> {
    if w_dims.len() < 3 || !onnx::is_default_domain(node.domain()) {
        return None;
    }
    let axis = match node.op_type() {
        "Conv" => 0,
        "ConvTranspose" if onnx::attr::int(node, "group", 1) == 1 => 1,
        _ => return None,
    };
    usize::try_from(w_dims[axis]).ok().map(|c| (c, axis))
}

/// Gives the convolution `conv` a new weight: its weight with every element of output
/// channel `c` multiplied by `factor(c)`, computed in f64. The weight is written as a new
/// initializer named after the node, since the original may be shared (deduplicated
/// constants); `index` must still locate the original.
///
/// # Errors
/// [`BadTensor`] when the weight's payload is unreadable.
pub(super) fn scale_weight(
    graph: &mut GraphProto,
    index: &GraphIndex,
    names: &mut NameGen,
    conv: &Foldable,
    factor: impl Fn(usize) -> f64,
) -> Result<(), BadTensor> {
    let w_init = &graph.initializer[index.initializer[&graph.node[conv.node].input[1]]];
    let dims = w_init.dims.clone();
    let mut w = tensor::to_f32(w_init)?;
    let inner = tensor::inner_size(&dims, conv.axis);
    for (e, v) in w.iter_mut().enumerate() {
        *v = (f64::from(*v) * factor((e / inner) % conv.channels)) as f32;
    }
    let name = names.fresh(&format!("{}_folded_weight", graph.node[conv.node].name()));
    graph.initializer.push(tensor::from_f32(&name, &dims, &w));
    graph.node[conv.node].input[1] = name;
    Ok(())
}

/// Gives the convolution at `node` the bias `bias` (a new `[C]` initializer named after the
/// node) and makes it write `output`, the folded op's output, in place of its own.
pub(super) fn set_folded_bias(
    graph: &mut GraphProto,
    names: &mut NameGen,
    node: usize,
    bias: &[f32],
    output: String,
) {
    let name = names.fresh(&format!("{}_folded_bias", graph.node[node].name()));
    graph
        .initializer
        .push(tensor::from_f32(&name, &[bias.len() as i64], bias));
    let conv = &mut graph.node[node];
    conv.input.truncate(2);
    conv.input.push(name);
    conv.output[0] = output;
}
