//! Default-domain opset upgrade to 13, where per-channel QuantizeLinear/DequantizeLinear
//! (the `axis` attribute) first exists, and the further raise to 14 or 17 that a fused
//! `HardSwish` or `LayerNormalization` needs ([`can_raise`], [`raise`]).
//!
//! Each rule converts one operator whose signature or semantics changed between the model's
//! opset and 13, following the ONNX operator changelog (docs/Changelog.md) and the ONNX
//! version converter's adapters. Operators not listed kept a compatible signature.

use std::collections::HashMap;

use crate::error::{BadOperator, Removed};
use crate::graph::NameGen;
use crate::onnx::{attr, make_node, tensor, GraphProto, ModelProto, NodeProto, TensorProto};

/// The opset models are upgraded to when they are older.
pub const TARGET_OPSET: i64 = 13;

/// Removed or experimental operators with no opset-13 equivalent.
const NO_EQUIVALENT: &[&str] = &[
    "ImageScaler",
    "Crop",
    "ScaledTanh",
    "ParametricSoftplus",
    "Affine",
    "GRUUnit",
    "GivenTensorFill",
    "ThresholdedRelu_experimental",
];

/// Upgrades every default-domain node of `graph` (and its subgraphs) from `from` to 13.
///
/// # Errors
/// [`BadOperator`] for a node with no opset-13 equivalent, or without the attribute or input
/// its conversion reads.
pub fn upgrade(graph: &mut GraphProto, from: i64, names: &mut NameGen) -> Result<(), BadOperator> {
    let ranks = known_ranks(graph);
    let mut new_inits: Vec<TensorProto> = Vec::new();
    let mut out_nodes: Vec<NodeProto> = Vec::with_capacity(graph.node.len());
    for mut node in std::mem::take(&mut graph.node) {
        for a in &mut node.attribute {
            for g in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                upgrade(g, from, names)?;
            }
        }
        if !crate::onnx::is_default_domain(node.domain()) {
            out_nodes.push(node);
            continue;
        }
        let mut c = Converter {
            names,
            inits: &mut new_inits,
            node: &mut node,
        };
        let extra = c.convert(from, &ranks)?;
        out_nodes.push(node);
        out_nodes.extend(extra);
    }
    // Rewrites that wrap a node (Softmax) append nodes after it; sort later restores order.
    graph.node = out_nodes;
    graph.initializer.extend(new_inits);
    Ok(())
}

/// Highest opset [`raise`] goes to.
pub const MAX_RAISE: i64 = 17;

/// Whether the default-domain opset of `graph` can go from `from` (>= 13) to `to` (at most
/// [`MAX_RAISE`]) without changing what an inference graph computes. Between 13 and 17 the
/// ONNX Changelog changes the meaning of two existing definitions: BatchNormalization's
/// training-mode outputs (14), which block the raise, and RoiAlign's default
/// `coordinate_transformation_mode` (16: `half_pixel`, before `output_half_pixel`), which
/// [`raise`] writes out. The other updates add types, operators, or inputs and attributes
/// whose defaults keep the old behaviour (Reshape's `allowzero`, Shape's `start`/`end`,
/// ScatterND/ScatterElements' `reduction`, the RNNs' `layout`).
pub fn can_raise(graph: &GraphProto, from: i64, to: i64) -> bool {
    fn has_training_batchnorm(graph: &GraphProto) -> bool {
        graph.node.iter().any(|n| {
            (n.op_type() == "BatchNormalization" && n.output.iter().skip(1).any(|o| !o.is_empty()))
                || crate::onnx::subgraphs(n).any(has_training_batchnorm)
        })
    }
    (TARGET_OPSET..=MAX_RAISE).contains(&from)
        && to <= MAX_RAISE
        && !(from < 14 && to >= 14 && has_training_batchnorm(graph))
}

/// Raises the default-domain opset import of `model` to `to` (see [`can_raise`], which the
/// caller checked), first giving every RoiAlign without one the `coordinate_transformation_mode`
/// it had before opset 16.
pub fn raise(model: &mut ModelProto, to: i64) {
    fn pin_roi_align_mode(graph: &mut GraphProto) {
        for node in &mut graph.node {
            if node.op_type() == "RoiAlign"
                && crate::onnx::is_default_domain(node.domain())
                && attr::find(node, "coordinate_transformation_mode").is_none()
            {
                node.attribute.push(attr::make_string(
                    "coordinate_transformation_mode",
                    "output_half_pixel",
                ));
            }
            for a in &mut node.attribute {
                for g in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                    pin_roi_align_mode(g);
                }
            }
        }
    }
    let from = crate::onnx::default_opset(model).unwrap_or(to);
    if from >= to {
        return;
    }
    if from < 16 && to >= 16 {
        if let Some(g) = model.graph.as_mut() {
            pin_roi_align_mode(g);
        }
    }
    set_default_opset(model, to);
}

/// Sets the version of `model`'s default-domain opset import(s) to `version`.
pub fn set_default_opset(model: &mut ModelProto, version: i64) {
    for o in model
        .opset_import
        .iter_mut()
        .filter(|o| crate::onnx::is_default_domain(o.domain()))
    {
        o.version = Some(version);
    }
}

