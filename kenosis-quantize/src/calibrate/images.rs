//! A folder of images as a model's samples: a call site's `calibration_images` with its
//! `preprocess` spec, and the `kenosis` command's `--images DIR --preprocess SPEC`.
//!
//! The spec is `kenosis_options::preprocess::ImagePreprocess` (the one parser); each image
//! goes through `kenosis_request::images::preprocess_image`, the function
//! `kenosis_build::image_preprocessor` hands a build script's `calibration_images`, so the
//! command and every build read images alike. Samples stay in memory, in file-name order,
//! as a folder of `.npy` files would be read.

use std::path::Path;

use kenosis_options::preprocess::{ImagePreprocess, Layout, Size};
use kenosis_request::images::preprocess_image;

use crate::calibrate::data::InputSpec;
use crate::calibrate::{CalibrationData, SampleValue};
use crate::error::{Error, Result};
use crate::model_files::image_files;
use crate::onnx::DataType;

/// The images of `dir`, preprocessed by `spec` into samples of the model at `model` with
/// inputs `inputs`: one `[1, 3, H, W]` (or `[1, H, W, 3]`; no batch dimension when the
/// input has none) f32 sample per image file directly in `dir` (by extension, see
/// `kenosis_request::model_files::IMAGE_EXTENSIONS`), in sorted file-name order; and `spec` with its
/// size resolved (the model's when the spec gives none).
///
/// # Errors
/// [`Error::Calibration`] naming the model when it has not exactly one float input of rank 3 or
/// 4 with three channels where `spec`'s layout puts them, when the spec's size differs
/// from the input's declared one or neither gives one; naming `dir` when it cannot be
/// listed or holds no image; naming the image that cannot be read or decoded.
pub fn samples(
    dir: &Path,
    spec: &ImagePreprocess,
    model: &Path,
    inputs: &[InputSpec],
) -> Result<(CalibrationData, ImagePreprocess)> {
    let (size, batched) = fit_input(spec, model, inputs)?;
    let files = image_files(dir)?;
    let mut samples = Vec::with_capacity(files.len());
    for file in &files {
        let bytes = std::fs::read(file).map_err(|e| Error::io(file, e))?;
        let x = preprocess_image(&bytes, spec, size).map_err(|e| Error::Calibration {
            path: file.clone(),
            reason: format!("cannot be decoded: {e}"),
        })?;
        let x = if batched {
            x.insert_axis(ndarray::Axis(0)).into_dyn()
        } else {
            x.into_dyn()
        };
        samples.push(vec![SampleValue::F32(x)]);
    }
    let data = CalibrationData {
        samples,
        files,
        synthetic: false,
    };
    let resolved = ImagePreprocess {
        size: Some(size),
        ..spec.clone()
    };
    Ok((data, resolved))
}

/// The image size to produce for the model's one input, and whether it has a batch
/// dimension.
fn fit_input(spec: &ImagePreprocess, model: &Path, inputs: &[InputSpec]) -> Result<(Size, bool)> {
    let bad = |reason: String| Error::Calibration {
        path: model.to_owned(),
        reason,
    };
    let [input] = inputs else {
        return Err(bad(format!(
            "image samples feed a model with one input; this one has {}: give .npy samples \
             (one subfolder per input)",
            inputs.len()
        )));
    };
    if input.elem_type != DataType::Float {
        return Err(bad(format!(
            "image samples are float32; input `{}` is {}: give .npy samples",
            input.name, input.elem_type
        )));
    }
    let dims = &input.dims;
    let (batched, image) = match dims.len() {
        4 => (true, &dims[1..]),
        3 => (false, &dims[..]),
        rank => {
            return Err(bad(format!(
                "input `{}` has {rank} dimensions; image samples feed an image input of 3 \
                 ([C, H, W] or [H, W, C]) or 4 (with a batch first)",
                input.name
            )))
        }
    };
    if batched && dims[0].is_some_and(|n| n != 1) {
        return Err(bad(format!(
            "input `{}` takes a batch of {} images; image samples are batches of one",
            input.name,
            dims[0].unwrap_or_default()
        )));
    }
    let (c, h, w) = match spec.layout {
        Layout::Nchw => (image[0], image[1], image[2]),
        Layout::Nhwc => (image[2], image[0], image[1]),
    };
    let shape = describe(dims);
    if c.is_some_and(|c| c != 3) {
        return Err(bad(format!(
            "input `{}` is {shape}: with {} its channel dimension is {}, not 3; check the \
             layout in the preprocessing spec",
            input.name,
            match spec.layout {
                Layout::Nchw => "nchw",
                Layout::Nhwc => "nhwc",
            },
            c.unwrap_or_default()
        )));
    }
    let declared = match (w, h) {
        (Some(w), Some(h)) => u32::try_from(w).ok().zip(u32::try_from(h).ok()),
        _ => None,
    };
    let size = match (spec.size, declared) {
        (Some(s), Some((w, h))) if (s.width, s.height) != (w, h) => {
            return Err(bad(format!(
                "the preprocessing spec says {}x{}, but input `{}` is {shape} ({w}x{h})",
                s.width, s.height, input.name
            )))
        }
        (Some(s), _) => s,
        (None, Some((width, height))) => Size { width, height },
        (None, None) => {
            return Err(bad(format!(
                "input `{}` is {shape}, with no fixed height and width: give the size in \
                 the preprocessing spec (e.g. 224x224)",
                input.name
            )))
        }
    };
    Ok((size, batched))
}

/// `[1, 3, 224, 224]`, `?` for a symbolic dimension.
fn describe(dims: &[Option<i64>]) -> String {
    let dims: Vec<String> = (dims.iter())
        .map(|d| d.map_or_else(|| "?".into(), |d| d.to_string()))
        .collect();
    format!("[{}]", dims.join(", "))
}
