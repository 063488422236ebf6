//! The speed check: the INT8 model's latency against FP32's, measured in the build, and its
//! floor (`min_speedup`, or 1 with the default `speed_check = true`).
//!
//! Quantizing does not make a model faster by itself: each QuantizeLinear and
//! DequantizeLinear costs time, and ONNX Runtime runs its integer kernels in NHWC and its
//! float ones in NCHWc, so layout changes between integer and float regions can cost more
//! than the integer kernels save. Only a measurement says which way a model goes, so the
//! check runs only when the build machine runs the target's code
//! (`QuantizeOptions::host_runs_target`, see `IntegerKernels::timed_here`). Latency depends
//! on the machine's load: the two models run interleaved, one run of each per round, so a
//! change of load touches both, and each latency is the median of its rounds. The time spent
//! is bounded by [`BUDGET_SHARE`] of the quantization's own time (at least [`MIN_RUNS`]
//! rounds, at most [`MAX_RUNS`]).

use std::path::Path;
use std::time::{Duration, Instant};

use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::calibrate::session::{borrowed, sample_inputs, session};
use crate::calibrate::SampleValue;
use crate::error::{Error, Result};
use crate::onnx::ModelProto;

/// The measured latencies, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SpeedReport {
    /// Median FP32 latency, milliseconds (ONNX Runtime, all graph optimizations, 1 thread).
    pub fp32_ms: f64,
    /// Median INT8 latency, milliseconds, measured interleaved with FP32's.
    pub int8_ms: f64,
    /// `fp32_ms / int8_ms`: above 1 when INT8 is faster.
    pub speedup: f64,
    /// The floor asked for (`min_speedup`).
    pub min_speedup: f64,
    /// The INT8 model was slower than the floor (at most 1), so the artifact is the
    /// normalized FP32 model.
    pub kept_fp32: bool,
    /// Placements tried again with conversions priced higher after the first was slower
    /// than the floor; the figures above are the last one's.
    #[serde(default)]
    pub revisions: usize,
}

/// What the `min_speedup` check did, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SpeedCheck {
    /// Both models were timed on the build machine.
    Measured(SpeedReport),
    /// Not timed, and why (the build machine does not run the target's code, or the model
    /// holds an op ONNX Runtime cannot run).
    NotMeasured(String),
}

/// Why a cross build's speed is not measured.
pub const NOT_THE_TARGET: &str =
    "the build machine does not run the target's code (another architecture or other integer kernels)";

/// Interleaved runs of each model, after `WARMUP_RUNS`: at least [`MIN_RUNS`], and more
/// up to [`MAX_RUNS`] while the measurement has taken less than its budget.
pub const MIN_RUNS: usize = 7;
/// See [`MIN_RUNS`].
pub const MAX_RUNS: usize = 51;
/// The budget of one measurement: this share of the time the quantization took before it.
pub const BUDGET_SHARE: f64 = 0.1;
/// Untimed runs of each model first: ONNX Runtime allocates and packs weights on the first.
const WARMUP_RUNS: usize = 2;

/// Median single-thread latency of `fp32` and `int8` on `sample` (inputs `input_names`),
/// interleaved run by run so that a change of machine load affects both alike: at least
/// [`MIN_RUNS`] rounds, more up to [`MAX_RUNS`] while less than `budget` has passed.
///
/// # Errors
/// [`Error::Runtime`] when ONNX Runtime fails on either model.
pub fn measure(
    fp32: &ModelProto,
    int8: &ModelProto,
    input_names: &[String],
    sample: &[SampleValue],
    path: &Path,
    budget: Duration,
) -> Result<(f64, f64)> {
    let started = Instant::now();
    measure_while(fp32, int8, input_names, sample, path, |runs| {
        runs < MIN_RUNS || (runs < MAX_RUNS && started.elapsed() < budget)
    })
}

/// [`measure`] with exactly `runs` timed runs of each model (at least 1), e.g. for the
/// `kenosis validate` command.
///
/// # Errors
/// As [`measure`].
pub fn measure_runs(
    fp32: &ModelProto,
    int8: &ModelProto,
    input_names: &[String],
    sample: &[SampleValue],
    path: &Path,
    runs: usize,
) -> Result<(f64, f64)> {
    let runs = runs.max(1);
    measure_while(fp32, int8, input_names, sample, path, |done| done < runs)
}

/// Times both models after [`WARMUP_RUNS`], one run of each per round, while `more(rounds
/// done)` holds; the median latency of each, milliseconds.
fn measure_while(
    fp32: &ModelProto,
    int8: &ModelProto,
    input_names: &[String],
    sample: &[SampleValue],
    path: &Path,
    more: impl Fn(usize) -> bool,
) -> Result<(f64, f64)> {
    let mut a = session(path, fp32.encode_to_vec(), GraphOptimizationLevel::All, 1)?;
    let mut b = session(path, int8.encode_to_vec(), GraphOptimizationLevel::All, 1)?;
    let inputs = sample_inputs(input_names, sample, path)?;
    let run = |s: &mut Session| -> Result<Duration> {
        let started = Instant::now();
        s.run(borrowed(&inputs))
            .map_err(|e| Error::runtime(path, e))?;
        Ok(started.elapsed())
    };
    for _ in 0..WARMUP_RUNS {
        run(&mut a)?;
        run(&mut b)?;
    }
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    while more(ta.len()) {
        ta.push(run(&mut a)?);
        tb.push(run(&mut b)?);
    }
    Ok((median_ms(&mut ta), median_ms(&mut tb)))
}

fn median_ms(times: &mut [Duration]) -> f64 {
    times.sort_unstable();
    times
        .get(times.len() / 2)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// What `min_speedup` decides for measured latencies `fp32_ms` and `int8_ms`: the report,
/// with `kept_fp32` set when INT8 misses a floor of at most 1 (FP32 itself meets it).
///
/// # Errors
/// [`Error::SpeedTarget`] with the figures when INT8 misses a floor above 1, which no
/// artifact can be shown to reach.
pub fn check(fp32_ms: f64, int8_ms: f64, min_speedup: f64, path: &Path) -> Result<SpeedReport> {
    let speedup = if int8_ms > 0.0 {
        fp32_ms / int8_ms
    } else {
        f64::INFINITY
    };
    let met = speedup >= min_speedup;
    if !met && min_speedup > 1.0 {
        return Err(Error::SpeedTarget {
            path: path.to_owned(),
            report: format!(
                "min_speedup {min_speedup} not reached: INT8 {int8_ms:.3} ms against FP32 \
                 {fp32_ms:.3} ms (median, 1 thread), {speedup:.2}x; keep more ops FP32 \
                 (keep_float) or lower the floor"
            ),
        });
    }
    Ok(SpeedReport {
        fp32_ms,
        int8_ms,
        speedup,
        min_speedup,
        kept_fp32: !met,
        revisions: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_above_one_fails_and_one_at_most_one_keeps_fp32() {
        let path = Path::new("m.onnx");
        let fast = check(2.0, 1.0, 1.5, path).unwrap();
        assert_eq!((fast.speedup, fast.kept_fp32), (2.0, false));
        let slow = check(1.0, 1.25, 1.0, path).unwrap();
        assert_eq!((slow.speedup, slow.kept_fp32), (0.8, true));
        let Err(Error::SpeedTarget { report, .. }) = check(1.0, 1.25, 1.1, path) else {
            panic!("a floor above 1 that INT8 misses fails");
        };
        assert!(report.contains("0.80x"), "{report}");
    }
}
