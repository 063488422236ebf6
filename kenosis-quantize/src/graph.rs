//! Producer/consumer index and topological order over a `GraphProto`.

use std::collections::{HashMap, HashSet};

use crate::onnx::{GraphProto, NodeProto, NodeRef};

/// Who produces and who consumes each tensor name of one graph (not of its subgraphs).
#[derive(Debug, Default)]
pub struct GraphIndex {
    /// Tensor name → index of the node producing it.
    pub producer: HashMap<String, usize>,
    /// Tensor name → indices of the nodes reading it (a node reading it twice appears twice).
    pub consumers: HashMap<String, Vec<usize>>,
    /// Initializer name → index into `graph.initializer`.
    pub initializer: HashMap<String, usize>,
    /// Names of real graph inputs (initializers listed as inputs are excluded).
    pub inputs: HashSet<String>,
    /// Names of graph outputs.
    pub outputs: HashSet<String>,
}

impl GraphIndex {
    /// Indexes `graph`.
    pub fn new(graph: &GraphProto) -> Self {
        let mut index = GraphIndex::default();
        for (i, t) in graph.initializer.iter().enumerate() {
            index.initializer.insert(t.name().to_owned(), i);
        }
        for input in &graph.input {
            if !index.initializer.contains_key(input.name()) {
                index.inputs.insert(input.name().to_owned());
            }
        }
        index.outputs = graph.output.iter().map(|o| o.name().to_owned()).collect();
        for (i, node) in graph.node.iter().enumerate() {
            for out in node.output.iter().filter(|o| !o.is_empty()) {
                index.producer.insert(out.clone(), i);
            }
            for inp in node.input.iter().filter(|i| !i.is_empty()) {
                index.consumers.entry(inp.clone()).or_default().push(i);
            }
        }
        index
    }

    /// Nodes reading `tensor` (empty when none).
    pub fn consumers_of(&self, tensor: &str) -> &[usize] {
        self.consumers.get(tensor).map_or(&[], Vec::as_slice)
    }

    /// True when `tensor` is an initializer.
    pub fn is_initializer(&self, tensor: &str) -> bool {
        self.initializer.contains_key(tensor)
    }
}

/// A graph that breaks ONNX's structural rules (every node writes an output, each name is
/// assigned once, every input is provided, no cycles), found while ordering its nodes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// A node lists no output.
    #[error("node {0} lists no output; every ONNX operator has at least one")]
    NoOutput(NodeRef),
    /// Two nodes write the same tensor.
    #[error("tensor `{tensor}` is written by node {first} and again by node {second}; an ONNX graph assigns each name once")]
    WrittenTwice {
        /// The tensor.
        tensor: String,
        /// Its first writer.
        first: NodeRef,
        /// The second.
        second: NodeRef,
    },
    /// A node reads a tensor nothing provides.
    #[error("node {node} reads `{tensor}`, which no node, initializer or graph input provides")]
    Dangling {
        /// The reader.
        node: NodeRef,
        /// The missing tensor.
        tensor: String,
    },
    /// The nodes form a cycle.
    #[error("the graph has a cycle through node {0}")]
    Cycle(NodeRef),
}

