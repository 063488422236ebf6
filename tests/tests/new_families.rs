//! Model families Kenosis was not tuned on (issue 54), on rendered documents in a DejaVu font
//! (`kenosis_eval::documents`): each model is quantized with default options on rendered
//! inputs, and the shipped artifact is judged on other rendered inputs (never seen by the
//! build) with its family's task metric against FP32:
//! - YOLOv8n DocLayNet (layout detection, 1024x1024, boxes and class scores in one output):
//!   the share of FP32's detections an INT8 detection of the same class matches at IoU ≥ 0.5,
//!   and the INT8 detections matching none;
//! - PP-OCRv6 small rec (text lines, 48 high): the share of lines whose greedy CTC decoding
//!   is the same as FP32's;
//! - PP-OCRv6 small det (pages): the IoU of the probability map binarized at 0.3 with FP32's.
//!
//! The models come from `../shared/fetch-models.sh` (in `$KENOSIS_MODELS` or
//! `target/kenosis-models`); a test skips with a note when its model or the DejaVu fonts
//! (`fonts-dejavu-core`) are missing. Sample counts are kept small for CI's two cores.

use std::path::PathBuf;

use kenosis_eval::documents::{self, Fonts};
use kenosis_eval::*;
use kenosis_quantize::{quantize, Calibration, QuantizeOptions, Quantized};
use ndarray::Array4;
use ort::session::builder::GraphOptimizationLevel;

/// The model `name` fetched by `fetch-models.sh`, or `None` with a note.
fn fetched(name: &str) -> Option<PathBuf> {
    let path = fetched_models_dir().join(name);
    if path.is_file() {
        return Some(path);
    }
    eprintln!(
        "note: skipping, {} not found (../shared/fetch-models.sh fetches it)",
        path.display()
    );
    None
}

/// The DejaVu fonts, or `None` with a note.
fn fonts() -> Option<Fonts> {
    let fonts = documents::dejavu_fonts();
    if fonts.is_none() {
        eprintln!(
            "note: skipping, no DejaVu fonts in $KENOSIS_FONT_DIR or {:?} \
             (apt-get install fonts-dejavu-core)",
            documents::FONT_DIRS
        );
    }
    fonts
}

