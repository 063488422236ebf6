//! Layout-only ops on constant float tensors, evaluated: an `Identity`, `Reshape`,
//! `Flatten`, `Squeeze` or `Unsqueeze` of a float initializer becomes an initializer with the
//! same values and the output's dims (row-major order is unchanged by all five, ONNX spec
//! §Reshape/§Flatten/§Squeeze/§Unsqueeze).
//!
//! Exporters that skip constant folding (Caffe2 conversions, PyTorch with
//! `do_constant_folding=False`) reach weights and per-channel parameters through such ops:
//! the ONNX model zoo's DenseNet-121 writes every BatchNormalization as
//! `BatchNormalization → Mul(Unsqueeze(w)) → Add(Unsqueeze(b))`. Left as ops, those
//! operands look like activations, so the Mul and Add cannot fold into the Conv before them
//! and would run as QLinearMul/QLinearAdd with the parameters rounded to one uint8 scale.
//! ONNX Runtime's constant folding does the same for the FP32 model at load time.

use std::collections::{HashMap, HashSet};

use crate::onnx::{attr, tensor, DataType, GraphProto, NodeProto};

/// Replaces every foldable layout op (see the module docs) of the main graph by an
/// initializer, in topological order so that chains fold in one pass. A node whose output is
/// a graph output, whose shape or axes operand is not a constant, or whose result would not
/// hold the same number of values is left as it is (ONNX Runtime reports a malformed one
/// when it loads the model). Returns the number of nodes folded.
///
/// A fold whose result has its source's dims (an `Identity`, a no-op `Reshape`) reads the
/// source itself, and folds of one source to the same dims read one initializer: a weight an
/// exporter shares between layers through `Identity` nodes (ALBERT's, whose layers all read
/// one set of weights) stays one initializer, which the quantizer then quantizes once (issue
/// 54). Otherwise the result is a new initializer named after the node's output. Outputs a
/// subgraph reads keep their own initializer: only the main graph's readers are renamed.
pub fn fold(graph: &mut GraphProto) -> usize {
    let outputs: HashSet<String> = graph.output.iter().map(|o| o.name().to_owned()).collect();
    let mut initializer: HashMap<String, usize> = graph
        .initializer
        .iter()
        .enumerate()
        .map(|(k, t)| (t.name().to_owned(), k))
        .collect();
    let in_subgraphs = subgraph_inputs(graph);
    // Folded output → the initializer it reads instead; (source, dims) → initializer.
    let mut aliases: HashMap<String, String> = HashMap::new();
    let mut folded: HashMap<(String, Vec<i64>), String> = HashMap::new();
    let mut removed = HashSet::new();
    for i in 0..graph.node.len() {
        let node = &graph.node[i];
        let (Some(data), [out]) = (node.input.first(), node.output.as_slice()) else {
            continue;
        };
        if !crate::onnx::is_default_domain(node.domain())
            || outputs.contains(out)
            || initializer.contains_key(out)
        {
            continue;
        }
        let data = aliases.get(data).unwrap_or(data);
        let Some(&k) = initializer.get(data) else {
            continue;
        };
        let source = &graph.initializer[k];
        if source.elem_type() != DataType::Float {
            continue;
        }
        let ints = |name: &str| {
            initializer
                .get(name)
                .and_then(|&k| tensor::to_i64(&graph.initializer[k]).ok())
        };
        let Some(dims) = output_dims(node, &source.dims, ints) else {
            continue;
        };
        let count = tensor::element_count(&dims);
        if count.is_none() || count != tensor::element_count(&source.dims) {
            continue;
        }
        let same = if dims == source.dims {
            Some(data.clone())
        } else {
            folded.get(&(data.clone(), dims.clone())).cloned()
        };
        match same.filter(|_| !in_subgraphs.contains(out)) {
            Some(existing) => {
                aliases.insert(out.clone(), existing);
            }
            None => {
                let mut copy = source.clone();
                copy.name = Some(out.clone());
                copy.dims = dims.clone();
                folded.insert((data.clone(), dims), out.clone());
                initializer.insert(out.clone(), graph.initializer.len());
                graph.initializer.push(copy);
            }
        }
        removed.insert(i);
    }
    super::remove_nodes(graph, &removed);
    for node in &mut graph.node {
        for input in &mut node.input {
            if let Some(to) = aliases.get(input) {
                input.clone_from(to);
            }
        }
    }
    super::prune_unused_initializers(graph);
    removed.len()
}

/// Names the nodes of `graph`'s subgraphs (at any depth) read.
fn subgraph_inputs(graph: &GraphProto) -> HashSet<String> {
    fn collect(graph: &GraphProto, used: &mut HashSet<String>) {
        for node in &graph.node {
            used.extend(node.input.iter().cloned());
            for g in crate::onnx::subgraphs(node) {
                collect(g, used);
            }
        }
    }
    let mut used = HashSet::new();
    for node in &graph.node {
        for g in crate::onnx::subgraphs(node) {
            collect(g, &mut used);
        }
    }
    used
}