/// Tensor name → rank, from declared shapes (value_info, inputs, outputs).
fn known_ranks(graph: &GraphProto) -> HashMap<String, Vec<i64>> {
    let mut ranks = HashMap::new();
    for vi in graph
        .input
        .iter()
        .chain(&graph.value_info)
        .chain(&graph.output)
    {
        if let Some((_, Some(dims))) = crate::onnx::declared_tensor(vi) {
            ranks.insert(
                vi.name().to_owned(),
                dims.into_iter().map(|d| d.unwrap_or(-1)).collect(),
            );
        }
    }
    ranks
}

struct Converter<'a> {
    names: &'a mut NameGen,
    inits: &'a mut Vec<TensorProto>,
    node: &'a mut NodeProto,
}

impl Converter<'_> {
    fn not_upgradable(&self, what: Removed) -> BadOperator {
        BadOperator::NotUpgradable {
            node: crate::onnx::node_ref(self.node),
            what,
        }
    }

    fn missing(&self, what: &'static str) -> BadOperator {
        BadOperator::Missing {
            node: crate::onnx::node_ref(self.node),
            what,
        }
    }

    /// Moves integer-list attribute `name` into a new INT64 initializer at input `slot`.
    fn ints_to_input(&mut self, name: &str, slot: usize) {
        if let Some(values) = attr::remove(self.node, name).map(|a| a.ints) {
            let init = self.names.fresh(&format!("{}_{name}", self.node.name()));
            self.inits
                .push(tensor::from_i64(&init, &[values.len() as i64], &values));
            self.set_input(slot, init);
        }
    }

    fn set_input(&mut self, slot: usize, value: String) {
        while self.node.input.len() <= slot {
            self.node.input.push(String::new());
        }
        self.node.input[slot] = value;
    }

    fn scalar_f32_input(&mut self, suffix: &str, value: f32, slot: usize) {
        let init = self.names.fresh(&format!("{}_{suffix}", self.node.name()));
        self.inits.push(tensor::from_f32(&init, &[], &[value]));
        self.set_input(slot, init);
    }

    /// Converts `self.node` in place; returns nodes to insert after it.
    fn convert(
        &mut self,
        from: i64,
        ranks: &HashMap<String, Vec<i64>>,
    ) -> Result<Vec<NodeProto>, BadOperator> {
        let op = self.node.op_type().to_owned();
        if NO_EQUIVALENT.contains(&op.as_str()) {
            return Err(self.not_upgradable(Removed::Operator));
        }
        match op.as_str() {
            "BatchNormalization" if from < 9 => {
                if attr::int(self.node, "spatial", 1) != 1 {
                    return Err(self.not_upgradable(Removed::SpatialBatchNorm));
                }
                for a in ["spatial", "is_test", "consumed_inputs"] {
                    attr::remove(self.node, a);
                }
                self.node.output.truncate(1);
            }
            "Dropout" if from < 12 => {
                for a in ["ratio", "is_test"] {
                    attr::remove(self.node, a);
                }
            }
            "Clip" if from < 11 => {
                let min = attr::remove(self.node, "min").and_then(|a| a.f);
                let max = attr::remove(self.node, "max").and_then(|a| a.f);
                if let Some(v) = min {
                    self.scalar_f32_input("min", v, 1);
                }
                if let Some(v) = max {
                    self.scalar_f32_input("max", v, 2);
                }
            }
            "Squeeze" | "Unsqueeze" | "ReduceSum" => self.ints_to_input("axes", 1),
            "Split" => self.ints_to_input("split", 1),
            "Slice" if from < 10 => {
                self.ints_to_input("starts", 1);
                self.ints_to_input("ends", 2);
                self.ints_to_input("axes", 3);
            }
            "TopK" if from < 10 => {
                let k = attr::remove(self.node, "k")
                    .and_then(|a| a.i)
                    .ok_or_else(|| self.missing("k"))?;
                let init = self.names.fresh(&format!("{}_k", self.node.name()));
                self.inits.push(tensor::from_i64(&init, &[1], &[k]));
                self.set_input(1, init);
            }
            "Pad" if from < 11 => {
                self.ints_to_input("pads", 1);
                if let Some(v) = attr::remove(self.node, "value").and_then(|a| a.f) {
                    self.scalar_f32_input("value", v, 2);
                }
            }
            "Upsample" => self.upsample_to_resize(from)?,
            "Resize" if from < 11 => {
                let scales = self.node.input.get(1).cloned().unwrap_or_default();
                self.node.input = vec![self.node.input[0].clone(), String::new(), scales];
                attr::set(
                    self.node,
                    attr::make_string("coordinate_transformation_mode", "asymmetric"),
                );
                attr::set(self.node, attr::make_string("nearest_mode", "floor"));
            }
            "Scatter" => self.node.op_type = Some("ScatterElements".into()),
            "Scan" if from < 9 => return Err(self.not_upgradable(Removed::BatchedScan)),
            "Softmax" | "LogSoftmax" | "Hardmax" => return self.softmax_semantics(ranks),
            _ => {}
        }
        Ok(Vec::new())
    }

    /// Upsample (opsets 7-9) → Resize 13 with the same (asymmetric, floor) coordinate mapping.
    fn upsample_to_resize(&mut self, from: i64) -> Result<(), BadOperator> {
        let scales = if from < 9 {
            let values = attr::remove(self.node, "scales")
                .map(|a| a.floats)
                .ok_or_else(|| self.missing("scales"))?;
            let init = self.names.fresh(&format!("{}_scales", self.node.name()));
            self.inits
                .push(tensor::from_f32(&init, &[values.len() as i64], &values));
            init
        } else {
            self.node
                .input
                .get(1)
                .cloned()
                .ok_or_else(|| self.missing("scales input"))?
        };
        let mode = attr::string(self.node, "mode").unwrap_or_else(|| "nearest".into());
        self.node.op_type = Some("Resize".into());
        self.node.input = vec![self.node.input[0].clone(), String::new(), scales];
        self.node.attribute.clear();
        attr::set(
            self.node,
            attr::make_string("mode", if mode == "bilinear" { "linear" } else { &mode }),
        );
        attr::set(
            self.node,
            attr::make_string("coordinate_transformation_mode", "asymmetric"),
        );
        attr::set(self.node, attr::make_string("nearest_mode", "floor"));
        Ok(())
    }

    /// Before opset 13, Softmax coerced its input to 2-D at `axis` (default 1) and normalized
    /// over everything from `axis` on; from 13 it normalizes along `axis` (default -1) only.
    /// Where the two agree (axis is the last dim, or every later dim is 1) only `axis` is made
    /// explicit; otherwise the old semantics are rebuilt as Flatten → op → Reshape(Shape(x)).
    fn softmax_semantics(
        &mut self,
        ranks: &HashMap<String, Vec<i64>>,
    ) -> Result<Vec<NodeProto>, BadOperator> {
        let axis = attr::int(self.node, "axis", 1);
        let dims = ranks.get(&self.node.input[0]);
        let same = dims.is_some_and(|d| {
            let a = if axis < 0 {
                axis + d.len() as i64
            } else {
                axis
            };
            a >= 0 && d.iter().skip(a as usize + 1).all(|&x| x == 1)
        });
        if same {
            attr::set(self.node, attr::make_int("axis", axis));
            return Ok(Vec::new());
        }
        let base = self.node.name().to_owned();
        let input = self.node.input[0].clone();
        let output = self.node.output[0].clone();
        let flat = self.names.fresh(&format!("{base}_flat"));
        let shape = self.names.fresh(&format!("{base}_shape"));
        let normalized = self.names.fresh(&format!("{base}_2d"));
        let flatten = make_node(
            "Flatten",
            self.names.fresh(&format!("{base}_Flatten")),
            vec![input.clone()],
            vec![flat.clone()],
            vec![attr::make_int("axis", axis)],
        );
        let shape_node = make_node(
            "Shape",
            self.names.fresh(&format!("{base}_Shape")),
            vec![input],
            vec![shape.clone()],
            vec![],
        );
        let reshape = make_node(
            "Reshape",
            self.names.fresh(&format!("{base}_Reshape")),
            vec![normalized.clone(), shape],
            vec![output],
            vec![],
        );
        self.node.input[0] = flat;
        self.node.output[0] = normalized;
        attr::set(self.node, attr::make_int("axis", -1));
        Ok(vec![flatten, shape_node, reshape])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{model, node};

    #[test]
    fn raising_past_16_keeps_roi_align_on_its_old_coordinates() {
        let mut pinned = node("RoiAlign", &["x", "rois", "batch"], "r2");
        pinned.attribute.push(attr::make_string(
            "coordinate_transformation_mode",
            "half_pixel",
        ));
        let mut m = model(
            vec![node("RoiAlign", &["x", "rois", "batch"], "r1"), pinned],
            &["r1", "r2"],
            vec![],
        );
        assert!(can_raise(m.graph.as_ref().unwrap(), 13, 17));
        raise(&mut m, 17);
        assert_eq!(crate::onnx::default_opset(&m), Some(17));
        let modes: Vec<Option<String>> = m
            .graph
            .as_ref()
            .unwrap()
            .node
            .iter()
            .map(|n| attr::string(n, "coordinate_transformation_mode"))
            .collect();
        assert_eq!(
            modes,
            [Some("output_half_pixel".into()), Some("half_pixel".into())]
        );
    }

    #[test]
    fn a_training_batch_normalization_blocks_raising_past_13() {
        let mut bn = node("BatchNormalization", &["x", "s", "b", "m", "v"], "y");
        bn.output
            .extend(["running_mean".to_owned(), "running_var".to_owned()]);
        let m = model(vec![bn], &["y"], vec![]);
        let g = m.graph.as_ref().unwrap();
        assert!(!can_raise(g, 13, 14));
        assert!(can_raise(g, 14, 17));
        assert!(!can_raise(g, 14, 18), "past the checked range");
    }
}
