//! The value range of synthetic image inputs: normalized photographs (`[-2.118, 2.64]`) or
//! raw pixels (`[0, 255]`), inferred from the model's stem Convs.
//!
//! A model's expected input scale is not written in the ONNX file: EfficientNet-Lite0 and
//! PaddleOCR rec / cls normalize to `[-1, 1]`, PP-OCR det and most torchvision models use
//! ImageNet's mean and standard deviation (about `[-2.1, 2.6]`), YOLOX reads raw 0-255
//! pixels. Calibrating on the wrong scale misplaces every activation range.
//!
//! The two normalizations are not told apart: their gains differ by only 2.2x, within the
//! spread of the statistic below across models. Normalized inputs are synthesized over
//! ImageNet's range instead, which contains `[-1, 1]`.
//!
//! Pixels are told apart from normalized inputs by the weights. A network trained with batch
//! normalization (Ioffe & Szegedy 2015) has, after the BN is folded into its first Conv,
//! per-channel outputs whose standard deviation on the training inputs is the BN's `|gamma|`:
//! of order one. So the stem Convs are run once on `[-1, 1]` fields, and the inputs are taken
//! as pixels when the median channel standard deviation gets closer to one (in log scale)
//! when multiplied by 127.5, the gain from `[-1, 1]` to `[0, 255]`, i.e. below `1/√127.5`
//! (see [`range_for_stem_std`]; the medians of the shared models of either kind lie on their
//! side of it, `docs/benchmarks.md`). A network without BatchNorm breaks the premise, so the
//! rule is a default for BN-trained networks, not a guarantee: `synthetic_image_range`
//! overrides it, and real calibration data avoids the question.

use std::collections::HashSet;
use std::path::Path;

use crate::calibrate::data::InputSpec;
use crate::calibrate::session;
use crate::calibrate::stats::ChannelAxis;
use crate::calibrate::synthetic::{synthesizes_image, synthetic_with_dims, ImageRange};
use crate::error::Result;
use crate::graph::GraphIndex;
use crate::onnx::{GraphProto, ModelProto};
use crate::ops::{self, OpRule};

/// Gain from `[-1, 1]` to `[0, 255]` (the offset does not change a standard deviation).
const PIXEL_GAIN: f64 = 127.5;

/// `[-1, 1]` fields run to measure the stem Convs' channel spread.
const PROBE_SAMPLES: usize = 2;

/// The probe fields' range: the scale [`range_for_stem_std`]'s threshold is stated in.
const PROBE_RANGE: ImageRange = ImageRange::Given {
    low: -1.0,
    high: 1.0,
};

/// The range whose stem response is closer to unit standard deviation in log scale:
/// `Pixel` when `|ln(127.5 s)| < |ln s|`, i.e. `s < 1 / sqrt(127.5)`, for the median
/// channel standard deviation `s` measured on `[-1, 1]` fields.
pub fn range_for_stem_std(median_std: f64) -> ImageRange {
    if median_std > 0.0 && median_std < PIXEL_GAIN.sqrt().recip() {
        ImageRange::Pixel
    } else {
        ImageRange::Normalized
    }
}

/// First output of each default-domain Conv reached from `input` without passing another
/// weighted op (Conv, ConvTranspose, Gemm, MatMul): the stem Convs that see the input
/// through slicing, padding, concatenation or elementwise normalization only.
pub fn stem_convs(graph: &GraphProto, index: &GraphIndex, input: &str) -> Vec<String> {
    let mut stems = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![input.to_owned()];
    while let Some(tensor) = stack.pop() {
        for &c in index.consumers_of(&tensor) {
            if !seen.insert(c) {
                continue;
            }
            let node = &graph.node[c];
            let weighted = matches!(ops::rule_of(node), OpRule::Weighted { .. });
            if weighted && node.op_type() == "Conv" {
                stems.extend(node.output.first().cloned());
            } else if !weighted {
                stack.extend(node.output.iter().filter(|o| !o.is_empty()).cloned());
            }
        }
    }
    stems
}

