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
        for &v in values.iter().filter(|v| v.is_finite()) {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
    }

    /// True once at least one finite value was seen.
    pub fn is_set(&self) -> bool {
        self.min <= self.max
    }
}

/// Number of bins of a [`Histogram`].
pub const HISTOGRAM_BINS: usize = 2048;

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
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            min_max: MinMax::default(),
            origin: 0.0,
            width: 0.0,
            counts: vec![0; HISTOGRAM_BINS],
            zeros: 0,
        }
    }
}

impl Histogram {
    /// Folds `values` in (NaN/±inf ignored).
    pub fn update(&mut self, values: &[f32]) {
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
        for &v in values.iter().filter(|v| v.is_finite()) {
            let k = ((f64::from(v) - origin) * inv_width) as usize;
            self.counts[k.min(last)] += 1;
            self.zeros += u64::from(v == 0.0);
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

/// Running per-channel first and second moments of one tensor (f64 sums): the means
/// bias correction needs, and the spreads that show whether one per-tensor scale resolves
/// every channel.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelMoments {
    axis: ChannelAxis,
    sums: Vec<f64>,
    squares: Vec<f64>,
    counts: Vec<u64>,
}

impl ChannelMoments {
    /// An empty accumulator over `axis`.
    pub fn new(axis: ChannelAxis) -> Self {
        Self {
            axis,
            sums: Vec::new(),
            squares: Vec::new(),
            counts: Vec::new(),
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
        if channels == 0 || (!self.sums.is_empty() && self.sums.len() != channels) {
            return;
        }
        if self.sums.is_empty() {
            self.sums = vec![0.0; channels];
            self.squares = vec![0.0; channels];
            self.counts = vec![0; channels];
        }
        for (k, &v) in values.iter().enumerate() {
            if v.is_finite() {
                let c = (k / inner.max(1)) % channels;
                let v = f64::from(v);
                self.sums[c] += v;
                self.squares[c] += v * v;
                self.counts[c] += 1;
            }
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
}
