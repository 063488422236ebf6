//! Streaming per-tensor statistics: each batch of activations is folded into a fixed-size
//! summary and dropped, so memory does not grow with the number of samples.

/// Running minimum and maximum of one tensor over all calibration samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MinMax {
    /// Smallest finite value seen (+inf before any).
    pub min: f32,
    /// Largest finite value seen (-inf before any).
    pub max: f32,
}

impl Default for MinMax {
    fn default() -> Self {
        Self {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
        }
    }
}

impl MinMax {
    /// Folds `values` in; NaN and ±inf are ignored (they would poison the range).
    pub fn update(&mut self, values: &[f32]) {
        // Independent lanes the compiler turns into vector compares; the calibration pass
        // folds every activation of every sample through here.
        const LANES: usize = 8;
        let (mut low, mut high) = ([self.min; LANES], [self.max; LANES]);
        let chunks = values.chunks_exact(LANES);
        let rest = chunks.remainder();
        for chunk in chunks {
            for k in 0..LANES {
                let v = chunk[k];
                let finite = v.abs() <= f32::MAX;
                low[k] = if finite && v < low[k] { v } else { low[k] };
                high[k] = if finite && v > high[k] { v } else { high[k] };
            }
        }
        for &v in rest.iter().filter(|v| v.is_finite()) {
            low[0] = low[0].min(v);
            high[0] = high[0].max(v);
        }
        self.min = low.into_iter().fold(f32::INFINITY, f32::min);
        self.max = high.into_iter().fold(f32::NEG_INFINITY, f32::max);
    }

    /// True once at least one finite value was seen.
    pub fn is_set(&self) -> bool {
        self.min <= self.max
    }
}

/// Number of bins of a [`Histogram`].
pub const HISTOGRAM_BINS: usize = 2048;

/// How many of `values` are NaN or ±inf.
pub fn count_non_finite(values: &[f32]) -> u64 {
    values.iter().filter(|v| !v.is_finite()).count() as u64
}

/// A fixed-size histogram built in one streaming pass, with exact min/max alongside.
///
/// Bins are `width` wide starting at `origin`. When a value falls outside, the histogram
/// doubles its bin width, merging neighbouring bins pairwise and extending to the side the
/// value lies on; bin edges stay aligned, so no count is ever split or re-estimated. Memory
/// is `HISTOGRAM_BINS` counters per tensor whatever the number of samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Exact extremes of every finite value seen.
    pub min_max: MinMax,
    /// Left edge of bin 0.
    pub origin: f64,
    /// Width of every bin (0 until the first non-constant data).
    pub width: f64,
    /// Counts per bin.
    pub counts: Vec<u64>,
    /// How many of the counted values are exactly 0.0 (they are in `counts` too). ReLU-type
    /// outputs pile a large share there, and every range reproduces 0 exactly (it is the
    /// zero point), so range searches must be able to leave that spike out.
    pub zeros: u64,
    /// NaN and ±inf values seen (not in `counts`): a tensor that carries them (a `-inf`
    /// attention mask) cannot be quantized without losing them.
    pub non_finite: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            min_max: MinMax::default(),
            origin: 0.0,
            width: 0.0,
            counts: vec![0; HISTOGRAM_BINS],
            zeros: 0,
            non_finite: 0,
        }
    }
}

