//! The bounds of option values, shared by every entry point: a call site's value is checked
//! when it is parsed, and `kenosis-build` checks the values a `build.rs` gives before it
//! reads any model. Each message completes "option `<name>` ...".

use crate::{Method, OUT_DIR_PREFIX};

/// Most synthetic calibration samples one model may ask for. Synthetic data is generated
/// and held in memory whole (see `kenosis_quantize::calibrate::data::MAX_SYNTHETIC_TOTAL_ELEMENTS`
/// for the bound on their total size); past a few hundred samples, real calibration data
/// is the better use of the time.
pub const MAX_SYNTHETIC_SAMPLES: usize = 4096;

/// Accepts every value (a flag has no bounds).
///
/// # Errors
/// Never.
pub fn any<T>(_: &T) -> Result<(), String> {
    Ok(())
}

/// A calibration folder: not empty, and `$` only in a leading [`OUT_DIR_PREFIX`] (no other
/// variable is expanded).
///
/// # Errors
/// A message naming the problem.
pub fn calibration_dir(dir: &String) -> Result<(), String> {
    if dir.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if dir.starts_with('$')
        && !(dir == OUT_DIR_PREFIX || dir.starts_with(&format!("{OUT_DIR_PREFIX}/")))
    {
        return Err(
            "may only start with `$OUT_DIR` (the build script's OUT_DIR); \
                    no other variable is expanded"
                .into(),
        );
    }
    Ok(())
}

/// A method's parameter: a `percentile(P)` needs `0 < P <= 100` (percent of the histogram
/// kept).
///
/// # Errors
/// A message naming the bad percentile (NaN included).
pub fn method(method: &Method) -> Result<(), String> {
    match *method {
        Method::Percentile(p) => percentile(p),
        _ => Ok(()),
    }
}

/// `0 < p <= 100`. Its message is whole (it does not complete "option ...").
pub(crate) fn percentile(p: f64) -> Result<(), String> {
    if p > 0.0 && p <= 100.0 {
        Ok(())
    } else {
        Err(format!("percentile must be in (0, 100], got {p}"))
    }
}

/// A `min_cosine` floor: a cosine similarity, in `[-1, 1]`.
///
/// # Errors
/// A message naming the bad value (NaN included).
pub fn min_cosine(v: &f64) -> Result<(), String> {
    closed(*v, -1.0)
}

/// A `min_top1_agreement` floor: a fraction of samples, in `[0, 1]`.
///
/// # Errors
/// A message naming the bad value (NaN included).
pub fn min_top1_agreement(v: &f64) -> Result<(), String> {
    closed(*v, 0.0)
}

/// A `min_speedup` floor: a latency ratio in `(0, 100]`.
///
/// # Errors
/// A message naming the bad value (NaN included).
pub fn min_speedup(v: &f64) -> Result<(), String> {
    if *v > 0.0 && *v <= 100.0 {
        Ok(())
    } else {
        Err(format!("must be in (0, 100], got {v}"))
    }
}

/// The longest `max_len` window (tokens): far beyond any encoder's positions, and short of
/// windows that would not fit in memory.
pub const MAX_TEXT_WINDOW: usize = 1 << 16;

/// A text window length: room for at least one token besides a special one, at most
/// [`MAX_TEXT_WINDOW`].
///
/// # Errors
/// The reason, when out of range.
pub fn max_len(n: &usize) -> Result<(), String> {
    if (2..=MAX_TEXT_WINDOW).contains(n) {
        Ok(())
    } else {
        Err(format!("must be in [2, {MAX_TEXT_WINDOW}], got {n}"))
    }
}

/// The most intra-op threads `intra_threads` accepts.
pub const MAX_INTRA_THREADS: usize = 256;

/// An intra-op thread count: in `[1, MAX_INTRA_THREADS]`.
///
/// # Errors
/// The reason, when out of range.
pub fn intra_threads(n: &usize) -> Result<(), String> {
    if (1..=MAX_INTRA_THREADS).contains(n) {
        Ok(())
    } else {
        Err(format!("must be in [1, {MAX_INTRA_THREADS}], got {n}"))
    }
}

fn closed(v: f64, lo: f64) -> Result<(), String> {
    if (lo..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(format!("must be in [{lo:?}, 1.0], got {v}"))
    }
}

/// A synthetic sample count: at least 1, at most [`MAX_SYNTHETIC_SAMPLES`].
///
/// # Errors
/// A message for zero or a count over the bound.
pub fn synthetic_samples(n: &usize) -> Result<(), String> {
    if *n == 0 {
        Err("must be at least 1".into())
    } else if *n > MAX_SYNTHETIC_SAMPLES {
        Err(format!("must be at most {MAX_SYNTHETIC_SAMPLES}, got {n}"))
    } else {
        Ok(())
    }
}

/// A synthetic image range `[low, high]`: finite bounds with `low < high`.
///
/// # Errors
/// A message naming the bad bounds.
pub fn image_range(&[low, high]: &[f32; 2]) -> Result<(), String> {
    if low.is_finite() && high.is_finite() && low < high {
        Ok(())
    } else {
        Err(format!(
            "needs finite bounds with low < high, got [{low}, {high}]"
        ))
    }
}

/// Node names to keep in FP32: none empty (an empty name matches no node).
///
/// # Errors
/// A message for an empty name.
#[allow(
    clippy::ptr_arg,
    reason = "the table calls each check as fn(&ValueType), and keep_float's is Vec<String>"
)]
pub fn node_names(names: &Vec<String>) -> Result<(), String> {
    if names.iter().any(|n| n.is_empty()) {
        Err("must not name an empty node name \"\"".into())
    } else {
        Ok(())
    }
}
