//! Detects COCO objects in an image with YOLOX-Nano, quantized to INT8 by `build.rs` and
//! embedded in this binary, and prints one line per object: class, score and box.
//!
//! ```text
//! detect [IMAGE.jpg]
//! ```
//! Without an argument it reads an image compiled into the binary (a rider on a horse).

mod preprocess;

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use image::GenericImageView;
use ndarray::{ArrayView2, Axis};

// YOLOX-Nano, quantized to INT8 by build.rs (which finds this call) and calibrated on the
// tensors build.rs wrote to `$OUT_DIR/calib`. Its typed `run` takes the f32 [1, 3, 416, 416]
// input `images` and returns the f32 [1, 3549, 85] output: per anchor, box (x, y, log w,
// log h) relative to its grid cell, objectness, and 80 class scores.
kenosis_runtime::include_quantized!(
    struct YoloxNano = "models/yolox_nano.onnx",
    calibration = "$OUT_DIR/calib",
);

const DEFAULT_IMAGE_NAME: &str = "images/000000000103.jpg (built in)";
const DEFAULT_IMAGE: &[u8] = include_bytes!("../images/000000000103.jpg");

/// Objects scoring below this (objectness × class score) are dropped.
const SCORE_THRESHOLD: f32 = 0.3;
/// Of two boxes of one class that overlap more than this (IoU), the weaker is dropped.
const NMS_IOU: f32 = 0.45;
/// YOLOX's output strides: one grid of anchors per stride, finest first.
const STRIDES: [usize; 3] = [8, 16, 32];

/// The 80 COCO classes in YOLOX's output order.
#[rustfmt::skip]
const COCO_CLASSES: [&str; 80] = [
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich",
    "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote",
    "keyboard", "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book",
    "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
];

/// One detected object.
#[derive(Debug, Clone, PartialEq)]
struct Detection {
    /// Index into [`COCO_CLASSES`].
    class: usize,
    /// Objectness × class score, in `[0, 1]`.
    score: f32,
    /// `[x0, y0, x1, y1]` in the original image's pixels.
    bbox: [f32; 4],
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("detect: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (name, bytes) = match (args.next(), args.next()) {
        (None, _) => (DEFAULT_IMAGE_NAME.to_owned(), DEFAULT_IMAGE.to_vec()),
        (Some(path), None) => {
            let bytes = std::fs::read(&path)
                .with_context(|| format!("cannot read {}", path.to_string_lossy()))?;
            (path.to_string_lossy().into_owned(), bytes)
        }
        (Some(_), Some(_)) => bail!("usage: detect [IMAGE.jpg]"),
    };
    let image = image::load_from_memory(&bytes).with_context(|| format!("cannot decode {name}"))?;
    let detections = detect(&image)?;
    println!("{name}: {} objects", detections.len());
    for d in &detections {
        let [x0, y0, x1, y1] = d.bbox;
        println!(
            "{:<14} {:>5.1}%  [{x0:>4.0}, {y0:>4.0}, {x1:>4.0}, {y1:>4.0}]",
            COCO_CLASSES[d.class],
            100.0 * d.score
        );
    }
    Ok(())
}

/// The objects in `image`, strongest first.
fn detect(image: &image::DynamicImage) -> Result<Vec<Detection>> {
    let input = preprocess::letterbox(image).insert_axis(Axis(0));
    let output = YoloxNano.run(input.view())?;
    let scale = preprocess::scale(image.width(), image.height());
    let (width, height) = image.dimensions();
    let mut found = decode(output.index_axis(Axis(0), 0), scale)?;
    for d in &mut found {
        d.bbox = clip(d.bbox, width as f32, height as f32);
    }
    Ok(non_max_suppression(found, NMS_IOU))
}

/// YOLOX's anchor-free decoding of the `[3549, 85]` output: each row belongs to one cell of the
/// stride-8, -16 and -32 grids over the 416×416 input, in that order, row-major. Boxes are
/// mapped back to the original image by dividing by the letterbox `scale`.
fn decode(rows: ArrayView2<f32>, scale: f32) -> Result<Vec<Detection>> {
    let side = preprocess::SIZE as usize;
    let cells: Vec<(usize, usize, usize)> = STRIDES
        .iter()
        .flat_map(|&s| (0..side / s).flat_map(move |y| (0..side / s).map(move |x| (x, y, s))))
        .collect();
    if rows.dim() != (cells.len(), 5 + COCO_CLASSES.len()) {
        bail!(
            "expected YOLOX output [{}, 85], got {:?}",
            cells.len(),
            rows.shape()
        );
    }
    let mut found = Vec::new();
    for (row, &(gx, gy, stride)) in rows.outer_iter().zip(&cells) {
        let (class, class_score) =
            row.iter()
                .skip(5)
                .enumerate()
                .fold(
                    (0, f32::MIN),
                    |best, (i, &p)| if p > best.1 { (i, p) } else { best },
                );
        let score = row[4] * class_score;
        if score < SCORE_THRESHOLD {
            continue;
        }
        let s = stride as f32;
        let (cx, cy) = ((row[0] + gx as f32) * s, (row[1] + gy as f32) * s);
        let (w, h) = (row[2].exp() * s, row[3].exp() * s);
        let bbox = [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0].map(|v| v / scale);
        found.push(Detection { class, score, bbox });
    }
    Ok(found)
}

