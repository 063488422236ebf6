//! `cargo xtask test [CARGO TEST ARGS]`: the workspace's tests, as CI runs them.

use std::env;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};

use crate::{cargo, ort};

/// Run `cargo test --workspace` with ONNX Runtime set up (what CI runs)
#[derive(clap::Args)]
pub struct Args {
    /// Passed on to `cargo test`, e.g. `-p kenosis-build -- --nocapture`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    args: Vec<OsString>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    check_shared_dir()?;
    let ort = ort::ensure(&ort::default_lib_dir(&crate::workspace_root()))?;
    let mut cmd = cargo::command(&ort);
    cmd.args(["test", "--workspace"]).args(passthrough(args.args));
    cargo::run(cmd)
}

/// The arguments after `test`, verbatim. clap would swallow a leading `--`
/// (`cargo xtask test -- --nocapture` parses as `[--nocapture]`), but for `cargo test` it is
/// meaningful: it separates the test binaries' arguments. `parsed` only serves `--help`.
fn passthrough(_parsed: Vec<OsString>) -> Vec<OsString> {
    // argv is `xtask test ARGS...`: xtask has no global options.
    env::args_os().skip(2).collect()
}

/// The shared data (models, images) lives in `$KENOSIS_SHARED_DIR` or `<workspace>/../shared`.
/// Tests that need it skip without it, which is fine locally but must not pass silently in CI.
fn check_shared_dir() -> Result<()> {
    let (dir, source) = match env::var_os("KENOSIS_SHARED_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => (PathBuf::from(dir), "KENOSIS_SHARED_DIR"),
        None => (crate::workspace_root().join("..").join("shared"), "the workspace's sibling"),
    };
    if dir.is_dir() {
        return Ok(());
    }
    if env::var("CI").is_ok_and(|v| v == "true") {
        bail!(
            "CI=true but the shared data directory {} ({source}) does not exist; CI must run with \
             shared/ next to the checkout (or KENOSIS_SHARED_DIR pointing at it), otherwise the \
             tests on real models would be skipped",
            dir.display()
        );
    }
    eprintln!(
        "xtask: warning: shared data directory {} ({source}) not found; tests that need real \
         models and images will be skipped",
        dir.display()
    );
    Ok(())
}