/// Quantizes with default options on `calibration`, checks what every family must hold
/// (a fidelity line measured on held-out samples, an artifact no larger than FP32), and
/// returns the FP32 bytes and the result.
fn quantize_default(name: &str, calibration: &[Array4<f32>]) -> Option<(Vec<u8>, Quantized)> {
    let path = fetched(name)?;
    let fp32 = std::fs::read(&path).expect("model file");
    let q = quantize(
        &path,
        &fp32,
        &Calibration::Data(calibration_data(calibration)),
        &QuantizeOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let line = q.report.summary_line();
    eprintln!("{name}: {line}");
    assert!(line.contains("held-out"), "{name}: {line}");
    assert!(
        q.bytes.len() <= fp32.len(),
        "{name}: artifact {} bytes, FP32 {}; {line}",
        q.bytes.len(),
        fp32.len()
    );
    Some((fp32, q))
}

fn calibration_data(samples: &[Array4<f32>]) -> kenosis_quantize::calibrate::CalibrationData {
    calibration(samples)
}

/// Output 0 of `bytes` on each input, flattened.
fn outputs(bytes: &[u8], inputs: &[Array4<f32>]) -> Vec<Vec<f32>> {
    let mut s = session(bytes, GraphOptimizationLevel::All, None);
    inputs.iter().map(|x| run(&mut s, x)).collect()
}

/// Document pages as YOLOv8n DocLayNet sees them: 768x1024 pages letterboxed into 1024x1024.
fn doclaynet_pages(fonts: &Fonts, seeds: std::ops::Range<u64>) -> Vec<Array4<f32>> {
    seeds
        .map(|s| documents::yolo_input(&documents::page(fonts, s, 768, 1024), 1024))
        .collect()
}

#[test]
fn yolov8n_doclaynet_keeps_fp32_detections_on_rendered_pages() {
    let Some(fonts) = fonts() else { return };
    // 10 pages calibrate (2 of them held out by the build, the fewest it holds out); 4
    // others evaluate. One page runs in about a second in FP32 on one core, and a build
    // that misses the default floor rebuilds the model once per candidate op (see
    // `kenosis_quantize::fidelity::meet_target`), so the counts are kept small.
    let calib = doclaynet_pages(&fonts, 0..10);
    let Some((fp32, q)) = quantize_default("yolov8n-doclaynet.onnx", &calib) else {
        return;
    };
    drop(calib);
    let eval = doclaynet_pages(&fonts, 1000..1004);
    let decode = |o: &Vec<f32>| documents::decode_doclaynet(o);
    let reference: Vec<_> = outputs(&fp32, &eval).iter().map(decode).collect();
    let shipped: Vec<_> = outputs(&q.bytes, &eval).iter().map(decode).collect();
    let m = (reference.iter().zip(&shipped))
        .map(|(r, s)| documents::DetectionMatch::of(r, s))
        .fold(documents::DetectionMatch::default(), |a, b| a + b);
    eprintln!(
        "yolov8n-doclaynet: {} of {} FP32 detections matched ({:.1}%), {} extra, on {} pages",
        m.matched,
        m.reference,
        100.0 * m.matched_share(),
        m.extra,
        eval.len()
    );
    // The pages must read as documents to FP32 (title, paragraphs, table, picture, ...).
    assert!(m.reference >= 5 * eval.len(), "{m:?}");
    // Floors: the detector's answer is its list of boxes, so the INT8 model must keep 9 of
    // 10 of FP32's (same class, IoU ≥ 0.5, the usual true-positive criterion) and add no
    // more than 1 in 10. A box lost or gained is a layout element a downstream parser
    // drops or invents; 10% is the margin a classifier's 90% arg-max floor
    // (`kenosis_quantize::fidelity::DEFAULT_FLOOR`) gives, applied to detections.
    assert!(m.matched_share() >= 0.9, "{m:?}");
    assert!(m.extra_share() <= 0.1, "{m:?}");
}

#[test]
#[ignore = "misses its floor: 33 of 40 rendered lines decode as FP32 does (82.5%, floor 90%), \
            with the default floor met per time step (arg-max 98% of 240 rows); see the stop \
            note of 2026-12-03"]
fn ppocr_v6_rec_decodes_rendered_lines_as_fp32_does() {
    let Some(fonts) = fonts() else { return };
    let lines = |seeds: std::ops::Range<u64>| -> Vec<Array4<f32>> {
        seeds
            .map(|s| documents::rec_input(&documents::text_line(&fonts, s), 320))
            .collect()
    };
    // 30 lines calibrate (6 held out by the build), 40 others evaluate.
    let calib = lines(0..30);
    let Some((fp32, q)) = quantize_default("ppocr-v6-rec-small.onnx", &calib) else {
        return;
    };
    let eval = lines(10_000..10_040);
    let reference = outputs(&fp32, &eval);
    let shipped = outputs(&q.bytes, &eval);
    // [1, steps, classes]: the class count is the model's last output dimension.
    let classes = 18_710;
    assert_eq!(reference[0].len() % classes, 0);
    let decoded: Vec<(Vec<usize>, Vec<usize>)> = (reference.iter().zip(&shipped))
        .map(|(r, s)| {
            (
                documents::ctc_greedy(r, classes),
                documents::ctc_greedy(s, classes),
            )
        })
        .collect();
    let same = decoded.iter().filter(|(r, s)| r == s).count();
    let nonempty = decoded.iter().filter(|(r, _)| r.len() >= 5).count();
    eprintln!(
        "ppocr-v6-rec-small: {same} of {} lines decode as FP32 does ({nonempty} with 5+ characters in FP32)",
        eval.len()
    );
    // FP32 must read the lines (two or more words each).
    assert!(nonempty == eval.len(), "{nonempty} of {}", eval.len());
    // Floor: a recognizer's answer is the string; 9 lines in 10 identical to FP32's, the
    // same 90% as the default floor's arg-max agreement, at the level of whole lines (every
    // character's arg-max must hold, so this is stricter per character).
    assert!(
        same as f64 >= 0.9 * eval.len() as f64,
        "{same} of {} lines",
        eval.len()
    );
}

#[test]
fn ppocr_v6_det_keeps_the_binarized_text_map_on_rendered_pages() {
    let Some(fonts) = fonts() else { return };
    // Pages of 576x768 (sides multiples of 32; body text 9-11 px high).
    let pages = |seeds: std::ops::Range<u64>| -> Vec<Array4<f32>> {
        seeds
            .map(|s| documents::det_input(&documents::page(&fonts, s, 576, 768)))
            .collect()
    };
    // 10 pages calibrate (2 held out), 6 others evaluate.
    let calib = pages(0..10);
    let Some((fp32, q)) = quantize_default("ppocr-v6-det-small.onnx", &calib) else {
        return;
    };
    drop(calib);
    let eval = pages(2000..2006);
    let reference = outputs(&fp32, &eval);
    let shipped = outputs(&q.bytes, &eval);
    let (mut inter, mut union) = (0u64, 0u64);
    for (r, s) in reference.iter().zip(&shipped) {
        let (i, u) = documents::binary_overlap(r, s, documents::DET_THRESHOLD);
        inter += i;
        union += u;
    }
    let text: u64 = (reference.iter().flatten())
        .filter(|&&p| p > documents::DET_THRESHOLD)
        .count() as u64;
    let pixels: usize = reference.iter().map(Vec::len).sum();
    let iou = inter as f64 / union.max(1) as f64;
    eprintln!(
        "ppocr-v6-det-small: binarized map IoU {iou:.4} on {} pages (FP32 text pixels {:.1}%)",
        eval.len(),
        100.0 * text as f64 / pixels as f64
    );
    // FP32 must find text on the pages.
    assert!(text as f64 > 0.02 * pixels as f64, "{text} of {pixels}");
    // Floor: DB post-processing turns the binarized map into text boxes, so the map is the
    // answer; 0.9 IoU keeps the boxes (a box's outline moves by a pixel or two on text a
    // dozen pixels high) where less would merge or split lines. The same 90% as above.
    assert!(iou >= 0.9, "IoU {iou:.4}");
}
