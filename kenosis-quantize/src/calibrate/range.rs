//! Choosing an activation's quantization range from its calibration histogram.
//!
//! - **MinMax**: the observed extremes (no clipping; ONNX Runtime's default calibrator).
//! - **Percentile(p)**: cut each tail at the `p`-th percentile (e.g. 99.99), ORT's
//!   `CalibrationMethod.Percentile` on each side separately.
//! - **Entropy**: the range whose 255-level quantized distribution has the smallest
//!   Kullback-Leibler divergence from the observed one (Migacz, "8-bit Inference with
//!   TensorRT", GTC 2017), searched over shrinking ranges. Unlike TensorRT, exact zeros are
//!   left out of the comparison, since every range reproduces them (see [`Histogram::zeros`]).
//! - **Mse**: the range minimizing the expected squared error of quantize-dequantize over the
//!   histogram, clipping error included (as in Banner et al. 2019, "Post-training 4-bit
//!   quantization", for the uniform case).
//!
//! **Default: MSE**, the method with the best mean cosine against FP32 on the shared
//! classifiers (`docs/benchmarks.md`): unlike Entropy it does not clip ReLU6 outputs harder
//! than their rounding error warrants.
//!
//! Entropy and MSE search candidate ranges `[t·min, t·max]` for shrink factors `t` in (0, 1],
//! so the sign structure (e.g. a ReLU output's zero lower bound) is kept.
//!
//! **MSE after the reader.** When a tensor's only reader is a saturating activation
//! ([`Activation`]: a SiLU, Sigmoid or Tanh), MSE measures the error after it,
//! `(f(x̂) − f(x))²`, and shrinks the two ends of the range independently: the flat side of
//! the activation then costs little to clip, and the levels it frees go where `f` has slope.
//! AdaRound (Nagel et al. 2020, "Up or Down? Adaptive Rounding", §4) likewise measures its
//! layer-wise loss after the activation function; here that choice sets the range rather
//! than the rounding. Tensors without such readers get the plain MSE range.

pub use super::activation::Activation;
use super::stats::Histogram;

/// How an activation's range is chosen from its statistics: the call-site grammar's own
/// enum (`minmax`, `percentile(P)`, `entropy`, `mse`), so build options and
/// `include_quantized!` options cannot drift apart.
pub use kenosis_options::Method;

/// Number of uint8 quantization intervals.
const LEVELS: f64 = 255.0;

/// The chosen `(min, max)` for `hist` under `method`; `None` when nothing was observed.
/// `read_by`: the activation that is the tensor's only reader, if any; it refines MSE only
/// (see the module docs), the other methods are the user's explicit choice of criterion.
pub fn choose(hist: &Histogram, method: Method, read_by: Option<Activation>) -> Option<(f32, f32)> {
    if !hist.min_max.is_set() {
        return None;
    }
    let (lo, hi) = (
        f64::from(hist.min_max.min.min(0.0)),
        f64::from(hist.min_max.max.max(0.0)),
    );
    if hi - lo <= 0.0 || hist.width == 0.0 {
        return Some((hist.min_max.min, hist.min_max.max));
    }
    let (min, max) = match method {
        Method::MinMax => (lo, hi),
        Method::Percentile(p) => {
            let tail = (1.0 - p / 100.0).clamp(0.0, 0.5);
            let low = if lo < 0.0 { quantile(hist, tail) } else { lo };
            let high = if hi > 0.0 {
                quantile(hist, 1.0 - tail)
            } else {
                hi
            };
            (low.min(0.0).max(lo), high.max(0.0).min(hi))
        }
        Method::Entropy => search(hist, lo, hi, kl_divergence),
        Method::Mse => match read_by {
            Some(f) => search_after(hist, lo, hi, f),
            None => search(hist, lo, hi, squared_error),
        },
    };
    Some((min as f32, max as f32))
}

/// How many uint8 quantization steps of the range `[min, max]` the central 99% of the
/// histogram's values span; `None` when that bulk has zero width (a mostly constant tensor,
/// which quantizes exactly).
///
/// A few steps means the range is set by rare outliers far from the bulk, e.g. the
/// `[CLS]`/`[SEP]` feature spikes of BERT-style feed-forward outputs (Bondarenko et al. 2021,
/// "Understanding and Overcoming the Challenges of Efficient Transformer Quantization"):
/// uint8 then rounds almost every value to the zero point.
pub fn bulk_steps(hist: &Histogram, (min, max): (f32, f32)) -> Option<f64> {
    let width = quantile(hist, 0.995) - quantile(hist, 0.005);
    let step = (f64::from(max) - f64::from(min)) / LEVELS;
    (width > 0.0 && step > 0.0).then(|| width / step)
}

