//! `Split` with constant sizes written as one `Slice` per output.
//!
//! CSP blocks (YOLOv5/v8's C2f), ShuffleNet V2's channel split and GhostNet-style blocks cut a
//! Conv's output in two with `Split`. ONNX Runtime 1.31 has no QDQ rule that keeps both sides
//! integer:
//! - left FP32, the Split runs on a dequantized copy between a DequantizeLinear and one
//!   QuantizeLinear per output;
//! - quantized with its input's scale on every output, ORT runs it on uint8, but the Convs
//!   reading its outputs stop fusing into QLinearConv (checked on a Conv → Split → Conv
//!   → Concat block: the reading Conv ran as DequantizeLinear → Conv → QuantizeLinear).
//!
//! `Slice` is a data-movement op whose DequantizeLinear/QuantizeLinear pairs ORT drops
//! (`DropQDQNodes`), and ORT then merges sibling Slices back into one uint8 Split
//! (`GatherSliceToSplitFusion`), with every reader still fused.
//!
//! The rewrite is exact: output `k` of a Split with sizes `s` along `axis` is the Slice
//! `[s₀ + … + s_{k-1}, s₀ + … + s_k)` of that axis. Only Splits with a constant sizes input
//! are rewritten (the opset-13 upgrade turns the older `split` attribute into that input);
//! an even split without sizes, opset 18's `num_outputs` included, stays, since its sizes
//! depend on the input's shape. Sizes that do not add up to the axis length make the Split
//! fail in ONNX Runtime, while the Slices would not re-check them.

use std::collections::HashMap;

use crate::graph::{GraphIndex, NameGen};
use crate::onnx::{attr, make_node, tensor, GraphProto, NodeProto};

/// Rewrites every Split of the main graph that has constant sizes (see the module docs) and
/// returns how many it rewrote.
pub fn as_slices(graph: &mut GraphProto, names: &mut NameGen) -> usize {
    let index = GraphIndex::new(graph);
    let found: Vec<(usize, Vec<(i64, i64)>)> = graph
        .node
        .iter()
        .enumerate()
        .filter_map(|(i, node)| Some((i, slice_bounds(graph, &index, node)?)))
        .collect();
    let mut replaced: HashMap<usize, Vec<NodeProto>> = HashMap::new();
    for (i, bounds) in &found {
        let split = &graph.node[*i];
        let base = split.name().to_owned();
        let axes = names.fresh(&format!("{base}_axes"));
        let axis = attr::int(split, "axis", 0);
        graph
            .initializer
            .push(tensor::from_i64(&axes, &[1], &[axis]));
        let mut slices = Vec::with_capacity(bounds.len());
        for (k, (&(start, end), output)) in bounds.iter().zip(&split.output).enumerate() {
            let starts = names.fresh(&format!("{base}_starts_{k}"));
            let ends = names.fresh(&format!("{base}_ends_{k}"));
            graph
                .initializer
                .push(tensor::from_i64(&starts, &[1], &[start]));
            graph
                .initializer
                .push(tensor::from_i64(&ends, &[1], &[end]));
            slices.push(make_node(
                "Slice",
                names.fresh(&format!("{base}_slice_{k}")),
                vec![split.input[0].clone(), starts, ends, axes.clone()],
                vec![output.clone()],
                vec![],
            ));
        }
        replaced.insert(*i, slices);
    }
    super::replace_nodes(graph, replaced);
    super::prune_unused_initializers(graph);
    found.len()
}

