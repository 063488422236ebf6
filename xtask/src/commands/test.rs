//! `cargo xtask test [CARGO TEST ARGS]`: the workspace's tests, as CI runs them.

use std::env;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};

use crate::{cargo, ort};

/// Run `cargo test --workspace` (or of the packages given with -p) with ONNX Runtime set up,
/// as CI does
#[derive(clap::Args)]
pub struct Args {
    /// Passed on to `cargo test` verbatim, e.g. `-p kenosis-build -- --nocapture`
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

pub fn run(_args: Args) -> Result<ExitCode> {
    check_shared_dir()?;
    let ort = ort::ensure(&ort::default_lib_dir(&crate::workspace_root()))?;
    // The arguments after `test`, verbatim: clap swallows a leading `--` (`test -- --nocapture`
    // parses as `[--nocapture]`), but for `cargo test` it separates the test binaries'
    // arguments. The parsed `Args` only serve `--help`. (argv is `xtask test ARGS...`: xtask
    // has no global options.)
    let args: Vec<OsString> = env::args_os().skip(2).collect();
    let mut cmd = cargo::command(&ort);
    cmd.arg("test");
    if !selects_packages(&args) {
        cmd.arg("--workspace");
    }
    cmd.args(args);
    cargo::run(cmd)
}

/// Whether the cargo arguments (before `--`) pick packages themselves: `--workspace` would
/// override `-p`.
fn selects_packages(args: &[OsString]) -> bool {
    args.iter()
        .map(|arg| arg.to_string_lossy())
        .take_while(|arg| arg != "--")
        .any(|arg| {
            arg.starts_with("-p") || arg.starts_with("--package") || arg == "--manifest-path"
        })
}

/// The shared data (models, images) lives in `$KENOSIS_SHARED_DIR` or `<workspace>/../shared`.
/// Tests that need it skip without it, which is fine locally but must not pass silently in CI.
fn check_shared_dir() -> Result<()> {
    let (dir, source) = match env::var_os("KENOSIS_SHARED_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => (PathBuf::from(dir), "KENOSIS_SHARED_DIR"),
        None => (
            crate::workspace_root().join("..").join("shared"),
            "the workspace's sibling",
        ),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn package_selection_replaces_workspace() {
        assert!(selects_packages(&args(&["-p", "classify"])));
        assert!(selects_packages(&args(&["-pclassify"])));
        assert!(selects_packages(&args(&["--package=classify", "--", "x"])));
        assert!(!selects_packages(&args(&[])));
        assert!(!selects_packages(&args(&["--release", "--", "-p"])));
    }
}
