//! An explicit zero `Pad` in front of a Conv folded into the Conv's `pads`.
//!
//! TensorFlow's "SAME" padding of strided convolutions is asymmetric, so converters
//! (tf2onnx) write it as a separate `Pad` before the Conv. For FP32 ONNX Runtime folds that
//! Pad into the Conv itself (`PadFusion`). In a QDQ model the Conv reads a DequantizeLinear
//! instead, so the fusion no longer applies: the Pad ran on a dequantized copy between a
//! DequantizeLinear and a QuantizeLinear (checked on `Conv → Clip → Pad → depthwise Conv`),
//! a copy of the whole activation map per strided Conv.
//!
//! The fold is exact: a Conv pads its input with zeros, so a constant-mode Pad with value 0
//! on the spatial axes only (none on batch or channels), read by nothing but the Conv's data
//! input, adds its amounts to the Conv's `pads`. Convs with an `auto_pad` other than
//! `NOTSET`, and Pads with negative amounts, another mode or value, or opset 18's `axes`
//! input stay as written.

use std::collections::HashSet;

use crate::graph::GraphIndex;
use crate::onnx::{attr, tensor, GraphProto, NodeProto};

/// Folds every foldable Pad of the main graph into its Conv (see the module docs) and
/// returns how many it folded.
pub fn fold_into_convs(graph: &mut GraphProto) -> usize {
    let index = GraphIndex::new(graph);
    let mut folds: Vec<(usize, usize, Vec<i64>)> = Vec::new();
    for (p, pad) in graph.node.iter().enumerate() {
        let Some(amounts) = zero_pad_amounts(graph, &index, pad) else {
            continue;
        };
        let out = &pad.output[0];
        let &[c] = index.consumers_of(out) else {
            continue;
        };
        if index.outputs.contains(out) {
            continue;
        }
        if let Some(pads) = folded_conv_pads(graph, &index, &graph.node[c], out, &amounts) {
            folds.push((p, c, pads));
        }
    }
    let mut removed = HashSet::new();
    for (p, c, pads) in &folds {
        let data = graph.node[*p].input[0].clone();
        let conv = &mut graph.node[*c];
        conv.input[0] = data;
        attr::set(conv, attr::make_ints("pads", pads));
        removed.insert(*p);
    }
    super::remove_nodes(graph, &removed);
    super::prune_unused_initializers(graph);
    folds.len()
}

/// The per-axis `[begin..., end...]` amounts of a default-domain, constant-mode Pad with
/// value 0 and constant, non-negative amounts.
fn zero_pad_amounts(graph: &GraphProto, index: &GraphIndex, pad: &NodeProto) -> Option<Vec<i64>> {
    if pad.op_type() != "Pad"
        || !crate::onnx::is_default_domain(pad.domain())
        || pad.output.len() != 1
        || pad.input.first().is_none_or(String::is_empty)
        || attr::string(pad, "mode").is_some_and(|m| m != "constant")
        || pad.input.get(3).is_some_and(|axes| !axes.is_empty())
    {
        return None;
    }
    let constant = |name: &str| Some(&graph.initializer[*index.initializer.get(name)?]);
    let amounts = tensor::to_i64(constant(pad.input.get(1)?)?).ok()?;
    let zero_value = match pad.input.get(2).filter(|v| !v.is_empty()) {
        None => true,
        Some(v) => tensor::to_f32(constant(v)?).ok()?.iter().all(|&x| x == 0.0),
    };
    (zero_value && amounts.len() % 2 == 0 && amounts.iter().all(|&a| a >= 0)).then_some(amounts)
}

