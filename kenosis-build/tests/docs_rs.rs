//! Under `DOCS_RS` (docs.rs builds documentation without ONNX Runtime or network), a build
//! writes what `include_quantized!` needs, the manifest and an empty artifact, without
//! quantizing or calling ONNX Runtime.

// The quantizer's test fixtures, shared with its own tests.
#[path = "../../kenosis-quantize/tests/support/mod.rs"]
mod support;

#[test]
fn a_docs_rs_build_writes_the_manifest_without_onnx_runtime() {
    // This test binary holds only this test, so setting the variable races nothing.
    std::env::set_var("DOCS_RS", "1");
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, cache) = (dir.path().join("out"), dir.path().join("cache"));
    kenosis_build::Config::new()
        .model(support::TINY)
        .manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .out_dir(&out)
        .cache_dir(&cache)
        .target("x86_64-unknown-linux-gnu")
        .compile()
        .expect("a docs.rs build succeeds");
    assert!(
        !kenosis_quantize::calibrate::session::runtime_used(),
        "a docs.rs build called ONNX Runtime"
    );
    let cached = std::fs::read_dir(&cache).map_or(0, |d| d.count());
    assert_eq!(cached, 0, "a docs.rs build put nothing in the cache");

    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("kenosis-manifest.json")).expect("manifest written"),
    )
    .expect("manifest is JSON");
    let entry = &manifest["models"][0];
    let artifact = entry["artifact_path"].as_str().expect("artifact path");
    assert_eq!(std::fs::read(artifact).expect("artifact written").len(), 0);
    assert_eq!(
        entry["artifact_blake3"],
        blake3::hash(&[]).to_hex().as_str()
    );
    // The typed wrapper documents the FP32 model's declared input and output.
    assert_eq!(entry["inputs"][0]["name"], "x");
    assert_eq!(entry["inputs"][0]["shape"], serde_json::json!([1, 3, 8, 8]));
    assert_eq!(entry["outputs"][0]["name"], "y");
}
