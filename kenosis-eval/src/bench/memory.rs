//! Peak memory while quantizing: the bench runs itself as a child process that quantizes one
//! model with synthetic calibration and reports its peak resident set (`VmHWM` in
//! `/proc/self/status`, Linux), so that neither the bench's own allocations nor earlier
//! models count.

use std::path::{Path, PathBuf};
use std::process::Command;

use kenosis_build::onnx::decode;
use kenosis_build::pipeline::quantize_decoded;
use kenosis_build::{Calibration, QuantizeOptions};
use serde::Serialize;

/// Flag that turns the bench binary into the measuring child.
pub const CHILD_FLAG: &str = "--peak-rss-child";

/// The bound: peak RSS under this many times the model file's size.
pub const TARGET_RATIO: f64 = 4.0;

/// One model's peak memory while quantizing.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryResult {
    pub model: String,
    /// Model file size, MB (10^6 bytes).
    pub file_mb: f64,
    /// Synthetic calibration samples.
    pub samples: usize,
    /// Peak resident set of the quantizing process, MB (10^6 bytes); includes the ONNX
    /// Runtime library and its sessions.
    pub peak_rss_mb: Option<f64>,
    /// `peak_rss_mb / file_mb`.
    pub ratio: Option<f64>,
    pub target_ratio: f64,
    /// Why there is no measurement, when there is none.
    pub error: Option<String>,
}

/// Quantizes `model` with `samples` synthetic samples in a child process and reads its
/// peak RSS. A missing model is reported in `error`, not measured.
pub fn measure(model: &Path, samples: usize) -> MemoryResult {
    let file_mb = std::fs::metadata(model).map_or(0.0, |m| m.len() as f64 / 1e6);
    let peak = if model.is_file() {
        run_child(model, samples)
    } else {
        Err(format!(
            "{} not found: `cargo xtask bench` fetches it with ../shared/fetch-models.sh",
            model.display()
        ))
    };
    MemoryResult {
        model: model
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        file_mb,
        samples,
        peak_rss_mb: peak.as_ref().ok().copied(),
        ratio: peak.as_ref().ok().map(|p| p / file_mb),
        target_ratio: TARGET_RATIO,
        error: peak.err(),
    }
}

fn run_child(model: &Path, samples: usize) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let out = Command::new(exe)
        .arg(CHILD_FLAG)
        .arg(model)
        .arg(samples.to_string())
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

/// The child's side: `<bench> --peak-rss-child <model.onnx> <samples>`. Reads and decodes
/// the model, drops the file's bytes as a build script does, quantizes, and prints
/// `peak_rss_kib=<VmHWM>`.
pub fn child(args: &[String]) -> Result<(), String> {
    let [model, samples] = args else {
        return Err(format!("usage: bench {CHILD_FLAG} <model.onnx> <samples>"));
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
    quantize_decoded(&path, decoded, size, &Calibration::Synthetic, &options)
        .map_err(|e| e.to_string())?;
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e}"))?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or("no VmHWM in /proc/self/status")?;
    println!("peak_rss_kib={hwm}");
    Ok(())
}
