//! The speed check: the INT8 model's latency against FP32's, measured in the build at the
//! thread counts the application runs, and its floor (`min_speedup`, or 1 with the default
//! `speed_check = true`).
//!
//! Quantizing does not make a model faster by itself: each QuantizeLinear and
//! DequantizeLinear costs time, and ONNX Runtime runs its integer kernels in NHWC and its
//! float ones in NCHWc, so layout changes between integer and float regions can cost more
//! than the integer kernels save; and with more threads, the integer kernels' shorter work
//! per operator repays their synchronization less than the float ones'. Only a measurement
//! says which way a model goes, so the check runs only when the build machine runs the
//! target's code (`QuantizeOptions::host_runs_target`, see `IntegerKernels::timed_here`).
//!
//! It times both models at one thread and at the count the application's session uses
//! ([`thread_counts`]): the `intra_threads` option, else `kenosis_runtime`'s default for
//! this machine ([`kenosis_manifest::default_intra_threads`]). A build script shares the
//! machine with other compile jobs, so:
//! - the threads beyond the first are taken from cargo's jobserver first (`Tokens`), as a
//!   compile job would, so that the build does not time them against jobs it started;
//! - the two models run interleaved, one run of each per round, so a change of load touches
//!   both, and the speedup is the median of the per-round ratios;
//! - each speedup comes with its noise band, the 95% confidence interval of that median
//!   from the order statistics of the ratios (distribution-free; e.g. Conover, *Practical
//!   Nonparametric Statistics*, 3rd ed., §3.2).
//!
//! The time spent is bounded by [`BUDGET_SHARE`] of the quantization's own time, shared by
//! the thread counts (at least [`MIN_RUNS`] rounds each, at most [`MAX_RUNS`]).

use std::path::Path;
use std::time::{Duration, Instant};

use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::calibrate::session::{borrowed, sample_inputs, session_threads};
use crate::calibrate::SampleValue;
use crate::error::{Error, Result};
use crate::onnx::ModelProto;

/// Both models timed at one intra-op thread count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Timing {
    /// Intra-op threads of both sessions; `None`: ONNX Runtime's own choice (one per
    /// physical core), which is what `kenosis-runtime` leaves a session at on this machine.
    pub threads: Option<usize>,
    /// Median FP32 latency, milliseconds (ONNX Runtime, all graph optimizations).
    pub fp32_ms: f64,
    /// Median INT8 latency, milliseconds, measured interleaved with FP32's.
    pub int8_ms: f64,
    /// Median of the per-round ratios FP32 time / INT8 time: above 1 when INT8 is faster.
    pub speedup: f64,
    /// The noise band of [`speedup`](Self::speedup): the 95% confidence interval of the
    /// median ratio, `[low, high]`.
    pub speedup_band: [f64; 2],
    /// Timed rounds (one run of each model per round).
    pub rounds: usize,
    /// Tokens taken from cargo's jobserver for the threads beyond the first while timing
    /// (0 outside a build, or when none came in time: then other jobs may have run beside).
    pub jobserver_tokens: usize,
}

impl Timing {
    /// `"1.03x (0.98-1.07) at 2 threads"`.
    pub fn describe(&self) -> String {
        let threads = match self.threads {
            Some(1) => "1 thread".to_owned(),
            Some(n) => format!("{n} threads"),
            None => "ONNX Runtime's default threads".to_owned(),
        };
        format!(
            "{:.2}x ({:.2}-{:.2}) at {threads}",
            self.speedup, self.speedup_band[0], self.speedup_band[1]
        )
    }
}

/// The measured latencies, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SpeedReport {
    /// Median FP32 latency, milliseconds, at the thread count where INT8 fared worst.
    pub fp32_ms: f64,
    /// Median INT8 latency, milliseconds, at that thread count.
    pub int8_ms: f64,
    /// The lowest speedup over the thread counts timed (see [`Timing::speedup`]): above 1
    /// when INT8 is faster at every count.
    pub speedup: f64,
    /// The floor asked for (`min_speedup`).
    pub min_speedup: f64,
    /// The INT8 model was slower than the floor (at most 1) at some thread count, so the
    /// artifact is the normalized FP32 model.
    pub kept_fp32: bool,
    /// Placements tried again with conversions priced higher after the first was slower
    /// than the floor; the figures above are the last one's.
    #[serde(default)]
    pub revisions: usize,
    /// Each thread count timed (see [`thread_counts`]), one thread first.
    #[serde(default)]
    pub timings: Vec<Timing>,
}