/// Node indices of `graph` in an order where every node comes after the producers of its
/// inputs (Kahn's algorithm, stable with respect to the original order).
///
/// `outer` holds names visible from an enclosing graph (for subgraphs of If/Loop/Scan).
///
/// # Errors
/// [`Malformed`] naming the offending tensor or node when a node lists no output, an input
/// is produced by nothing (dangling), a tensor is written twice, or the nodes form a cycle.
pub fn topological_order(
    graph: &GraphProto,
    outer: &HashSet<String>,
) -> Result<Vec<usize>, Malformed> {
    let index = GraphIndex::new(graph);
    // ONNX graphs are in SSA form; a name written twice would also be counted twice below.
    let mut written: HashMap<&str, usize> = HashMap::new();
    for (i, node) in graph.node.iter().enumerate() {
        if node.output.is_empty() {
            return Err(Malformed::NoOutput(crate::onnx::node_ref(node)));
        }
        for out in node.output.iter().filter(|o| !o.is_empty()) {
            if let Some(first) = written.insert(out, i) {
                return Err(Malformed::WrittenTwice {
                    tensor: out.clone(),
                    first: crate::onnx::node_ref(&graph.node[first]),
                    second: crate::onnx::node_ref(node),
                });
            }
        }
    }
    let mut missing = vec![0usize; graph.node.len()];
    for (i, node) in graph.node.iter().enumerate() {
        for inp in node.input.iter().filter(|n| !n.is_empty()) {
            if index.producer.contains_key(inp) {
                missing[i] += 1;
            } else if !index.initializer.contains_key(inp)
                && !graph.input.iter().any(|g| g.name() == inp)
                && !outer.contains(inp)
            {
                return Err(Malformed::Dangling {
                    node: crate::onnx::node_ref(node),
                    tensor: inp.clone(),
                });
            }
        }
    }
    let mut ready: std::collections::VecDeque<usize> =
        (0..graph.node.len()).filter(|&i| missing[i] == 0).collect();
    let mut order = Vec::with_capacity(graph.node.len());
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for out in graph.node[i].output.iter().filter(|o| !o.is_empty()) {
            for &c in index.consumers_of(out) {
                missing[c] -= 1;
                if missing[c] == 0 {
                    ready.push_back(c);
                }
            }
        }
    }
    if order.len() != graph.node.len() {
        #[allow(
            clippy::expect_used,
            reason = "fewer nodes ordered than exist means one still waits for an input"
        )]
        let stuck = (0..graph.node.len())
            .find(|i| missing[*i] > 0)
            .expect("a node is left");
        return Err(Malformed::Cycle(crate::onnx::node_ref(&graph.node[stuck])));
    }
    Ok(order)
}

/// Removes the nodes at the indices in `removed` from `graph` (the others keep their order)
/// and appends `added` after them; the caller sorts the graph again where order matters.
pub fn replace_nodes(graph: &mut GraphProto, removed: &HashSet<usize>, added: Vec<NodeProto>) {
    let kept: Vec<NodeProto> = std::mem::take(&mut graph.node)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !removed.contains(i))
        .map(|(_, n)| n)
        .collect();
    graph.node = kept;
    graph.node.extend(added);
}

/// Reorders `graph.node` topologically (see [`topological_order`]).
///
/// # Errors
/// As [`topological_order`]: a dangling input or a cycle.
#[allow(
    clippy::expect_used,
    reason = "the topological order lists each node index exactly once"
)]
pub fn sort_topologically(graph: &mut GraphProto) -> Result<(), Malformed> {
    let order = topological_order(graph, &HashSet::new())?;
    let mut nodes: Vec<Option<crate::onnx::NodeProto>> = std::mem::take(&mut graph.node)
        .into_iter()
        .map(Some)
        .collect();
    graph.node = order
        .into_iter()
        .map(|i| nodes[i].take().expect("each index once"))
        .collect();
    Ok(())
}

/// Hands out tensor/node names that do not collide with any name already in a graph.
#[derive(Debug, Default)]
pub struct NameGen {
    used: HashSet<String>,
}

impl NameGen {
    /// Collects every name used in `graph` (and, recursively, its subgraphs).
    pub fn new(graph: &GraphProto) -> Self {
        let mut gen = NameGen::default();
        gen.collect(graph);
        gen
    }

    fn collect(&mut self, graph: &GraphProto) {
        let names = graph
            .input
            .iter()
            .chain(&graph.output)
            .chain(&graph.value_info)
            .map(|v| v.name())
            .chain(graph.initializer.iter().map(|t| t.name()));
        self.used.extend(names.map(str::to_owned));
        for node in &graph.node {
            self.used.insert(node.name().to_owned());
            self.used
                .extend(node.input.iter().chain(&node.output).cloned());
            crate::onnx::subgraphs(node).for_each(|g| self.collect(g));
        }
    }

    /// `base` itself when unused, else `base_1`, `base_2`, ...; the result is marked used.
    pub fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_owned();
        let mut n = 0;
        while self.used.contains(&name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        self.used.insert(name.clone());
        name
    }
}
