//! `cargo xtask fuzz [--seconds N] [--target NAME]...`: runs the `cargo fuzz` targets
//! (`fuzz/fuzz_targets/`) one after another, each for a bounded time, from its seed corpus,
//! and fails on the first crash. libFuzzer needs nightly's sanitizer flags: a `nightly`
//! toolchain is used when rustup has one, else the default toolchain with
//! `RUSTC_BOOTSTRAP=1` (machines with one toolchain and no way to fetch another). Installs
//! `cargo-fuzz` when it is missing. `cargo xtask test` runs every target this way after the
//! tests (see [`run_all`]); crashes it finds are fixed and kept as unit tests.
//!
//! Seeds: `quantize_offline` starts from the test fixtures and the small shared models;
//! every other target from the small files committed under `fuzz/seeds/<target>/`. Both are
//! copied into the working corpus `fuzz/corpus/<target>/` (not committed), which libFuzzer
//! grows as it finds new paths.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};

use crate::ort;

/// Every fuzz target (see `fuzz/fuzz_targets/`), in the order they run.
const TARGETS: [&str; 5] = [
    "quantize_offline",
    "external_data",
    "npy_sample",
    "manifest",
    "call_options",
];
/// Shared models larger than this are left out of the seed corpus: libFuzzer mutates whole
/// inputs, and a multi-megabyte seed costs seconds per execution.
const MAX_SEED_BYTES: u64 = 6_000_000;
/// libFuzzer's allocation limit for the targets that read small files (`.npy`, manifest,
/// option text): inputs are at most a few KiB, so an allocation this large can only come
/// from a size the input declares but does not hold.
const SMALL_INPUT_MALLOC_LIMIT_MB: u32 = 256;

/// Fuzz model loading and quantization, `.npy` calibration input, manifest decoding and the
/// `include_quantized!` option grammar, each for a bounded time
#[derive(clap::Args)]
pub struct Args {
    /// How long to fuzz each target, in seconds
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Run only this target (repeatable); default: every target
    #[arg(long = "target", value_parser = clap::builder::PossibleValuesParser::new(TARGETS))]
    targets: Vec<String>,
    /// Parallel fuzzing jobs per target
    #[arg(long, default_value_t = 1)]
    jobs: usize,
}

/// Every target for `seconds` each, one job: what `cargo xtask test` runs.
pub fn run_all(seconds: u64) -> Result<ExitCode> {
    run(Args {
        seconds,
        targets: Vec::new(),
        jobs: 1,
    })
}

