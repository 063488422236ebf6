//! Element-wise agreement of a quantized model's output with the FP32 reference: the
//! per-value loops behind `kenosis-build`'s fidelity judge (cosine over finite elements,
//! non-finite mismatches, error relative to a range, arg-max agreement along the last axis).
//!
//! Non-finite values are compared apart: a mask table's `-inf` that the quantized model keeps
//! is agreement, not an infinite error, and one it loses (or a NaN it makes) is counted, never
//! folded into a cosine or a mean where it would print `inf` or `NaN`.

/// Agreement of one output on one sample, accumulated in `f64`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Agreement {
    /// Cosine similarity over the positions where both values are finite; 1 when both are
    /// all zero there (or no position is finite in both).
    pub cosine: f64,
    /// Positions where either value is non-finite and the two differ (`-inf` against `-inf`
    /// agrees; NaN against NaN agrees: both models mark the same position as undefined).
    pub non_finite_mismatches: u64,
    /// Sum of `|quantized - reference|` over the positions finite in both.
    pub abs_error_sum: f64,
    /// Positions finite in both.
    pub finite: u64,
}

/// Compares `quantized` with `reference` (same length; extra elements of the longer one are
/// ignored) position by position (see [`Agreement`]).
pub fn agreement(reference: &[f32], quantized: &[f32]) -> Agreement {
    let (mut dot, mut na, mut nb, mut abs) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let (mut finite, mut mismatches) = (0u64, 0u64);
    for (&a, &b) in reference.iter().zip(quantized) {
        if a.is_finite() && b.is_finite() {
            let (a, b) = (f64::from(a), f64::from(b));
            dot += a * b;
            na += a * a;
            nb += b * b;
            abs += (a - b).abs();
            finite += 1;
        } else if !(a == b || (a.is_nan() && b.is_nan())) {
            mismatches += 1;
        }
    }
    let cosine = if na == 0.0 && nb == 0.0 {
        1.0
    } else {
        dot / (na.sqrt() * nb.sqrt()).max(f64::MIN_POSITIVE)
    };
    Agreement {
        cosine,
        non_finite_mismatches: mismatches,
        abs_error_sum: abs,
        finite,
    }
}

/// Smallest and largest finite value of `values`, `None` when none is finite.
pub fn finite_range(values: &[f32]) -> Option<(f32, f32)> {
    values
        .iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, &v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// Whether every row of `row` values (> 1) is a probability distribution: non-negative
/// (to float rounding) and summing to 1 within 1e-3, as a softmax writes it.
pub fn rows_are_distributions(values: &[f32], row: usize) -> bool {
    row > 1
        && values.chunks_exact(row).all(|r| {
            r.iter().all(|&x| x >= -1e-6)
                && (r.iter().map(|&x| f64::from(x)).sum::<f64>() - 1.0).abs() <= 1e-3
        })
}

/// Arg-max agreement along the last axis, of length `row` (> 0), over the rows of
/// `reference` whose largest finite value leads the second largest by at least
/// `min_margin`: rows where FP32 itself hardly prefers one position (a background anchor's
/// near-equal class scores, a flat attention row, a row of a probability map far from any
/// object) say nothing about the quantized model's answer and are not counted.
///
/// Returns `(agreeing rows, decisive rows)`.
pub fn argmax_agreement(
    reference: &[f32],
    quantized: &[f32],
    row: usize,
    min_margin: f64,
) -> (u64, u64) {
    if row == 0 {
        return (0, 0);
    }
    let (mut agree, mut decisive) = (0u64, 0u64);
    for (a, b) in reference.chunks_exact(row).zip(quantized.chunks_exact(row)) {
        let Some((top, first, second)) = top_two(a) else {
            continue;
        };
        let margin = f64::from(first) - f64::from(second);
        if margin <= 0.0 || margin < min_margin {
            continue;
        }
        decisive += 1;
        if top_two(b).is_some_and(|(i, ..)| i == top) {
            agree += 1;
        }
    }
    (agree, decisive)
}

/// Position of the largest finite value of `row`, that value, and the second largest
/// finite value (the largest again for a one-element row).
fn top_two(row: &[f32]) -> Option<(usize, f32, f32)> {
    let mut best: Option<(usize, f32)> = None;
    let mut second = f32::NEG_INFINITY;
    for (i, &v) in row.iter().enumerate().filter(|(_, v)| v.is_finite()) {
        match best {
            Some((_, b)) if v <= b => second = second.max(v),
            Some((_, b)) => {
                second = b;
                best = Some((i, v));
            }
            None => best = Some((i, v)),
        }
    }
    let (i, first) = best?;
    let second = if second == f32::NEG_INFINITY {
        first
    } else {
        second
    };
    Some((i, first, second))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_positions_are_counted_apart_from_the_cosine() {
        let inf = f32::INFINITY;
        let a = [1.0, 2.0, -inf, f32::NAN, -inf];
        let b = [1.0, 2.0, -inf, f32::NAN, 3.0];
        let m = agreement(&a, &b);
        assert_eq!(m.non_finite_mismatches, 1);
        assert!((m.cosine - 1.0).abs() < 1e-12 && m.cosine.is_finite());
        assert_eq!(m.finite, 2);
        let off = agreement(&[1.0, 0.0], &[0.0, 1.0]);
        assert_eq!((off.cosine, off.abs_error_sum), (0.0, 2.0));
    }

    #[test]
    fn only_decisive_rows_count_for_arg_max_agreement() {
        // Row 0: clear winner kept; row 1: clear winner lost; row 2: a near tie, ignored.
        let reference = [0.0, 5.0, 1.0, 4.0, 0.0, 1.0, 2.0, 2.001, 0.0];
        let quantized = [0.0, 5.1, 1.0, 3.0, 3.5, 1.0, 2.1, 2.0, 0.0];
        assert_eq!(argmax_agreement(&reference, &quantized, 3, 0.05), (1, 2));
        assert_eq!(
            finite_range(&[f32::NEG_INFINITY, 2.0, -1.0]),
            Some((-1.0, 2.0))
        );
        assert_eq!(finite_range(&[f32::NAN]), None);
        assert!(rows_are_distributions(&[0.25, 0.75, 1.0, 0.0], 2));
        assert!(!rows_are_distributions(&[0.25, 0.70, 1.0, 0.0], 2));
        assert!(!rows_are_distributions(&[1.0], 1));
    }
}
