//! Running child cargo processes with the ONNX Runtime environment.

use std::env;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::OnceLock;

use anyhow::{anyhow, Context, Result};

use crate::ort::OrtEnv;

/// `cargo` (the one that started us, if known) in the workspace root, with `ort`'s variables set.
pub fn command(ort: &OrtEnv) -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(crate::workspace_root());
    cmd.envs(ort.vars());
    cmd
}

/// The workspace's target folder as cargo resolves it (`CARGO_TARGET_DIR`, `build.target-dir`
/// of a config file, else `<workspace>/target`): `cargo metadata`'s `target_directory`, asked
/// once per process. Every path xtask puts under the target folder starts here.
///
/// # Errors
/// When `cargo metadata` cannot run or its output has no `target_directory`.
pub fn target_dir() -> Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| ask_target_dir().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!(e))
}

/// `cargo metadata --no-deps`'s `target_directory`.
fn ask_target_dir() -> Result<PathBuf> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let output = Command::new(cargo)
        .current_dir(crate::workspace_root())
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("starting `cargo metadata`")?;
    if !output.status.success() {
        anyhow::bail!("`cargo metadata` failed: {}", output.status);
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("parsing `cargo metadata`'s output")?;
    let dir = metadata["target_directory"]
        .as_str()
        .context("`cargo metadata` printed no target_directory")?;
    Ok(PathBuf::from(dir))
}

/// Runs `cmd` to completion and passes its exit code on.
pub fn run(mut cmd: Command) -> Result<ExitCode> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        // Killed by a signal.
        None => {
            eprintln!("xtask: {cmd:?} was terminated: {status}");
            ExitCode::FAILURE
        }
    })
}

/// Builds the `kenosis` quantizer from the workspace (`cargo build --release -p kenosis-cli`)
/// and returns its path, for `KENOSIS_QUANTIZER`: build scripts whose kenosis-build is the
/// front end alone (the examples, the downstream crates the tests make) run it on a cache
/// miss instead of building their own copy into the per-user folder.
///
/// # Errors
/// When the build fails.
pub fn quantizer(ort: &OrtEnv) -> Result<PathBuf> {
    let mut cmd = command(ort);
    cmd.args([
        "build",
        "--release",
        "-p",
        "kenosis-cli",
        "--bin",
        "kenosis",
    ]);
    if run(cmd)? != ExitCode::SUCCESS {
        anyhow::bail!(
            "building the kenosis quantizer (`cargo build --release -p kenosis-cli`) failed"
        );
    }
    Ok(target_dir()?
        .join("release")
        .join(format!("kenosis{}", env::consts::EXE_SUFFIX)))
}
