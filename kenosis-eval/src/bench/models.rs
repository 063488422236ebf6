//! The benchmarked models, their image sets and preprocessing.

use std::path::{Path, PathBuf};

use kenosis_eval::{coco_files, imagenet_files, load_image, Preprocess};

use super::measure::Columns;
use ndarray::{Array4, Axis};

/// Which images a model is calibrated and evaluated on, and how they become its input.
#[derive(Debug, Clone, Copy)]
pub enum Inputs {
    /// `images/imagenet-224`, 1x3x224x224, with the classifier's preprocessing.
    ImageNet(Preprocess),
    /// `images/coco-300`, YOLOX preprocessing to 1x3x416x416 BGR 0-255 (see [`load_coco`]).
    Coco416,
}

/// One benchmarked model.
#[derive(Debug, Clone, Copy)]
pub struct ModelSpec {
    /// Name used with `--models`.
    pub key: &'static str,
    /// File under `models/`.
    pub file: &'static str,
    /// Human-readable preprocessing, for the report.
    pub preprocessing: &'static str,
    pub inputs: Inputs,
    /// Top-1 agreement is meaningful (a classifier); otherwise only cosine is reported.
    pub classifier: bool,
    /// Output columns compared separately (secondary metric).
    pub score_columns: Option<Columns>,
    /// `min_cosine` of an extra Kenosis build with a fidelity target, if the bench makes one.
    pub fidelity_target: Option<f64>,
}

pub const MODELS: [ModelSpec; 3] = [
    ModelSpec {
        key: "efficientnet-lite0",
        file: "efficientnet_lite0.onnx",
        preprocessing: "imagenet-224, RGB, (x-127)/128",
        inputs: Inputs::ImageNet(Preprocess::RgbCentered),
        classifier: true,
        score_columns: None,
        fidelity_target: Some(0.995),
    },
    ModelSpec {
        key: "squeezenet1.0",
        file: "squeezenet1.0.onnx",
        preprocessing: "imagenet-224, BGR, x-[104,117,123]",
        inputs: Inputs::ImageNet(Preprocess::BgrMeanSubtracted),
        classifier: true,
        score_columns: None,
        fidelity_target: Some(0.998),
    },
    ModelSpec {
        key: "yolox-nano",
        file: "yolox_nano.onnx",
        preprocessing: "coco-300, YOLOX letterbox to 416x416 (scale to fit, top-left, pad 114; \
                        the 300x300 images make it a plain bilinear resize), BGR 0-255",
        inputs: Inputs::Coco416,
        classifier: false,
        // Rows of [x, y, log w, log h, objectness, 80 class scores] (not decoded): the box
        // regression dominates the raw output's norm, so the scores get their own cosine.
        score_columns: Some(Columns {
            width: 85,
            start: 4,
            end: 85,
        }),
        fidelity_target: None,
    },
];

/// Looks a model up by key, file name or file stem (`squeezenet`, `yolox_nano`, ... too).
pub fn find(name: &str) -> Option<ModelSpec> {
    let norm = |s: &str| s.to_ascii_lowercase().replace(['_', '.'], "-");
    let n = norm(name.trim_end_matches(".onnx"));
    MODELS.iter().copied().find(|m| {
        norm(m.key) == n
            || norm(m.file.trim_end_matches(".onnx")) == n
            || norm(m.key).starts_with(&n) && !n.is_empty()
    })
}

impl ModelSpec {
    /// The image files in sorted order: the first 100 calibrate, the rest evaluate.
    pub fn files(&self, shared: &Path) -> Vec<PathBuf> {
        match self.inputs {
            Inputs::ImageNet(_) => imagenet_files(shared),
            Inputs::Coco416 => coco_files(shared),
        }
    }

    /// The model input for one image file, batch of one.
    pub fn load(&self, path: &Path) -> Array4<f32> {
        match self.inputs {
            Inputs::ImageNet(pre) => load_image(path, pre).insert_axis(Axis(0)),
            Inputs::Coco416 => load_coco(path, 416),
        }
    }

    /// Image set name, for the report.
    pub fn image_set(&self) -> &'static str {
        match self.inputs {
            Inputs::ImageNet(_) => "imagenet-224",
            Inputs::Coco416 => "coco-300",
        }
    }
}

/// YOLOX's `preproc`: scale to fit `size`x`size` keeping the aspect ratio (bilinear), place
/// at the top-left of a canvas filled with 114, BGR, 0-255 floats, no normalization.
pub fn load_coco(path: &Path, size: u32) -> Array4<f32> {
    let img = image::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_rgb8();
    let (w, h) = img.dimensions();
    let r = (size as f32 / w as f32).min(size as f32 / h as f32);
    let (nw, nh) = (
        ((w as f32 * r) as u32).clamp(1, size),
        ((h as f32 * r) as u32).clamp(1, size),
    );
    let img = image::imageops::resize(&img, nw, nh, image::imageops::FilterType::Triangle);
    let s = size as usize;
    let mut out = Array4::<f32>::from_elem((1, 3, s, s), 114.0);
    for (x, y, p) in img.enumerate_pixels() {
        for c in 0..3 {
            out[[0, 2 - c, y as usize, x as usize]] = f32::from(p[c]);
        }
    }
    out
}
