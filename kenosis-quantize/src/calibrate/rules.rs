//! Rules the pipeline applies around calibration: how many samples are held out of range
//! calibration and which, when a calibrated range is outlier-dominated, and what to say when
//! ONNX Runtime rejects synthetic samples.

use std::collections::HashSet;

use crate::calibrate::data::InputSpec;
use crate::error::OrtFailure;
use crate::onnx::DataType;

/// Fewest uint8 steps the central 99% of an activation's values may span before it is
/// kept FP32 as outlier-dominated.
pub const MIN_BULK_STEPS: f64 = 8.0;

/// Fewest real calibration samples from which a fifth is held out of range calibration by
/// default, to judge the artifact on samples its ranges were not fitted to: with 10, two are
/// held out and eight calibrate. Below it every sample calibrates (and the line says so).
pub const MIN_SAMPLES_TO_HOLD_OUT: usize = 10;

/// Samples held out of range calibration to judge the artifact: a fifth, at least 1.
pub fn held_out_count(samples: usize) -> usize {
    (samples / 5).max(1).min(samples)
}

/// Moves `count` samples spread evenly over `samples` (the last of each of `count` equal
/// runs) to its end, the others keeping their order. A folder sorted by file name often
/// groups samples by kind (document pages, then photographs): a held-out tail of one kind
/// would judge a fidelity target on that kind alone.
pub fn spread_to_end<T>(samples: &mut Vec<T>, count: usize) {
    let len = samples.len();
    if count == 0 || count > len {
        return;
    }
    let held: HashSet<usize> = (0..count).map(|k| (k + 1) * len / count - 1).collect();
    let (mut kept, mut out) = (Vec::with_capacity(len - count), Vec::with_capacity(count));
    for (i, s) in samples.drain(..).enumerate() {
        if held.contains(&i) {
            out.push(s);
        } else {
            kept.push(s);
        }
    }
    kept.extend(out);
    *samples = kept;
}

/// The reason given when ONNX Runtime fails on synthetic calibration data: synthetic integer
/// inputs are token ids, which a shape, index or size input cannot take.
pub fn synthetic_rejected(specs: &[InputSpec], source: &OrtFailure) -> String {
    let ints: Vec<String> = specs
        .iter()
        .filter(|s| {
            matches!(
                s.elem_type.known(),
                Some(
                    DataType::Int64
                        | DataType::Int32
                        | DataType::Int16
                        | DataType::Int8
                        | DataType::Uint8
                )
            )
        })
        .map(|s| format!("`{}`", s.name))
        .collect();
    let tokens = if ints.is_empty() {
        String::new()
    } else {
        format!(
            "; its integer inputs ({}) were synthesized as token ids",
            ints.join(", ")
        )
    };
    format!(
        "ONNX Runtime failed on synthetic calibration data ({source}){tokens}; give calibration samples"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_out_samples_are_spread_over_the_folder_order() {
        // 44 pages then 6 photographs, as a folder sorted by name gives them.
        let mut samples: Vec<usize> = (0..50).collect();
        let count = held_out_count(samples.len());
        spread_to_end(&mut samples, count);
        let held = &samples[50 - count..];
        assert_eq!(held, [4, 9, 14, 19, 24, 29, 34, 39, 44, 49]);
        assert!(held.iter().any(|&i| i < 44) && held.iter().any(|&i| i >= 44));
        // The others keep their order, and nothing is lost.
        assert!(samples[..50 - count].windows(2).all(|w| w[0] < w[1]));
        let mut all = samples.clone();
        all.sort_unstable();
        assert_eq!(all, (0..50).collect::<Vec<_>>());
    }
}
