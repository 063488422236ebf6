//! A real model holding an op of a custom domain ONNX Runtime has no kernel for: the build
//! calibrates and quantizes the part before it, leaves the op and everything depending on it
//! FP32, and the artifact runs in `kenosis-runtime` once the op's kernel is registered.

use kenosis_eval::*;
use kenosis_quantize::onnx::{self, ModelProto};
use kenosis_quantize::{quantize, Calibration, QuantizeOptions};
use kenosis_runtime::EmbeddedModel;
use ort::operator::{
    BoxedKernel, ComputeContext, KernelContext, Operator, OperatorDomain, OperatorInput,
    OperatorOutput,
};
use ort::value::TensorElementType;
use prost::Message;

/// `com.acme::Frobnicate`, the identity on a float tensor: a stand-in for a product's own op.
struct Frobnicate;

impl Operator for Frobnicate {
    type Kernel<'attr> = BoxedKernel<'attr>;

    fn name(&self) -> &str {
        "Frobnicate"
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        [OperatorInput::required(TensorElementType::Float32)]
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        [OperatorOutput::required(TensorElementType::Float32)]
    }

    fn create_kernel<'attr>(&self, _: &KernelContext<'attr>) -> ort::Result<Self::Kernel<'attr>> {
        Ok(Box::new(|ctx: &ComputeContext| {
            let x = ctx.input(0)?.ok_or_else(|| ort::Error::new("no input"))?;
            let (shape, x) = x.try_extract_tensor::<f32>()?;
            let mut y = ctx
                .output(0, shape.to_vec())?
                .ok_or_else(|| ort::Error::new("no output"))?;
            y.try_extract_tensor_mut::<f32>()?.1.copy_from_slice(x);
            Ok(())
        }))
    }
}

/// `model` with `Frobnicate` inserted after the tensor `after`.
fn with_frobnicate(mut model: ModelProto, after: &str) -> ModelProto {
    model.opset_import.push(onnx::OperatorSetIdProto {
        domain: Some("com.acme".into()),
        version: Some(1),
    });
    let g = model.graph.as_mut().expect("graph");
    let out = format!("{after}_frobnicated");
    for input in g.node.iter_mut().flat_map(|n| &mut n.input) {
        if input == after {
            *input = out.clone();
        }
    }
    let at = g
        .node
        .iter()
        .position(|n| n.output.iter().any(|o| o == after))
        .expect("producer")
        + 1;
    let mut node = onnx::make_node(
        "Frobnicate",
        "frobnicate".into(),
        vec![after.into()],
        vec![out],
        vec![],
    );
    node.domain = Some("com.acme".into());
    g.node.insert(at, node);
    model
}

#[test]
fn squeezenet_with_an_op_onnx_runtime_cannot_run_quantizes_around_it_and_runs() {
    let Some(shared) = shared_dir() else { return };
    let original = shared.join("models/squeezenet1.0.onnx");
    let fp32 = std::fs::read(&original).expect("model");
    let model = ModelProto::decode(fp32.as_slice()).expect("decodes");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("squeezenet_custom.onnx");
    // After the third fire module's pooling: 13 Convs before the op, 13 after.
    let custom = with_frobnicate(model, "pool5_1").encode_to_vec();
    std::fs::write(&path, &custom).expect("write");

    let files = imagenet_files(&shared);
    let calib = load_batch(&files[..20], Preprocess::BgrMeanSubtracted);
    let eval = load_batch(&files[files.len() - 20..], Preprocess::BgrMeanSubtracted);
    let q = quantize(
        &path,
        &custom,
        &Calibration::Data(calibration(&calib)),
        &QuantizeOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}", q.report.summary_line());

    assert_eq!(
        q.report.ops_quantized.get("Conv"),
        Some(&13),
        "{:?}",
        q.report.ops_quantized
    );
    let blocked_convs = q
        .report
        .nodes_fp32
        .iter()
        .filter(|n| n.op_type == "Conv" && n.reason.is_uncalibratable())
        .count();
    assert_eq!(blocked_convs, 13, "{:?}", q.report.nodes_fp32);
    assert!(q.report.fidelity.is_none());
    let graph = ModelProto::decode(q.bytes.as_slice())
        .expect("artifact")
        .graph
        .expect("graph");
    let kept = graph
        .node
        .iter()
        .find(|n| n.op_type() == "Frobnicate")
        .expect("the custom op is kept");
    assert_eq!(kept.domain(), "com.acme");

    // ORT allows one environment per process: the runtime shares the build's.
    let environment =
        kenosis_quantize::calibrate::session::environment(&path).expect("environment");
    let _ = kenosis_runtime::set_environment(environment.clone());
    let int8: &'static [u8] = Box::leak(q.bytes.into_boxed_slice());
    let unregistered = EmbeddedModel::from_static_bytes("without kernel", int8);
    let err = unregistered
        .load()
        .expect_err("ORT has no Frobnicate kernel");
    assert!(err.to_string().contains("Frobnicate"), "{err}");

    let model = EmbeddedModel::from_static_bytes("squeezenet_custom", int8);
    model
        .configure_session(|builder| {
            Ok(builder.with_operators(OperatorDomain::new("com.acme")?.add(Frobnicate)?)?)
        })
        .expect("before first use");
    assert!(model.configure_session(Ok).is_err(), "set only once");
    let mut reference = session(
        &fp32,
        ort::session::builder::GraphOptimizationLevel::All,
        None,
    );
    let (mut cosines, mut agree) = (0.0, 0);
    for x in &eval {
        let expected = run(&mut reference, x);
        let outputs = model.run([x.view()]).unwrap_or_else(|e| panic!("{e}"));
        let got = outputs[0].as_f32().expect("f32 output");
        let got: Vec<f32> = got.iter().copied().collect();
        cosines += cosine(&expected, &got);
        agree += usize::from(argmax(&expected) == argmax(&got));
    }
    let mean = cosines / eval.len() as f64;
    eprintln!(
        "vs FP32 on {} images: cosine {mean:.4}, top-1 {agree}",
        eval.len()
    );
    assert!(mean >= 0.98, "mean cosine {mean:.4}");
    assert!(agree >= 18, "top-1 agreement {agree} of {}", eval.len());
}