/// The dims `node` gives a tensor of dims `dims`, for the layout ops this module folds, in
/// their opset-13 form (axes and shape as inputs; an `axes` attribute is read too);
/// `ints` reads a constant int64 operand. `None` for any other op or an invalid operand.
fn output_dims(
    node: &NodeProto,
    dims: &[i64],
    ints: impl Fn(&str) -> Option<Vec<i64>>,
) -> Option<Vec<i64>> {
    let operand = |k: usize| node.input.get(k).filter(|n| !n.is_empty());
    let axes = || match operand(1) {
        Some(name) => ints(name),
        None => attr::ints(node, "axes"),
    };
    match node.op_type() {
        "Identity" => Some(dims.to_vec()),
        "Flatten" => {
            let rank = dims.len() as i64;
            let axis = attr::int(node, "axis", 1);
            let axis = usize::try_from(if axis < 0 { axis + rank } else { axis }).ok()?;
            let (outer, inner) = (dims.get(..axis)?, &dims[axis..]);
            let count = |d: &[i64]| i64::try_from(tensor::element_count(d)?).ok();
            Some(vec![count(outer)?, count(inner)?])
        }
        "Reshape" => reshaped(
            dims,
            &ints(operand(1)?)?,
            attr::int(node, "allowzero", 0) != 0,
        ),
        "Unsqueeze" => {
            let axes = axes()?;
            let rank = dims.len() + axes.len();
            let at = normalized_axes(&axes, rank)?;
            let mut rest = dims.iter();
            (0..rank)
                .map(|k| {
                    if at.contains(&k) {
                        Some(1)
                    } else {
                        rest.next().copied()
                    }
                })
                .collect()
        }
        "Squeeze" if operand(1).is_none() && attr::find(node, "axes").is_none() => {
            Some(dims.iter().copied().filter(|&d| d != 1).collect())
        }
        "Squeeze" => {
            let at = normalized_axes(&axes()?, dims.len())?;
            if at.iter().any(|&k| dims[k] != 1) {
                return None;
            }
            Some(
                (0..dims.len())
                    .filter(|k| !at.contains(k))
                    .map(|k| dims[k])
                    .collect(),
            )
        }
        _ => None,
    }
}

/// ONNX `Reshape`: a 0 copies the input's dim at that position (unless `allow_zero`), one
/// -1 takes what the other dims leave.
fn reshaped(dims: &[i64], shape: &[i64], allow_zero: bool) -> Option<Vec<i64>> {
    let mut out = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (k, &s) in shape.iter().enumerate() {
        match s {
            0 if !allow_zero => out.push(*dims.get(k)?),
            -1 if infer.is_none() => {
                infer = Some(k);
                out.push(1);
            }
            s if s >= 0 => out.push(s),
            _ => return None,
        }
    }
    if let Some(k) = infer {
        let total = tensor::element_count(dims)?;
        let known = tensor::element_count(&out)?;
        if known == 0 || total % known != 0 {
            return None;
        }
        out[k] = i64::try_from(total / known).ok()?;
    }
    Some(out)
}