/// The `pads` of `conv` with the Pad `amounts` (ONNX Pad layout, `[begin..., end...]` over
/// every axis) added, when `conv` is a default-domain Conv reading `padded` as its data
/// input, with explicit padding, and the amounts cover only its spatial axes.
fn folded_conv_pads(
    graph: &GraphProto,
    index: &GraphIndex,
    conv: &NodeProto,
    padded: &str,
    amounts: &[i64],
) -> Option<Vec<i64>> {
    if conv.op_type() != "Conv"
        || !crate::onnx::is_default_domain(conv.domain())
        || conv.input.first().map(String::as_str) != Some(padded)
        || conv.input.iter().skip(1).any(|t| t == padded)
        || attr::string(conv, "auto_pad").is_some_and(|a| a != "NOTSET")
    {
        return None;
    }
    let weight = &graph.initializer[*index.initializer.get(conv.input.get(1)?)?];
    let rank = weight.dims.len();
    let spatial = rank.checked_sub(2).filter(|&s| s > 0)?;
    if amounts.len() != 2 * rank {
        return None;
    }
    let (begin, end) = amounts.split_at(rank);
    if begin[..2].iter().chain(&end[..2]).any(|&a| a != 0) {
        return None;
    }
    let mut pads = attr::ints(conv, "pads").unwrap_or_else(|| vec![0; 2 * spatial]);
    if pads.len() != 2 * spatial {
        return None;
    }
    for (k, add) in begin[2..].iter().chain(&end[2..]).enumerate() {
        pads[k] = pads[k].checked_add(*add)?;
    }
    Some(pads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{model, node, run_y};

    /// `x → Relu → Pad(amounts, value) → Conv(3x3, stride 2, pads) → y` on 2 channels.
    fn pad_graph(
        amounts: &[i64],
        value: Option<f32>,
        conv_pads: Option<&[i64]>,
    ) -> crate::onnx::ModelProto {
        let mut pad_inputs = vec!["a", "amounts"];
        let mut initializer = vec![
            tensor::from_i64("amounts", &[amounts.len() as i64], amounts),
            tensor::from_f32(
                "w",
                &[2, 2, 3, 3],
                &(0..36).map(|k| k as f32 - 17.5).collect::<Vec<_>>(),
            ),
        ];
        if let Some(v) = value {
            pad_inputs.push("value");
            initializer.push(tensor::from_f32("value", &[], &[v]));
        }
        let mut conv = node("Conv", &["p", "w"], "y");
        conv.attribute.push(attr::make_ints("strides", &[2, 2]));
        if let Some(p) = conv_pads {
            conv.attribute.push(attr::make_ints("pads", p));
        }
        model(
            vec![
                node("Relu", &["x"], "a"),
                node("Pad", &pad_inputs, "p"),
                conv,
            ],
            &["y"],
            initializer,
        )
    }

    fn folded(m: &mut crate::onnx::ModelProto) -> usize {
        fold_into_convs(m.graph.as_mut().unwrap())
    }

    #[test]
    fn tensorflow_same_padding_moves_into_the_conv() {
        // Bottom/right only, as TensorFlow pads a stride-2 3x3 Conv on even sizes.
        let mut m = pad_graph(&[0, 0, 0, 0, 0, 0, 1, 1], None, None);
        assert_eq!(folded(&mut m), 1);
        let g = m.graph.as_ref().unwrap();
        let ops: Vec<&str> = g.node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, ["Relu", "Conv"]);
        assert_eq!(g.node[1].input[0], "a");
        assert_eq!(attr::ints(&g.node[1], "pads").unwrap(), [0, 0, 1, 1]);
        assert!(g.initializer.iter().all(|t| t.name() != "amounts"));
        // Added to padding the Conv already has; an explicit zero value folds too.
        let mut m = pad_graph(&[0, 0, 1, 0, 0, 0, 0, 2], Some(0.0), Some(&[1, 1, 1, 1]));
        assert_eq!(folded(&mut m), 1);
        let conv = &m.graph.as_ref().unwrap().node[1];
        assert_eq!(attr::ints(conv, "pads").unwrap(), [2, 1, 1, 3]);
    }

    #[test]
    fn the_folded_conv_computes_what_pad_and_conv_did_in_onnx_runtime() {
        let original = pad_graph(&[0, 0, 2, 0, 0, 0, 1, 3], None, Some(&[1, 0, 0, 1]));
        let mut rewritten = original.clone();
        assert_eq!(folded(&mut rewritten), 1);
        let x = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[1, 2, 7, 6]), |i| {
            (i[1] * 100 + i[2] * 10 + i[3]) as f32 - 50.0
        });
        assert_eq!(run_y(&rewritten, &x), run_y(&original, &x));
    }

    #[test]
    fn pads_that_are_not_zero_padding_of_spatial_axes_stay() {
        for (amounts, value) in [
            (&[0, 1, 0, 0, 0, 0, 0, 0][..], None),      // channels padded
            (&[0, 0, 0, -1, 0, 0, 0, 0][..], None),     // a crop
            (&[0, 0, 1, 1, 0, 0, 1, 1][..], Some(1.0)), // value 1
            (&[0, 0, 1, 1, 0, 0][..], None),            // rank does not match the Conv's
        ] {
            let mut m = pad_graph(amounts, value, None);
            assert_eq!(folded(&mut m), 0, "{amounts:?} {value:?}");
        }
        let mut reflect = pad_graph(&[0, 0, 1, 1, 0, 0, 1, 1], None, None);
        let pad = &mut reflect.graph.as_mut().unwrap().node[1];
        pad.attribute.push(attr::make_string("mode", "reflect"));
        assert_eq!(folded(&mut reflect), 0);
        let mut same = pad_graph(&[0, 0, 1, 1, 0, 0, 1, 1], None, None);
        let conv = &mut same.graph.as_mut().unwrap().node[2];
        conv.attribute
            .push(attr::make_string("auto_pad", "SAME_UPPER"));
        assert_eq!(folded(&mut same), 0);
    }
}
