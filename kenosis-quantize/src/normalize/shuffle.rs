//! Channel shuffles as one Gather.
//!
//! ShuffleNet (Zhang et al. 2018) and ShuffleNet V2 (Ma et al. 2018) exchange channels
//! between groups with `Reshape [n, g, k, h, w] → Transpose [0, 2, 1, 3, 4] → Reshape`.
//! In an INT8 model ONNX Runtime runs QLinearConv in NHWC and merges its NHWC→NCHW
//! Transpose into the shuffle's, leaving a 5-D uint8 Transpose that its generic kernel runs
//! slowly, enough to make ShuffleNet slower in INT8 than in FP32. Written as
//! `Reshape [n, g·k, h·w] → Gather(axis 1, permutation) → Reshape`, the shuffle is one
//! uint8 Gather of contiguous blocks.
//!
//! The rewrite is exact whatever the input's shape: the first Reshape views the data as `n`
//! runs of `g·k` blocks of `h·w` values, the Transpose reorders the blocks within each run
//! from `(group, member)` to `(member, group)` order, and the Gather applies that same
//! permutation to the blocks of a `[n, g·k, h·w]` view. Only `n`, `g`, `k`, `h`, `w` from the
//! first Reshape's constant shape are used, and every reader of the Transpose is a Reshape
//! whose result does not depend on its input's dims (no 0 "copy" entry past the first).

use std::collections::HashMap;

use crate::graph::{GraphIndex, NameGen};
use crate::onnx::{attr, make_node, tensor, GraphProto};

/// The Transpose permutation that swaps the group and member axes of a 5-D view.
const SHUFFLE_PERM: [i64; 5] = [0, 2, 1, 3, 4];

/// Most channels a rewritten shuffle may have: the permutation is stored as one int64 per
/// channel, and the view's numbers come from the file.
const MAX_CHANNELS: i64 = 1 << 20;

/// Rewrites every channel shuffle of the main graph (see the module docs) and returns how
/// many it rewrote.
pub fn rewrite(graph: &mut GraphProto, names: &mut NameGen) -> usize {
    let index = GraphIndex::new(graph);
    let constant = |name: &str| {
        index
            .initializer
            .get(name)
            .and_then(|&k| tensor::to_i64(&graph.initializer[k]).ok())
    };
    let is_default_domain = |n: &crate::onnx::NodeProto| crate::onnx::is_default_domain(n.domain());
    let mut found = Vec::new();
    for (t, transpose) in graph.node.iter().enumerate() {
        let ([shuffled], [out]) = (transpose.input.as_slice(), transpose.output.as_slice()) else {
            continue;
        };
        if transpose.op_type() != "Transpose"
            || !is_default_domain(transpose)
            || attr::ints(transpose, "perm").as_deref() != Some(&SHUFFLE_PERM[..])
            || index.outputs.contains(out)
        {
            continue;
        }
        let Some(&r) = index.producer.get(shuffled) else {
            continue;
        };
        let reshape = &graph.node[r];
        let ([_, view_shape], [_]) = (reshape.input.as_slice(), reshape.output.as_slice()) else {
            continue;
        };
        if reshape.op_type() != "Reshape"
            || !is_default_domain(reshape)
            || index.consumers_of(shuffled).len() != 1
            || index.outputs.contains(shuffled)
        {
            continue;
        }
        let Some(view) = constant(view_shape) else {
            continue;
        };
        let Some((runs, channels, block)) = blocks(&view) else {
            continue;
        };
        let readers = index.consumers_of(out);
        let readers_flatten = !readers.is_empty()
            && readers.iter().all(|&c| {
                let reader = &graph.node[c];
                reader.op_type() == "Reshape"
                    && is_default_domain(reader)
                    && reader.input.first() == Some(out)
                    && reader
                        .input
                        .get(1)
                        .and_then(|s| constant(s))
                        .is_some_and(|s| s.iter().skip(1).all(|&d| d != 0))
            });
        if readers_flatten {
            let (g, k) = (view[1], view[2]);
            found.push((r, t, [runs, channels, block], permutation(g, k)));
        }
    }
    let mut replaced = HashMap::new();
    for (r, t, view, perm) in &found {
        let (reshape, transpose) = (&graph.node[*r], &graph.node[*t]);
        let base = transpose.name().to_owned();
        let shape_name = names.fresh(&format!("{base}_blocks_shape"));
        let perm_name = names.fresh(&format!("{base}_permutation"));
        let blocks_out = names.fresh(&format!("{base}_blocks"));
        let view_node = make_node(
            "Reshape",
            names.fresh(&format!("{base}_blocks")),
            vec![reshape.input[0].clone(), shape_name.clone()],
            vec![blocks_out.clone()],
            reshape.attribute.clone(),
        );
        let gather = make_node(
            "Gather",
            names.fresh(&format!("{base}_gather")),
            vec![blocks_out, perm_name.clone()],
            vec![transpose.output[0].clone()],
            vec![attr::make_int("axis", 1)],
        );
        graph
            .initializer
            .push(tensor::from_i64(&shape_name, &[3], view));
        graph
            .initializer
            .push(tensor::from_i64(&perm_name, &[perm.len() as i64], perm));
        // The view and the Gather take the Transpose's place; the first Reshape goes.
        replaced.insert(*r, Vec::new());
        replaced.insert(*t, vec![view_node, gather]);
    }
    super::replace_nodes(graph, replaced);
    super::prune_unused_initializers(graph);
    found.len()
}