/// `axes` resolved against `rank` (negatives count from the end), or `None` when one is out
/// of range or repeated.
fn normalized_axes(axes: &[i64], rank: usize) -> Option<HashSet<usize>> {
    let mut at = HashSet::new();
    for &a in axes {
        let k = if a < 0 { a + rank as i64 } else { a };
        if !(0..rank as i64).contains(&k) || !at.insert(k as usize) {
            return None;
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{model, node};

    fn dims_of(g: &GraphProto, name: &str) -> Option<Vec<i64>> {
        g.initializer
            .iter()
            .find(|t| t.name() == name)
            .map(|t| t.dims.clone())
    }

    #[test]
    fn a_chain_of_layout_ops_on_a_weight_becomes_one_initializer_with_the_same_values() {
        let values: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let mut m = model(
            vec![
                node("Unsqueeze", &["w", "axes"], "w1"),
                node("Reshape", &["w1", "shape"], "w2"),
                node("Flatten", &["w2"], "w3"),
                node("Mul", &["x", "w3"], "y"),
            ],
            &["y"],
            vec![
                tensor::from_f32("w", &[6], &values),
                tensor::from_i64("axes", &[2], &[0, -1]),
                tensor::from_i64("shape", &[3], &[0, 3, -1]),
            ],
        );
        let g = m.graph.as_mut().unwrap();
        assert_eq!(fold(g), 3);
        assert_eq!(g.node.len(), 1);
        assert_eq!(g.node[0].input, ["x", "w3"]);
        assert_eq!(
            dims_of(g, "w1"),
            None,
            "intermediate initializers are pruned"
        );
        assert_eq!(dims_of(g, "w"), None, "the source has no other reader");
        assert_eq!(dims_of(g, "w3"), Some(vec![1, 6]));
        let w3 = g.initializer.iter().find(|t| t.name() == "w3").unwrap();
        assert_eq!(tensor::to_f32(w3).unwrap(), values);
    }

    /// ALBERT's export: every layer reads the one weight through its own `Identity`, some
    /// through two; a weight reshaped the same way twice is one initializer too.
    #[test]
    fn identity_chains_and_repeated_folds_of_a_weight_read_one_initializer() {
        let values: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let mut m = model(
            vec![
                node("Identity", &["w"], "w_layer1"),
                node("Identity", &["w"], "w_layer2"),
                node("Identity", &["w_layer2"], "w_layer2b"),
                node("MatMul", &["x", "w_layer1"], "a"),
                node("MatMul", &["a", "w_layer2b"], "b"),
                node("Reshape", &["v", "shape"], "v1"),
                node("Reshape", &["v", "shape"], "v2"),
                node("Add", &["b", "v1"], "c"),
                node("Add", &["c", "v2"], "y"),
            ],
            &["y"],
            vec![
                tensor::from_f32("w", &[2, 3], &values),
                tensor::from_f32("v", &[6], &values),
                tensor::from_i64("shape", &[2], &[2, 3]),
            ],
        );
        let g = m.graph.as_mut().unwrap();
        assert_eq!(fold(g), 5);
        let inputs: Vec<&[String]> = g.node.iter().map(|n| n.input.as_slice()).collect();
        assert_eq!(
            inputs,
            [&["x", "w"][..], &["a", "w"], &["b", "v1"], &["c", "v1"]]
        );
        let mut names: Vec<&str> = g.initializer.iter().map(|t| t.name()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["v1", "w"],
            "one initializer per distinct value and shape"
        );
        assert_eq!(dims_of(g, "v1"), Some(vec![2, 3]));
    }

    #[test]
    fn an_identity_output_a_subgraph_reads_keeps_its_own_initializer() {
        let branch = GraphProto {
            node: vec![node("Add", &["w_copy", "w_copy"], "z")],
            output: vec![crate::test_support::float_value("z")],
            ..Default::default()
        };
        let mut r#if = node("If", &["cond"], "y");
        for name in ["then_branch", "else_branch"] {
            r#if.attribute.push(crate::onnx::AttributeProto {
                name: Some(name.into()),
                g: Some(branch.clone()),
                ..Default::default()
            });
        }
        let mut m = model(
            vec![
                node("Identity", &["w"], "w_copy"),
                node("Mul", &["x", "w_copy"], "cond"),
                r#if,
            ],
            &["y"],
            vec![tensor::from_f32("w", &[1], &[1.0])],
        );
        let g = m.graph.as_mut().unwrap();
        assert_eq!(fold(g), 1);
        assert_eq!(g.node[0].input, ["x", "w_copy"]);
        assert_eq!(dims_of(g, "w_copy"), Some(vec![1]));
    }

    #[test]
    fn squeeze_drops_the_named_or_all_unit_axes() {
        let dims = [1, 3, 1];
        let with_axes = node("Squeeze", &["w", "axes"], "v");
        assert_eq!(
            output_dims(&with_axes, &dims, |_| Some(vec![-1])),
            Some(vec![1, 3])
        );
        assert_eq!(
            output_dims(&with_axes, &dims, |_| Some(vec![1])),
            None,
            "not a unit axis"
        );
        let all = node("Squeeze", &["w"], "v");
        assert_eq!(output_dims(&all, &dims, |_| None), Some(vec![3]));
    }

    #[test]
    fn non_constant_operands_integer_tensors_graph_outputs_and_bad_shapes_are_left() {
        let mut m = model(
            vec![
                node("Reshape", &["w", "x"], "a"),
                node("Unsqueeze", &["ids", "axes"], "b"),
                node("Reshape", &["w", "bad"], "c"),
                node("Identity", &["w"], "y"),
                node("Concat", &["a", "b", "c"], "z"),
            ],
            &["y", "z"],
            vec![
                tensor::from_f32("w", &[4], &[1.0; 4]),
                tensor::from_i64("ids", &[2], &[1, 2]),
                tensor::from_i64("axes", &[1], &[0]),
                tensor::from_i64("bad", &[2], &[3, 3]),
            ],
        );
        let g = m.graph.as_mut().unwrap();
        assert_eq!(fold(g), 0);
        assert_eq!(g.node.len(), 5);
    }
}
