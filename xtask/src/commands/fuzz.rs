//! `cargo xtask fuzz [--seconds N]`: runs the `cargo fuzz` target `quantize_offline`
//! (`fuzz/`) for a bounded time, with a seed corpus of the test fixtures and the small shared
//! models. Needs a nightly toolchain (libFuzzer's sanitizer flags); installs `cargo-fuzz`
//! when it is missing. Not part of CI: crashes it finds are fixed and kept as unit tests.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};

use crate::ort;

/// The fuzz target (see `fuzz/fuzz_targets/`).
const TARGET: &str = "quantize_offline";
/// Shared models larger than this are left out of the seed corpus: libFuzzer mutates whole
/// inputs, and a multi-megabyte seed costs seconds per execution.
const MAX_SEED_BYTES: u64 = 6_000_000;

/// Fuzz model loading and quantization (decode, normalize, plan, rewrite) for a bounded time
#[derive(clap::Args)]
pub struct Args {
    /// How long to fuzz, in seconds
    #[arg(long, default_value_t = 300)]
    seconds: u64,
    /// Parallel fuzzing jobs
    #[arg(long, default_value_t = 1)]
    jobs: usize,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let root = crate::workspace_root();
    let ort = ort::ensure(&ort::default_lib_dir(&root))?;
    ensure_cargo_fuzz()?;
    let corpus = root.join("fuzz").join("corpus").join(TARGET);
    seed_corpus(&root, &corpus)?;
    // The rustup proxy, not `$CARGO`: `+nightly` selects the toolchain.
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root.join("fuzz"))
        .envs(ort.vars())
        .args(["+nightly", "fuzz", "run", TARGET])
        .arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={}", args.seconds))
        // One input may take a while (a real model through BatchNorm folding), but never long.
        .arg("-timeout=20")
        .arg("-rss_limit_mb=4096");
    if args.jobs > 1 {
        // libFuzzer's fork mode; each job logs to `fuzz/fuzz-<n>.log`.
        cmd.arg(format!("-jobs={}", args.jobs))
            .arg(format!("-workers={}", args.jobs));
    }
    crate::cargo::run(cmd)
}

fn ensure_cargo_fuzz() -> Result<()> {
    let present = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz");
    let status = Command::new("cargo")
        .args(["install", "cargo-fuzz", "--locked"])
        .status()
        .context("starting `cargo install cargo-fuzz`")?;
    if !status.success() {
        bail!("`cargo install cargo-fuzz` failed: {status}");
    }
    Ok(())
}

/// Copies the ONNX fixtures and the shared models up to [`MAX_SEED_BYTES`] into `corpus`.
fn seed_corpus(root: &Path, corpus: &Path) -> Result<()> {
    std::fs::create_dir_all(corpus).with_context(|| format!("creating {}", corpus.display()))?;
    let shared_models = super::test::check_shared_dir()?.map(|d| d.join("models"));
    let mut seeds = 0;
    let fixtures = ["tests/fixtures/tiny", "tests/fixtures/onnx-zoo"].map(|d| root.join(d));
    for dir in fixtures.into_iter().chain(shared_models) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.flatten().map(|e| e.path()) {
            let small = path.metadata().is_ok_and(|m| m.len() <= MAX_SEED_BYTES);
            if path.extension().is_some_and(|x| x == "onnx") && small {
                let name = path.file_name().expect("a file");
                std::fs::copy(&path, corpus.join(name))
                    .with_context(|| format!("copying {}", path.display()))?;
                seeds += 1;
            }
        }
    }
    eprintln!("xtask: {seeds} seed models in {}", corpus.display());
    Ok(())
}