impl SpeedReport {
    /// `"1.03x (0.98-1.07) at 1 thread, 0.97x (0.95-0.99) at 2 threads"`; `"0.50x at 1
    /// thread"` for a report written before the timings were kept (one thread, no band).
    pub fn describe(&self) -> String {
        if self.timings.is_empty() {
            return format!("{:.2}x at 1 thread", self.speedup);
        }
        let timings: Vec<String> = self.timings.iter().map(Timing::describe).collect();
        timings.join(", ")
    }
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

/// Interleaved runs of each model per thread count, after `WARMUP_RUNS`: at least
/// [`MIN_RUNS`], and more up to [`MAX_RUNS`] while the measurement has taken less than its
/// budget.
pub const MIN_RUNS: usize = 7;
/// See [`MIN_RUNS`].
pub const MAX_RUNS: usize = 51;
/// The budget of one check: this share of the time the quantization took before it.
pub const BUDGET_SHARE: f64 = 0.1;
/// Untimed runs of each model first: ONNX Runtime allocates and packs weights on the first.
const WARMUP_RUNS: usize = 2;
/// The longest a timing waits for the jobserver's tokens before it times without them.
const TOKEN_WAIT: Duration = Duration::from_secs(30);

/// The intra-op thread counts the check times: one thread, and the count the application
/// runs the model at when that may be another: `intra_threads` (the build option), else
/// [`kenosis_manifest::default_intra_threads`] for this machine's logical CPUs (`None`:
/// ONNX Runtime's own choice).
pub fn thread_counts(intra_threads: Option<usize>) -> Vec<Option<usize>> {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    match intra_threads.or_else(|| kenosis_manifest::default_intra_threads(cpus)) {
        Some(1) => vec![Some(1)],
        None if cpus == 1 => vec![Some(1)],
        deployed => vec![Some(1), deployed],
    }
}

/// Times `fp32` and `int8` on `sample` (inputs `input_names`) at each of `threads` (see
/// [`thread_counts`]), interleaved run by run so that a change of machine load affects both
/// alike: at least [`MIN_RUNS`] rounds per count, more up to [`MAX_RUNS`] while less than
/// its share of `budget` has passed.
///
/// # Errors
/// [`Error::Runtime`] when ONNX Runtime fails on either model.
pub fn measure(
    (fp32, int8): (&ModelProto, &ModelProto),
    input_names: &[String],
    sample: &[SampleValue],
    path: &Path,
    threads: &[Option<usize>],
    budget: Duration,
) -> Result<Vec<Timing>> {
    let share = budget.div_f64(threads.len().max(1) as f64);
    (threads.iter())
        .map(|&count| {
            let started = Instant::now();
            measure_while((fp32, int8), input_names, sample, path, count, |runs| {
                runs < MIN_RUNS || (runs < MAX_RUNS && started.elapsed() < share)
            })
        })
        .collect()
}

/// Median latencies of `fp32` and `int8` at `threads` intra-op threads (at least 1),
/// milliseconds, over exactly `runs` interleaved runs of each model (at least 1), e.g. for
/// the `kenosis validate` command.
///
/// # Errors
/// As [`measure`].
pub fn measure_runs(
    fp32: &ModelProto,
    int8: &ModelProto,
    input_names: &[String],
    sample: &[SampleValue],
    path: &Path,
    (runs, threads): (usize, usize),
) -> Result<(f64, f64)> {
    let t = measure_rounds(
        (fp32, int8),
        input_names,
        sample,
        path,
        Some(threads.max(1)),
        runs,
    )?;
    Ok((t.fp32_ms, t.int8_ms))
}

/// Times `fp32` and `int8` as the speed check does (see [`measure`]) at `threads` intra-op
/// threads (`None`: ONNX Runtime's default), over exactly `rounds` interleaved rounds (at
/// least 1): the [`Timing`] with its speedup and noise band, e.g. for the benchmark's table
/// by thread count.
///
/// # Errors
/// As [`measure`].
pub fn measure_rounds(
    models: (&ModelProto, &ModelProto),
    input_names: &[String],
    sample: &[SampleValue],
    path: &Path,
    threads: Option<usize>,
    rounds: usize,
) -> Result<Timing> {
    let rounds = rounds.max(1);
    measure_while(models, input_names, sample, path, threads, |done| {
        done < rounds
    })
}

/// Times both models at `threads` after [`WARMUP_RUNS`], one run of each per round, while
/// `more(rounds done)` holds, holding the jobserver's tokens for the threads beyond the
/// first.
fn measure_while(
    (fp32, int8): (&ModelProto, &ModelProto),
    input_names: &[String],
    sample: &[SampleValue],
    path: &Path,
    threads: Option<usize>,
    more: impl Fn(usize) -> bool,
) -> Result<Timing> {
    let level = GraphOptimizationLevel::All;
    let mut a = session_threads(path, fp32.encode_to_vec(), level, threads)?;
    let mut b = session_threads(path, int8.encode_to_vec(), level, threads)?;
    let inputs = sample_inputs(input_names, sample, path)?;
    let run = |s: &mut Session| -> Result<Duration> {
        let started = Instant::now();
        s.run(borrowed(&inputs))
            .map_err(|e| crate::error::runtime(path, e))?;
        Ok(started.elapsed())
    };
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let tokens = Tokens::take(threads.unwrap_or(cpus).saturating_sub(1));
    for _ in 0..WARMUP_RUNS {
        run(&mut a)?;
        run(&mut b)?;
    }
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    while more(ta.len()) {
        ta.push(run(&mut a)?);
        tb.push(run(&mut b)?);
    }
    let jobserver_tokens = tokens.held();
    drop(tokens);
    let mut ratios: Vec<f64> = (ta.iter().zip(&tb))
        .map(|(f, i)| f.as_secs_f64() / i.as_secs_f64().max(1e-9))
        .collect();
    ratios.sort_unstable_by(f64::total_cmp);
    Ok(Timing {
        threads,
        fp32_ms: median_ms(&mut ta),
        int8_ms: median_ms(&mut tb),
        speedup: ratios.get(ratios.len() / 2).copied().unwrap_or(1.0),
        speedup_band: median_band(&ratios),
        rounds: ratios.len(),
        jobserver_tokens,
    })
}

fn median_ms(times: &mut [Duration]) -> f64 {
    times.sort_unstable();
    times
        .get(times.len() / 2)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// The 95% confidence interval of the median of `sorted` (ascending): `[x(r), x(n+1-r)]`
/// (1-based order statistics) with `r` the largest rank whose binomial tail
/// `P(Bin(n, 1/2) < r)` is at most 2.5%, and at least 1 (the whole range, for fewer than 6
/// values). Distribution-free: it assumes only independent rounds.
fn median_band(sorted: &[f64]) -> [f64; 2] {
    let n = sorted.len();
    let (Some(&first), Some(&last)) = (sorted.first(), sorted.last()) else {
        return [1.0, 1.0];
    };
    // P(X <= k) for X ~ Bin(n, 1/2), accumulated term by term.
    let mut term = 0.5f64.powi(n as i32);
    let mut below = term; // P(X <= 0) = P(X < 1)
    let mut r = 1;
    while r < n / 2 {
        // P(X < r + 1) = P(X <= r).
        term *= (n - r + 1) as f64 / r as f64;
        if below + term > 0.025 {
            break;
        }
        below += term;
        r += 1;
    }
    if below > 0.025 {
        return [first, last];
    }
    [sorted[r - 1], sorted[n - r]]
}

/// Tokens taken from cargo's jobserver (the one a build script and the quantizer it runs
/// inherit through `CARGO_MAKEFLAGS`), released on drop. The process holds one token
/// implicitly, its own; a timing at `n` threads takes `n - 1` more, waiting up to
/// [`TOKEN_WAIT`] for them as other jobs finish. Outside cargo there is no jobserver and no
/// token is taken.
struct Tokens(Vec<jobserver::Acquired>);

impl Tokens {
    fn take(wanted: usize) -> Tokens {
        let Some(client) = jobserver_client().filter(|_| wanted > 0) else {
            return Tokens(Vec::new());
        };
        let deadline = Instant::now() + TOKEN_WAIT;
        let mut held = Vec::new();
        while held.len() < wanted && Instant::now() < deadline {
            match client.try_acquire() {
                Ok(Some(token)) => held.push(token),
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                // No non-blocking acquire on this jobserver: time without tokens.
                Err(_) => break,
            }
        }
        Tokens(held)
    }

    fn held(&self) -> usize {
        self.0.len()
    }
}

/// Cargo's jobserver, when this process inherited one; connected once.
fn jobserver_client() -> Option<&'static jobserver::Client> {
    static CLIENT: std::sync::OnceLock<Option<jobserver::Client>> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // SAFETY: called once per process (the `OnceLock`). The descriptors the
            // environment names were inherited from cargo through the build script; with
            // `check_pipe`, descriptors that are not a pipe or a FIFO (closed and reused for
            // another file) are refused rather than used.
            let found = unsafe { jobserver::Client::from_env_ext(true) };
            found.client.ok()
        })
        .as_ref()
}

