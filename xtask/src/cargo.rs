//! Running child cargo processes with the ONNX Runtime environment.

use std::env;
use std::ffi::OsString;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

use crate::ort::OrtEnv;

/// `cargo` (the one that started us, if known) in the workspace root, with `ort`'s variables set.
pub fn command(ort: &OrtEnv) -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(crate::workspace_root());
    cmd.envs(ort.vars());
    cmd
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
