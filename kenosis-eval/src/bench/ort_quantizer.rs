//! The comparison column: ONNX Runtime's Python `quantize_static`, run by
//! `bench/ort_quantize.py` in the venv `cargo xtask bench` prepares.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use ndarray::Array4;
use serde::Deserialize;

/// The settings the script uses, for the report.
pub const SETTINGS: &str =
    "onnxruntime.quantization.quantize_static 1.31.1: QDQ, per_channel=True, \
    reduce_range=True, activations QUInt8, weights QInt8, MinMax calibration, on the same \
    calibration samples; models below opset 13 converted with onnx.version_converter first; \
    quant_pre_process (ORT's recommended pre-processing) applied when it succeeds";

/// The Python helper, next to this crate's manifest.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/ort_quantize.py")
}

/// What the script printed.
#[derive(Debug, Deserialize)]
struct ScriptResult {
    ok: bool,
    seconds: f64,
    #[serde(default)]
    steps: Vec<String>,
    error: Option<String>,
}

/// A successful ORT quantization.
pub struct OrtQuantized {
    pub bytes: Vec<u8>,
    /// Wall time of conversion + pre-processing + `quantize_static`, measured in Python
    /// (interpreter start-up and imports excluded).
    pub seconds: f64,
    /// Wall time of the whole Python process, start-up included.
    pub process_seconds: f64,
    /// What the script did, in order.
    pub steps: Vec<String>,
}

/// A failed one: the error and the steps done before it.
pub struct OrtFailure {
    pub error: String,
    pub steps: Vec<String>,
}

/// Quantizes `model` with ORT's quantizer on `calibration` (written as `.npy` files into a
/// temporary folder), writing the result to `out`.
pub fn quantize(
    python: &Path,
    model: &Path,
    calibration: &[Array4<f32>],
    out: &Path,
) -> Result<OrtQuantized, OrtFailure> {
    let fail = |error: String| OrtFailure {
        error,
        steps: Vec::new(),
    };
    let dir = tempfile::tempdir().map_err(|e| fail(format!("temporary folder: {e}")))?;
    for (i, x) in calibration.iter().enumerate() {
        let p = dir.path().join(format!("sample_{i:04}.npy"));
        ndarray_npy::write_npy(&p, x).map_err(|e| fail(format!("{}: {e}", p.display())))?;
    }
    let started = Instant::now();
    let output = Command::new(python)
        .arg(script())
        .arg("--model")
        .arg(model)
        .arg("--calib-dir")
        .arg(dir.path())
        .arg("--out")
        .arg(out)
        .output()
        .map_err(|e| fail(format!("starting {}: {e}", python.display())))?;
    let process_seconds = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let parsed = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<ScriptResult>(l).ok());
    let Some(result) = parsed else {
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(fail(format!(
            "ort_quantize.py exited with {} and no result; stderr:\n{}",
            output.status,
            tail.join("\n")
        )));
    };
    if !result.ok {
        return Err(OrtFailure {
            error: result.error.unwrap_or_else(|| "unknown error".into()),
            steps: result.steps,
        });
    }
    let bytes = std::fs::read(out).map_err(|e| OrtFailure {
        error: format!("{}: {e}", out.display()),
        steps: result.steps.clone(),
    })?;
    Ok(OrtQuantized {
        bytes,
        seconds: result.seconds,
        process_seconds,
        steps: result.steps,
    })
}
