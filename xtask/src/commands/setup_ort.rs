//! `cargo xtask setup-ort [--target TRIPLE]`: install ONNX Runtime (and, for a target, the
//! cross tools) and print the `.cargo/config.toml` fragment that builds with it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cross;
use crate::ort::{self, Platform};

/// Fetch ONNX Runtime from PyPI's wheels (for this machine and, with --target, for the device),
/// install the cross tools a target needs, and print the .cargo/config.toml fragment to append
/// to a crate's .cargo/config.toml. Only the fragment goes to stdout.
#[derive(clap::Args)]
pub struct Args {
    /// Cross-compile for this target triple (aarch64-unknown-linux-gnu); default: this machine
    #[arg(long, value_name = "TRIPLE")]
    target: Option<String>,
    /// Install under this directory (one folder per target triple) instead of
    /// TARGET_FOLDER/ort/VERSION (the workspace's target folder, as `cargo metadata` tells)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    print!("{}", provision(args.target.as_deref(), args.dir)?);
    Ok(ExitCode::SUCCESS)
}

/// Installs everything for building for `target` (default: the host) under `dir` and returns
/// the config fragment.
pub fn provision(target: Option<&str>, dir: Option<PathBuf>) -> Result<String> {
    let root = match dir {
        Some(dir) => dir,
        None => ort::default_lib_dir()?,
    };
    // The paths go into other crates' config files: make them absolute.
    let root = std::path::absolute(&root)
        .with_context(|| format!("making {} absolute", root.display()))?;
    let host = Platform::host().context(
        "setup-ort installs ONNX Runtime from PyPI's wheels on Linux x86-64 and aarch64 hosts \
         only; elsewhere use ort's default download (no set-up needed) or set ORT_LIB_PATH",
    )?;
    for var in ["ORT_LIB_PATH", "ORT_DYLIB_PATH"] {
        if let Some(value) = std::env::var_os(var) {
            eprintln!(
                "xtask: warning: {var}={} is set in this environment; cargo's [env] table does \
                 not override it, so unset it where you build with the fragment",
                value.to_string_lossy()
            );
        }
    }
    let host_dir = ort::install(host, &root)?;
    let target = match target {
        Some(triple) if triple != host.triple => {
            let platform = Platform::of(triple)?;
            let dir = ort::install(platform, &root)?;
            cross::provision(platform)?;
            Some((platform, dir))
        }
        _ => None,
    };
    eprintln!("xtask: append this to your crate's .cargo/config.toml:");
    Ok(cross::config_fragment(
        &host_dir,
        target.as_ref().map(|(p, d)| (*p, d.as_path())),
    ))
}
