//! Ops of custom domains ONNX Runtime does not implement. The FP32 model cannot run as a
//! whole, so the nodes that depend on such an op get no calibration statistics and stay
//! FP32, while the part of the graph that does not depend on it is calibrated and quantized
//! as usual. The artifact keeps the op; whoever runs it registers the op's kernel.

use std::collections::{BTreeMap, HashSet};

use crate::onnx::{subgraphs, FunctionProto, ModelProto, NodeProto};

/// Operator domains ONNX Runtime's CPU build implements (`onnxruntime/core/graph/constants.h`).
const ORT_DOMAINS: &[&str] = &[
    "",
    "ai.onnx",
    "ai.onnx.ml",
    "com.microsoft",
    "com.microsoft.nchwc",
    "com.ms.internal.nhwc",
    "ai.onnx.training",
    "ai.onnx.preview.training",
];

/// Start of the reason given for a node that stays FP32 because it depends on an op ONNX
/// Runtime cannot run.
pub const UNCALIBRATABLE_REASON: &str = "depends on an op ONNX Runtime cannot run";

/// Why a node cannot be calibrated (see [`uncalibratable`]). `Display` gives the report's
/// reason; empty for [`Blocked::CustomOp`], which the plan names by its domain.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Blocked {
    /// The node itself is an op of a domain ONNX Runtime does not implement.
    CustomOp,
    /// Its subgraph holds `op` of the custom domain `domain`.
    Subgraph {
        /// The op type.
        op: String,
        /// Its domain.
        domain: String,
    },
    /// It reads `tensor`, which a blocked node writes.
    Reads {
        /// The tensor.
        tensor: String,
    },
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocked::CustomOp => Ok(()),
            Blocked::Subgraph { op, domain } => write!(
                f,
                "{UNCALIBRATABLE_REASON}: its subgraph holds `{op}` of the custom domain `{domain}`"
            ),
            Blocked::Reads { tensor } => write!(f, "{UNCALIBRATABLE_REASON}: it reads `{tensor}`"),
        }
    }
}

impl Blocked {
    /// The non-empty reason whose text is `text` (as `Display` writes it), if any.
    pub fn from_text(text: &str) -> Option<Self> {
        let rest = text
            .strip_prefix(UNCALIBRATABLE_REASON)?
            .strip_prefix(": ")?;
        let blocked = if let Some(tensor) =
            (rest.strip_prefix("it reads `")).and_then(|r| r.strip_suffix('`'))
        {
            Blocked::Reads {
                tensor: tensor.to_owned(),
            }
        } else {
            let inner =
                (rest.strip_prefix("its subgraph holds `")).and_then(|r| r.strip_suffix('`'))?;
            let (op, domain) = inner.split_once("` of the custom domain `")?;
            Blocked::Subgraph {
                op: op.to_owned(),
                domain: domain.to_owned(),
            }
        };
        (blocked.to_string() == text).then_some(blocked)
    }
}

/// Top-level nodes of `model` (normalized: named, topologically sorted) that ONNX Runtime
/// cannot run without a custom kernel, by node name, with the reason they stay FP32
/// ([`Blocked::CustomOp`] for a custom-domain node itself, which the plan names by its
/// domain). These are:
/// - nodes of a domain ORT does not implement and no model-local function defines;
/// - nodes whose subgraphs (If/Loop/Scan bodies) hold such an op;
/// - every node reading, directly or through a subgraph, a tensor one of these writes.
///
/// Empty for every model ONNX Runtime runs as is.
pub fn uncalibratable(model: &ModelProto) -> BTreeMap<String, Blocked> {
    let Some(graph) = model.graph.as_ref() else {
        return BTreeMap::new();
    };
    let mut blocked = BTreeMap::new();
    let mut blocked_tensors: HashSet<&str> = HashSet::new();
    // Converges in one pass over a sorted graph; repeated in case a subgraph reads an outer
    // tensor written by a later node.
    loop {
        let before = blocked.len();
        for node in &graph.node {
            if blocked.contains_key(node.name()) {
                continue;
            }
            let reason = if let Some(op) = unknown_op(node, &model.functions) {
                if std::ptr::eq(op, node) {
                    // Named by the plan's own custom-domain reason.
                    Some(Blocked::CustomOp)
                } else {
                    Some(Blocked::Subgraph {
                        op: op.op_type().to_owned(),
                        domain: op.domain().to_owned(),
                    })
                }
            } else {
                let mut read = Vec::new();
                inputs_read(node, &mut read);
                read.into_iter()
                    .find(|t| blocked_tensors.contains(t))
                    .map(|t| Blocked::Reads {
                        tensor: t.to_owned(),
                    })
            };
            if let Some(reason) = reason {
                blocked.insert(node.name().to_owned(), reason);
                blocked_tensors.extend(node.output.iter().map(String::as_str));
            }
        }
        if blocked.len() == before {
            break;
        }
    }
    blocked
}

