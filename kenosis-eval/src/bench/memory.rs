//! Peak memory while quantizing: the bench runs itself as a child process that quantizes one
//! model (with the bench's own calibration samples, or synthetic ones) and reports its peak
//! resident set (`VmHWM` in `/proc/self/status`, Linux), so that neither the bench's own
//! allocations nor earlier models count.
//!
//! The bound (issue 54): peak memory ≤ [`TARGET_RATIO`] times the FP32 file plus ONNX
//! Runtime, where "ONNX Runtime" is the peak resident set of another child, measured in the
//! same run, that loads ONNX Runtime and creates a session of the FP32 model (and does
//! nothing else): the memory any program running that model needs anyway.

use std::path::{Path, PathBuf};
use std::process::Command;

use kenosis_quantize::onnx::decode;
use kenosis_quantize::pipeline::quantize_decoded;
use kenosis_quantize::{Calibration, QuantizeOptions};
use ndarray::Array4;
use serde::Serialize;

/// Flag that turns the bench binary into the measuring child.
pub const CHILD_FLAG: &str = "--peak-rss-child";

/// Flag that turns the bench binary into the baseline child: ONNX Runtime and one FP32
/// session.
pub const BASELINE_FLAG: &str = "--ort-baseline-child";

/// The bound: peak RSS under this many times the model file's size, plus ONNX
/// Runtime's baseline.
pub const TARGET_RATIO: f64 = 4.0;

/// One model's peak memory while quantizing.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryResult {
    /// Model file name.
    pub model: String,
    /// Model file size, MB (10^6 bytes).
    pub file_mb: f64,
    /// Calibration samples.
    pub samples: usize,
    /// What they were: `real` (the bench's, read from `.npy` files as a build script's
    /// `calibration` folder is) or `synthetic`.
    pub calibration: &'static str,
    /// Size of the calibration samples as float32, MB; `None` for synthetic ones.
    pub calibration_mb: Option<f64>,
    /// Peak resident set of the quantizing process, MB (10^6 bytes); includes the ONNX
    /// Runtime library and its sessions.
    pub peak_rss_mb: Option<f64>,
    /// `peak_rss_mb / file_mb`.
    pub ratio: Option<f64>,
    /// [`TARGET_RATIO`].
    pub target_ratio: f64,
    /// Peak resident set of a process that loaded ONNX Runtime and created a session of the
    /// FP32 model, MB.
    pub ort_baseline_mb: Option<f64>,
    /// The bound: `target_ratio * file_mb + ort_baseline_mb`.
    pub bound_mb: Option<f64>,
    /// Whether `peak_rss_mb <= bound_mb`.
    pub met: Option<bool>,
    /// Why there is no measurement, when there is none.
    pub error: Option<String>,
}

/// How the measuring child calibrates.
pub enum Samples<'a> {
    /// `n` synthetic samples.
    Synthetic(usize),
    /// These single-input samples (written as `.npy` files the child reads as
    /// [`Calibration::NpyDir`]).
    Real(&'a [Array4<f32>]),
}

/// Quantizes `model` in a child process calibrated on `samples`, reads its peak RSS, and
/// measures the ONNX Runtime baseline in another. A missing model is reported in `error`,
/// not measured.
pub fn measure(model: &Path, samples: Samples) -> MemoryResult {
    let file_mb = std::fs::metadata(model).map_or(0.0, |m| m.len() as f64 / 1e6);
    let (count, calibration, calibration_mb) = match &samples {
        Samples::Synthetic(n) => (*n, "synthetic", None),
        Samples::Real(s) => (
            s.len(),
            "real",
            Some(s.iter().map(|x| x.len() * 4).sum::<usize>() as f64 / 1e6),
        ),
    };
    let measured = if model.is_file() {
        run_child(model, &samples).and_then(|peak| Ok((peak, run_baseline(model)?)))
    } else {
        Err(format!(
            "{} not found: `cargo xtask bench` fetches it with ../shared/fetch-models.sh",
            model.display()
        ))
    };
    let (peak, baseline) = match &measured {
        Ok((p, b)) => (Some(*p), Some(*b)),
        Err(_) => (None, None),
    };
    let bound = baseline.map(|b| TARGET_RATIO * file_mb + b);
    MemoryResult {
        model: model
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        file_mb,
        samples: count,
        calibration,
        calibration_mb,
        peak_rss_mb: peak,
        ratio: peak.map(|p| p / file_mb),
        target_ratio: TARGET_RATIO,
        ort_baseline_mb: baseline,
        bound_mb: bound,
        met: peak.zip(bound).map(|(p, b)| p <= b),
        error: measured.err(),
    }
}