/// The value below which fraction `q` of the counts lie (bin-resolution, linear within bin).
fn quantile(hist: &Histogram, q: f64) -> f64 {
    let target = q * hist.total() as f64;
    let mut acc = 0.0;
    for (k, &c) in hist.counts.iter().enumerate() {
        let next = acc + c as f64;
        if next >= target && c > 0 {
            let frac = ((target - acc) / c as f64).clamp(0.0, 1.0);
            return hist.origin + (k as f64 + frac) * hist.width;
        }
        acc = next;
    }
    hist.origin + hist.width * hist.counts.len() as f64
}

/// Shrink factors tried by the searches: fine near 1 (little clipping), coarser below.
fn candidates() -> impl Iterator<Item = f64> {
    (0..200)
        .map(|i| 1.0 - f64::from(i) * 0.0049)
        .filter(|t| *t > 0.02)
}

fn search(hist: &Histogram, lo: f64, hi: f64, cost: fn(&Histogram, f64, f64) -> f64) -> (f64, f64) {
    let mut best = (f64::INFINITY, lo, hi);
    for t in candidates() {
        let (a, b) = (lo * t, hi * t);
        let c = cost(hist, a, b);
        if c < best.0 {
            best = (c, a, b);
        }
    }
    (best.1, best.2)
}

/// The range `[t_lo·lo, t_hi·hi]` minimizing [`squared_error_after`] `f`, both shrink factors
/// from [`candidates`]. About 40 000 pairs would each cost a pass over the histogram, so the
/// search narrows down: every 8th pair, then the pairs within 8 and within 2 of the best so
/// far (every 2nd, then every one), about 730 passes. The search stays on the full
/// histogram: a coarser one misses the optimum by more than a step on long-tailed tensors.
fn search_after(hist: &Histogram, lo: f64, hi: f64, f: Activation) -> (f64, f64) {
    let t: Vec<f64> = candidates().collect();
    // A side at 0 (e.g. all values non-negative) has nothing to shrink.
    let last = |end: f64| if end == 0.0 { 0 } else { t.len() - 1 };
    let (last_lo, last_hi) = (last(lo), last(hi));
    let bins: Vec<(f64, f64, f64)> = (0..hist.counts.len())
        .filter(|&k| hist.counts[k] > 0)
        .map(|k| {
            let x = hist.center(k);
            (hist.counts[k] as f64, x, f.apply(x))
        })
        .collect();
    let best = |is: Vec<usize>, js: Vec<usize>| {
        is.iter()
            .flat_map(|&i| js.iter().map(move |&j| (i, j)))
            .map(|(i, j)| (squared_error_after(&bins, lo * t[i], hi * t[j], f), (i, j)))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map_or((0, 0), |(_, p)| p)
    };
    let around = |k: usize, radius: usize, step: usize, last: usize| -> Vec<usize> {
        (k.saturating_sub(radius)..=(k + radius).min(last))
            .step_by(step)
            .collect()
    };
    let mut at = best(
        (0..=last_lo).step_by(8).collect(),
        (0..=last_hi).step_by(8).collect(),
    );
    for (radius, step) in [(8, 2), (2, 1)] {
        at = best(
            around(at.0, radius, step, last_lo),
            around(at.1, radius, step, last_hi),
        );
    }
    (lo * t[at.0], hi * t[at.1])
}

/// Squared error of `f` applied after uint8 quantize-dequantize on `[a, b]` against `f` of the
/// exact value, over `bins` of `(count, centre, f(centre))`. `f` is evaluated once per level.
fn squared_error_after(bins: &[(f64, f64, f64)], a: f64, b: f64, f: Activation) -> f64 {
    let scale = (b - a) / LEVELS;
    let zero_point = (-a / scale).round();
    let level: Vec<f64> = (0..=LEVELS as usize)
        .map(|q| f.apply((q as f64 - zero_point) * scale))
        .collect();
    bins.iter()
        .map(|&(c, x, fx)| {
            let q = ((x / scale).round() + zero_point).clamp(0.0, LEVELS) as usize;
            let err = fx - level[q];
            c * err * err
        })
        .sum()
}

/// Squared error of uint8 quantize-dequantize on range `[a, b]` (includes 0), summed over
/// bin centres weighted by count (bins are ~8x finer than a quantization step at `t = 1`).
fn squared_error(hist: &Histogram, a: f64, b: f64) -> f64 {
    let scale = (b - a) / LEVELS;
    let zero_point = (-a / scale).round();
    hist.counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(k, &c)| {
            let x = hist.center(k);
            let q = ((x / scale).round() + zero_point).clamp(0.0, LEVELS);
            let err = x - (q - zero_point) * scale;
            c as f64 * err * err
        })
        .sum()
}

