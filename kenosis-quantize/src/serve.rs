//! The quantizer's side of a build's [`Request`]: what `kenosis build-request` runs, and what
//! a build script linking the quantizer (feature `quantizer`) calls in process.

use crate::cache::write_atomic;
use crate::error::{Error, Result};
use crate::kernel_costs::KernelCosts;
use crate::pipeline::{self, Calibration};
use crate::request::{CalibrationSource, Request};
use crate::{kernel_bench, onnx};

/// Quantizes the model of `request` as `Config::compile` resolved it, writes the artifact to
/// `request.artifact` and its report (JSON, `source` and `key` from the request) to
/// `request.report`, each atomically; returns the report's summary line.
///
/// Where the options ask for kernel costs measured on this machine
/// ([`crate::options::QuantizeOptions::kernel_costs_cpu`]), they are read from, or measured
/// into, `request.cache_dir` first (see `kernel_bench::cached`); a request naming a device
/// profile prices with the profile's costs instead (`Request::quantize_options`).
///
/// # Errors
/// Any [`Error`] of quantization (invalid or unsupported model, bad calibration data, ONNX
/// Runtime failures, targets not met), naming the model; [`Error::Io`] when a file cannot be
/// read or written.
pub fn serve(request: &Request) -> Result<String> {
    let path = &request.model;
    let mut options = request.quantize_options()?;
    options.check()?;
    // A device profile's costs came with the options; costs for this machine are measured.
    if options.kernel_costs_cpu.is_some() && options.measured_costs.is_none() {
        let table = KernelCosts::of(options.target_cpu);
        options.measured_costs =
            Some(kernel_bench::cached(&request.cache_dir, &table, path)?.costs);
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let size_fp32 = bytes.len();
    let decoded = onnx::decode(path, &bytes)?;
    drop(bytes);
    let calibration = match &request.calibration {
        Some(CalibrationSource::Npy { dir }) => Calibration::NpyDir(dir.clone()),
        Some(CalibrationSource::Images { dir, preprocess }) => Calibration::Images {
            dir: dir.clone(),
            preprocess: preprocess.parse().map_err(|e| {
                Error::Config(format!(
                    "the build's preprocessing spec `{preprocess}`: {e}"
                ))
            })?,
        },
        Some(CalibrationSource::Text {
            path,
            tokenizer,
            max_len,
        }) => Calibration::Text {
            path: path.clone(),
            tokenizer: tokenizer.clone(),
            max_len: *max_len,
        },
        None => Calibration::Synthetic,
    };
    let mut quantized =
        pipeline::quantize_decoded(path, decoded, size_fp32, &calibration, &options)?;
    quantized.report.source = request.source.clone();
    quantized.report.key = request.key.clone();
    let report = serde_json::to_vec_pretty(&quantized.report)
        .map_err(|e| Error::Config(format!("the report does not serialize: {e}")))?;
    write_atomic(&request.artifact, &quantized.bytes)?;
    write_atomic(&request.report, &report)?;
    Ok(quantized.report.summary_line())
}
