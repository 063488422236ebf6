//! Every IR version the ONNX Runtime in use loads is accepted, through the user path
//! (`Config::compile`): current `onnx` releases save IR 12 and later. One the runtime
//! refuses fails the build with a message naming the file, the version and the range.

use std::path::Path;

use kenosis_build::{Config, Error};
use kenosis_eval::{session, shared_dir};
use kenosis_manifest::Manifest;
use kenosis_quantize::onnx::ModelProto;
use ort::session::builder::GraphOptimizationLevel;
use prost::Message;

/// The shared EfficientNet-Lite0, re-saved with `ir_version` into `dir`.
fn saved_with_ir(shared: &Path, dir: &Path, ir: i64) -> String {
    let bytes = std::fs::read(shared.join("models/efficientnet_lite0.onnx")).expect("model");
    let mut model = ModelProto::decode(bytes.as_slice()).expect("decodes");
    model.ir_version = Some(ir);
    let name = format!("lite0_ir{ir}.onnx");
    std::fs::write(dir.join(&name), model.encode_to_vec()).expect("write");
    name
}

fn config(dir: &Path) -> Config {
    Config::new()
        .manifest_dir(dir)
        .out_dir(dir.join("out"))
        .cache_dir(dir.join("cache"))
        .target("x86_64-unknown-linux-gnu")
        .synthetic_samples(8)
}

#[test]
fn ir_12_and_13_models_quantize_and_their_artifacts_load() {
    let Some(shared) = shared_dir() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let names = [12, 13].map(|ir| saved_with_ir(&shared, dir.path(), ir));
    let mut config = config(dir.path());
    for name in &names {
        config = config.model(name);
    }
    config.compile().unwrap_or_else(|e| panic!("{e}"));
    let manifest = Manifest::read(&Manifest::path_in(&dir.path().join("out"))).expect("manifest");
    assert_eq!(manifest.models.len(), 2);
    for (entry, ir) in manifest.models.iter().zip([12, 13]) {
        let artifact = std::fs::read(&entry.artifact_path).expect("artifact");
        let model = ModelProto::decode(artifact.as_slice()).expect("artifact decodes");
        assert_eq!(model.ir_version, Some(ir), "{}", entry.source);
        // The runtime that embeds it loads it (a panic here is ORT's refusal).
        session(&artifact, GraphOptimizationLevel::All, None);
    }
}

#[test]
fn an_ir_version_onnx_runtime_refuses_fails_with_a_clear_message() {
    let Some(shared) = shared_dir() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let name = saved_with_ir(&shared, dir.path(), 14);
    let err = config(dir.path())
        .model(&name)
        .compile()
        .expect_err("IR 14 is refused");
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&name), "{text}");
    assert!(
        text.contains("IR version 14 is not supported (supported: 3 to 13)"),
        "{text}"
    );
    assert!(!dir.path().join("out/kenosis-manifest.json").exists());
}
