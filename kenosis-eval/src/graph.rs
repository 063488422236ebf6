//! Small ONNX graphs written by hand for tests: a node per line, the model encoded at opset
//! 13 and IR version 8; and the pieces the hand-built encoders (`mpnet`, `vit`) share
//! ([`GraphWriter`]), in the primitive ops exporters write.

use kenosis_quantize::onnx::{
    self, attr, tensor_shape_proto, type_proto, GraphProto, ModelProto, OperatorSetIdProto,
    TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
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

/// A float tensor of `dims` whose little-endian payload is `raw`.
pub fn raw_f32(name: &str, dims: &[usize], raw: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.to_owned()),
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: Some(onnx::DataType::Float as i32),
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// A dimension of a graph input or output.
#[derive(Debug, Clone, Copy)]
pub enum Dim {
    /// Symbolic (`batch`, `seq`).
    Named(&'static str),
    /// Fixed size.
    Fixed(usize),
}

/// A graph input or output of element type `elem_type` whose dims are `dims`.
pub fn value_info(name: &str, elem_type: onnx::DataType, dims: &[Dim]) -> ValueInfoProto {
    use tensor_shape_proto::dimension::Value;
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(match d {
                Dim::Named(n) => Value::DimParam((*n).to_owned()),
                Dim::Fixed(v) => Value::DimValue(*v as i64),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem_type as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A graph under construction that nodes are appended to, each call returning the node's
/// output name. The encoder pieces read constants the builder adds as initializers: `two`,
/// `ln_eps`, `sqrt_two`, `one` and `half` (scalars).
pub trait GraphWriter {
    /// The graph nodes are appended to.
    fn graph(&mut self) -> &mut GraphProto;

    /// Appends `op(inputs) -> output` (see [`node`]); returns `output`.
    fn node(&mut self, op: &str, inputs: &[&str], output: &str) -> String {
        node(self.graph(), op, inputs, output);
        output.to_owned()
    }

    /// [`GraphWriter::node`] with attributes.
    fn node_with(
        &mut self,
        op: &str,
        inputs: &[&str],
        output: &str,
        attrs: Vec<onnx::AttributeProto>,
    ) -> String {
        node_with(self.graph(), op, inputs, output, attrs);
        output.to_owned()
    }

    /// `x · prefix.weight + prefix.bias` as `MatMul` and `Add` (the initializers are the
    /// caller's to add; the weight `[in, out]`).
    fn matmul_add(&mut self, x: &str, prefix: &str) -> String {
        let (w, b) = (format!("{prefix}.weight"), format!("{prefix}.bias"));
        let mm = self.node("MatMul", &[x, &w], &format!("{prefix}/MatMul"));
        self.node("Add", &[&mm, &b], &format!("{prefix}/Add"))
    }

    /// LayerNorm over the last axis with `prefix.weight` and `prefix.bias` (the caller's
    /// initializers), in primitive ops: `(x − mean) / √(var + ln_eps) · γ + β`.
    fn layer_norm_ops(&mut self, x: &str, prefix: &str) -> String {
        let (w, b) = (format!("{prefix}.weight"), format!("{prefix}.bias"));
        let last = || {
            vec![
                attr::make_ints("axes", &[-1]),
                attr::make_int("keepdims", 1),
            ]
        };
        let mean = self.node_with("ReduceMean", &[x], &format!("{prefix}/mean"), last());
        let d = self.node("Sub", &[x, &mean], &format!("{prefix}/centered"));
        let sq = self.node("Pow", &[&d, "two"], &format!("{prefix}/squared"));
        let var = self.node_with("ReduceMean", &[&sq], &format!("{prefix}/var"), last());
        let ve = self.node("Add", &[&var, "ln_eps"], &format!("{prefix}/var_eps"));
        let sd = self.node("Sqrt", &[&ve], &format!("{prefix}/std"));
        let n = self.node("Div", &[&d, &sd], &format!("{prefix}/normalized"));
        let s = self.node("Mul", &[&n, &w], &format!("{prefix}/scaled"));
        self.node("Add", &[&s, &b], &format!("{prefix}/out"))
    }

    /// Attention's context: Softmax over the last axis of `scores` `[batch, heads, seq,
    /// seq]`, times `v` `[batch, heads, seq, head_dim]`, the heads merged back into `[batch,
    /// seq, heads · head_dim]` by the shape initializer `merged_shape`; nodes named under
    /// `attn`.
    fn attention_context(
        &mut self,
        scores: &str,
        v: &str,
        attn: &str,
        merged_shape: &str,
    ) -> String {
        let p = self.node_with(
            "Softmax",
            &[scores],
            &format!("{attn}/probs"),
            vec![attr::make_int("axis", -1)],
        );
        let ctx = self.node("MatMul", &[&p, v], &format!("{attn}/context"));
        let ctx = self.node_with(
            "Transpose",
            &[&ctx],
            &format!("{attn}/context_t"),
            vec![attr::make_ints("perm", &[0, 2, 1, 3])],
        );
        self.node(
            "Reshape",
            &[&ctx, merged_shape],
            &format!("{attn}/context_merged"),
        )
    }

    /// Exact GELU, `x · 0.5 · (1 + erf(x / √2))`.
    fn gelu(&mut self, x: &str, prefix: &str) -> String {
        let d = self.node("Div", &[x, "sqrt_two"], &format!("{prefix}/gelu_div"));
        let e = self.node("Erf", &[&d], &format!("{prefix}/gelu_erf"));
        let a = self.node("Add", &[&e, "one"], &format!("{prefix}/gelu_add"));
        let m = self.node("Mul", &[x, &a], &format!("{prefix}/gelu_mul"));
        self.node("Mul", &[&m, "half"], &format!("{prefix}/gelu"))
    }
}