/// What `min_speedup` decides for `timings` (one per thread count): the report, with
/// `kept_fp32` set when INT8 misses a floor of at most 1 at any count (FP32 itself meets it),
/// and the figures of the count where INT8 fared worst.
///
/// # Errors
/// [`Error::SpeedTarget`] with the figures when INT8 misses a floor above 1, which no
/// artifact can be shown to reach.
pub fn check(timings: Vec<Timing>, min_speedup: f64, path: &Path) -> Result<SpeedReport> {
    let worst = (timings.iter())
        .min_by(|a, b| a.speedup.total_cmp(&b.speedup))
        .copied();
    let (fp32_ms, int8_ms, speedup) = worst.map_or((0.0, 0.0, f64::INFINITY), |t| {
        (t.fp32_ms, t.int8_ms, t.speedup)
    });
    let report = SpeedReport {
        fp32_ms,
        int8_ms,
        speedup,
        min_speedup,
        kept_fp32: speedup < min_speedup,
        revisions: 0,
        timings,
    };
    if report.kept_fp32 && min_speedup > 1.0 {
        return Err(Error::SpeedTarget {
            path: path.to_owned(),
            report: format!(
                "min_speedup {min_speedup} not reached: INT8 {int8_ms:.3} ms against FP32 \
                 {fp32_ms:.3} ms (median); {}; keep more ops FP32 (keep_float) or lower the \
                 floor",
                report.describe()
            ),
        });
    }
    Ok(report)
}

