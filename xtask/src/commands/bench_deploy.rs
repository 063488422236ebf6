//! The deployment costs of `kenosis-runtime`'s ways to ship ONNX Runtime: `examples/classify`
//! built for this machine (x86-64) and for aarch64 (run under `qemu-aarch64`), each linking
//! ONNX Runtime dynamically, embedding it (`bundled-ort-uncompressed`) and embedding it
//! compressed (`bundled-ort`), each with cargo's default release settings and with the
//! README's small-binary settings ([`SMALL`]). Each binary is measured for file size, time to
//! the first inference (process start to the INT8 logits printed, ONNX Runtime load and
//! session creation included) and peak resident memory. Written to `target/bench/deploy.md`
//! and to the `deploy` section of `docs/benchmarks.md`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::ort::{OrtEnv, LIB_FILE};

/// Process starts per binary, interleaved over the binaries; the medians are reported.
const STARTS: usize = 7;

/// The README's small-binary release settings, as `cargo --config` values.
const SMALL: [&str; 5] = [
    "profile.release.strip=true",
    "profile.release.lto=true",
    "profile.release.codegen-units=1",
    "profile.release.panic=\"abort\"",
    "profile.release.opt-level=\"s\"",
];

/// Target: `bundled-ort`'s first inference on this machine at most this much after the linked
/// binary's (ms).
const MAX_EXTRA_MS: f64 = 100.0;
/// Target: `bundled-ort`'s peak resident memory on this machine (MiB), the uncompressed
/// bundle's before compression.
const MAX_PEAK_MIB: f64 = 48.0;
/// Target: the device's `bundled-ort` binary with the small-binary settings (MiB).
const MAX_DEVICE_MIB: f64 = 16.0;

/// The cross target measured under qemu.
const CROSS: &str = "aarch64-unknown-linux-gnu";

/// How the binary gets ONNX Runtime.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shipping {
    /// Linked dynamically: the library ships next to the binary.
    Linked,
    /// `bundled-ort-uncompressed`.
    Bundled,
    /// `bundled-ort`: zstd frames.
    Compressed,
}

impl Shipping {
    const ALL: [Shipping; 3] = [Shipping::Linked, Shipping::Bundled, Shipping::Compressed];

    fn feature(self) -> Option<&'static str> {
        match self {
            Shipping::Linked => None,
            Shipping::Bundled => Some("bundled-ort-uncompressed"),
            Shipping::Compressed => Some("bundled-ort"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Shipping::Linked => "linked",
            Shipping::Bundled => "`bundled-ort-uncompressed`",
            Shipping::Compressed => "`bundled-ort` (zstd)",
        }
    }
}

/// One binary of the table.
struct Row {
    shipping: Shipping,
    small: bool,
    binary: PathBuf,
    times: Vec<Duration>,
    cpu: Vec<Duration>,
    peaks_kib: Vec<u64>,
}

/// Where one target's binaries are built and how they run.
struct Target {
    /// `None`: this machine.
    triple: Option<&'static str>,
    /// The `.cargo/config.toml` fragment for the cross build.
    config: Option<PathBuf>,
    /// The library a linked binary loads.
    lib_dir: PathBuf,
}

/// Builds every binary, measures them and writes the markdown section into `out`.
pub fn run(ort: &OrtEnv, out: &Path) -> Result<()> {
    let OrtEnv::Managed { lib_dir } = ort else {
        bail!("the deployment bench needs the managed ONNX Runtime (ORT_LIB_PATH unset)");
    };
    let root = crate::workspace_root();
    let target_dir = crate::cargo::target_dir()?.join("bench-deploy");
    let image = root.join("examples/classify/images/n07873807_pizza.JPEG");
    let host = Target {
        triple: None,
        config: None,
        lib_dir: lib_dir.clone(),
    };
    let cross = cross_target(&target_dir)?;
    let cpuinfo = root.join("tests/fixtures/aarch64-cpuinfo.txt");
    let mut text = format!(
        "## Deployment: how ONNX Runtime ships with the binary\n\n\
         `examples/classify` (EfficientNet-Lite0 INT8 embedded) built in release, linking ONNX \
         Runtime ({LIB_FILE}, shipped next to the binary), embedding it \
         (`bundled-ort-uncompressed`) or embedding it compressed (`bundled-ort`, the default), \
         each with cargo's default release settings and with the README's small-binary \
         settings (`strip`, `lto`, `codegen-units = 1`, `panic = \"abort\"`, \
         `opt-level = \"s\"`). `classify --logits IMAGE` started {STARTS} times per binary, \
         interleaved, medians. Time to the first inference runs from process start to the \
         printed logits: loading ONNX Runtime, creating the session and one inference. \
         Load average {:.1} before.\n\n",
        load_average()
    );
    for (target, what) in [
        (Some(&host), format!("x86-64, run on {}", cpu_name())),
        (
            cross.as_ref(),
            format!(
                "aarch64, run under qemu-aarch64 (user mode, emulating the CPU of \
                 `tests/fixtures/aarch64-cpuinfo.txt`) on {}: times and memory are the \
                 emulator's, not a device's; sizes are the device's",
                cpu_name()
            ),
        ),
    ] {
        let Some(target) = target else {
            text.push_str(&format!("No aarch64 rows: {what}\n\n"));
            continue;
        };
        let mut rows = Vec::new();
        for small in [false, true] {
            for shipping in Shipping::ALL {
                let binary = build(ort, target, &target_dir, shipping, small)?;
                rows.push(Row {
                    shipping,
                    small,
                    binary,
                    times: Vec::new(),
                    cpu: Vec::new(),
                    peaks_kib: Vec::new(),
                });
            }
        }
        for _ in 0..STARTS {
            for row in &mut rows {
                let mut cmd = match target.triple {
                    None => Command::new(&row.binary),
                    Some(_) => qemu(&row.binary, &cpuinfo),
                };
                cmd.env_remove("LD_LIBRARY_PATH");
                if row.shipping == Shipping::Linked {
                    cmd.env("LD_LIBRARY_PATH", &target.lib_dir);
                }
                let (time, cpu, peak) = start(cmd, &image)?;
                row.times.push(time);
                row.cpu.push(cpu);
                row.peaks_kib.push(peak);
            }
        }
        let library = std::fs::metadata(target.lib_dir.join(LIB_FILE))?.len();
        text.push_str(&table(&what, &mut rows, library, target.triple.is_none())?);
    }
    crate::docs::publish(out, "deploy", &text)
}

