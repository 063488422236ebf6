//! Where a build script's quantizer comes from, end to end: the fixture crate of
//! `discover_e2e` (kenosis-build as a build-dependency without its `quantizer` feature, the
//! front end alone) built with cargo as a user builds it.
//!
//! - Without `KENOSIS_QUANTIZER` and without `kenosis` on `PATH`, the first build makes the
//!   quantizer (a nested `cargo install` of this checkout's `kenosis-cli` into the per-user
//!   folder, here a fresh `XDG_CACHE_HOME`), says so, and quantizes; a second crate's build
//!   finds it there and builds nothing.
//! - A `KENOSIS_QUANTIZER` of another version is refused, naming what it is.

use std::path::{Path, PathBuf};
use std::process::Command;

mod fixture;

use fixture::fixture_crate;

/// `PATH` without any folder holding a `kenosis`.
fn path_without_kenosis() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| !dir.join("kenosis").exists())
        .collect();
    std::env::join_paths(kept).expect("PATH")
}

/// `cargo build --offline` of the crate in `dir` with its own target folder and a fresh
/// Kenosis cache, as a user without `KENOSIS_QUANTIZER`; whether it succeeded, and its
/// output.
fn build(dir: &Path, vars: &[(&str, &std::ffi::OsStr)]) -> (bool, String) {
    let cache = tempfile::tempdir().expect("tempdir");
    let target_dir = kenosis_eval::target_dir().join("quantizer-binary");
    fixture::outcome(
        fixture::cargo(dir, &["build"], &target_dir, cache.path())
            .env("CARGO_NET_OFFLINE", "true")
            .env("PATH", path_without_kenosis())
            .env_remove("KENOSIS_QUANTIZER")
            .envs(vars.iter().copied()),
    )
}

#[test]
fn without_a_quantizer_the_first_build_makes_one_and_later_builds_reuse_it() {
    let krate = tempfile::tempdir().expect("tempdir");
    fixture_crate(krate.path());
    let user_cache = tempfile::tempdir().expect("tempdir");
    let xdg = [("XDG_CACHE_HOME", user_cache.path().as_os_str())];

    let (ok, first) = build(krate.path(), &xdg);
    assert!(ok, "the first build failed:\n{first}");
    assert!(first.contains("kenosis: building the quantizer"), "{first}");
    assert!(
        first.contains("kenosis: quantized models/tiny_conv.onnx to INT8"),
        "{first}"
    );
    let roots: Vec<PathBuf> = std::fs::read_dir(user_cache.path().join("kenosis/quantizer"))
        .expect("the per-user quantizer folder")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(roots.len(), 1, "{roots:?}");
    let version = Command::new(roots[0].join("bin/kenosis"))
        .arg("--version")
        .output()
        .expect("the built quantizer runs");
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("kenosis {}", kenosis_quantize::IDENTITY)
    );
    assert!(
        !roots[0].join("target").exists(),
        "the nested build folder is left behind"
    );

    // Another crate on the same machine (a fresh Kenosis cache: it quantizes again) finds it.
    let other = tempfile::tempdir().expect("tempdir");
    fixture_crate(other.path());
    let (ok, second) = build(other.path(), &xdg);
    assert!(ok, "the second build failed:\n{second}");
    assert!(!second.contains("building the quantizer"), "{second}");
    assert!(
        second.contains("kenosis: quantized models/tiny_conv.onnx to INT8"),
        "{second}"
    );
}

#[test]
fn a_quantizer_of_another_version_is_refused_naming_it() {
    let krate = tempfile::tempdir().expect("tempdir");
    fixture_crate(krate.path());
    let fake = krate.path().join("old-kenosis");
    std::fs::write(&fake, "#!/bin/sh\necho 'kenosis 0.0.1 (source 00)'\n").expect("write");
    let status = Command::new("chmod")
        .arg("+x")
        .arg(&fake)
        .status()
        .expect("chmod");
    assert!(status.success());
    let (ok, text) = build(krate.path(), &[("KENOSIS_QUANTIZER", fake.as_os_str())]);
    assert!(!ok, "an old quantizer was used:\n{text}");
    assert!(
        text.contains("is unavailable")
            && text.contains("is kenosis 0.0.1 (source 00)")
            && text.contains("cargo install kenosis-cli"),
        "{text}"
    );
}
