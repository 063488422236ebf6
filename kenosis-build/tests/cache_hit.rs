//! A build whose artifact is in the cache makes no ONNX Runtime call, so `cargo check`,
//! rust-analyzer and unchanged rebuilds pay nothing for it.
//!
//! The cache is filled by this test binary run again as a child process (the ignored test
//! below), so that this process starts without an ONNX Runtime environment.

use std::path::{Path, PathBuf};
use std::process::Command;

const CACHE_VAR: &str = "KENOSIS_TEST_FILL_CACHE";

// The quantizer's test fixtures, shared with its own tests.
#[path = "../../kenosis-quantize/tests/support/mod.rs"]
mod support;

/// One build of the tiny fixture into `out`, with the cache in `cache`.
fn build(cache: &Path, out: &Path) {
    kenosis_build::Config::new()
        .model(support::TINY)
        .manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .out_dir(out)
        .cache_dir(cache)
        .target("x86_64-unknown-linux-gnu")
        .compile()
        .expect("the fixture builds");
}

#[test]
fn a_cache_hit_makes_no_onnx_runtime_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let filled = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "fill_the_cache", "--ignored", "--quiet"])
        .env(CACHE_VAR, &cache)
        .status()
        .expect("the child runs");
    assert!(filled.success(), "filling the cache failed");
    assert!(std::fs::read_dir(&cache).expect("cache").count() > 0);

    build(&cache, &dir.path().join("out"));
    assert!(
        !kenosis_quantize::calibrate::session::runtime_used(),
        "a build served from the cache called ONNX Runtime"
    );
    let manifest = dir.path().join("out/kenosis-manifest.json");
    assert!(manifest.is_file(), "the manifest is written on a hit");
}

#[test]
#[ignore = "run by a_cache_hit_makes_no_onnx_runtime_call in a child process"]
fn fill_the_cache() {
    let cache = PathBuf::from(std::env::var_os(CACHE_VAR).expect("run by the parent test"));
    let out = tempfile::tempdir().expect("tempdir");
    build(&cache, out.path());
    assert!(kenosis_quantize::calibrate::session::runtime_used());
}