/// A timing at `threads` with these medians and a band of 5% either side, for tests.
#[cfg(test)]
pub(crate) fn timed(threads: usize, fp32_ms: f64, int8_ms: f64) -> Timing {
    let speedup = fp32_ms / int8_ms;
    Timing {
        threads: Some(threads),
        fp32_ms,
        int8_ms,
        speedup,
        speedup_band: [speedup * 0.95, speedup * 1.05],
        rounds: 7,
        jobserver_tokens: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_above_one_fails_and_one_at_most_one_keeps_fp32() {
        let path = Path::new("m.onnx");
        let fast = check(vec![timed(1, 2.0, 1.0)], 1.5, path).unwrap();
        assert_eq!((fast.speedup, fast.kept_fp32), (2.0, false));
        let slow = check(vec![timed(1, 1.0, 1.25)], 1.0, path).unwrap();
        assert_eq!((slow.speedup, slow.kept_fp32), (0.8, true));
        let Err(Error::SpeedTarget { report, .. }) = check(vec![timed(1, 1.0, 1.25)], 1.1, path)
        else {
            panic!("a floor above 1 that INT8 misses fails");
        };
        assert!(report.contains("0.80x"), "{report}");
    }

    #[test]
    fn slower_at_any_thread_count_keeps_fp32_with_that_counts_figures() {
        let path = Path::new("m.onnx");
        let report = check(vec![timed(1, 2.0, 1.6), timed(2, 1.0, 1.04)], 1.0, path).unwrap();
        assert!(report.kept_fp32);
        assert_eq!((report.fp32_ms, report.int8_ms), (1.0, 1.04));
        assert_eq!(report.timings.len(), 2);
        let line = report.describe();
        assert!(
            line.contains("1.25x") && line.contains("at 1 thread"),
            "{line}"
        );
        assert!(
            line.contains("0.96x") && line.contains("at 2 threads"),
            "{line}"
        );
        let both_faster = check(vec![timed(1, 2.0, 1.6), timed(2, 1.0, 0.9)], 1.0, path);
        assert!(!both_faster.unwrap().kept_fp32);
    }

    #[test]
    fn the_noise_band_is_the_medians_order_statistic_interval() {
        let values = |n: usize| (0..n).map(|i| i as f64).collect::<Vec<_>>();
        // Bin(n, 1/2): r = 1 for 7 rounds (P(X < 1) = 0.8%), 6 for 20, 19 for 51.
        assert_eq!(median_band(&values(7)), [0.0, 6.0]);
        assert_eq!(median_band(&values(20)), [5.0, 14.0]);
        assert_eq!(median_band(&values(51)), [18.0, 32.0]);
        // Too few rounds for any narrower interval: the whole range.
        assert_eq!(median_band(&values(3)), [0.0, 2.0]);
        assert_eq!(median_band(&[]), [1.0, 1.0]);
    }

    #[test]
    fn one_thread_is_always_timed_and_the_deployed_count_beside_it() {
        assert_eq!(thread_counts(Some(1)), vec![Some(1)]);
        assert_eq!(thread_counts(Some(3)), vec![Some(1), Some(3)]);
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let default = thread_counts(None);
        assert_eq!(default[0], Some(1));
        let deployed = kenosis_manifest::default_intra_threads(cpus);
        assert_eq!(default.get(1).copied(), (cpus > 1).then_some(deployed));
    }
}
