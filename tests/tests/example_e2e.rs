//! The example crates, built the way a user builds them: `examples/classify` (its build script
//! quantizes EfficientNet-Lite0, the binary classifies the embedded image with the INT8 model,
//! and a rebuild whose build script re-runs takes the artifact from the cache),
//! `examples/detect` (YOLOX-Nano on a COCO image) and `examples/embed` (MiniLM sentence
//! embeddings; a standalone crate whose model is fetched, see [`embed_model`]).
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

/// The nested builds' target directory, shared by the examples (they share dependencies):
/// `e2e` in the workspace's target folder.
fn e2e_target() -> PathBuf {
    kenosis_eval::target_dir().join("e2e")
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
    let target_dir = e2e_target();
    let cache = tempfile::tempdir().expect("tempdir");
    let source = "models/efficientnet_lite0.onnx";

    // First build: the build script quantizes and says so in one warning line.
    let first = text(&cargo(
        &["build", "-p", "classify"],
        &target_dir,
        cache.path(),
    ));
    assert_eq!(
        kenosis_tests::summary_lines(&first, source),
        1,
        "first build should quantize:\n{first}"
    );
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

    // The binary runs the embedded INT8 model; its first-ranked class is the pizza.
    let run = cargo(&["run", "-q", "-p", "classify"], &target_dir, cache.path());
    let stdout = String::from_utf8_lossy(&run.stdout);
    let first = stdout.lines().find(|l| l.trim_start().starts_with("1."));
    assert!(
        first.is_some_and(|l| l.contains("pizza")),
        "expected the built-in pizza image to be recognised:\n{stdout}"
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
    assert_eq!(
        kenosis_tests::summary_lines(&second, source),
        0,
        "second build must not re-quantize:\n{second}"
    );
}

#[test]
fn detect_example_finds_the_rider_and_the_horse() {
    let cache = tempfile::tempdir().expect("tempdir");
    let build = text(&cargo(
        &["build", "-p", "detect"],
        &e2e_target(),
        cache.path(),
    ));
    assert_eq!(
        kenosis_tests::summary_lines(&build, "models/yolox_nano.onnx"),
        1,
        "the build script should quantize:\n{build}"
    );
    let run = cargo(&["run", "-q", "-p", "detect"], &e2e_target(), cache.path());
    let stdout = String::from_utf8_lossy(&run.stdout);
    // One line per object: class name, score, box. The built-in image (COCO val 103) is
    // annotated with one horse and one person.
    let classes: Vec<&str> = stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split("  ").next())
        .map(str::trim)
        .collect();
    for expected in ["horse", "person"] {
        assert!(classes.contains(&expected), "no {expected}:\n{stdout}");
    }
}

/// paraphrase-MiniLM-L3-v2, which `examples/embed` expects in its `models/` folder: not in the
/// repository (69 MB) but fetched by `../shared/fetch-models.sh` (which `cargo xtask test`
/// runs) into `$KENOSIS_MODELS`, else the target folder's `kenosis-models`. Linked into `models/` when not
/// there yet. `None` (skip, with a note) when not fetched, except under `CI=true`, where a
/// missing model fails the test.
fn embed_model() -> Option<PathBuf> {
    const NAME: &str = "paraphrase-MiniLM-L3-v2.onnx";
    let in_example = workspace().join("examples/embed/models").join(NAME);
    if in_example.is_file() {
        return Some(in_example);
    }
    let fetched = kenosis_eval::fetched_models_dir().join(NAME);
    if !fetched.is_file() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{} not found (CI=true: refusing to skip; run ../shared/fetch-models.sh)",
            fetched.display()
        );
        eprintln!("note: skipping examples/embed, {NAME} not fetched (../shared/fetch-models.sh)");
        return None;
    }
    // A dangling link left by an earlier run is replaced.
    let _ = std::fs::remove_file(&in_example);
    std::os::unix::fs::symlink(&fetched, &in_example).expect("link the model into examples/embed");
    Some(in_example)
}

#[test]
fn embed_example_scores_paraphrases_above_unrelated_sentences() {
    if embed_model().is_none() {
        return;
    }
    let manifest = workspace().join("examples/embed/Cargo.toml");
    let manifest = manifest.to_str().expect("UTF-8 path");
    let cache = tempfile::tempdir().expect("tempdir");
    let run = cargo(
        &["run", "-q", "--locked", "--manifest-path", manifest],
        &e2e_target(),
        cache.path(),
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    // `similarity  "a" ~ "b"`: three paraphrase pairs, then three unrelated pairs.
    let scores: Vec<f32> = stdout
        .lines()
        .map(|l| {
            l.split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no score in {l:?}:\n{stdout}"))
        })
        .collect();
    assert_eq!(scores.len(), 6, "{stdout}");
    let weakest_paraphrase = scores[..3].iter().copied().fold(f32::INFINITY, f32::min);
    let strongest_unrelated = scores[3..]
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    assert!(
        weakest_paraphrase > strongest_unrelated + 0.2,
        "paraphrases should score clearly higher:\n{stdout}"
    );

    // Its own tests: the INT8 embeddings against the FP32 model's, mean pooling, tokenizer.
    let tests = text(&cargo(
        &["test", "--locked", "--manifest-path", manifest],
        &e2e_target(),
        cache.path(),
    ));
    assert!(tests.contains("test result: ok."), "{tests}");
}