impl Histogram {
    /// Folds `values` in (NaN/±inf ignored).
    pub fn update(&mut self, values: &[f32]) {
        self.non_finite += count_non_finite(values);
        let mut batch = MinMax::default();
        batch.update(values);
        if !batch.is_set() {
            return;
        }
        self.min_max.min = self.min_max.min.min(batch.min);
        self.min_max.max = self.min_max.max.max(batch.max);
        if self.width == 0.0 {
            // First data: cover this batch's range with a little headroom.
            let span = f64::from(batch.max) - f64::from(batch.min);
            self.width = (span.max(1e-6) * 1.0001) / HISTOGRAM_BINS as f64;
            self.origin = f64::from(batch.min);
        }
        while f64::from(batch.min) < self.origin {
            self.grow(true);
        }
        while f64::from(batch.max) >= self.origin + self.width * HISTOGRAM_BINS as f64 {
            self.grow(false);
        }
        let (origin, inv_width, last) = (self.origin, 1.0 / self.width, HISTOGRAM_BINS - 1);
        let bin = |v: f32| (((f64::from(v) - origin) * inv_width) as usize).min(last);
        // Neighbouring values go to different sub-histograms: ReLU outputs are half zeros,
        // and one counter incremented for value after value waits on its own last store.
        const LANES: usize = 4;
        let mut lanes = vec![[0u32; HISTOGRAM_BINS]; LANES];
        // Lanes count in u32; a block never lets one overflow.
        for block in values.chunks(1 << 30) {
            let quads = block.chunks_exact(LANES);
            let rest = quads.remainder();
            for quad in quads {
                for (lane, &v) in lanes.iter_mut().zip(quad) {
                    if v.is_finite() {
                        lane[bin(v)] += 1;
                        self.zeros += u64::from(v == 0.0);
                    }
                }
            }
            for &v in rest.iter().filter(|v| v.is_finite()) {
                lanes[0][bin(v)] += 1;
                self.zeros += u64::from(v == 0.0);
            }
            for lane in &mut lanes {
                for (count, c) in self.counts.iter_mut().zip(lane.iter_mut()) {
                    *count += u64::from(std::mem::take(c));
                }
            }
        }
    }

    /// Doubles the bin width, extending to the left (`true`) or right.
    fn grow(&mut self, left: bool) {
        let n = HISTOGRAM_BINS;
        let mut merged = vec![0u64; n];
        let offset = if left { n } else { 0 };
        for (k, &c) in self.counts.iter().enumerate() {
            merged[(k + offset) / 2] += c;
        }
        if left {
            self.origin -= self.width * n as f64;
        }
        self.width *= 2.0;
        self.counts = merged;
    }

    /// Total number of values counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Centre of bin `k`.
    pub fn center(&self, k: usize) -> f64 {
        self.origin + (k as f64 + 0.5) * self.width
    }
}

/// Which axis of an activation holds the channels a weight's input dimension runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelAxis {
    /// Axis 1 (`N, C, ...` layout of Conv/ConvTranspose inputs).
    Second,
    /// The last axis (Gemm/MatMul inputs `[..., K]`).
    Last,
}

/// Running per-channel first and second moments and extremes of one tensor (f64 sums): the
/// means bias correction needs, the spreads that show whether one per-tensor scale resolves
/// every channel, and the mean squares and per-update extremes SmoothQuant's migration reads
/// (a dynamic quantizer takes each run's range).
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelMoments {
    axis: ChannelAxis,
    sums: Vec<f64>,
    squares: Vec<f64>,
    counts: Vec<u64>,
    /// Per update (one calibration sample), per channel.
    extremes: Vec<Vec<MinMax>>,
}

impl ChannelMoments {
    /// An empty accumulator over `axis`.
    pub fn new(axis: ChannelAxis) -> Self {
        Self {
            axis,
            sums: Vec::new(),
            squares: Vec::new(),
            counts: Vec::new(),
            extremes: Vec::new(),
        }
    }

