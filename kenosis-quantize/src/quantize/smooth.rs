//! SmoothQuant's migration of activation outliers into the weights, chosen per group of
//! MatMuls with dynamic activations.
//!
//! A transformer's MatMul inputs carry a few outlier channels far above the rest (Dettmers
//! et al., 2022, "LLM.int8()"). One per-tensor activation scale, as `DynamicQuantizeLinear`
//! computes at each run, is then set by them, and every other channel gets a few of its 256
//! steps. SmoothQuant (Xiao et al., 2023, "SmoothQuant: Accurate and Efficient Post-Training
//! Quantization for Large Language Models", eq. 4) divides input channel `j` by
//! `s_j = max|X_j|^α / max|W_j|^(1-α)` and multiplies weight row `j` by it, which leaves
//! `X·W` unchanged and moves part of each outlier's range into the weight, quantized per
//! output column. The paper uses one α for a whole model; which α is best differs per layer
//! (its own Fig. 10; Lin et al., 2024, "AWQ", search a scale per layer), and for some layers
//! no migration is best.
//!
//! Each group (the MatMuls reading one input tensor: they share one quantizer, so one `s`)
//! takes the candidate of [`ALPHAS`], or no migration, that minimizes the group's expected
//! squared output error under the uniform rounding-noise model (Widrow; see Nagel et al.,
//! 2021, "A White Paper on Neural Network Quantization", sec. 2.2). For `s`, with
//! `X̃ = X / s` and `W̃ = s · W` (`[K, N]`), and `Ŵ` the int8 codes times scales the rewrite
//! would write for `W̃`:
//! - activation noise: `E[Δ²] / 12 · Σ_j s_j² Σ_n W_jn²`, with `Δ` the uint8 step of the
//!   range of `X̃` in one calibration sample (`max(0, max_j max X_j / s_j) − min(0, min_j
//!   min X_j / s_j)`, over 255), as `DynamicQuantizeLinear` takes each run's range, averaged
//!   over the samples;
//! - weight noise: `Σ_j E[X_j²] / s_j² · Σ_n (Ŵ_jn − W̃_jn)²` (input channels taken as
//!   uncorrelated).
//!
//! The migration costs one `Mul` by `1 / s` before the group's quantizer.

use std::collections::HashMap;

use kenosis_numerics::stats::ChannelMoments;

use super::dynamic::{self, DynamicPlan};
use crate::error::BadTensor;
use crate::graph::GraphIndex;
use crate::onnx::GraphProto;

/// The migration strengths tried per group (SmoothQuant's α; the paper's default is 0.5).
pub const ALPHAS: [f64; 5] = [0.2, 0.35, 0.5, 0.65, 0.8];

/// Largest share of the unmigrated expected error a migration may leave to be applied: it
/// costs a `Mul` per run, and the noise model is an estimate.
pub const MAX_ERROR_SHARE: f64 = 0.9;

/// Bounds of a migration scale: a channel that never left 0 or a zero weight row would
/// otherwise give 0 or infinity.
const SCALE_BOUNDS: (f64, f64) = (1e-4, 1e4);

/// A group's chosen migration.
#[derive(Debug, Clone, PartialEq)]
pub struct Smoothing {
    /// SmoothQuant's α of the chosen scales.
    pub alpha: f64,
    /// `s_j` per input channel (`K` values): the input is divided by it, weight row `j`
    /// multiplied by it.
    pub scales: Vec<f32>,
}

/// The choices [`choose`] made, by the indices of a group's nodes.
pub type Memo = HashMap<Vec<usize>, Option<Smoothing>>;

/// The migration of each group of `plan` (by the input tensor its MatMuls read) whose
/// expected output error (see the [module docs](self)) with one of [`ALPHAS`] is at most
/// [`MAX_ERROR_SHARE`] of the error without migration. `moments` holds the per-channel
/// statistics calibration measured on the inputs (last axis); groups without them, with a
/// channel count other than `K`, or with a weight another node also reads (one stored copy
/// serves every reader, see [`dynamic::rewrite`]) are left as they are. `reduce_range`
/// selects the weight grid the rewrite uses. `memo` keeps each group's choice (by its nodes'
/// indices) for the next call on the same graph: a fidelity search builds many times.
///
/// # Errors
/// [`BadTensor`] when a weight cannot be read.
pub fn choose(
    graph: &GraphProto,
    plan: &DynamicPlan,
    moments: &HashMap<String, ChannelMoments>,
    reduce_range: bool,
    memo: &mut Memo,
) -> Result<HashMap<String, Smoothing>, BadTensor> {
    let index = GraphIndex::new(graph);
    let mut chosen = HashMap::new();
    for (input, members) in plan.by_input(graph) {
        let key: Vec<usize> = members.iter().map(|m| m.node).collect();
        if let Some(done) = memo.get(&key) {
            if let Some(s) = done {
                chosen.insert(input.to_owned(), s.clone());
            }
            continue;
        }
        let Some(stats) = moments.get(input) else {
            continue;
        };
        let k = members[0].k;
        let shared =
            (members.iter()).any(|m| index.consumers_of(&graph.node[m.node].input[1]).len() > 1);
        if shared || stats.mean_squares().len() != k || members.iter().any(|m| m.k != k) {
            memo.insert(key, None);
            continue;
        }
        // The group's weights side by side: `[K, ΣN]`, one matrix per member.
        let weights: Vec<(Vec<f32>, usize)> = (members.iter())
            .map(|m| {
                Ok((
                    dynamic::weight_matrix(graph, &index, &graph.node[m.node], m)?.0,
                    m.n,
                ))
            })
            .collect::<Result<_, BadTensor>>()?;
        let s = best(stats, &weights, reduce_range);
        if let Some(s) = &s {
            chosen.insert(input.to_owned(), s.clone());
        }
        memo.insert(key, s);
    }
    Ok(chosen)
}

