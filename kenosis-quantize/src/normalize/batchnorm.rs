//! Conv/ConvTranspose + BatchNormalization folding: `W' = W·γ/√(σ²+ε)`, `b' = (b−μ)·γ/√(σ²+ε) + β`,
//! computed in f64 per output channel (Ioffe & Szegedy 2015; the standard inference-time fold
//! every runtime applies). Folding before quantization makes the quantized weight the one
//! that actually runs, so its per-channel scale fits the folded values.

use std::collections::HashSet;

use super::conv;
use crate::error::{BadOperator, Unsupported};
use crate::graph::{GraphIndex, NameGen};
use crate::onnx::{attr, tensor, GraphProto};

/// Folds every BatchNormalization whose only input producer is a Conv or ungrouped
/// ConvTranspose with constant weight (and optional constant bias) that feeds nothing else.
/// Returns the number folded.
///
/// # Errors
/// [`Unsupported::Tensor`] when a folded tensor's payload is unreadable,
/// [`Unsupported::Operator`] when the parameters' lengths do not match the convolution's
/// output channels.
pub fn fold(graph: &mut GraphProto, names: &mut NameGen) -> Result<usize, Unsupported> {
    let index = GraphIndex::new(graph);
    let mut folds = Vec::new();
    for (bn_idx, bn) in graph.node.iter().enumerate() {
        if bn.op_type() != "BatchNormalization"
            || bn.input.len() < 5
            || bn.output.iter().skip(1).any(|o| !o.is_empty())
            || !bn.input[1..5].iter().all(|t| index.is_initializer(t))
        {
            continue;
        }
        if let Some(conv) = conv::foldable_producer(graph, &index, &bn.input[0]) {
            folds.push((conv, bn_idx));
        }
    }
    // New initializers are appended, so the indices in `index` stay valid while folding.
    let get = |graph: &GraphProto, name: &str| {
        tensor::to_f32(&graph.initializer[index.initializer[name]])
    };
    let mut removed = HashSet::new();
    for (conv, bn_idx) in folds {
        let out_channels = conv.channels;
        let bn = graph.node[bn_idx].clone();
        let eps = f64::from(attr::float(&bn, "epsilon", 1e-5));
        let [gamma, beta, mean, var] = [1, 2, 3, 4].map(|i| get(graph, &bn.input[i]));
        let (gamma, beta, mean, var) = (gamma?, beta?, mean?, var?);
        if [&gamma, &beta, &mean, &var]
            .iter()
            .any(|v| v.len() != out_channels)
        {
            return Err(BadOperator::BatchNormChannels {
                node: bn.name().to_owned(),
                channels: out_channels,
            }
            .into());
        }
        let bias = match graph.node[conv.node].input.get(2).filter(|b| !b.is_empty()) {
            Some(b) => get(graph, b)?,
            None => vec![0.0; out_channels],
        };
        if bias.len() != out_channels {
            return Err(BadOperator::BiasChannels {
                node: graph.node[conv.node].name().to_owned(),
                found: bias.len(),
                channels: out_channels,
            }
            .into());
        }
        let factors: Vec<f64> = (0..out_channels)
            .map(|c| f64::from(gamma[c]) / (f64::from(var[c]) + eps).sqrt())
            .collect();
        let new_bias: Vec<f32> = (0..out_channels)
            .map(|c| {
                ((f64::from(bias[c]) - f64::from(mean[c])) * factors[c] + f64::from(beta[c])) as f32
            })
            .collect();
        conv::scale_weight(graph, &index, names, &conv, |c| factors[c])?;
        conv::set_folded_bias(graph, names, conv.node, &new_bias, bn.output[0].clone());
        removed.insert(bn_idx);
    }
    super::remove_nodes(graph, &removed);
    super::prune_unused_initializers(graph);
    Ok(removed.len())
}