/// `(n, g·k, h·w)` for a shuffle view `[n, g, k, h, w]` whose `g`, `k`, `h`, `w` are given
/// (positive, at most [`MAX_CHANNELS`] channels); `n` may be anything Reshape accepts there
/// (0 copies the input's first dim in both views, -1 infers the same value in both).
fn blocks(view: &[i64]) -> Option<(i64, i64, i64)> {
    let [n, g, k, h, w] = *view else {
        return None;
    };
    if [g, k, h, w].iter().any(|&d| d <= 0) || n < -1 {
        return None;
    }
    let channels = g.checked_mul(k).filter(|&c| c <= MAX_CHANNELS)?;
    Some((n, channels, h.checked_mul(w)?))
}

/// The channel order a shuffle of `g` groups of `k` produces: output channel `m·g + j` is
/// input channel `j·k + m`.
fn permutation(g: i64, k: i64) -> Vec<i64> {
    (0..k)
        .flat_map(|m| (0..g).map(move |j| j * k + m))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{model, node, run_y};

    fn shuffle_graph(view: &[i64], flat: &[i64]) -> crate::onnx::ModelProto {
        let mut transpose = node("Transpose", &["v"], "t");
        transpose
            .attribute
            .push(attr::make_ints("perm", &SHUFFLE_PERM));
        model(
            vec![
                node("Relu", &["x"], "a"),
                node("Reshape", &["a", "view"], "v"),
                transpose,
                node("Reshape", &["t", "flat"], "s"),
                node("Relu", &["s"], "y"),
            ],
            &["y"],
            vec![
                tensor::from_i64("view", &[5], view),
                tensor::from_i64("flat", &[flat.len() as i64], flat),
            ],
        )
    }

    #[test]
    fn a_shuffle_becomes_a_gather_of_the_same_channel_order() {
        let mut m = shuffle_graph(&[1, 2, 3, 4, 5], &[1, 6, 4, 5]);
        let g = m.graph.as_mut().unwrap();
        let mut names = NameGen::new(g);
        assert_eq!(rewrite(g, &mut names), 1);
        let ops: Vec<&str> = g.node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, ["Relu", "Reshape", "Gather", "Reshape", "Relu"]);
        let value = |name: &str| {
            tensor::to_i64(g.initializer.iter().find(|t| t.name() == name).unwrap()).unwrap()
        };
        assert_eq!(value(&g.node[1].input[1]), [1, 6, 20]);
        assert_eq!(g.node[1].input[0], "a");
        assert_eq!(attr::int(&g.node[2], "axis", 0), 1);
        // Two groups of three: (0 1 2)(3 4 5) → 0 3 1 4 2 5.
        assert_eq!(value(&g.node[2].input[1]), [0, 3, 1, 4, 2, 5]);
        assert_eq!(g.node[2].output, ["t"]);
        assert!(g.initializer.iter().all(|t| t.name() != "view"));
    }

    #[test]
    fn the_gather_computes_what_the_transpose_did_in_onnx_runtime() {
        // Batch 2, 3 groups of 4 channels, 2x3 maps; the flat Reshape leaves the batch to -1.
        let original = shuffle_graph(&[2, 3, 4, 2, 3], &[-1, 12, 2, 3]);
        let mut rewritten = original.clone();
        let g = rewritten.graph.as_mut().unwrap();
        let mut names = NameGen::new(g);
        assert_eq!(rewrite(g, &mut names), 1);
        let x = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[2, 12, 2, 3]), |i| {
            (i[0] * 1000 + i[1] * 10 + i[2] * 3 + i[3]) as f32
        });
        assert_eq!(run_y(&rewritten, &x), run_y(&original, &x));
    }

    #[test]
    fn views_that_depend_on_the_input_dims_or_are_too_large_stay() {
        for (view, flat) in [
            (vec![1, 2, 3, 0, 5], vec![1, 6, 4, 5]), // h copied from the input
            (vec![1, 2, -1, 4, 5], vec![1, 6, 4, 5]), // k inferred
            (vec![1, 2, 3, 4, 5], vec![1, 0, 4, 5]), // flat copies the 5-D view's dim
            (vec![1, 1 << 40, 1 << 20, 1, 1], vec![1, -1, 1, 1]), // too many channels
        ] {
            let mut m = shuffle_graph(&view, &flat);
            let g = m.graph.as_mut().unwrap();
            let mut names = NameGen::new(g);
            assert_eq!(rewrite(g, &mut names), 0, "{view:?} {flat:?}");
            assert_eq!(g.node.len(), 5);
        }
    }
}