    /// Folds in a row-major tensor of `shape`. A shape whose channel count differs from
    /// earlier updates is ignored (the means would mix unrelated channels).
    pub fn update(&mut self, shape: &[i64], values: &[f32]) {
        let (channels, inner) = match (self.axis, shape.len()) {
            (_, 0) => return,
            (ChannelAxis::Second, r) if r >= 2 => (
                shape[1] as usize,
                shape[2..].iter().product::<i64>() as usize,
            ),
            (ChannelAxis::Second, _) => return,
            (ChannelAxis::Last, r) => (shape[r - 1] as usize, 1),
        };
        if channels == 0 || inner == 0 || (!self.sums.is_empty() && self.sums.len() != channels) {
            return;
        }
        if self.sums.is_empty() {
            self.sums = vec![0.0; channels];
            self.squares = vec![0.0; channels];
            self.counts = vec![0; channels];
        }
        self.extremes.push(vec![MinMax::default(); channels]);
        let extremes = self.extremes.last_mut().expect("pushed above");
        if self.axis == ChannelAxis::Last {
            for row in values.chunks(channels) {
                for (c, &v) in row.iter().enumerate().filter(|(_, v)| v.is_finite()) {
                    let e = &mut extremes[c];
                    (e.min, e.max) = (e.min.min(v), e.max.max(v));
                    let v = f64::from(v);
                    self.sums[c] += v;
                    self.squares[c] += v * v;
                    self.counts[c] += 1;
                }
            }
            return;
        }
        // One channel's run of `inner` values at a time, each channel summed in index order.
        for (k, run) in values.chunks(inner).enumerate() {
            let c = k % channels;
            extremes[c].update(run);
            let (mut sum, mut square, mut count) = (self.sums[c], self.squares[c], 0u64);
            for v in run.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v)) {
                sum += v;
                square += v * v;
                count += 1;
            }
            self.sums[c] = sum;
            self.squares[c] = square;
            self.counts[c] += count;
        }
    }

    /// Mean per channel (0 for a channel never seen); empty before any update.
    pub fn means(&self) -> Vec<f64> {
        self.sums
            .iter()
            .zip(&self.counts)
            .map(|(&s, &n)| if n == 0 { 0.0 } else { s / n as f64 })
            .collect()
    }

    /// Mean of the squares per channel, `E[x²]` (0 for a channel never seen); empty before
    /// any update.
    pub fn mean_squares(&self) -> Vec<f64> {
        (self.squares.iter().zip(&self.counts))
            .map(|(&sq, &n)| if n == 0 { 0.0 } else { sq / n as f64 })
            .collect()
    }

    /// Smallest and largest finite value per channel of each update (unset for a channel
    /// without a finite value in it), in update order.
    pub fn sample_extremes(&self) -> &[Vec<MinMax>] {
        &self.extremes
    }

    /// Smallest and largest finite value per channel over all updates (unset for a channel
    /// never seen); empty before any update.
    pub fn extremes(&self) -> Vec<MinMax> {
        let mut all = vec![MinMax::default(); self.sums.len()];
        for sample in &self.extremes {
            for (a, e) in all.iter_mut().zip(sample) {
                (a.min, a.max) = (a.min.min(e.min), a.max.max(e.max));
            }
        }
        all
    }

    /// Population standard deviation per channel (0 for a channel never seen); empty
    /// before any update.
    pub fn std_devs(&self) -> Vec<f64> {
        self.means()
            .iter()
            .zip(self.squares.iter().zip(&self.counts))
            .map(|(&mean, (&sq, &n))| {
                if n == 0 {
                    0.0
                } else {
                    (sq / n as f64 - mean * mean).max(0.0).sqrt()
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_max_streams_and_ignores_non_finite() {
        let mut m = MinMax::default();
        assert!(!m.is_set());
        m.update(&[1.0, f32::NAN, -2.0]);
        m.update(&[f32::INFINITY, 5.0]);
        assert_eq!(
            m,
            MinMax {
                min: -2.0,
                max: 5.0
            }
        );
    }

    #[test]
    fn channel_moments_follow_the_layout() {
        // [N=1, C=2, H=1, W=2]
        let mut m = ChannelMoments::new(ChannelAxis::Second);
        m.update(&[1, 2, 1, 2], &[1.0, 3.0, -2.0, -4.0]);
        assert_eq!(m.means(), vec![2.0, -3.0]);
        assert_eq!(m.std_devs(), vec![1.0, 1.0]);
        // [N=2, K=3]
        let mut m = ChannelMoments::new(ChannelAxis::Last);
        m.update(&[2, 3], &[1.0, 2.0, 3.0, 3.0, 4.0, 5.0]);
        assert_eq!(m.means(), vec![2.0, 3.0, 4.0]);
        assert_eq!(m.std_devs(), vec![1.0, 1.0, 1.0]);
        assert_eq!(m.mean_squares(), vec![5.0, 10.0, 17.0]);
        assert_eq!(m.sample_extremes().len(), 1);
        let e = m.extremes();
        assert_eq!(
            (e[0].min, e[0].max, e[2].min, e[2].max),
            (1.0, 3.0, 3.0, 5.0)
        );
    }

    #[test]
    fn histogram_grows_without_losing_counts() {
        let mut h = Histogram::default();
        h.update(&[0.0, 1.0, 0.5]);
        h.update(&[-3.0, 10.0, f32::NAN]);
        h.update(&[100.0]);
        assert_eq!(h.total(), 6);
        assert_eq!(
            h.min_max,
            MinMax {
                min: -3.0,
                max: 100.0
            }
        );
        assert!(h.origin <= -3.0 && h.origin + h.width * HISTOGRAM_BINS as f64 > 100.0);
        // Each value sits in the bin that contains it.
        for v in [-3.0f64, 0.0, 0.5, 1.0, 10.0, 100.0] {
            let k = ((v - h.origin) / h.width) as usize;
            assert!(h.counts[k] >= 1, "value {v} not in its bin");
        }
    }

    /// Values of every kind the statistics treat apart: zeros (ReLU), non-finite, spread.
    fn activation_like(len: usize, seed: u64) -> Vec<f32> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..len)
            .map(|_| match rng.random_range(0..20) {
                0..=9 => 0.0,
                10 => f32::NAN,
                11 => f32::INFINITY,
                12 => -0.0,
                _ => rng.random_range(-3.0f32..50.0),
            })
            .collect()
    }

    #[test]
    fn lanes_count_every_value_in_its_bin() {
        let mut h = Histogram::default();
        // Sets the range, so the batches below fall inside and the bins stay put.
        h.update(&[-3.0, 50.0]);
        let mut expected = h.clone();
        for (seed, len) in [(1, 1003), (2, 7), (3, 4096), (4, 1)] {
            let values = activation_like(len, seed);
            h.update(&values);
            for &v in values.iter().filter(|v| v.is_finite()) {
                let k = ((f64::from(v) - expected.origin) * (1.0 / expected.width)) as usize;
                expected.counts[k.min(HISTOGRAM_BINS - 1)] += 1;
                expected.zeros += u64::from(v == 0.0);
            }
            expected.non_finite += values.iter().filter(|v| !v.is_finite()).count() as u64;
            assert_eq!(h, expected, "after seed {seed}");
        }
        assert!(h.zeros > 2000, "the batches are half zeros");
        assert!(h.non_finite > 400, "a tenth of the values are NaN or inf");
    }

    #[test]
    fn channel_moments_skip_non_finite_and_empty_shapes() {
        // [N=1, C=2, H=0]: nothing to fold, and no panic.
        let mut m = ChannelMoments::new(ChannelAxis::Second);
        m.update(&[1, 2, 0], &[]);
        assert!(m.means().is_empty());
        // [N=3, K=2] with a NaN in channel 0.
        let mut m = ChannelMoments::new(ChannelAxis::Last);
        m.update(&[3, 2], &[1.0, 10.0, f32::NAN, 20.0, 3.0, 30.0]);
        assert_eq!(m.means(), vec![2.0, 20.0]);
        assert_eq!((m.extremes()[0].min, m.extremes()[0].max), (1.0, 3.0));
    }
}
