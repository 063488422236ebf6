//! Small ONNX graphs written by hand for tests: a node per line, the model encoded at opset
//! 13 and IR version 8.

use kenosis_quantize::onnx::{self, GraphProto, ModelProto, OperatorSetIdProto};
use prost::Message;

/// Appends a node `op(inputs) -> output` to `graph`, named after its output.
pub fn node(graph: &mut GraphProto, op: &str, inputs: &[&str], output: &str) {
    node_with(graph, op, inputs, output, vec![]);
}

/// [`node`] with attributes.
pub fn node_with(
    graph: &mut GraphProto,
    op: &str,
    inputs: &[&str],
    output: &str,
    attrs: Vec<onnx::AttributeProto>,
) {
    graph.node.push(onnx::make_node(
        op,
        output.to_owned(),
        inputs.iter().map(|s| (*s).to_owned()).collect(),
        vec![output.to_owned()],
        attrs,
    ));
}

/// `graph` as an encoded model of the default domain at opset 13, IR version 8.
pub fn model(graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: None,
            version: Some(13),
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}