/// A copy of `model` without the `blocked` nodes (see [`uncalibratable`]): what ONNX Runtime
/// can run for calibration. Graph outputs written by removed nodes are dropped; the tensors
/// the removed nodes read from the remaining graph become outputs instead, so the copy
/// always has an output to compute.
pub fn runnable_part(model: &ModelProto, blocked: &BTreeMap<String, Blocked>) -> ModelProto {
    let mut runnable = model.clone();
    let graph = runnable.graph.get_or_insert_default();
    let mut removed_outputs: HashSet<String> = HashSet::new();
    let mut frontier: Vec<String> = Vec::new();
    for node in graph.node.iter().filter(|n| blocked.contains_key(n.name())) {
        removed_outputs.extend(node.output.iter().cloned());
        let mut read = Vec::new();
        inputs_read(node, &mut read);
        frontier.extend(read.into_iter().map(str::to_owned));
    }
    graph.node.retain(|n| !blocked.contains_key(n.name()));
    graph.output.retain(|o| !removed_outputs.contains(o.name()));
    let mut listed: HashSet<String> = graph.output.iter().map(|o| o.name().to_owned()).collect();
    let initializers: HashSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let mut extra = Vec::new();
    for t in frontier {
        if !removed_outputs.contains(&t)
            && !initializers.contains(t.as_str())
            && listed.insert(t.clone())
        {
            extra.push(crate::onnx::ValueInfoProto {
                name: Some(t),
                ..Default::default()
            });
        }
    }
    graph.output.extend(extra);
    runnable
}

/// The op in `node` (the node itself, or one inside its subgraphs) of a domain ONNX Runtime
/// does not implement and `functions` do not define.
fn unknown_op<'a>(node: &'a NodeProto, functions: &[FunctionProto]) -> Option<&'a NodeProto> {
    let defined = functions
        .iter()
        .any(|f| f.domain() == node.domain() && f.name() == node.op_type());
    if !ORT_DOMAINS.contains(&node.domain()) && !defined {
        return Some(node);
    }
    subgraphs(node)
        .flat_map(|g| &g.node)
        .find_map(|n| unknown_op(n, functions))
}

/// Every tensor name `node` reads: its inputs and the names its subgraphs read (including
/// their own internal names, which cannot collide with outer ones in SSA form).
fn inputs_read<'a>(node: &'a NodeProto, out: &mut Vec<&'a str>) {
    out.extend(
        node.input
            .iter()
            .filter(|i| !i.is_empty())
            .map(String::as_str),
    );
    for g in subgraphs(node) {
        for n in &g.node {
            inputs_read(n, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::GraphProto;
    use crate::test_support::{model as float_model, named as node};

    /// `nodes` over float input `x` with float `outputs`.
    fn model(nodes: Vec<NodeProto>, outputs: &[&str]) -> ModelProto {
        float_model(nodes, outputs, vec![])
    }

    #[test]
    fn what_follows_an_unknown_op_is_blocked_and_cut_off() {
        let mut custom = node("Frob", "custom", &["a"], &["b"]);
        custom.domain = Some("com.acme".into());
        let m = model(
            vec![
                node("Relu", "first", &["x"], &["a"]),
                custom,
                node("Relu", "after", &["b"], &["c"]),
                node("Relu", "beside", &["a"], &["d"]),
            ],
            &["c", "d"],
        );
        let blocked = uncalibratable(&m);
        assert_eq!(
            blocked.keys().map(String::as_str).collect::<Vec<_>>(),
            ["after", "custom"]
        );
        assert_eq!(blocked["custom"], Blocked::CustomOp);
        assert_eq!(blocked["after"], Blocked::Reads { tensor: "b".into() });

        let runnable = runnable_part(&m, &blocked);
        let g = runnable.graph.expect("graph");
        let names: Vec<&str> = g.node.iter().map(|n| n.name()).collect();
        assert_eq!(names, ["first", "beside"]);
        let outputs: Vec<&str> = g.output.iter().map(|o| o.name()).collect();
        assert_eq!(outputs, ["d", "a"]);
    }

    #[test]
    fn an_unknown_op_inside_a_subgraph_blocks_its_node_and_readers() {
        let mut custom = node("Frob", "inner", &["x"], &["y"]);
        custom.domain = Some("com.acme".into());
        let mut branch = node("If", "branch", &["cond"], &["z"]);
        branch.attribute.push(crate::onnx::AttributeProto {
            name: Some("then_branch".into()),
            g: Some(GraphProto {
                node: vec![custom],
                ..Default::default()
            }),
            ..Default::default()
        });
        let m = model(
            vec![branch, node("Relu", "after", &["z"], &["out"])],
            &["out"],
        );
        let blocked = uncalibratable(&m);
        assert_eq!(
            blocked["branch"],
            Blocked::Subgraph {
                op: "Frob".into(),
                domain: "com.acme".into()
            }
        );
        assert_eq!(blocked["after"], Blocked::Reads { tensor: "z".into() });
    }

    #[test]
    fn known_domains_and_local_functions_block_nothing() {
        let mut contrib = node("Gelu", "gelu", &["x"], &["y"]);
        contrib.domain = Some("com.microsoft".into());
        let mut local = node("MyOp", "local", &["y"], &["z"]);
        local.domain = Some("my.functions".into());
        let mut m = model(vec![contrib, local], &["z"]);
        m.functions.push(FunctionProto {
            name: Some("MyOp".into()),
            domain: Some("my.functions".into()),
            ..Default::default()
        });
        assert!(uncalibratable(&m).is_empty());
    }
}