/// The range to synthesize for each input of `specs` (concrete `dims` as from
/// [`super::shapes::resolve`]): [`ImageRange::Normalized`] for inputs that are not synthesized as
/// images (see [`synthesizes_image`]) or reach no Conv; otherwise [`range_for_stem_std`] of
/// the median standard deviation over the channels of the input's stem Convs on
/// `PROBE_SAMPLES` `[-1, 1]` fields. `model` is the runnable (normalized, BN-folded) model.
///
/// # Errors
/// [`crate::Error::Runtime`] or [`crate::Error::Calibration`] when the probe does not run.
pub fn infer(
    model: &ModelProto,
    specs: &[InputSpec],
    dims: &[Vec<usize>],
    path: &Path,
) -> Result<Vec<ImageRange>> {
    let Some(graph) = &model.graph else {
        // No graph, no stem Conv.
        return Ok(vec![ImageRange::Normalized; specs.len()]);
    };
    let index = GraphIndex::new(graph);
    let stems: Vec<Vec<String>> = specs
        .iter()
        .zip(dims)
        .map(|(spec, dims)| {
            if synthesizes_image(spec, dims) {
                stem_convs(graph, &index, &spec.name)
            } else {
                Vec::new()
            }
        })
        .collect();
    let mut ranges = vec![ImageRange::Normalized; specs.len()];
    if stems.iter().all(Vec::is_empty) {
        return Ok(ranges);
    }
    let moments: Vec<(String, ChannelAxis)> = stems
        .iter()
        .flatten()
        .map(|t| (t.clone(), ChannelAxis::Second))
        .collect();
    let probe_ranges = vec![PROBE_RANGE; specs.len()];
    let probe = synthetic_with_dims(specs, dims, &probe_ranges, PROBE_SAMPLES, path)?;
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let observed = session::observe(
        model,
        &session::Requests {
            moments: &moments,
            ..Default::default()
        },
        &names,
        &probe.samples,
        path,
    )?;
    for (range, stems) in ranges.iter_mut().zip(&stems) {
        let mut stds: Vec<f64> = stems
            .iter()
            .filter_map(|t| observed.channel_moments.get(t))
            .flat_map(|m| m.std_devs())
            .filter(|s| *s > 0.0)
            .collect();
        if stds.is_empty() {
            continue;
        }
        stds.sort_by(f64::total_cmp);
        *range = range_for_stem_std(stds[stds.len() / 2]);
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{model, node};

    #[test]
    fn the_threshold_sits_between_measured_normalized_and_pixel_models() {
        for normalized in [1.15, 0.62, 0.47, 0.30, 0.20] {
            assert_eq!(
                range_for_stem_std(normalized),
                ImageRange::Normalized,
                "{normalized}"
            );
        }
        assert_eq!(range_for_stem_std(0.0056), ImageRange::Pixel);
        // A stem that never varies says nothing about the scale.
        assert_eq!(range_for_stem_std(0.0), ImageRange::Normalized);
        assert_eq!(ImageRange::Normalized.label(), "[-2.118, 2.64]");
        assert_eq!(PROBE_RANGE.label(), "[-1, 1]");
        assert_eq!(ImageRange::Pixel.label(), "[0, 255]");
        assert_eq!(
            ImageRange::Given {
                low: -123.0,
                high: 151.5
            }
            .label(),
            "[-123, 151.5]"
        );
    }

    #[test]
    fn stems_are_the_first_convs_past_slicing_and_normalization_only() {
        let m = model(
            vec![
                node("Slice", &["x"], "s"),
                node("Concat", &["s", "x"], "c"),
                node("Conv", &["c", "w1"], "stem"),
                node("Conv", &["stem", "w2"], "deeper"),
                node("MatMul", &["x", "w3"], "m"),
                node("Conv", &["m", "w4"], "after_matmul"),
            ],
            &["deeper", "after_matmul"],
            vec![],
        );
        let graph = m.graph.as_ref().unwrap();
        let stems = stem_convs(graph, &GraphIndex::new(graph), "x");
        assert_eq!(stems, vec!["stem".to_owned()]);
    }
}