pub fn run(args: Args) -> Result<ExitCode> {
    let root = crate::workspace_root();
    let ort = ort::ensure(&ort::default_lib_dir()?)?;
    let toolchain = Toolchain::detect();
    ensure_cargo_fuzz(&toolchain)?;
    let targets: Vec<&str> = if args.targets.is_empty() {
        TARGETS.to_vec()
    } else {
        TARGETS
            .into_iter()
            .filter(|t| args.targets.iter().any(|a| a == t))
            .collect()
    };
    for target in targets {
        let corpus = root.join("fuzz").join("corpus").join(target);
        std::fs::create_dir_all(&corpus)
            .with_context(|| format!("creating {}", corpus.display()))?;
        if target == "quantize_offline" {
            seed_models(&root, &corpus)?;
        } else if target == "external_data" {
            seed_hostile_models(&root, &corpus)?;
        } else {
            seed_committed(&root.join("fuzz").join("seeds").join(target), &corpus)?;
        }
        eprintln!("xtask: fuzzing {target} for {} s", args.seconds);
        let mut cmd = toolchain.cargo();
        cmd.current_dir(root.join("fuzz"))
            .envs(ort.vars())
            .args(["fuzz", "run", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={}", args.seconds))
            // One input may take a while (a real model through BatchNorm folding), but never long.
            .arg("-timeout=20")
            .arg("-rss_limit_mb=4096");
        if target != "quantize_offline" {
            cmd.arg(format!("-malloc_limit_mb={SMALL_INPUT_MALLOC_LIMIT_MB}"));
        }
        if args.jobs > 1 {
            // libFuzzer's fork mode; each job logs to `fuzz/fuzz-<n>.log`.
            cmd.arg(format!("-jobs={}", args.jobs))
                .arg(format!("-workers={}", args.jobs));
        }
        let code = crate::cargo::run(cmd)?;
        if code != ExitCode::SUCCESS {
            eprintln!("xtask: fuzz target {target} failed; its crash input is under fuzz/artifacts/{target}/");
            return Ok(code);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How to get nightly features: a nightly toolchain, or the default one unlocked.
enum Toolchain {
    Nightly,
    Bootstrapped,
}

impl Toolchain {
    fn detect() -> Self {
        let listed = Command::new("rustup")
            .args(["toolchain", "list"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if listed.lines().any(|l| l.starts_with("nightly")) {
            Toolchain::Nightly
        } else {
            eprintln!("xtask: no nightly toolchain; using the default one with RUSTC_BOOTSTRAP=1");
            Toolchain::Bootstrapped
        }
    }

    /// `cargo` on this toolchain. The rustup proxy, not `$CARGO`: `+nightly` selects the
    /// toolchain.
    fn cargo(&self) -> Command {
        let mut cmd = Command::new("cargo");
        match self {
            Toolchain::Nightly => {
                cmd.arg("+nightly");
            }
            Toolchain::Bootstrapped => {
                cmd.env("RUSTC_BOOTSTRAP", "1");
            }
        }
        cmd
    }
}

fn ensure_cargo_fuzz(toolchain: &Toolchain) -> Result<()> {
    // libfuzzer-sys compiles libFuzzer's C++ sources.
    crate::cross::host_tools(&[("c++", "g++")])?;
    let present = toolchain
        .cargo()
        .args(["fuzz", "--version"])
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

/// Copies the committed seeds in `seeds` into `corpus`.
fn seed_committed(seeds: &Path, corpus: &Path) -> Result<()> {
    let mut count = 0;
    for entry in std::fs::read_dir(seeds).with_context(|| format!("reading {}", seeds.display()))? {
        let path = entry?.path();
        if path.is_file() {
            let name = path.file_name().expect("a file");
            std::fs::copy(&path, corpus.join(name))
                .with_context(|| format!("copying {}", path.display()))?;
            count += 1;
        }
    }
    eprintln!("xtask: {count} seeds in {}", corpus.display());
    Ok(())
}

/// Seeds the `external_data` target from the hostile corpus (`kenosis-build/tests/hostile/`):
/// each case's `model.onnx` and its `weights.bin` (empty when it has none), in the target's
/// input layout (a little-endian `u32` model length, the model, the data file).
fn seed_hostile_models(root: &Path, corpus: &Path) -> Result<()> {
    let hostile = root.join("kenosis-build/tests/hostile");
    let mut seeds = 0;
    for case in std::fs::read_dir(&hostile)
        .with_context(|| format!("reading {}", hostile.display()))?
        .flatten()
        .map(|e| e.path())
    {
        let Ok(model) = std::fs::read(case.join("model.onnx")) else {
            continue;
        };
        let weights = std::fs::read(case.join("weights.bin")).unwrap_or_default();
        let mut seed = u32::try_from(model.len())?.to_le_bytes().to_vec();
        seed.extend(model);
        seed.extend(weights);
        let name = case.file_name().expect("a case folder");
        std::fs::write(corpus.join(name), seed)
            .with_context(|| format!("seeding from {}", case.display()))?;
        seeds += 1;
    }
    eprintln!("xtask: {seeds} seeds from {}", hostile.display());
    Ok(())
}

/// Copies the ONNX fixtures and the shared models up to [`MAX_SEED_BYTES`] into `corpus`.
fn seed_models(root: &Path, corpus: &Path) -> Result<()> {
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