/// Runs the bench binary with `args`, returning the `peak_rss_kib=` line's value in MB.
fn child_peak(args: &[&std::ffi::OsStr]) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let out = Command::new(exe)
        .args(args)
        .output()
        .map_err(|e| format!("starting the measuring child: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "the measuring child failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("peak_rss_kib="))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|kib| kib * 1024.0 / 1e6)
        .ok_or_else(|| format!("no peak_rss_kib line in the child's output: {stdout}"))
}

fn run_baseline(model: &Path) -> Result<f64, String> {
    child_peak(&[BASELINE_FLAG.as_ref(), model.as_os_str()])
}

fn run_child(model: &Path, samples: &Samples) -> Result<f64, String> {
    match samples {
        Samples::Synthetic(n) => child_peak(&[
            CHILD_FLAG.as_ref(),
            model.as_os_str(),
            n.to_string().as_ref(),
        ]),
        Samples::Real(xs) => {
            let dir = tempfile::tempdir().map_err(|e| format!("temporary folder: {e}"))?;
            for (i, x) in xs.iter().enumerate() {
                let p = dir.path().join(format!("sample_{i:04}.npy"));
                ndarray_npy::write_npy(&p, x).map_err(|e| format!("{}: {e}", p.display()))?;
            }
            child_peak(&[
                CHILD_FLAG.as_ref(),
                model.as_os_str(),
                xs.len().to_string().as_ref(),
                dir.path().as_os_str(),
            ])
        }
    }
}

/// The `VmHWM` of this process, KiB.
fn peak_kib() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| "no VmHWM in /proc/self/status".to_owned())
}

/// The baseline child's side: `<bench> --ort-baseline-child <model.onnx>`. Loads ONNX
/// Runtime, creates a session of the model (1 intra-op thread, all optimizations, as the
/// bench times it), and prints `peak_rss_kib=<VmHWM>`.
pub fn baseline_child(args: &[String]) -> Result<(), String> {
    let [model] = args else {
        return Err(format!("usage: bench {BASELINE_FLAG} <model.onnx>"));
    };
    let bytes = std::fs::read(model).map_err(|e| format!("{model}: {e}"))?;
    let session = super::measure::session(&bytes, None)?;
    drop(bytes);
    println!("peak_rss_kib={}", peak_kib()?);
    drop(session);
    Ok(())
}

/// The child's side: `<bench> --peak-rss-child <model.onnx> <samples> [<npy folder>]`.
/// Reads and decodes the model, drops the file's bytes as a build script does, quantizes
/// (default options; calibrated on the folder's `.npy` files, else on `samples` synthetic
/// samples), and prints `peak_rss_kib=<VmHWM>`.
pub fn child(args: &[String]) -> Result<(), String> {
    let (model, samples, folder) = match args {
        [m, s] => (m, s, None),
        [m, s, f] => (m, s, Some(f)),
        _ => {
            return Err(format!(
                "usage: bench {CHILD_FLAG} <model.onnx> <samples> [<npy folder>]"
            ))
        }
    };
    let path = PathBuf::from(model);
    let samples: usize = samples
        .parse()
        .map_err(|e| format!("samples {samples:?}: {e}"))?;
    let bytes = std::fs::read(&path).map_err(|e| format!("{model}: {e}"))?;
    let decoded = decode(&path, &bytes).map_err(|e| e.to_string())?;
    let size = bytes.len();
    drop(bytes);
    let options = QuantizeOptions {
        synthetic_samples: samples,
        ..Default::default()
    };
    let calibration = match folder {
        Some(f) => Calibration::NpyDir(PathBuf::from(f)),
        None => Calibration::Synthetic,
    };
    quantize_decoded(&path, decoded, size, &calibration, &options).map_err(|e| e.to_string())?;
    println!("peak_rss_kib={}", peak_kib()?);
    Ok(())
}
