//! What the fusions of ops written out in elementary ones (HardSwish, LayerNormalization,
//! GELU)
//! share: an indexed graph to match against, with the questions every pattern asks of it
//! (each fusion adds its own pattern methods to [`Matcher`]), and the pass that replaces
//! the matches ([`fuse_written_out`]).

use std::collections::HashSet;

use crate::graph::GraphIndex;
use crate::onnx::{self, tensor, DataType, GraphProto, ModelProto, NodeProto, TensorProto};

/// An indexed graph to match patterns in.
pub(super) struct Matcher<'a> {
    pub graph: &'a GraphProto,
    pub index: &'a GraphIndex,
}

impl Matcher<'_> {
    /// The producer of `t` when a pattern owns `t`: one reader, not a graph output.
    pub fn inner(&self, t: &str) -> Option<usize> {
        let &p = self.index.producer.get(t)?;
        (self.index.consumers_of(t).len() == 1 && !self.index.outputs.contains(t)).then_some(p)
    }

    /// The initializer named `name`.
    pub fn constant(&self, name: &str) -> Option<&TensorProto> {
        Some(&self.graph.initializer[*self.index.initializer.get(name)?])
    }

    /// The value of a single-element float initializer.
    pub fn scalar(&self, name: &str) -> Option<f32> {
        let t = self.constant(name)?;
        if t.elem_type() != DataType::Float {
            return None;
        }
        match tensor::to_f32(t).ok()?.as_slice() {
            [v] => Some(*v),
            _ => None,
        }
    }

    /// Whether `name` is a single-element float initializer [`close`] to `value`.
    pub fn scalar_close(&self, name: &str, value: f32) -> bool {
        self.scalar(name).is_some_and(|v| close(v, value))
    }
}

/// If `node` is the default-domain binary op `op`: its two operands.
pub(super) fn operands<'n>(node: &'n NodeProto, op: &str) -> Option<(&'n String, &'n String)> {
    match node.input.as_slice() {
        [a, b] if is(node, op) => Some((a, b)),
        _ => None,
    }
}

/// If `node` is the default-domain binary op `op` and one operand passes `known` (the second
/// operand is tried first): `(the other operand, the known one)`.
pub(super) fn other_operand<'n>(
    node: &'n NodeProto,
    op: &str,
    known: impl Fn(&str) -> bool,
) -> Option<(&'n String, &'n String)> {
    let (a, b) = operands(node, op)?;
    if known(b) {
        Some((a, b))
    } else if known(a) {
        Some((b, a))
    } else {
        None
    }
}

/// If `node` is the default-domain binary op `op` with exactly one operand `x`: the other
/// one (`op(x, x)` does not qualify, unlike with [`other_operand`]).
pub(super) fn other_than<'n>(node: &'n NodeProto, op: &str, x: &str) -> Option<&'n String> {
    match operands(node, op)? {
        (a, b) if a == x && b != x => Some(b),
        (a, b) if b == x && a != x => Some(a),
        _ => None,
    }
}

/// Equal up to the f32 rounding of a decimal constant (1/6 is written 0.16666667 or
/// 0.1666667, √2 1.4142135 or 1.41421356).
pub(super) fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-6 * b.abs()
}

/// Whether `node` is the default-domain op `op`.
pub(super) fn is(node: &NodeProto, op: &str) -> bool {
    node.op_type() == op && onnx::is_default_domain(node.domain())
}

/// An op written out in elementary ones, found in the graph.
pub(super) struct Found {
    /// The pattern's last node; the fused op takes its place, name and outputs.
    pub tail: usize,
    /// The pattern's other nodes, removed.
    pub inner: Vec<usize>,
    /// The data input; the fusion applies only when it is float32.
    pub x: String,
    /// The fused op: type, inputs and attributes.
    pub fused: NodeProto,
}

/// Replaces every pattern `find` recognizes by its fused op, trying each node as the
/// pattern's last one (`last_first`: in reverse graph order, so that the longest pattern
/// ending further down wins) and letting each node join one fusion at most. The
/// default-domain opset is raised to `opset` when anything was fused; when it cannot be
/// (see [`super::opset::can_raise`]), nothing is. The graph must be topologically sorted
/// and its default-domain opset >= 13. Returns the number fused.
pub(super) fn fuse_written_out(
    model: &mut ModelProto,
    opset: i64,
    last_first: bool,
    find: impl Fn(&Matcher, usize) -> Option<Found>,
) -> usize {
    let current = onnx::default_opset(model).unwrap_or(0);
    let Some(graph) = model.graph.as_mut() else {
        return 0;
    };
    if current < opset && !super::opset::can_raise(graph, current, opset) {
        return 0;
    }
    let types = crate::types::infer_elem_types(graph);
    let index = GraphIndex::new(graph);
    let m = Matcher {
        graph,
        index: &index,
    };
    let mut tails: Vec<usize> = (0..graph.node.len()).collect();
    if last_first {
        tails.reverse();
    }
    let mut used = HashSet::new();
    let mut found: Vec<Found> = Vec::new();
    for tail in tails {
        let Some(f) = find(&m, tail) else {
            continue;
        };
        let taken = |i: &usize| used.contains(i) || found.iter().any(|g| g.tail == *i);
        if types.get(&f.x) != Some(&DataType::Float) || taken(&f.tail) || f.inner.iter().any(taken)
        {
            continue;
        }
        used.extend(f.inner.iter().copied());
        found.push(f);
    }
    for f in &mut found {
        let node = &mut graph.node[f.tail];
        f.fused.name = node.name.take();
        f.fused.output = std::mem::take(&mut node.output);
        *node = std::mem::take(&mut f.fused);
    }
    super::remove_nodes(graph, &used);
    super::prune_unused_initializers(graph);
    if !found.is_empty() {
        super::opset::raise(model, opset);
    }
    found.len()
}