/// The `[start, end)` range along the split axis of each output of `node`, if it is a
/// default-domain Split with a constant, non-negative size per output and no unnamed output.
fn slice_bounds(
    graph: &GraphProto,
    index: &GraphIndex,
    node: &NodeProto,
) -> Option<Vec<(i64, i64)>> {
    if node.op_type() != "Split" || !crate::onnx::is_default_domain(node.domain()) {
        return None;
    }
    let [data, sizes] = node.input.as_slice() else {
        return None;
    };
    if data.is_empty() {
        return None;
    }
    let sizes = tensor::to_i64(&graph.initializer[*index.initializer.get(sizes)?]).ok()?;
    if sizes.len() != node.output.len() || node.output.iter().any(String::is_empty) {
        return None;
    }
    let mut start = 0i64;
    sizes
        .iter()
        .map(|&size| {
            let end = start.checked_add(size).filter(|_| size >= 0)?;
            let bounds = (start, end);
            start = end;
            Some(bounds)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{model, node, run_y};

    /// `x → Relu → Split(axis 1, sizes) → Concat(outputs reversed) → y`.
    fn split_graph(sizes: Option<&[i64]>) -> crate::onnx::ModelProto {
        let outputs: Vec<String> = (0..3).map(|k| format!("s{k}")).collect();
        let mut inputs = vec!["a".to_owned()];
        let mut initializer = Vec::new();
        if let Some(sizes) = sizes {
            inputs.push("sizes".into());
            initializer.push(tensor::from_i64("sizes", &[sizes.len() as i64], sizes));
        }
        let split = make_node(
            "Split",
            "split".into(),
            inputs,
            outputs.clone(),
            vec![attr::make_int("axis", 1)],
        );
        let mut concat = node("Concat", &["s2", "s1", "s0"], "y");
        concat.attribute.push(attr::make_int("axis", 1));
        model(
            vec![node("Relu", &["x"], "a"), split, concat],
            &["y"],
            initializer,
        )
    }

    #[test]
    fn a_split_becomes_one_slice_per_output_over_the_same_ranges() {
        let mut m = split_graph(Some(&[2, 3, 1]));
        let g = m.graph.as_mut().unwrap();
        let mut names = NameGen::new(g);
        assert_eq!(as_slices(g, &mut names), 1);
        let ops: Vec<&str> = g.node.iter().map(|n| n.op_type()).collect();
        assert_eq!(ops, ["Relu", "Slice", "Slice", "Slice", "Concat"]);
        let value = |name: &str| {
            tensor::to_i64(g.initializer.iter().find(|t| t.name() == name).unwrap()).unwrap()
        };
        // (start, end, axis) and output of each Slice.
        let ranges: Vec<(Vec<i64>, &str)> = g.node[1..4]
            .iter()
            .map(|n| {
                assert_eq!(n.input[0], "a");
                let bounds = n.input[1..].iter().flat_map(|t| value(t)).collect();
                (bounds, n.output[0].as_str())
            })
            .collect();
        assert_eq!(
            ranges,
            [
                (vec![0, 2, 1], "s0"),
                (vec![2, 5, 1], "s1"),
                (vec![5, 6, 1], "s2"),
            ]
        );
        assert!(g.initializer.iter().all(|t| t.name() != "sizes"));
    }

    #[test]
    fn the_slices_compute_what_the_split_did_in_onnx_runtime() {
        let original = split_graph(Some(&[2, 3, 1]));
        let mut rewritten = original.clone();
        let g = rewritten.graph.as_mut().unwrap();
        let mut names = NameGen::new(g);
        assert_eq!(as_slices(g, &mut names), 1);
        let x = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[2, 6, 2, 3]), |i| {
            (i[0] * 1000 + i[1] * 10 + i[2] * 3 + i[3]) as f32
        });
        assert_eq!(run_y(&rewritten, &x), run_y(&original, &x));
    }

    #[test]
    fn splits_without_constant_non_negative_sizes_stay() {
        for sizes in [None, Some(&[2, -1, 5][..]), Some(&[2, 4][..])] {
            let mut m = split_graph(sizes);
            let g = m.graph.as_mut().unwrap();
            let mut names = NameGen::new(g);
            assert_eq!(as_slices(g, &mut names), 0, "{sizes:?}");
            assert_eq!(g.node[1].op_type(), "Split");
        }
        // Sizes computed at run time.
        let mut m = split_graph(Some(&[2, 3, 1]));
        let g = m.graph.as_mut().unwrap();
        g.initializer.clear();
        g.input.push(crate::test_support::float_value("sizes"));
        let mut names = NameGen::new(g);
        assert_eq!(as_slices(g, &mut names), 0);
    }
}
