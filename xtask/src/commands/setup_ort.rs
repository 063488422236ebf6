//! `cargo xtask setup-ort`: install ONNX Runtime and print how to use it with plain cargo.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::ort::{self, OrtEnv};

/// Fetch ONNX Runtime (Linux x86-64, from the PyPI wheel) and print the variables for cargo
#[derive(clap::Args)]
pub struct Args {
    /// Install into this directory instead of WORKSPACE/target/ort/VERSION
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let lib_dir = args
        .dir
        .unwrap_or_else(|| ort::default_lib_dir(&crate::workspace_root()));
    match ort::ensure(&lib_dir)? {
        OrtEnv::Managed { lib_dir } => {
            let dir = shell_quote(&lib_dir.to_string_lossy());
            eprintln!("xtask: to use it with plain cargo:");
            println!("export ORT_LIB_PATH={dir}");
            println!("export ORT_PREFER_DYNAMIC_LINK=1");
            println!("export LD_LIBRARY_PATH={dir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}");
        }
        OrtEnv::User { var, value } => {
            eprintln!(
                "xtask: {var}={} is set in the environment; using that ONNX Runtime, nothing to do",
                value.to_string_lossy()
            );
        }
        OrtEnv::Unmanaged => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Quotes `s` for POSIX shells when it needs it.
fn shell_quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:,@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}
