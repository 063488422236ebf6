//! `cargo xtask demo [-- ARGS]`: run the `classify` example in release mode.

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Result;

use crate::{cargo, ort};

/// Run the `classify` example (EfficientNet-Lite0 in INT8) in release mode
#[derive(clap::Args)]
pub struct Args {
    /// Arguments for `classify`, e.g. an image path
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let ort = ort::ensure(&ort::default_lib_dir()?)?;
    let mut cmd = cargo::command(&ort);
    cmd.args(["run", "--release", "--package", "classify", "--"])
        .args(args.args);
    cargo::run(cmd)
}
