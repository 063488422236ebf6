//! Bad build inputs give a typed error naming the file and the problem, never a panic, and
//! leave no artifact or manifest behind.

use std::path::{Path, PathBuf};

use kenosis_build::{Config, Error};
use kenosis_quantize::calibrate::runnable::Blocked;
use kenosis_quantize::onnx::{self, ModelProto};
use kenosis_quantize::FloatReason;
use prost::Message;

// The quantizer's test fixtures, shared with its own tests.
#[path = "../../kenosis-quantize/tests/support/mod.rs"]
mod support;
use support::{
    f32_bytes, npy, npy_fortran, sample_values, tiny, tiny_with_batchnorm, tiny_without_inputs,
    TINY,
};

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, bytes).expect("write");
        p
    }

    fn config(&self) -> Config {
        Config::new()
            .fp32_where_faster(false)
            .manifest_dir(self.dir.path())
            .out_dir(self.path("out"))
            .cache_dir(self.path("cache"))
            .target("x86_64-unknown-linux-gnu")
    }

    /// Runs `config`, expecting an error, and checks nothing was left in `OUT_DIR`.
    fn fail(&self, config: Config) -> Error {
        let err = config.compile().expect_err("compile must fail");
        assert!(
            !self.path("out/kenosis-manifest.json").exists(),
            "no manifest after an error"
        );
        let artifacts: Vec<_> = std::fs::read_dir(self.path("out/kenosis"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(
            artifacts.is_empty(),
            "no artifact after an error: {artifacts:?}"
        );
        err
    }
}

fn assert_mentions(err: &Error, file: &Path, words: &[&str]) {
    let msg = err.to_string();
    assert!(
        msg.contains(&file.display().to_string()),
        "error should name {}: {msg}",
        file.display()
    );
    for w in words {
        assert!(msg.contains(w), "error should say `{w}`: {msg}");
    }
}

#[test]
fn missing_model_file() {
    let s = Sandbox::new();
    let err = s.fail(s.config().model("models/nope.onnx"));
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert_mentions(&err, &s.path("models/nope.onnx"), &["No such file"]);
}

#[test]
fn empty_model_file() {
    let s = Sandbox::new();
    let p = s.write("m.onnx", b"");
    let err = s.fail(s.config().model("m.onnx"));
    assert!(matches!(err, Error::InvalidModel { .. }), "{err:?}");
    assert_mentions(&err, &p, &["the file is empty"]);
}

#[test]
fn random_bytes_and_truncated_protobuf() {
    let s = Sandbox::new();
    let random: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let p = s.write("random.onnx", &random);
    let err = s.fail(s.config().model("random.onnx"));
    assert!(matches!(err, Error::InvalidModel { .. }), "{err:?}");
    assert_mentions(&err, &p, &["not a valid ONNX model"]);

    let bytes = std::fs::read(TINY).expect("fixture");
    let p = s.write("truncated.onnx", &bytes[..bytes.len() / 2]);
    let err = s.fail(s.config().model("truncated.onnx"));
    assert!(matches!(err, Error::InvalidModel { .. }), "{err:?}");
    assert_mentions(&err, &p, &["protobuf decoding failed"]);
}

#[test]
fn a_protobuf_that_is_not_a_model() {
    let s = Sandbox::new();
    // A TensorProto holding only dims decodes as a ModelProto (field 1 is a varint in both)
    // yet has no graph: the decoder alone cannot tell, the validation must.
    let tensor = onnx::TensorProto {
        dims: vec![2, 2],
        ..Default::default()
    };
    let p = s.write("tensor.onnx", &tensor.encode_to_vec());
    let err = s.fail(s.config().model("tensor.onnx"));
    assert!(matches!(err, Error::InvalidModel { .. }), "{err:?}");
    assert_mentions(&err, &p, &["not an ONNX ModelProto"]);
}

#[test]
fn graph_with_a_cycle_or_a_dangling_input() {
    let s = Sandbox::new();
    let mut m = tiny();
    let g = m.graph.as_mut().expect("graph");
    // The Conv reads the Relu's output: a cycle.
    let relu_out = g.node[1].output[0].clone();
    g.node[0].input[0] = relu_out;
    let p = s.write("cycle.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("cycle.onnx"));
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert_mentions(&err, &p, &["cycle"]);

    let mut m = tiny();
    m.graph.as_mut().expect("graph").node[1].input[0] = "nowhere".into();
    let p = s.write("dangling.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("dangling.onnx"));
    assert_mentions(
        &err,
        &p,
        &["`nowhere`", "no node, initializer or graph input provides"],
    );

    // Found by `cargo xtask fuzz`: a name written twice underflowed the topological sort.
    let mut m = tiny();
    let g = m.graph.as_mut().expect("graph");
    g.node[1].output[0] = g.node[0].output[0].clone();
    let p = s.write("twice.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("twice.onnx"));
    assert_mentions(&err, &p, &["is written by node", "assigns each name once"]);
}

/// Inputs `cargo xtask fuzz` found crashing (`tests/fuzz-regressions/`): each must now be
/// refused with an error.
#[test]
fn fuzz_regressions_are_errors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("regression folder") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("regression input");
        let result = kenosis_quantize::pipeline::quantize_offline(&path, &bytes);
        assert!(result.is_err(), "{} quantized", path.display());
        count += 1;
    }
    assert!(count > 0, "no regression inputs in {}", dir.display());
}

#[test]
fn opset_or_ir_newer_than_supported() {
    let s = Sandbox::new();
    let mut m = tiny();
    m.opset_import[0].version = Some(99);
    let p = s.write("opset.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("opset.onnx"));
    assert_mentions(&err, &p, &["opset 99 is not supported"]);

    let mut m = tiny();
    m.ir_version = Some(99);
    let p = s.write("ir.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("ir.onnx"));
    assert_mentions(&err, &p, &["IR version 99 is not supported"]);
}

#[test]
fn declared_dims_too_large_to_allocate() {
    let s = Sandbox::new();
    let mut m = tiny();
    let input = &mut m.graph.as_mut().expect("graph").input[0];
    if let Some(onnx::type_proto::Value::TensorType(t)) =
        input.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        for d in t.shape.as_mut().expect("shape").dim.iter_mut().skip(2) {
            d.value = Some(onnx::tensor_shape_proto::dimension::Value::DimValue(
                1 << 40,
            ));
        }
    }
    let p = s.write("huge.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("huge.onnx"));
    assert!(matches!(err, Error::Calibration { .. }), "{err:?}");
    assert_mentions(&err, &p, &["too large"]);
}

#[test]
fn calibration_files_of_the_wrong_shape_or_dtype() {
    let s = Sandbox::new();
    std::fs::copy(TINY, s.path("m.onnx")).expect("copy");
    let wrong_shape = s.write(
        "calib_shape/a.npy",
        &npy(&[0u8; 3 * 10 * 10 * 4], "<f4", "(3, 10, 10)"),
    );
    let err = s.fail(
        s.config()
            .model("m.onnx")
            .calibration_npy_dir("calib_shape"),
    );
    assert!(matches!(err, Error::Calibration { .. }), "{err:?}");
    assert_mentions(
        &err,
        &wrong_shape,
        &["input `x` expects shape [1, 3, 8, 8]", "[3, 10, 10]"],
    );

    let wrong_dtype = s.write(
        "calib_dtype/a.npy",
        &npy(&[0u8; 3 * 8 * 8 * 8], "<f8", "(3, 8, 8)"),
    );
    let err = s.fail(
        s.config()
            .model("m.onnx")
            .calibration_npy_dir("calib_dtype"),
    );
    assert_mentions(&err, &wrong_dtype, &["expects float32"]);

    std::fs::create_dir_all(s.path("calib_empty")).expect("mkdir");
    let err = s.fail(
        s.config()
            .model("m.onnx")
            .calibration_npy_dir("calib_empty"),
    );
    assert_mentions(&err, &s.path("calib_empty"), &["no .npy files"]);
}

#[test]
fn unusable_cache_folder() {
    let s = Sandbox::new();
    std::fs::copy(TINY, s.path("m.onnx")).expect("copy");
    let not_a_dir = s.write("cache-file", b"a file where the cache folder should be");
    let err = s.fail(s.config().model("m.onnx").cache_dir(&not_a_dir));
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert_mentions(&err, &not_a_dir, &[]);
}

/// Options out of bounds, each with the message `include_quantized!` gives at a call site;
/// the builder refuses them before reading any model, and `quantize` (the library entry point
/// that takes `QuantizeOptions` directly) refuses them too.
#[test]
fn options_out_of_bounds_are_refused_by_every_entry_point() {
    use kenosis_quantize::calibrate::Method;
    use kenosis_quantize::{Calibration, QuantizeOptions};
    let s = Sandbox::new();
    std::fs::copy(TINY, s.path("m.onnx")).expect("copy");
    let cases: Vec<(Config, QuantizeOptions, &str)> = vec![
        (
            s.config().synthetic_image_range(1.0, 0.0),
            QuantizeOptions {
                synthetic_image_range: Some([1.0, 0.0]),
                ..Default::default()
            },
            "option `synthetic_image_range` needs finite bounds with low < high, got [1, 0]",
        ),
        (
            s.config().synthetic_image_range(0.0, 0.0),
            QuantizeOptions {
                synthetic_image_range: Some([0.0, 0.0]),
                ..Default::default()
            },
            "option `synthetic_image_range` needs finite bounds with low < high, got [0, 0]",
        ),
        (
            s.config().synthetic_image_range(f32::NAN, 1.0),
            QuantizeOptions {
                synthetic_image_range: Some([f32::NAN, 1.0]),
                ..Default::default()
            },
            "option `synthetic_image_range` needs finite bounds with low < high, got [NaN, 1]",
        ),
        (
            s.config().calibration_method(Method::Percentile(150.0)),
            QuantizeOptions {
                method: Method::Percentile(150.0),
                ..Default::default()
            },
            "option `method` percentile must be in (0, 100], got 150",
        ),
        (
            s.config().calibration_method(Method::Percentile(f64::NAN)),
            QuantizeOptions {
                method: Method::Percentile(f64::NAN),
                ..Default::default()
            },
            "option `method` percentile must be in (0, 100], got NaN",
        ),
        (
            s.config().synthetic_samples(0),
            QuantizeOptions {
                synthetic_samples: 0,
                ..Default::default()
            },
            "option `synthetic_samples` must be at least 1",
        ),
        (
            s.config().min_cosine(1.5),
            QuantizeOptions {
                min_cosine: Some(1.5),
                ..Default::default()
            },
            "option `min_cosine` must be in [-1.0, 1.0], got 1.5",
        ),
        (
            s.config().min_top1_agreement(f64::NAN),
            QuantizeOptions {
                min_top1_agreement: Some(f64::NAN),
                ..Default::default()
            },
            "option `min_top1_agreement` must be in [0.0, 1.0], got NaN",
        ),
    ];
    let model = std::fs::read(TINY).expect("tiny model");
    for (config, options, message) in cases {
        let err = s.fail(config.model("m.onnx"));
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        assert!(err.to_string().contains(message), "{err}");
        assert!(!s.path("cache").exists(), "refused before any work: {err}");

        let err =
            kenosis_quantize::quantize(Path::new(TINY), &model, &Calibration::Synthetic, &options)
                .expect_err("quantize must refuse the options");
        assert!(err.to_string().contains(message), "{err}");
    }
}

/// `tiny()` with every initializer moved to `data_file` (one after another, as
/// `onnx.save_model(..., save_as_external_data=True)` writes them), returning the model and
/// the file's bytes.
fn tiny_with_external_data(data_file: &str) -> (ModelProto, Vec<u8>) {
    let mut m = tiny();
    let data = support::externalize(&mut m, data_file, false);
    (m, data)
}

#[test]
fn external_data_is_read_and_its_bytes_enter_the_cache_key() {
    let s = Sandbox::new();
    std::fs::copy(TINY, s.path("inline.onnx")).expect("copy");
    let (m, data) = tiny_with_external_data("weights.bin");
    s.write("external.onnx", &m.encode_to_vec());
    s.write("weights.bin", &data);
    let build = || {
        s.config()
            .model("inline.onnx")
            .model("external.onnx")
            .compile()
            .expect("both quantize");
        kenosis_manifest::Manifest::read(&s.path("out/kenosis-manifest.json")).expect("manifest")
    };
    let manifest = build();
    let artifact = |i: usize| std::fs::read(&manifest.models[i].artifact_path).expect("artifact");
    assert_eq!(
        artifact(0),
        artifact(1),
        "the same weights give the same self-contained INT8 model"
    );

    // New weights in the data file alone must not be served from the cache.
    let changed: Vec<u8> = data
        .chunks_exact(4)
        .flat_map(|c| (f32::from_le_bytes(c.try_into().unwrap()) * 0.5).to_le_bytes())
        .collect();
    s.write("weights.bin", &changed);
    let rebuilt = build();
    assert_eq!(rebuilt.models[0].hash, manifest.models[0].hash);
    assert_ne!(rebuilt.models[1].hash, manifest.models[1].hash);
    assert_ne!(
        std::fs::read(&rebuilt.models[1].artifact_path).expect("artifact"),
        artifact(1)
    );
}

#[test]
fn external_data_outside_the_folder_or_the_file_is_refused() {
    let s = Sandbox::new();
    let (m, data) = tiny_with_external_data("weights.bin");
    s.write("weights.bin", &data);
    s.write("secret.bin", &data);
    let with_entry = |key: &str, value: &str| {
        let mut m = m.clone();
        let t = &mut m.graph.as_mut().expect("graph").initializer[0];
        for e in t.external_data.iter_mut().filter(|e| e.key() == key) {
            e.value = Some(value.into());
        }
        m.encode_to_vec()
    };
    let mut cases = vec![
        (
            "location",
            "../secret.bin",
            "must be a relative path inside the model's folder",
        ),
        (
            "location",
            "/etc/passwd",
            "must be a relative path inside the model's folder",
        ),
        ("offset", "99999999999", "beyond the end of `weights.bin`"),
        ("length", "-4", "not a byte count"),
    ];
    #[cfg(unix)]
    {
        std::fs::create_dir_all(s.path("m")).expect("mkdir");
        std::os::unix::fs::symlink(s.path("secret.bin"), s.path("m/link.bin")).expect("symlink");
        cases.push((
            "location",
            "link.bin",
            "resolves outside the model's folder",
        ));
    }
    for (key, value, problem) in cases {
        let p = s.write("m/external.onnx", &with_entry(key, value));
        s.write("m/weights.bin", &data);
        let err = s.fail(s.config().model("m/external.onnx"));
        assert!(
            matches!(err, Error::InvalidModel { .. }),
            "{key}={value}: {err:?}"
        );
        assert_mentions(&err, &p, &[problem]);
    }

    // A data file that is not there: the error names it.
    let p = s.write("n/external.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("n/external.onnx"));
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert_mentions(&err, &p.with_file_name("weights.bin"), &[]);
}

/// `tiny()` with `op_type` of `domain` between its Relu and its second Conv.
fn tiny_with_custom_op(op_type: &str, domain: &str) -> ModelProto {
    let mut m = tiny();
    m.opset_import.push(onnx::OperatorSetIdProto {
        domain: Some(domain.into()),
        version: Some(1),
    });
    let g = m.graph.as_mut().expect("graph");
    let head = g.node.len() - 1;
    let relu_out = g.node[head].input[0].clone();
    g.node[head].input[0] = "custom_out".into();
    let mut node = onnx::make_node(
        op_type,
        "custom".into(),
        vec![relu_out],
        vec!["custom_out".into()],
        vec![],
    );
    node.domain = Some(domain.into());
    g.node.insert(head, node);
    m
}

/// `tiny_with_custom_op(op_type, domain)` quantized with default options.
fn quantize_with_custom_op(op_type: &str, domain: &str) -> kenosis_quantize::Quantized {
    let s = Sandbox::new();
    let p = s.write(
        "m.onnx",
        &tiny_with_custom_op(op_type, domain).encode_to_vec(),
    );
    kenosis_quantize::quantize(
        &p,
        &std::fs::read(&p).expect("model"),
        &kenosis_quantize::Calibration::Synthetic,
        &support::tiny_options(),
    )
    .unwrap_or_else(|e| panic!("{domain}::{op_type}: {e}"))
}

/// The node the artifact keeps for the custom op.
fn kept_custom_node(q: &kenosis_quantize::Quantized) -> onnx::NodeProto {
    let graph = ModelProto::decode(q.bytes.as_slice())
        .expect("artifact")
        .graph
        .expect("graph");
    graph
        .node
        .into_iter()
        .find(|n| n.name() == "custom")
        .expect("kept")
}

#[test]
fn a_custom_op_onnx_runtime_knows_stays_fp32_and_is_named() {
    // A com.microsoft contrib op runs in ORT. (QuickGelu without `alpha` is ORT's 1.702·x
    // gate, not the SiLU normalization writes.)
    let q = quantize_with_custom_op("QuickGelu", "com.microsoft");
    let custom = q.report.nodes_fp32.iter().find(|n| n.name == "custom");
    assert_eq!(
        custom.map(|n| &n.reason),
        Some(&FloatReason::CustomDomain {
            domain: "com.microsoft".into()
        })
    );
    // The first Conv still quantizes; the head Conv writes the graph output and stays FP32.
    assert_eq!(q.report.ops_quantized.get("Conv"), Some(&1));
    assert!(
        q.report.summary_line().contains(
            "custom-domain ops left FP32, check they are not on a hot path: custom (QuickGelu)"
        ),
        "{}",
        q.report.summary_line()
    );
    assert_eq!(kept_custom_node(&q).domain(), "com.microsoft");

    // ORT's Gelu and FastGelu, which normalization also writes for spelled-out GELUs, are
    // known float ops.
    for op in ["Gelu", "FastGelu"] {
        let q = quantize_with_custom_op(op, "com.microsoft");
        let gelu = q.report.nodes_fp32.iter().find(|n| n.name == "custom");
        assert_eq!(gelu.map(|n| &n.reason), Some(&FloatReason::Gelu));
        assert!(
            !q.report.summary_line().contains("custom-domain"),
            "{}",
            q.report.summary_line()
        );
    }
}

#[test]
fn a_custom_op_onnx_runtime_cannot_run_stays_fp32_with_what_depends_on_it() {
    // The part before the custom op calibrates without it.
    let q = quantize_with_custom_op("Frobnicate", "com.acme");
    let reasons: Vec<(&str, &FloatReason)> = q
        .report
        .nodes_fp32
        .iter()
        .map(|n| (n.name.as_str(), &n.reason))
        .collect();
    let custom_domain = FloatReason::CustomDomain {
        domain: "com.acme".into(),
    };
    assert!(reasons.contains(&("custom", &custom_domain)), "{reasons:?}");
    let head = tiny()
        .graph
        .expect("graph")
        .node
        .last()
        .expect("head")
        .name()
        .to_owned();
    let blocked = FloatReason::Uncalibratable(Blocked::Reads {
        tensor: "custom_out".into(),
    });
    assert!(reasons.contains(&(head.as_str(), &blocked)), "{reasons:?}");
    assert_eq!(q.report.ops_quantized.get("Conv"), Some(&1));
    assert!(q.report.fidelity.is_none(), "nothing can run to measure it");
    let line = q.report.summary_line();
    assert!(
        line.contains(
            "custom-domain ops left FP32, check they are not on a hot path: custom (Frobnicate)"
        ) && line.contains("1 more ops depend on ops ONNX Runtime has no kernel for")
            && line.contains("fidelity not measured"),
        "{line}"
    );
    let custom = kept_custom_node(&q);
    assert_eq!(
        (custom.op_type(), custom.domain()),
        ("Frobnicate", "com.acme")
    );
}

#[test]
fn a_fidelity_target_on_a_model_onnx_runtime_cannot_run_is_refused() {
    let s = Sandbox::new();
    let p = s.write(
        "m.onnx",
        &tiny_with_custom_op("Frobnicate", "com.acme").encode_to_vec(),
    );
    let err = s.fail(s.config().model("m.onnx").min_cosine(0.99));
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert_mentions(
        &err,
        &p,
        &[
            "fidelity target",
            "node `custom`",
            "Frobnicate",
            "`com.acme`",
            "cannot run",
        ],
    );
}

#[test]
fn an_already_quantized_model_is_refused() {
    let s = Sandbox::new();
    std::fs::copy(TINY, s.path("m.onnx")).expect("copy");
    let q = kenosis_quantize::quantize(
        &s.path("m.onnx"),
        &std::fs::read(TINY).expect("fixture"),
        &kenosis_quantize::Calibration::Synthetic,
        &support::tiny_options(),
    )
    .expect("fixture quantizes");
    // The report names the options it was built with as the cache key hashes them.
    assert_eq!(q.report.options, support::tiny_options().canonical());
    let p = s.write("int8.onnx", &q.bytes);
    let err = s.fail(s.config().model("int8.onnx"));
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert_mentions(
        &err,
        &p,
        &["already quantized", "quantization nodes", "FP32 original"],
    );
}

#[test]
fn valid_model_compiles_and_a_corrupt_cache_entry_is_rebuilt() {
    let s = Sandbox::new();
    std::fs::copy(TINY, s.path("m.onnx")).expect("copy");
    s.config()
        .model("m.onnx")
        .compile()
        .expect("tiny model quantizes");
    let manifest =
        kenosis_manifest::Manifest::read(&s.path("out/kenosis-manifest.json")).expect("manifest");
    let entry = &manifest.models[0];
    let artifact = std::fs::read(&entry.artifact_path).expect("artifact");
    assert!(ModelProto::decode(artifact.as_slice()).is_ok());

    // Corrupt the cached artifact: the next build detects it by hash and rebuilds it.
    let cached = s.path("cache").join(format!("{}.onnx", entry.hash));
    std::fs::write(&cached, b"garbage").expect("corrupt");
    s.config().model("m.onnx").compile().expect("rebuilds");
    assert_eq!(
        std::fs::read(&cached).expect("cache entry"),
        artifact,
        "the rebuilt entry is identical (deterministic)"
    );
}

/// A shape input cannot take the token ids synthetic calibration gives int64 inputs: the
/// error says so and names the input, and no artifact is left.
#[test]
fn synthetic_calibration_data_onnx_runtime_rejects_is_explained() {
    use onnx::{type_proto, TypeProto, ValueInfoProto};
    let mut m = tiny();
    let g = m.graph.as_mut().expect("graph");
    let head = g.node.len() - 1;
    let before = g.node[head].input[0].clone();
    g.node[head].input[0] = "expanded".into();
    g.node.insert(
        head,
        onnx::make_node(
            "Expand",
            "expand".into(),
            vec![before, "shape".into()],
            vec!["expanded".into()],
            vec![],
        ),
    );
    g.input.push(ValueInfoProto {
        name: Some("shape".into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(onnx::DataType::Int64 as i32),
                shape: Some(onnx::TensorShapeProto {
                    dim: vec![onnx::tensor_shape_proto::Dimension {
                        value: Some(onnx::tensor_shape_proto::dimension::Value::DimValue(2)),
                        ..Default::default()
                    }],
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    });
    let s = Sandbox::new();
    let p = s.write("expand.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("expand.onnx"));
    assert!(matches!(err, Error::Calibration { .. }), "{err}");
    assert_mentions(
        &err,
        &p,
        &[
            "Expand",
            "`shape`",
            "synthesized as token ids",
            "give calibration samples",
        ],
    );
}

#[test]
fn keep_float_names_matching_no_node_are_reported() {
    let sb = Sandbox::new();
    sb.write("tiny.onnx", &std::fs::read(TINY).expect("fixture"));
    sb.config()
        .model("tiny.onnx")
        .keep_float("conv")
        .keep_float("cnov")
        .compile()
        .expect("a misspelled name is not an error: names apply to every model");
    let report_path = std::fs::read_dir(sb.path("out/kenosis"))
        .expect("artifacts")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".report.json"))
        .expect("report written");
    let report: kenosis_quantize::report::Report =
        serde_json::from_slice(&std::fs::read(report_path).expect("report")).expect("parses");
    assert_eq!(report.keep_float_unmatched, ["cnov"]);
    let conv = report.nodes_fp32.iter().find(|n| n.name == "conv");
    assert!(
        conv.is_some_and(|n| n.reason == FloatReason::Requested),
        "{:?}",
        report.nodes_fp32
    );
}

// ---- Issue 33: every build input is hostile. -------------------------------------------

#[test]
fn a_fortran_order_npy_is_read_in_its_logical_order() {
    let s = Sandbox::new();
    std::fs::copy(TINY, s.path("m.onnx")).expect("copy");
    let values = sample_values(3 * 8 * 8);
    s.write(
        "calib_c/a.npy",
        &npy(&f32_bytes(values.clone()), "<f4", "(3, 8, 8)"),
    );
    s.write("calib_f/a.npy", &npy_fortran(&values, &[3, 8, 8]));
    let artifact = |dir: &str| {
        let out = s.path(&format!("out-{dir}"));
        s.config()
            .out_dir(&out)
            .model("m.onnx")
            .calibration_npy_dir(dir)
            .compile()
            .unwrap_or_else(|e| panic!("{dir}: {e}"));
        let manifest =
            kenosis_manifest::Manifest::read(&out.join("kenosis-manifest.json")).expect("manifest");
        std::fs::read(&manifest.models[0].artifact_path).expect("artifact")
    };
    // The same logical sample in either layout calibrates the same model (the files
    // differ, so each is quantized, not served from the cache).
    assert_eq!(artifact("calib_c"), artifact("calib_f"));
}

#[test]
fn a_conv_bias_shorter_than_its_output_channels_before_batchnorm() {
    let s = Sandbox::new();
    s.write("ok.onnx", &tiny_with_batchnorm(&[0.25; 4]).encode_to_vec());
    s.config()
        .out_dir(s.path("out-ok"))
        .model("ok.onnx")
        .compile()
        .expect("the well-formed fold quantizes");
    let p = s.write("short.onnx", &tiny_with_batchnorm(&[0.25]).encode_to_vec());
    let err = s.fail(s.config().model("short.onnx"));
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert_mentions(&err, &p, &["has 1 bias values for its 4 output channels"]);
}

#[test]
fn a_model_without_inputs_given_a_calibration_folder() {
    let s = Sandbox::new();
    // The input becomes a constant: the model has no input left to calibrate.
    s.write("m.onnx", &tiny_without_inputs().encode_to_vec());
    let dir = s.path("calib");
    s.write("calib/a.npy", &npy(&[0u8; 3 * 64 * 4], "<f4", "(3, 8, 8)"));
    let err = s.fail(s.config().model("m.onnx").calibration_npy_dir("calib"));
    assert!(matches!(err, Error::Calibration { .. }), "{err:?}");
    assert_mentions(&err, &dir, &["no inputs besides its initializers"]);
}

#[cfg(unix)]
#[test]
fn a_model_path_that_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let s = Sandbox::new();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.onnx");
    let model = s.dir.path().join(name);
    std::fs::copy(TINY, &model).expect("copy");
    let err = s.fail(s.config().model(name));
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("caf\u{fffd}.onnx"), "{err}");
    assert!(err.to_string().contains("is not valid UTF-8"), "{err}");
}

#[test]
fn declared_weight_dims_far_beyond_the_payload_before_a_per_channel_mul() {
    let s = Sandbox::new();
    // The first Conv loses its bias (so the fold would size a new one from the declared
    // channels) and declares 2^40 output channels over its 108 weights; a Mul by a scalar
    // (a per-channel shape under broadcasting) follows it.
    let m = support::tiny_with_weight_dims_beyond_payload_before_mul();
    let p = s.write("huge.onnx", &m.encode_to_vec());
    // Before the fix this allocated a 2^40-float bias (an abort), not an error.
    let err = s.fail(s.config().model("huge.onnx"));
    assert_mentions(&err, &p, &[]);
    let offline = kenosis_quantize::pipeline::quantize_offline(&p, &m.encode_to_vec());
    assert!(offline.is_err(), "offline graph path must refuse it too");
}

#[test]
fn npy_headers_declaring_more_than_the_file_holds() {
    let s = Sandbox::new();
    std::fs::copy(TINY, s.path("m.onnx")).expect("copy");
    // A shape of 2^40 rows over 12 bytes of data: the reader would allocate 4 TiB.
    let huge = s.write(
        "calib_shape/a.npy",
        &npy(&[0u8; 12], "<f4", "(1099511627776, 3)"),
    );
    let err = s.fail(
        s.config()
            .model("m.onnx")
            .calibration_npy_dir("calib_shape"),
    );
    assert!(matches!(err, Error::Calibration { .. }), "{err:?}");
    assert_mentions(
        &err,
        &huge,
        &["declares shape [1099511627776, 3]", "holds 12 bytes"],
    );

    // A version-2 header claiming a 4 GiB header in a 76-byte file.
    let mut bytes = npy(&[0u8; 12], "<f4", "(3,)");
    bytes[6] = 2;
    bytes.splice(8..10, 0xffff_fff0u32.to_le_bytes());
    let long = s.write("calib_header/a.npy", &bytes);
    let err = s.fail(
        s.config()
            .model("m.onnx")
            .calibration_npy_dir("calib_header"),
    );
    assert_mentions(&err, &long, &["declares 4294967280 header bytes"]);

    // Too few bytes for a declared shape that is otherwise right.
    let short = s.write("calib_short/a.npy", &npy(&[0u8; 100], "<f4", "(3, 8, 8)"));
    let err = s.fail(
        s.config()
            .model("m.onnx")
            .calibration_npy_dir("calib_short"),
    );
    assert_mentions(&err, &short, &["(768 bytes of data)", "holds 100 bytes"]);
}

#[test]
fn synthetic_samples_are_capped_per_option_and_in_total() {
    let s = Sandbox::new();
    std::fs::copy(TINY, s.path("m.onnx")).expect("copy");
    let err = s.fail(s.config().model("m.onnx").synthetic_samples(1 << 40));
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("option `synthetic_samples` must be at most 4096, got 1099511627776"),
        "{err}"
    );

    // Each sample is within the per-input limit, all 4096 together are not.
    let mut m = tiny();
    let input = &mut m.graph.as_mut().expect("graph").input[0];
    if let Some(onnx::type_proto::Value::TensorType(t)) =
        input.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        for d in t.shape.as_mut().expect("shape").dim.iter_mut().skip(2) {
            d.value = Some(onnx::tensor_shape_proto::dimension::Value::DimValue(256));
        }
    }
    let p = s.write("big.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("big.onnx").synthetic_samples(4096));
    assert!(matches!(err, Error::Calibration { .. }), "{err:?}");
    assert_mentions(
        &err,
        &p,
        &[
            "4096 synthetic samples",
            "805306368 elements",
            "over the limit",
        ],
    );
}

#[test]
fn external_tensors_sharing_bytes_or_too_large_in_total() {
    let s = Sandbox::new();
    let (mut m, data) = tiny_with_external_data("weights.bin");
    // Every tensor reads from offset 0 of a file holding only the largest one: together
    // they name more bytes than the file has.
    let mut largest = 0;
    for t in &mut m.graph.as_mut().expect("graph").initializer {
        for e in t.external_data.iter_mut() {
            match e.key() {
                "offset" => e.value = Some("0".into()),
                "length" => largest = largest.max(e.value().parse::<usize>().expect("length")),
                _ => {}
            }
        }
    }
    s.write("shared/weights.bin", &data[..largest]);
    let p = s.write("shared/m.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("shared/m.onnx"));
    assert!(matches!(err, Error::InvalidModel { .. }), "{err:?}");
    assert_mentions(&err, &p, &["share or overlap byte ranges"]);

    // One tensor of 9 GiB in a sparse file: refused before anything is read.
    let (mut m, _) = tiny_with_external_data("huge.bin");
    let nine_gib: u64 = 9 << 30;
    let t = &mut m.graph.as_mut().expect("graph").initializer[0];
    for e in t.external_data.iter_mut().filter(|e| e.key() == "length") {
        e.value = Some(nine_gib.to_string());
    }
    std::fs::create_dir_all(s.path("huge")).expect("mkdir");
    std::fs::File::create(s.path("huge/huge.bin"))
        .and_then(|f| f.set_len(nine_gib + (1 << 30)))
        .expect("sparse file");
    let p = s.write("huge/m.onnx", &m.encode_to_vec());
    let err = s.fail(s.config().model("huge/m.onnx"));
    assert_mentions(&err, &p, &["over 8589934588", "protobuf's 2 GB limit"]);
}

/// Runs `f` on another thread and fails (instead of hanging the suite) when it takes more
/// than 60 s: a FIFO or `/dev/zero` that is read never ends.
#[cfg(unix)]
fn within_a_minute<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: still running after 60 s (a read that never ends)"))
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

#[cfg(unix)]
#[test]
fn special_files_in_the_model_or_calibration_folder_are_never_read() {
    use std::os::unix::fs::symlink;
    let s = std::sync::Arc::new(Sandbox::new());
    let (m, _) = tiny_with_external_data("weights.bin");
    let model = m.encode_to_vec();

    // The data file is a link to /dev/zero, then a FIFO.
    s.write("zero/m.onnx", &model);
    symlink("/dev/zero", s.path("zero/weights.bin")).expect("symlink");
    s.write("fifo/m.onnx", &model);
    mkfifo(&s.path("fifo/weights.bin"));
    for (dir, problem) in [
        ("zero", "resolves outside the model's folder"),
        ("fifo", "is not a regular file"),
    ] {
        let sb = s.clone();
        let err = within_a_minute(dir, move || {
            let config = sb.config().model(format!("{dir}/m.onnx"));
            sb.fail(config).to_string()
        });
        let p = s.path(&format!("{dir}/m.onnx"));
        assert!(err.contains(&p.display().to_string()), "{err}");
        assert!(err.contains(problem), "{dir}: {err}");
    }

    // The model file itself is a FIFO.
    mkfifo(&s.path("model-fifo.onnx"));
    let sb = s.clone();
    let err = within_a_minute("model FIFO", move || {
        sb.fail(sb.config().model("model-fifo.onnx")).to_string()
    });
    assert!(
        err.contains("model-fifo.onnx") && err.contains("not a regular file"),
        "{err}"
    );

    // A calibration `.npy` that is a link to /dev/zero, then a FIFO.
    std::fs::copy(TINY, s.path("m.onnx")).expect("copy");
    symlink("/dev/zero", s.path("calib_zero/a.npy"))
        .or_else(|_| {
            std::fs::create_dir_all(s.path("calib_zero"))?;
            symlink("/dev/zero", s.path("calib_zero/a.npy"))
        })
        .expect("symlink");
    mkfifo(&s.path("calib_fifo/a.npy"));
    for dir in ["calib_zero", "calib_fifo"] {
        let sb = s.clone();
        let err = within_a_minute(dir, move || {
            let config = sb.config().model("m.onnx").calibration_npy_dir(dir);
            sb.fail(config).to_string()
        });
        let file = s.path(&format!("{dir}/a.npy"));
        assert!(err.contains(&file.display().to_string()), "{err}");
        assert!(err.contains("not a regular file"), "{dir}: {err}");
    }
}

/// The float initializers of an encoded model whose names say they are scales.
fn scales_of(model: &[u8]) -> Vec<(String, Vec<f32>)> {
    let graph = ModelProto::decode(model)
        .expect("artifact")
        .graph
        .expect("graph");
    graph
        .initializer
        .iter()
        .filter(|t| t.elem_type() == onnx::DataType::Float && t.name().ends_with("scale"))
        .map(|t| (t.name().to_owned(), onnx::tensor::to_f32(t).expect("scale")))
        .collect()
}

#[test]
fn a_clip_whose_max_is_below_its_min_is_not_absorbed_and_no_scale_is_zero() {
    let s = Sandbox::new();
    // Relu → Clip(0, -6): every output is -6; nothing about it is a range to quantize to.
    let m = support::tiny_with_clip_max_below_min();
    let p = s.write("clip.onnx", &m.encode_to_vec());
    let bytes = std::fs::read(&p).expect("model");
    let check = |what: &str, artifact: &[u8]| {
        let scales = scales_of(artifact);
        assert!(
            !scales.is_empty(),
            "{what}: the artifact quantizes the first Conv"
        );
        for (name, values) in &scales {
            assert!(
                values.iter().all(|v| v.is_finite() && *v > 0.0),
                "{what}: scale `{name}`: {values:?}"
            );
        }
    };
    // The graph path with every range set to [-1, 1] (the fuzz target's): before the fix
    // the Clip's empty range was taken as the Conv's, whose scale was stepped down one ulp
    // at a time (about 10^9 steps) to 0.0.
    let offline = kenosis_quantize::pipeline::quantize_offline(&p, &bytes).expect("offline");
    check("offline", &offline);
    // The full build calibrates the Conv's output as an ordinary activation.
    let q = kenosis_quantize::quantize(
        &p,
        &bytes,
        &kenosis_quantize::Calibration::Synthetic,
        &support::tiny_options(),
    )
    .expect("quantizes");
    check("calibrated", &q.bytes);
    assert_eq!(
        q.report.ops_quantized.get("Conv"),
        Some(&1),
        "{:?}",
        q.report
    );
}

/// A per-input calibration subfolder may be a symlink; a link back up the tree is entered
/// once (hashing the folder ends) and the build succeeds on the one sample.
#[cfg(unix)]
#[test]
fn a_symlink_cycle_in_the_calibration_folder_is_entered_once() {
    let s = Sandbox::new();
    std::fs::copy(TINY, s.path("m.onnx")).expect("copy");
    s.write("calib/a.npy", &npy(&[0u8; 3 * 64 * 4], "<f4", "(3, 8, 8)"));
    std::os::unix::fs::symlink(s.path("calib"), s.path("calib/again")).expect("symlink");
    s.config()
        .model("m.onnx")
        .calibration_npy_dir("calib")
        .compile()
        .expect("builds");
}
