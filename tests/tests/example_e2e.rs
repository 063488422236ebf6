//! The `examples/classify` crate, built the way a user builds it: `cargo build` quantizes
//! EfficientNet-Lite0 in its build script, the binary classifies the embedded image with the
//! INT8 model, and a rebuild whose build script re-runs takes the artifact from the cache.
//!
//! The nested cargo uses its own target directory (the outer `cargo test` holds the lock on
//! the workspace's) and a fresh kenosis cache, so the first build really quantizes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

fn cargo(args: &[&str], target_dir: &Path, cache_dir: &Path) -> Output {
    let output = Command::new(env!("CARGO"))
        .args(args)
        .current_dir(workspace())
        .env("CARGO_TARGET_DIR", target_dir)
        .env("KENOSIS_CACHE_DIR", cache_dir)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn classify_example_quantizes_at_build_time_runs_and_rebuilds_from_cache() {
    let target_dir = workspace().join("target/e2e");
    let cache = tempfile::tempdir().expect("tempdir");
    let quantized_line = "kenosis: quantized models/efficientnet_lite0.onnx to INT8";

    // First build: the build script quantizes and says so in one warning line.
    let first = text(&cargo(
        &["build", "-p", "classify"],
        &target_dir,
        cache.path(),
    ));
    assert!(
        first.contains(quantized_line),
        "first build should quantize:\n{first}"
    );
    assert_eq!(first.matches(quantized_line).count(), 1);
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .expect("cache dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert!(
        entries
            .iter()
            .any(|p| p.extension().is_some_and(|x| x == "onnx")),
        "artifact cached: {entries:?}"
    );

    // The binary runs the embedded INT8 model and the FP32 original side by side.
    let run = cargo(&["run", "-q", "-p", "classify"], &target_dir, cache.path());
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        stdout.contains("pizza"),
        "expected the built-in pizza image to be recognised:\n{stdout}"
    );
    assert!(
        stdout.contains("INT8") && stdout.contains("FP32"),
        "side-by-side table:\n{stdout}"
    );

    // Touching the model makes cargo re-run the build script; the content is unchanged, so
    // the cache answers and nothing is re-quantized.
    let model = workspace().join("examples/classify/models/efficientnet_lite0.onnx");
    std::fs::File::options()
        .append(true)
        .open(&model)
        .and_then(|f| f.set_modified(std::time::SystemTime::now()))
        .expect("touch model");
    let second = text(&cargo(
        &["build", "-vv", "-p", "classify"],
        &target_dir,
        cache.path(),
    ));
    assert!(
        second.contains("[classify 0.1.0] cargo:rerun-if-changed"),
        "build script should have re-run:\n{second}"
    );
    assert!(
        !second.contains(quantized_line),
        "second build must not re-quantize:\n{second}"
    );
}