/// KL(P‖Q) for range `[a, b]`, following TensorRT's entropy calibrator: P is the histogram
/// restricted to `[a, b]` with the mass outside folded into the edge bins (what clipping
/// does), Q is the restricted histogram *without* that mass, merged into the 255
/// quantization intervals and spread evenly over each interval's non-empty bins. Clipping
/// thus costs divergence through the folded mass and coarse ranges cost it through merging.
fn kl_divergence(hist: &Histogram, a: f64, b: f64) -> f64 {
    let n = hist.counts.len();
    let bin = |x: f64| (((x - hist.origin) / hist.width).floor().max(0.0) as usize).min(n - 1);
    let (first, last) = (bin(a), bin(b));
    let m = last + 1 - first;
    if m < LEVELS as usize {
        // Narrower than one histogram bin per level: the histogram cannot judge it.
        return f64::INFINITY;
    }
    let mut inside: Vec<f64> = hist.counts[first..=last]
        .iter()
        .map(|&c| c as f64)
        .collect();
    // Exact zeros are reproduced by every range, yet merging their spike with its
    // neighbours into one level would count as divergence and pull the search towards
    // ever narrower ranges (one bin per level) on ReLU outputs: leave them out of P and Q.
    if hist.zeros > 0 && a <= 0.0 && b >= 0.0 {
        inside[bin(0.0) - first] -= hist.zeros as f64;
    }
    let mut p = inside.clone();
    p[0] += hist.counts[..first].iter().sum::<u64>() as f64;
    p[m - 1] += hist.counts[last + 1..].iter().sum::<u64>() as f64;
    let total: f64 = p.iter().sum();
    if total == 0.0 {
        return f64::INFINITY;
    }
    let levels = LEVELS as usize;
    let mut q = vec![0f64; m];
    for l in 0..levels {
        let (s, e) = (l * m / levels, (l + 1) * m / levels);
        let mass: f64 = inside[s..e].iter().sum();
        let nonzero = inside[s..e].iter().filter(|&&v| v > 0.0).count();
        for k in s..e {
            if inside[k] > 0.0 {
                q[k] = mass / nonzero as f64;
            }
        }
    }
    let q_total: f64 = q.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    p.iter()
        .zip(&q)
        .filter(|(&pk, _)| pk > 0.0)
        .map(|(&pk, &qk)| {
            let (pk, qk) = (pk / total, (qk / q_total).max(1e-12));
            pk * (pk / qk).ln()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    /// 1M standard-normal values plus a handful of far outliers at ±40.
    fn gaussian_with_outliers() -> Histogram {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut values: Vec<f32> = (0..1_000_000)
            .map(|_| rng.sample::<f32, _>(StandardNormal))
            .collect();
        values.extend([40.0, -40.0, 39.0, -38.5]);
        let mut h = Histogram::default();
        for chunk in values.chunks(10_000) {
            h.update(chunk);
        }
        h
    }

    #[test]
    fn minmax_never_clips() {
        let h = gaussian_with_outliers();
        assert_eq!(choose(&h, Method::MinMax, None), Some((-40.0, 40.0)));
    }

    #[test]
    fn percentile_clips_to_the_bulk() {
        let (lo, hi) = choose(&gaussian_with_outliers(), Method::Percentile(99.99), None).unwrap();
        // The 0.01% tails of N(0,1) are at about ±3.7σ.
        assert!((3.0..5.0).contains(&hi), "hi {hi}");
        assert!((-5.0..-3.0).contains(&lo), "lo {lo}");
    }

    #[test]
    fn entropy_clips_the_outliers() {
        let (lo, hi) = choose(&gaussian_with_outliers(), Method::Entropy, None).unwrap();
        assert!(hi < 12.0 && hi > 2.0, "hi {hi}");
        assert!(lo > -12.0 && lo < -2.0, "lo {lo}");
    }

    /// A ReLU6 output shaped like EfficientNet-Lite0's depthwise outputs: 40% exact zeros, the
    /// rest heavy-tailed (median 0.1, 10% above 1.9, 1% above 5) and clipped at 6.
    fn relu6_output() -> Histogram {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let values: Vec<f32> = (0..1_000_000)
            .map(|_| {
                let u: f64 = rng.random();
                if u < 0.4 {
                    0.0
                } else {
                    (0.8 * (-(1.0 - rng.random::<f64>()).ln()).powf(1.4)).min(6.0) as f32
                }
            })
            .collect();
        let mut h = Histogram::default();
        for chunk in values.chunks(10_000) {
            h.update(chunk);
        }
        h
    }

    #[test]
    fn entropy_and_mse_keep_the_tail_of_a_relu6_output() {
        // A tenth of the values lie above 1.9: cutting there would flatten them all. The
        // zero spike is exact under every range and must not pull the search towards
        // narrow ranges (without that, Entropy cut this at 1.5).
        for method in [Method::Entropy, Method::Mse] {
            let (lo, hi) = choose(&relu6_output(), method, None).unwrap();
            assert_eq!(lo, 0.0, "{method:?}");
            assert!(hi > 5.5, "{method:?} clips ReLU6 at {hi}");
        }
    }

    #[test]
    fn mse_trades_clipping_error_against_rounding_error() {
        // Expected squared error ≈ 4·(40−c)² + 1e6·(2c/255)²/12, minimal near c ≈ 17.5:
        // MSE clips the outliers, but far less than entropy (4 values weigh little
        // against a million).
        let (lo, hi) = choose(&gaussian_with_outliers(), Method::Mse, None).unwrap();
        assert!((12.0..25.0).contains(&hi), "hi {hi}");
        assert!((-25.0..-12.0).contains(&lo), "lo {lo}");
    }

    #[test]
    fn mse_keeps_a_uniform_range_unclipped() {
        let values: Vec<f32> = (0..10_000).map(|i| i as f32 / 10_000.0 * 6.0).collect();
        let mut h = Histogram::default();
        h.update(&values);
        let (lo, hi) = choose(&h, Method::Mse, None).unwrap();
        assert_eq!(lo, 0.0);
        assert!(hi > 5.9, "uniform data has no outliers to clip: {hi}");
    }

    /// 1M values of N(0, 4²) and the histogram they fill: a Conv output's spread before
    /// an activation.
    fn wide_gaussian() -> (Vec<f32>, Histogram) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let values: Vec<f32> = (0..1_000_000)
            .map(|_| 4.0 * rng.sample::<f32, _>(StandardNormal))
            .collect();
        let mut h = Histogram::default();
        for chunk in values.chunks(10_000) {
            h.update(chunk);
        }
        (values, h)
    }

    /// Mean of `(f(x̂) − f(x))²` over the raw `values`, quantized exactly as ONNX Runtime
    /// does on `[lo, hi]` (scale and rounded zero point as in `params`).
    fn error_after(values: &[f32], (lo, hi): (f32, f32), f: Activation) -> f64 {
        let (lo, hi) = (f64::from(lo), f64::from(hi));
        let scale = (hi - lo) / LEVELS;
        let zero_point = (-lo / scale).round();
        let total: f64 = values
            .iter()
            .map(|&v| {
                let x = f64::from(v);
                let q = ((x / scale).round() + zero_point).clamp(0.0, LEVELS);
                (f.apply((q - zero_point) * scale) - f.apply(x)).powi(2)
            })
            .sum();
        total / values.len() as f64
    }

    #[test]
    fn mse_before_an_activation_clips_its_flat_side_and_lowers_the_error_after_it() {
        let (values, h) = wide_gaussian();
        let plain = choose(&h, Method::Mse, None).unwrap();
        for f in [
            Activation::QuickGelu { alpha: 1.0 },
            Activation::Sigmoid,
            Activation::Tanh,
        ] {
            let after = choose(&h, Method::Mse, Some(f)).unwrap();
            // The flat negative side is cut (SiLU(-9) ≈ -0.001, Sigmoid(-9) ≈ 1e-4)...
            assert!(
                after.0 > -9.0 && after.0 > 0.6 * plain.0,
                "{f:?}: {after:?} vs {plain:?}"
            );
            // ...and the error measured after the activation, on the raw values, drops.
            let (e_after, e_plain) = (
                error_after(&values, after, f),
                error_after(&values, plain, f),
            );
            assert!(e_after < 0.8 * e_plain, "{f:?}: {e_after:e} vs {e_plain:e}");
        }
        // Sigmoid also saturates above: its positive end is cut like its negative one, while
        // SiLU's, linear there, keeps at least plain MSE's.
        let sigmoid = choose(&h, Method::Mse, Some(Activation::Sigmoid)).unwrap();
        let silu = choose(&h, Method::Mse, Some(Activation::QuickGelu { alpha: 1.0 })).unwrap();
        assert!(sigmoid.1 < 0.6 * plain.1, "{sigmoid:?} vs {plain:?}");
        assert!(silu.1 >= plain.1, "{silu:?} vs {plain:?}");
    }

    #[test]
    fn the_reader_refines_mse_only() {
        let (_, h) = wide_gaussian();
        for method in [Method::MinMax, Method::Percentile(99.9), Method::Entropy] {
            assert_eq!(
                choose(&h, method, Some(Activation::Sigmoid)),
                choose(&h, method, None)
            );
        }
    }
}
