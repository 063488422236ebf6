//! `--images DIR --preprocess SPEC`: a folder of images as a model's samples, for
//! `quantize` (calibration) and `validate` (agreement).
//!
//! The spec is `kenosis_options::preprocess::ImagePreprocess` (the one parser); each image
//! goes through `kenosis_build::preprocess_image`, the function a build script hands to
//! `kenosis_build::calibration_images`, so the command and a build read images alike.
//! Samples stay in memory (`Calibration::Data`), in file-name order, as a folder of `.npy`
//! files would be read.

use std::path::{Path, PathBuf};

use kenosis_options::preprocess::{ImagePreprocess, Layout, Size};
use kenosis_quantize::calibrate::data::InputSpec;
use kenosis_quantize::calibrate::{CalibrationData, SampleValue};
use kenosis_quantize::onnx::DataType;

use crate::error::{Error, Result};

/// The images of `dir`, preprocessed by `spec` into samples of the model at `model` with
/// inputs `inputs`: one `[1, 3, H, W]` (or `[1, H, W, 3]`; no batch dimension when the
/// input has none) f32 sample per image file directly in `dir` (by extension, see
/// `kenosis_build::IMAGE_EXTENSIONS`), in sorted file-name order; and `spec` with its
/// size resolved (the model's when the spec gives none).
///
/// # Errors
/// [`Error::Input`] naming the model when it has not exactly one float input of rank 3 or
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
    let bar = crate::progress::bar(files.len(), "decoding images");
    let mut samples = Vec::with_capacity(files.len());
    for file in &files {
        bar.inc(1);
        let bytes = std::fs::read(file).map_err(|e| Error::Input {
            path: file.clone(),
            reason: e.to_string(),
        })?;
        let x = kenosis_build::preprocess_image(&bytes, spec, size).map_err(|e| Error::Input {
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
    bar.finish_and_clear();
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
    let bad = |reason: String| Error::Input {
        path: model.to_owned(),
        reason,
    };
    let [input] = inputs else {
        return Err(bad(format!(
            "--images feeds a model with one input; this one has {}: give .npy samples \
             (one subfolder per input)",
            inputs.len()
        )));
    };
    if input.elem_type != DataType::Float {
        return Err(bad(format!(
            "--images makes float32 samples; input `{}` is {}: give .npy samples",
            input.name, input.elem_type
        )));
    }
    let dims = &input.dims;
    let (batched, image) = match dims.len() {
        4 => (true, &dims[1..]),
        3 => (false, &dims[..]),
        rank => {
            return Err(bad(format!(
                "input `{}` has {rank} dimensions; --images feeds an image input of 3 \
                 ([C, H, W] or [H, W, C]) or 4 (with a batch first)",
                input.name
            )))
        }
    };
    if batched && dims[0].is_some_and(|n| n != 1) {
        return Err(bad(format!(
            "input `{}` takes a batch of {} images; --images makes batches of one",
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
             layout in --preprocess",
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
                "--preprocess says {}x{}, but input `{}` is {shape} ({w}x{h})",
                s.width, s.height, input.name
            )))
        }
        (Some(s), _) => s,
        (None, Some((width, height))) => Size { width, height },
        (None, None) => {
            return Err(bad(format!(
                "input `{}` is {shape}, with no fixed height and width: give the size in \
                 --preprocess (e.g. 224x224)",
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

/// The image files directly in `dir` (by `kenosis_build::IMAGE_EXTENSIONS`), sorted.
fn image_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let none = format!(
        "no images (files ending in .{}) in this folder",
        kenosis_build::IMAGE_EXTENSIONS.join(", .")
    );
    crate::samples::files_in(dir, kenosis_build::IMAGE_EXTENSIONS, &none)
}

/// `--preprocess`'s value parsed (for clap).
///
/// # Errors
/// The spec's error, with its message.
pub fn parse_spec(text: &str) -> std::result::Result<ImagePreprocess, String> {
    text.parse()
        .map_err(|e: kenosis_options::preprocess::PreprocessError| e.to_string())
}