/// The aarch64 build set-up (as `cargo xtask setup-ort --target` makes it), or `None` when it
/// cannot be had here (not an x86-64 Linux host, or no root for the cross tools).
fn cross_target(target_dir: &Path) -> Result<Option<Target>> {
    if crate::ort::Platform::host().is_none_or(|h| h.triple != "x86_64-unknown-linux-gnu") {
        return Ok(None);
    }
    let fragment = match crate::commands::setup_ort::provision(Some(CROSS), None) {
        Ok(fragment) => fragment,
        Err(e) => {
            eprintln!("xtask: warning: no aarch64 rows: {e:#}");
            return Ok(None);
        }
    };
    std::fs::create_dir_all(target_dir)?;
    let config = target_dir.join(format!("{CROSS}.cargo-config.toml"));
    std::fs::write(&config, fragment)?;
    let lib_dir = crate::ort::Platform::of(CROSS)?.lib_dir(&crate::ort::default_lib_dir()?);
    Ok(Some(Target {
        triple: Some(CROSS),
        config: Some(config),
        lib_dir,
    }))
}

/// `cargo build --release -p classify` for `target` as `shipping` says (with [`SMALL`] when
/// `small`), copied out of `target_dir` under a name of its own.
fn build(
    ort: &OrtEnv,
    target: &Target,
    target_dir: &Path,
    shipping: Shipping,
    small: bool,
) -> Result<PathBuf> {
    let mut cmd = crate::cargo::command(ort);
    cmd.args(["build", "--quiet", "--release", "-p", "classify"])
        .env("CARGO_TARGET_DIR", target_dir);
    if let Some(feature) = shipping.feature() {
        cmd.args(["--features", feature]);
    }
    if small {
        for setting in SMALL {
            cmd.args(["--config", setting]);
        }
    }
    let release = match (target.triple, &target.config) {
        (Some(triple), Some(config)) => {
            // Only the fragment speaks, as for a user's cross build.
            for var in [
                "ORT_LIB_PATH",
                "ORT_DYLIB_PATH",
                "ORT_PREFER_DYNAMIC_LINK",
                "LD_LIBRARY_PATH",
            ] {
                cmd.env_remove(var);
            }
            cmd.args(["--target", triple]).arg("--config").arg(config);
            target_dir.join(triple).join("release")
        }
        _ => target_dir.join("release"),
    };
    let status = cmd.status().context("starting cargo")?;
    if !status.success() {
        bail!(
            "building classify for {} ({}, small: {small}) failed: {status}",
            target.triple.unwrap_or("this machine"),
            shipping.label()
        );
    }
    let name = format!(
        "classify-{}-{}{}",
        target.triple.unwrap_or("host"),
        shipping.feature().unwrap_or("linked"),
        if small { "-small" } else { "" }
    );
    let copy = target_dir.join(name);
    std::fs::copy(release.join("classify"), &copy)?;
    Ok(copy)
}

/// `binary` under qemu-aarch64 in a private mount namespace with `cpuinfo` bound over
/// `/proc/cpuinfo` (ONNX Runtime's CPU detection crashes on the host's), as the edge tests run
/// it. `unshare` and `sh` exec into qemu: the measured process is the emulator.
fn qemu(binary: &Path, cpuinfo: &Path) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.arg("-m").arg("sh").arg("-c").arg(format!(
        "mount --bind '{}' /proc/cpuinfo && exec qemu-aarch64 -L /usr/aarch64-linux-gnu \"$0\" \"$@\"",
        cpuinfo.display()
    ));
    cmd.arg(binary);
    cmd
}

