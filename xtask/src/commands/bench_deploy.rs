//! The deployment costs of `kenosis-runtime`'s `bundled-ort` feature: `examples/classify`
//! built twice for this machine, linking ONNX Runtime dynamically and embedding it, then
//! measured for binary size, time to the first inference (process start to the INT8 logits
//! printed, ONNX Runtime load and session creation included) and peak resident memory.
//! Written to `target/bench/deploy.md` and to the `deploy` section of `docs/benchmarks.md`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::ort::{OrtEnv, LIB_FILE};

/// Process starts per binary; the medians are reported.
const STARTS: usize = 7;

/// One binary's measurements.
struct Measured {
    size: u64,
    first_inference: Duration,
    peak_rss_kib: u64,
}

/// Builds both binaries, measures them and writes the markdown section into `out`.
pub fn run(ort: &OrtEnv, out: &Path) -> Result<()> {
    let OrtEnv::Managed { lib_dir } = ort else {
        bail!("the deployment bench needs the managed ONNX Runtime (ORT_LIB_PATH unset)");
    };
    let root = crate::workspace_root();
    let image = root.join("examples/classify/images/n07873807_pizza.JPEG");
    let dynamic = build(ort, false)?;
    let bundled = build(ort, true)?;
    let library = std::fs::metadata(lib_dir.join(LIB_FILE))?.len();
    // The dynamic binary finds ONNX Runtime through the loader's path, the bundled one alone.
    let dynamic = measure(&dynamic, &image, Some(lib_dir))?;
    let bundled = measure(&bundled, &image, None)?;

    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let text = format!(
        "## Deployment: one file (`bundled-ort`) against a linked ONNX Runtime\n\n\
         `examples/classify` (EfficientNet-Lite0 INT8 embedded) built for this \
         machine in release; `classify --logits IMAGE` started {STARTS} times, medians. Time \
         to the first inference runs from process start to the printed logits: loading ONNX \
         Runtime, creating the session and one inference.\n\n\
         | binary | files to ship | size | first inference | peak resident memory |\n\
         |---|---|---:|---:|---:|\n\
         | linked (`LD_LIBRARY_PATH`) | binary + `{LIB_FILE}` | {:.1} + {:.1} MiB | {:.0} ms | {:.0} MiB |\n\
         | `bundled-ort` | binary | {:.1} MiB | {:.0} ms | {:.0} MiB |\n",
        mib(dynamic.size),
        mib(library),
        dynamic.first_inference.as_secs_f64() * 1e3,
        dynamic.peak_rss_kib as f64 / 1024.0,
        mib(bundled.size),
        bundled.first_inference.as_secs_f64() * 1e3,
        bundled.peak_rss_kib as f64 / 1024.0,
    );
    crate::docs::publish(out, "deploy", &text)
}

/// `cargo build --release -p classify` (with `bundled-ort` when `bundled`), copied out of the
/// shared target folder.
fn build(ort: &OrtEnv, bundled: bool) -> Result<PathBuf> {
    let target_dir = crate::cargo::target_dir()?.join("bench-deploy");
    let mut cmd = crate::cargo::command(ort);
    cmd.args(["build", "--quiet", "--release", "-p", "classify"])
        .env("CARGO_TARGET_DIR", &target_dir);
    if bundled {
        cmd.args(["--features", "bundled-ort"]);
    }
    let status = cmd.status().context("starting cargo")?;
    if !status.success() {
        bail!("building classify (bundled-ort: {bundled}) failed: {status}");
    }
    let name = if bundled { "bundled" } else { "linked" };
    let copy = target_dir.join(format!("classify-{name}"));
    std::fs::copy(target_dir.join("release/classify"), &copy)?;
    Ok(copy)
}

/// Starts `binary --logits image` [`STARTS`] times.
fn measure(binary: &Path, image: &Path, lib_dir: Option<&PathBuf>) -> Result<Measured> {
    let mut times = Vec::with_capacity(STARTS);
    let mut peaks = Vec::with_capacity(STARTS);
    for _ in 0..STARTS {
        let mut cmd = Command::new(binary);
        cmd.arg("--logits")
            .arg(image)
            .stdout(Stdio::null())
            .env_remove("LD_LIBRARY_PATH");
        if let Some(dir) = lib_dir {
            cmd.env("LD_LIBRARY_PATH", dir);
        }
        let start = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let (status, peak) = wait_with_peak_rss(&mut child)?;
        times.push(start.elapsed());
        if !status.success() {
            bail!("{} --logits failed: {status}", binary.display());
        }
        peaks.push(peak);
    }
    times.sort();
    peaks.sort_unstable();
    Ok(Measured {
        size: std::fs::metadata(binary)?.len(),
        first_inference: times[STARTS / 2],
        peak_rss_kib: peaks[STARTS / 2],
    })
}

/// Waits for `child` and returns its status and peak resident set (KiB, `wait4`'s
/// `ru_maxrss`).
fn wait_with_peak_rss(child: &mut std::process::Child) -> Result<(std::process::ExitStatus, u64)> {
    use std::os::unix::process::ExitStatusExt;
    let pid = libc::pid_t::try_from(child.id()).context("pid")?;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value, and `wait4` writes only into the two
    // pointers it is given, which outlive the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if waited != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let peak = u64::try_from(usage.ru_maxrss).unwrap_or(0);
    Ok((std::process::ExitStatus::from_raw(status), peak))
}