/// The candidate of [`ALPHAS`] with the lowest expected error, when at most
/// [`MAX_ERROR_SHARE`] of the error without migration.
fn best(
    stats: &ChannelMoments,
    weights: &[(Vec<f32>, usize)],
    reduce_range: bool,
) -> Option<Smoothing> {
    let extremes = stats.extremes();
    let k = extremes.len();
    let x_abs_max: Vec<f64> = (extremes.iter())
        .map(|e| {
            if e.min <= e.max {
                f64::from(e.min.abs().max(e.max.abs()))
            } else {
                0.0
            }
        })
        .collect();
    let mut w_abs_max = vec![0f64; k];
    for (w, n) in weights {
        for (j, row) in w.chunks(*n).enumerate() {
            let m = row.iter().fold(0f32, |a, v| a.max(v.abs()));
            w_abs_max[j] = w_abs_max[j].max(f64::from(m));
        }
    }
    let none = vec![1f32; k];
    let baseline = expected_error(stats, weights, &none, reduce_range);
    (ALPHAS.iter())
        .map(|&alpha| {
            let scales: Vec<f32> = (x_abs_max.iter().zip(&w_abs_max))
                .map(|(&x, &w)| {
                    if x == 0.0 || w == 0.0 {
                        return 1.0;
                    }
                    let s = x.powf(alpha) / w.powf(1.0 - alpha);
                    s.clamp(SCALE_BOUNDS.0, SCALE_BOUNDS.1) as f32
                })
                .collect();
            let error = expected_error(stats, weights, &scales, reduce_range);
            (Smoothing { alpha, scales }, error)
        })
        .filter(|(_, e)| *e <= MAX_ERROR_SHARE * baseline)
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(s, _)| s)
}

/// The expected squared error of the group's outputs per input row with migration `scales`
/// (see the [module docs](self)).
fn expected_error(
    stats: &ChannelMoments,
    weights: &[(Vec<f32>, usize)],
    scales: &[f32],
    reduce_range: bool,
) -> f64 {
    // Each run quantizes with its own range: the mean square step over the samples.
    let samples = stats.sample_extremes();
    let step_square = (samples.iter())
        .map(|sample| {
            let (mut high, mut low) = (0f64, 0f64);
            for (e, &s) in sample.iter().zip(scales) {
                if e.min <= e.max {
                    high = high.max(f64::from(e.max) / f64::from(s));
                    low = low.min(f64::from(e.min) / f64::from(s));
                }
            }
            ((high - low) / 255.0).powi(2)
        })
        .sum::<f64>()
        / samples.len().max(1) as f64;
    let mean_squares = stats.mean_squares();
    let mut activation = 0.0;
    let mut weight = 0.0;
    for (w, n) in weights {
        let scaled: Vec<f32> = (w.chunks(*n).zip(scales))
            .flat_map(|(row, &s)| row.iter().map(move |v| v * s))
            .collect();
        let q = dynamic::quantize_weight(&scaled, [scales.len(), *n], reduce_range);
        for (j, (row, &s)) in scaled.chunks(*n).zip(scales).enumerate() {
            let s = f64::from(s);
            let row_square: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            activation += row_square; // Σ_n (s_j W_jn)²
            let rounding: f64 = (row.iter().enumerate())
                .map(|(c, &v)| {
                    let r = f64::from(q.codes[j * n + c]) * f64::from(q.scales[c]) - f64::from(v);
                    r * r
                })
                .sum();
            weight += mean_squares[j] / (s * s) * rounding;
        }
    }
    step_square / 12.0 * activation + weight
}

#[cfg(test)]
mod tests {
    use super::*;
    use kenosis_numerics::stats::ChannelAxis;

    /// Rows of `k` channels, channel 0 an outlier `outlier` times the others' spread.
    fn moments(k: usize, outlier: f32) -> ChannelMoments {
        let mut m = ChannelMoments::new(ChannelAxis::Last);
        let mut values = Vec::new();
        for r in 0..64 {
            for j in 0..k {
                let v = ((r * 7 + j * 13) % 17) as f32 / 8.0 - 1.0;
                values.push(if j == 0 { v * outlier } else { v });
            }
        }
        m.update(&[64, k as i64], &values);
        m
    }

    fn weight(k: usize, n: usize) -> Vec<f32> {
        (0..k * n)
            .map(|e| ((e * 31) % 23) as f32 / 23.0 - 0.5)
            .collect()
    }

    #[test]
    fn an_outlier_channel_is_migrated_into_the_weight() {
        let (k, n) = (64, 32);
        let stats = moments(k, 60.0);
        let w = vec![(weight(k, n), n)];
        let s = best(&stats, &w, false).expect("migration lowers the error");
        // The outlier channel is divided by far more than the others.
        let rest = s.scales[1..].iter().fold(0f32, |a, &v| a.max(v));
        assert!(s.scales[0] > 4.0 * rest, "{:?}", &s.scales[..4]);
        let none = expected_error(&stats, &w, &vec![1.0; k], false);
        assert!(expected_error(&stats, &w, &s.scales, false) < none / 4.0);
    }

    #[test]
    fn balanced_channels_are_left_alone() {
        // Every channel alike and every weight row alike: migration cannot lower the
        // activation noise, and it adds weight noise.
        let (k, n) = (32, 16);
        let stats = moments(k, 1.0);
        let w: Vec<f32> = (0..k * n)
            .map(|e| if e % 2 == 0 { 0.5 } else { -0.25 })
            .collect();
        assert_eq!(best(&stats, &[(w, n)], false), None);
    }
}