/// Starts `cmd --logits image` once: its time to exit, CPU time (user and system) and peak
/// resident memory (KiB).
fn start(mut cmd: Command, image: &Path) -> Result<(Duration, Duration, u64)> {
    cmd.arg("--logits").arg(image).stdout(Stdio::null());
    let started = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let (status, cpu, peak) = wait_with_usage(&mut child)?;
    let time = started.elapsed();
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok((time, cpu, peak))
}

/// The markdown table of `rows` (their medians), with the first-inference time against the
/// linked binary of the same settings.
/// Below it, the targets for `bundled-ort`: on this machine (`host`), the first
/// inference at most [`MAX_EXTRA_MS`] after the linked binary's and peak memory at most
/// [`MAX_PEAK_MIB`]; for the device, the small-settings binary at most [`MAX_DEVICE_MIB`].
fn table(what: &str, rows: &mut [Row], library: u64, host: bool) -> Result<String> {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let median_ms = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2].as_secs_f64() * 1e3
    };
    let mut medians = Vec::new();
    for row in rows.iter_mut() {
        let ms = median_ms(&mut row.times);
        let cpu = median_ms(&mut row.cpu);
        row.peaks_kib.sort_unstable();
        let peak = row.peaks_kib[row.peaks_kib.len() / 2] as f64 / 1024.0;
        medians.push((ms, cpu, peak));
    }
    let mut text = format!(
        "{what}.\n\n\
         | binary | settings | files to ship | size | first inference | vs linked | CPU time | vs linked | peak resident memory |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|\n"
    );
    for (i, row) in rows.iter().enumerate() {
        let size = std::fs::metadata(&row.binary)?.len();
        let linked = rows
            .iter()
            .position(|r| r.small == row.small && r.shipping == Shipping::Linked)
            .map_or(medians[i], |j| medians[j]);
        let (ms, cpu, peak) = medians[i];
        let (files, size) = match row.shipping {
            Shipping::Linked => (
                format!("binary + `{LIB_FILE}`"),
                format!("{:.1} + {:.1} MiB", mib(size), mib(library)),
            ),
            _ => ("binary".to_owned(), format!("{:.1} MiB", mib(size))),
        };
        let vs = |value: f64, base: f64| {
            if row.shipping == Shipping::Linked {
                String::new()
            } else {
                format!("{:+.0} ms", value - base)
            }
        };
        let (vs_ms, vs_cpu) = (vs(ms, linked.0), vs(cpu, linked.1));
        text.push_str(&format!(
            "| {} | {} | {files} | {size} | {ms:.0} ms | {vs_ms} | {cpu:.0} ms | {vs_cpu} | {peak:.0} MiB |\n",
            row.shipping.label(),
            if row.small { "small" } else { "default" },
        ));
    }
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    for (i, row) in rows.iter().enumerate() {
        if row.shipping != Shipping::Compressed {
            continue;
        }
        let settings = if row.small { "small" } else { "default" };
        if host {
            let linked = rows
                .iter()
                .position(|r| r.small == row.small && r.shipping == Shipping::Linked)
                .map_or(medians[i], |j| medians[j]);
            let (ms, cpu, peak) = medians[i];
            text.push_str(&format!(
                "\n\n`bundled-ort`, {settings} settings: first inference {:+.0} ms wall, {:+.0} ms \
                 CPU against linked (target ≤ +{MAX_EXTRA_MS:.0} ms: {} on wall time); peak \
                 memory {peak:.0} MiB (target ≤ {MAX_PEAK_MIB:.0} MiB: {}).",
                ms - linked.0,
                cpu - linked.1,
                verdict(ms - linked.0 <= MAX_EXTRA_MS),
                verdict(peak.round() <= MAX_PEAK_MIB),
            ));
        } else if row.small {
            let size = mib(std::fs::metadata(&row.binary)?.len());
            text.push_str(&format!(
                "\n\n`bundled-ort`, small settings: {size:.1} MiB (target ≤ \
                 {MAX_DEVICE_MIB:.0} MiB: {}).",
                verdict(size <= MAX_DEVICE_MIB)
            ));
        }
    }
    text.push_str("\n\n");
    Ok(text)
}

/// The first `model name` of `/proc/cpuinfo`, with the core count.
pub(crate) fn cpu_name() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let name = info
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split(':').nth(1))
        })
        .map_or("an unnamed CPU", str::trim)
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{name} ({cores} cores)")
}

/// The one-minute load average, or 0 when `/proc/loadavg` cannot be read.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Waits for `child` and returns its status, CPU time (`wait4`'s `ru_utime` + `ru_stime`)
/// and peak resident set (KiB, `ru_maxrss`).
fn wait_with_usage(
    child: &mut std::process::Child,
) -> Result<(std::process::ExitStatus, Duration, u64)> {
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
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    let cpu = time(usage.ru_utime) + time(usage.ru_stime);
    Ok((std::process::ExitStatus::from_raw(status), cpu, peak))
}
