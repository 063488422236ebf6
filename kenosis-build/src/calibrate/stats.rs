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
}
