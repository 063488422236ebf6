//! Attribute getters and builders for `NodeProto`.

use super::{attribute_proto::AttributeType, AttributeProto, NodeProto, TensorProto};

/// The attribute named `name`, if present.
pub fn find<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name() == name)
}

/// Integer attribute `name`, or `default` when absent.
pub fn int(node: &NodeProto, name: &str, default: i64) -> i64 {
    find(node, name).and_then(|a| a.i).unwrap_or(default)
}

/// Float attribute `name`, or `default` when absent.
pub fn float(node: &NodeProto, name: &str, default: f32) -> f32 {
    find(node, name).and_then(|a| a.f).unwrap_or(default)
}

/// Integer-list attribute `name`, if present.
pub fn ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    find(node, name).map(|a| a.ints.clone())
}

/// Float-list attribute `name`, if present.
pub fn floats(node: &NodeProto, name: &str) -> Option<Vec<f32>> {
    find(node, name).map(|a| a.floats.clone())
}

/// String attribute `name` (UTF-8, lossy), if present.
pub fn string(node: &NodeProto, name: &str) -> Option<String> {
    find(node, name)
        .and_then(|a| a.s.as_ref())
        .map(|s| String::from_utf8_lossy(s).into_owned())
}

/// Removes attribute `name` from `node`, returning it.
pub fn remove(node: &mut NodeProto, name: &str) -> Option<AttributeProto> {
    let pos = node.attribute.iter().position(|a| a.name() == name)?;
    Some(node.attribute.remove(pos))
}

/// Sets (replacing) attribute `attr` on `node`.
pub fn set(node: &mut NodeProto, attr: AttributeProto) {
    remove(node, attr.name());
    node.attribute.push(attr);
}

/// An `INT` attribute.
pub fn make_int(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(value),
        ..Default::default()
    }
}

/// An `INTS` attribute.
pub fn make_ints(name: &str, values: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        r#type: Some(AttributeType::Ints as i32),
        ints: values.to_vec(),
        ..Default::default()
    }
}

/// A `FLOAT` attribute.
pub fn make_float(name: &str, value: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(value),
        ..Default::default()
    }
}

/// A `STRING` attribute.
pub fn make_string(name: &str, value: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_owned()),
        r#type: Some(AttributeType::String as i32),
        s: Some(value.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// A `TENSOR` attribute's tensor, if present.
pub fn tensor<'a>(node: &'a NodeProto, name: &str) -> Option<&'a TensorProto> {
    find(node, name).and_then(|a| a.t.as_ref())
}
