//! Builders and comparisons shared by the crate's unit tests: small graphs, input specs, ONNX
//! Runtime runs.

use crate::onnx::{
    make_node, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, ValueInfoProto,
};

/// A default-domain node named `<op>_<output>` with one output.
pub fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    named(op, &format!("{op}_{output}"), inputs, &[output])
}

/// A default-domain node of type `op` named `name`.
pub fn named(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    make_node(op, name.into(), strings(inputs), strings(outputs), vec![])
}

/// A float32 graph input or output of unknown shape.
pub fn float_value(name: &str) -> ValueInfoProto {
    crate::onnx::tensor_info(name, crate::onnx::DataType::Float, None)
}

/// An opset-13 model of `nodes` over the float input `x`, with float `outputs` and constant
/// `initializer`s.
pub fn model(nodes: Vec<NodeProto>, outputs: &[&str], initializer: Vec<TensorProto>) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: None,
            version: Some(13),
        }],
        graph: Some(GraphProto {
            node: nodes,
            input: vec![float_value("x")],
            output: outputs.iter().map(|o| float_value(o)).collect(),
            initializer,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Single-value float initializers, one per `(name, value)`.
pub fn scalars(values: &[(&str, f32)]) -> Vec<TensorProto> {
    values
        .iter()
        .map(|(n, v)| crate::onnx::tensor::from_f32(n, &[], &[*v]))
        .collect()
}

/// Output `y` of `model` on input `x`, run in ONNX Runtime without graph optimizations.
pub fn run_y(model: &ModelProto, x: &ndarray::ArrayD<f32>) -> Vec<f32> {
    use crate::calibrate::data::SampleValue;
    use crate::calibrate::session::{borrowed, sample_inputs, session};
    use prost::Message;
    let path = std::path::Path::new("normalize-test.onnx");
    let level = ort::session::builder::GraphOptimizationLevel::Disable;
    let mut s = session(path, model.encode_to_vec(), level, 1).unwrap();
    let inputs = sample_inputs(&["x".into()], &[SampleValue::F32(x.clone())], path).unwrap();
    let out = s.run(borrowed(&inputs)).unwrap();
    let (_, values) = out["y"].try_extract_tensor::<f32>().unwrap();
    values.to_vec()
}

/// The largest |difference| between the outputs `y` of models `a` and `b` on input `x`
/// (see [`run_y`]).
pub fn max_difference_y(a: &ModelProto, b: &ModelProto, x: &ndarray::ArrayD<f32>) -> f32 {
    let (ya, yb) = (run_y(a, x), run_y(b, x));
    assert_eq!(ya.len(), yb.len());
    ya.iter()
        .zip(&yb)
        .map(|(p, q)| (p - q).abs())
        .fold(0f32, f32::max)
}

/// An input spec of `elem_type` with known `dims` and no dimension names.
pub fn input_spec(
    elem_type: crate::onnx::DataType,
    name: &str,
    dims: &[i64],
    token_rows: Option<usize>,
) -> crate::calibrate::InputSpec {
    crate::calibrate::InputSpec {
        name: name.into(),
        elem_type: elem_type.into(),
        dims: dims.iter().map(|&d| Some(d)).collect(),
        dim_names: vec![None; dims.len()],
        token_rows,
    }
}

/// `a` encoded as a `.npy` file.
pub fn npy<T: ndarray_npy::WritableElement>(a: ndarray::ArrayD<T>) -> Vec<u8> {
    use ndarray_npy::WriteNpyExt;
    let mut bytes = Vec::new();
    a.write_npy(&mut bytes).expect("written");
    bytes
}

/// A fidelity report of mean cosine `cosine` and full top-1 agreement on 4 held-out real
/// samples, with no target.
pub fn fidelity_report(cosine: f64) -> crate::fidelity::FidelityReport {
    let measured = crate::fidelity::Measured {
        mean_cosine: cosine,
        cosine_lower_bound: cosine - 0.001,
        top1_agreement: 1.0,
        argmax_agreement: None,
        argmax_rows: 0,
        relative_error: None,
        non_finite_mismatches: 0,
    };
    crate::fidelity::FidelityReport {
        samples: 4,
        evaluation: crate::kernels::Evaluation::HostKernels,
        held_out: true,
        outputs: Vec::new(),
        default_floor: None,
        floor_missed: false,
        search_stopped: false,
        measured,
        fully_quantized: measured,
        min_cosine: None,
        min_top1_agreement: None,
        kept_fp32: Vec::new(),
        kept_fp32_tensors: Vec::new(),
        most_sensitive: Vec::new(),
        ranking_samples: 0,
        compared_tensor: None,
        inputs: crate::fidelity::SampleSource::Real,
        predicts_real_data: true,
    }
}

/// The report of a build of `source` that quantized `ops_quantized` (op type, count), with
/// `fidelity` and `speed`, as `pipeline` fills it in (16 real calibration samples, one
/// input and one output).
pub fn report(
    source: &str,
    ops_quantized: &[(&str, usize)],
    fidelity: Option<crate::fidelity::FidelityReport>,
    speed: Option<crate::speed::SpeedCheck>,
) -> crate::report::Report {
    let tensor = |name: &str| crate::report::tensor_info(&float_value(name));
    crate::report::Report {
        source: source.into(),
        key: "0123abcd".into(),
        artifact_blake3: "ffee".into(),
        normalize: Default::default(),
        ops_quantized: (ops_quantized.iter())
            .map(|(op, n)| ((*op).to_owned(), *n))
            .collect(),
        nodes_fp32: Vec::new(),
        keep_float_unmatched: Vec::new(),
        activations_absorbed: 0,
        rewrite: Default::default(),
        calibration_method: "minmax".into(),
        calibration_samples: 16,
        calibration_synthetic: false,
        synthetic_image_ranges: Default::default(),
        fidelity,
        speed,
        kernel_costs: None,
        activations: None,
        options: "method = \"minmax\"\n".into(),
        size_fp32: 4_800_000,
        size_int8: 1_300_000,
        seconds: 10.6,
        inputs: vec![tensor("x")],
        outputs: vec![tensor("y")],
    }
}
