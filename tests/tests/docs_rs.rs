//! docs.rs builds a downstream crate's documentation with `DOCS_RS` set and neither ONNX
//! Runtime nor network. `examples/quickstart` (the README's crate) is documented that way
//! here, with every ONNX Runtime variable removed: its build script must link and run without
//! ONNX Runtime, and `include_quantized!` must expand on the empty artifact it writes.

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn a_downstream_crate_documents_under_docs_rs_without_onnx_runtime() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    // Its own target directory: `DOCS_RS` changes how ort-sys and kenosis-build are built.
    let target_dir = kenosis_eval::target_dir().join("docs-rs");
    let output = Command::new(env!("CARGO"))
        .args(["doc", "--no-deps", "-p", "quickstart"])
        .current_dir(workspace)
        .env("DOCS_RS", "1")
        .env("CARGO_TARGET_DIR", &target_dir)
        .env_remove("ORT_LIB_PATH")
        .env_remove("ORT_PREFER_DYNAMIC_LINK")
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo doc under DOCS_RS failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(target_dir.join("doc/quickstart/index.html").is_file());
    // The build script wrote an empty artifact: nothing was quantized.
    let artifacts: Vec<PathBuf> = glob_artifacts(&target_dir.join("debug/build"));
    assert!(
        !artifacts.is_empty(),
        "no artifact under {}",
        target_dir.display()
    );
    for a in &artifacts {
        let len = std::fs::metadata(a).expect("artifact").len();
        assert_eq!(len, 0, "{} was quantized under DOCS_RS", a.display());
    }
}

/// The `*.int8.onnx` files the quickstart build scripts wrote under `build`.
fn glob_artifacts(build: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in std::fs::read_dir(build).into_iter().flatten().flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        if !name.starts_with("quickstart-") {
            continue;
        }
        let kenosis = dir.path().join("out/kenosis");
        for file in std::fs::read_dir(kenosis).into_iter().flatten().flatten() {
            if file.path().to_string_lossy().ends_with(".int8.onnx") {
                found.push(file.path());
            }
        }
    }
    found
}