/// Greedy per-class non-maximum suppression: strongest first, dropping any box that overlaps
/// a kept box of its class by more than `max_iou`.
fn non_max_suppression(mut found: Vec<Detection>, max_iou: f32) -> Vec<Detection> {
    found.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut kept: Vec<Detection> = Vec::new();
    for d in found {
        if !kept
            .iter()
            .any(|k| k.class == d.class && iou(&k.bbox, &d.bbox) > max_iou)
        {
            kept.push(d);
        }
    }
    kept
}

/// Intersection over union of two `[x0, y0, x1, y1]` boxes.
fn iou(a: &[f32; 4], b: &[f32; 4]) -> f32 {
    let area = |r: &[f32; 4]| (r[2] - r[0]).max(0.0) * (r[3] - r[1]).max(0.0);
    let inter = area(&[
        a[0].max(b[0]),
        a[1].max(b[1]),
        a[2].min(b[2]),
        a[3].min(b[3]),
    ]);
    let union = area(a) + area(b) - inter;
    if union > 0.0 {
        inter / union
    } else {
        0.0
    }
}

fn clip(b: [f32; 4], width: f32, height: f32) -> [f32; 4] {
    [
        b[0].clamp(0.0, width),
        b[1].clamp(0.0, height),
        b[2].clamp(0.0, width),
        b[3].clamp(0.0, height),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in image's objects in `images/coco-300/annotations.json` of the shared
    /// data (COCO val, image 103): class and `[left, top, right, bottom]` as fractions.
    const GROUND_TRUTH: [(&str, [f32; 4]); 2] = [
        ("horse", [0.180, 0.309, 0.767, 0.930]),
        ("person", [0.403, 0.079, 0.589, 0.615]),
    ];

    #[test]
    fn the_int8_model_finds_the_annotated_objects() {
        let image = image::load_from_memory(DEFAULT_IMAGE).unwrap();
        let (w, h) = (image.width() as f32, image.height() as f32);
        let found = detect(&image).unwrap();
        for (label, [l, t, r, b]) in GROUND_TRUTH {
            let truth = [l * w, t * h, r * w, b * h];
            let best = found
                .iter()
                .filter(|d| COCO_CLASSES[d.class] == label)
                .map(|d| iou(&d.bbox, &truth))
                .fold(0.0, f32::max);
            assert!(best >= 0.5, "{label}: best IoU {best:.2} in {found:?}");
        }
        // Nothing else is claimed with confidence.
        assert!(found.len() <= 4, "{found:?}");
    }

    #[test]
    fn letterbox_keeps_the_aspect_ratio_and_pads_with_grey() {
        // 208x104, pure red: scaled by 2 to 416x208 in the top half, grey below.
        let red = image::RgbImage::from_pixel(208, 104, image::Rgb([255, 0, 0]));
        let x = preprocess::letterbox(&image::DynamicImage::ImageRgb8(red));
        assert_eq!(x.shape(), [3, 416, 416]);
        assert_eq!(preprocess::scale(208, 104), 2.0);
        // BGR: red is channel 2.
        assert_eq!((x[[0, 100, 200]], x[[2, 100, 200]]), (0.0, 255.0));
        assert_eq!((x[[0, 300, 200]], x[[2, 300, 200]]), (114.0, 114.0));
    }

    #[test]
    fn nms_keeps_the_strongest_of_overlapping_boxes_per_class() {
        let d = |class, score, x0: f32| Detection {
            class,
            score,
            bbox: [x0, 0.0, x0 + 10.0, 10.0],
        };
        let kept = non_max_suppression(vec![d(0, 0.5, 1.0), d(0, 0.9, 0.0), d(1, 0.4, 0.0)], 0.45);
        assert_eq!(kept, [d(0, 0.9, 0.0), d(1, 0.4, 0.0)]);
        assert_eq!(iou(&[0.0, 0.0, 2.0, 2.0], &[1.0, 0.0, 3.0, 2.0]), 1.0 / 3.0);
    }

    #[test]
    fn a_non_image_is_an_error() {
        assert!(preprocess::preprocess(b"not an image").is_err());
    }
}
