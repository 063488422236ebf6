//! Constant nodes → initializers, so that weights held in Constant nodes (PaddlePaddle and
//! some PyTorch exports) are seen, deduplicated and quantized like any initializer.

use std::collections::HashMap;

use crate::error::BadOperator;
use crate::onnx::{attr, tensor, GraphProto, TensorProto};

/// Moves every default-domain `Constant` node of the main graph into `graph.initializer`,
/// merging byte-identical tensors. Returns the number of Constant nodes removed.
///
/// # Errors
/// [`BadOperator`] when a Constant node carries no supported value attribute.
pub fn extract(graph: &mut GraphProto) -> Result<usize, BadOperator> {
    // Identical payloads (shared weights exported once per use) → one initializer.
    let mut by_content: HashMap<(crate::onnx::ElemType, Vec<i64>, Vec<u8>), String> =
        HashMap::new();
    let mut aliases: Vec<(String, String)> = Vec::new();
    let mut removed = 0;
    let mut kept = Vec::with_capacity(graph.node.len());
    for node in std::mem::take(&mut graph.node) {
        if node.op_type() != "Constant"
            || !crate::onnx::is_default_domain(node.domain())
            || node.output.len() != 1
        {
            kept.push(node);
            continue;
        }
        let name = node.output[0].clone();
        let mut value = constant_value(&node, &name)?;
        value.name = Some(name.clone());
        let key = content_key(&value);
        removed += 1;
        match key.and_then(|k| match by_content.get(&k) {
            Some(existing) => Some(existing.clone()),
            None => {
                by_content.insert(k, name.clone());
                None
            }
        }) {
            Some(existing) => aliases.push((name, existing)),
            None => graph.initializer.push(value),
        }
    }
    graph.node = kept;
    for (alias, target) in aliases {
        if graph.output.iter().any(|o| o.name() == alias) {
            // A graph output must keep its name: give it its own copy.
            #[allow(
                clippy::expect_used,
                reason = "the alias was found among the initializers just before"
            )]
            let mut copy = graph
                .initializer
                .iter()
                .find(|t| t.name() == target)
                .cloned()
                .expect("target exists");
            copy.name = Some(alias);
            graph.initializer.push(copy);
        } else {
            super::rename_inputs(graph, &alias, &target);
        }
    }
    Ok(removed)
}

fn content_key(t: &TensorProto) -> Option<(crate::onnx::ElemType, Vec<i64>, Vec<u8>)> {
    // Only small-to-large raw tensors are worth merging; typed-field tensors are rare here.
    t.raw_data
        .as_ref()
        .map(|raw| (t.elem_type(), t.dims.clone(), raw.clone()))
}

fn constant_value(node: &crate::onnx::NodeProto, name: &str) -> Result<TensorProto, BadOperator> {
    if let Some(t) = attr::tensor(node, "value") {
        return Ok(t.clone());
    }
    let a = node
        .attribute
        .first()
        .ok_or_else(|| BadOperator::ConstantWithoutValue {
            output: name.to_owned(),
        })?;
    Ok(match a.name() {
        "value_float" => tensor::from_f32(name, &[], &[a.f()]),
        "value_floats" => tensor::from_f32(name, &[a.floats.len() as i64], &a.floats),
        "value_int" => tensor::from_i64(name, &[], &[a.i()]),
        "value_ints" => tensor::from_i64(name, &[a.ints.len() as i64], &a.ints),
        other => {
            return Err(BadOperator::ConstantAttribute {
                output: name.to_owned(),
                attribute: other.to_owned(),
            })
        }
    })
}
