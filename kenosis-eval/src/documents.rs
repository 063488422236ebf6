//! Rendered documents for the model families that read them (issue 54): document pages for a
//! layout detector (YOLOv8n DocLayNet) and a text detector (PP-OCRv6 det), text lines for a
//! text recognizer (PP-OCRv6 rec), drawn in a DejaVu font from a seed; each family's input
//! preprocessing; and each family's task metric against FP32: detections matched by IoU,
//! exact CTC decode agreement, IoU of the binarized probability map.
//!
//! The fonts are the system's DejaVu TrueType files (Debian's `fonts-dejavu-core`), looked
//! up in `$KENOSIS_FONT_DIR` and the usual font folders ([`dejavu_fonts`]). Everything else is
//! deterministic: the same seed draws the same page on every machine with the same fonts.

use std::path::{Path, PathBuf};

use ab_glyph::{point, Font, FontVec, PxScale, ScaleFont};
use image::{Rgb, RgbImage};
use ndarray::Array4;

use crate::Uniform;

/// Folders searched for the DejaVu fonts after `$KENOSIS_FONT_DIR`.
pub const FONT_DIRS: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu",
    "/usr/share/fonts/TTF",
    "/usr/share/fonts/dejavu",
    "/usr/share/fonts/truetype",
    "/usr/local/share/fonts",
];

/// The DejaVu faces the pages and lines are drawn in.
pub struct Fonts {
    /// DejaVu Sans.
    pub sans: FontVec,
    /// DejaVu Sans Bold (titles, headers).
    pub bold: FontVec,
    /// DejaVu Serif, or Sans where Serif is missing.
    pub serif: FontVec,
    /// DejaVu Sans Mono, or Sans where Mono is missing.
    pub mono: FontVec,
    /// The folder they were read from.
    pub dir: PathBuf,
}

fn read_font(dir: &Path, file: &str) -> Option<FontVec> {
    FontVec::try_from_vec(std::fs::read(dir.join(file)).ok()?).ok()
}

/// The DejaVu fonts from `$KENOSIS_FONT_DIR` or the first of [`FONT_DIRS`] holding
/// `DejaVuSans.ttf` and `DejaVuSans-Bold.ttf`; `None` when no folder has them (the caller
/// skips, saying so: `apt-get install fonts-dejavu-core` provides them).
pub fn dejavu_fonts() -> Option<Fonts> {
    let dirs = std::env::var_os("KENOSIS_FONT_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain(FONT_DIRS.iter().map(PathBuf::from));
    for dir in dirs {
        let (Some(sans), Some(bold)) = (
            read_font(&dir, "DejaVuSans.ttf"),
            read_font(&dir, "DejaVuSans-Bold.ttf"),
        ) else {
            continue;
        };
        let serif = read_font(&dir, "DejaVuSerif.ttf")
            .or_else(|| read_font(&dir, "DejaVuSans.ttf"))
            .expect("read above");
        let mono = read_font(&dir, "DejaVuSansMono.ttf")
            .or_else(|| read_font(&dir, "DejaVuSans.ttf"))
            .expect("read above");
        return Some(Fonts {
            sans,
            bold,
            serif,
            mono,
            dir,
        });
    }
    None
}

/// Words the pages and lines are made of: running English with figures, as reports have.
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "this",
    "are",
    "from",
    "or",
    "have",
    "an",
    "they",
    "which",
    "one",
    "were",
    "all",
    "we",
    "their",
    "been",
    "has",
    "more",
    "when",
    "there",
    "can",
    "other",
    "model",
    "data",
    "results",
    "table",
    "figure",
    "analysis",
    "method",
    "section",
    "value",
    "measured",
    "sample",
    "rate",
    "system",
    "energy",
    "report",
    "annual",
    "growth",
    "market",
    "revenue",
    "total",
    "increase",
    "during",
    "period",
    "compared",
    "previous",
    "year",
    "quarter",
    "average",
    "temperature",
    "pressure",
    "density",
    "network",
    "layer",
    "training",
    "accuracy",
    "error",
    "baseline",
    "proposed",
    "approach",
    "shows",
    "between",
    "within",
    "across",
    "under",
    "standard",
    "deviation",
    "observed",
    "expected",
    "estimate",
    "following",
    "described",
    "above",
    "below",
    "these",
    "those",
    "each",
    "several",
    "however",
    "therefore",
    "moreover",
    "respectively",
    "significant",
    "customer",
    "service",
    "product",
    "operating",
    "income",
    "net",
    "cash",
    "flow",
    "assets",
    "company",
    "board",
    "directors",
    "meeting",
    "policy",
    "research",
    "development",
    "university",
    "journal",
    "experiment",
    "protocol",
    "patients",
    "treatment",
    "clinical",
    "trial",
    "2019",
    "2021",
    "2023",
    "12.5%",
    "3.14",
    "(n=48)",
    "Fig.",
    "et",
    "al.",
    "i.e.",
    "e.g.",
];

/// `min` to `min + spread - 1` words drawn from [`WORDS`], space-separated, the first
/// capitalized.
fn sentence(rng: &mut Uniform, min: usize, spread: usize) -> String {
    let n = min + pick(rng, spread);
    let mut s = String::new();
    for i in 0..n {
        let w = WORDS[pick(rng, WORDS.len())];
        if i == 0 {
            let mut c = w.chars();
            if let Some(f) = c.next() {
                s.extend(f.to_uppercase());
                s.push_str(c.as_str());
            }
        } else {
            s.push(' ');
            s.push_str(w);
        }
    }
    s
}

/// A uniform index below `n`.
fn pick(rng: &mut Uniform, n: usize) -> usize {
    (((rng.draw() + 1.0) * 0.5 * n as f32) as usize).min(n - 1)
}

/// A uniform value in `[lo, hi)`.
fn between(rng: &mut Uniform, lo: f32, hi: f32) -> f32 {
    lo + (rng.draw() + 1.0) * 0.5 * (hi - lo)
}

/// Width in pixels of `text` in `font` at `px` pixels.
pub fn text_width(font: &FontVec, px: f32, text: &str) -> f32 {
    let scaled = font.as_scaled(PxScale::from(px));
    let mut width = 0.0;
    let mut last = None;
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(l) = last {
            width += scaled.kern(l, id);
        }
        width += scaled.h_advance(id);
        last = Some(id);
    }
    width
}

/// Draws `text` in `font` at `px` pixels with its top at `(x, top)`, blending `color` over
/// the image by glyph coverage; returns the advance width.
pub fn draw_text(
    img: &mut RgbImage,
    font: &FontVec,
    px: f32,
    x: f32,
    top: f32,
    text: &str,
    color: [u8; 3],
) -> f32 {
    let scaled = font.as_scaled(PxScale::from(px));
    let baseline = top + scaled.ascent();
    let mut caret = x;
    let mut last = None;
    let (w, h) = img.dimensions();
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(l) = last {
            caret += scaled.kern(l, id);
        }
        let glyph = id.with_scale_and_position(px, point(caret, baseline));
        caret += scaled.h_advance(id);
        last = Some(id);
        let Some(outline) = font.outline_glyph(glyph) else {
            continue;
        };
        let b = outline.px_bounds();
        outline.draw(|gx, gy, coverage| {
            let (px_x, px_y) = (
                b.min.x as i64 + i64::from(gx),
                b.min.y as i64 + i64::from(gy),
            );
            if px_x < 0 || px_y < 0 || px_x >= i64::from(w) || px_y >= i64::from(h) {
                return;
            }
            let p = img.get_pixel_mut(px_x as u32, px_y as u32);
            let a = coverage.clamp(0.0, 1.0);
            for (ch, col) in p.0.iter_mut().zip(color) {
                *ch = (f32::from(*ch) * (1.0 - a) + f32::from(col) * a).round() as u8;
            }
        });
    }
    caret - x
}

fn fill_rect(img: &mut RgbImage, x0: u32, y0: u32, x1: u32, y1: u32, color: [u8; 3]) {
    let (w, h) = img.dimensions();
    for y in y0.min(h)..y1.min(h) {
        for x in x0.min(w)..x1.min(w) {
            img.put_pixel(x, y, Rgb(color));
        }
    }
}

/// Lines of words from `rng` filling `width` pixels at `px`: `lines` lines, the last one
/// shorter.
fn wrapped(rng: &mut Uniform, font: &FontVec, px: f32, width: f32, lines: usize) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..lines {
        let limit = if i + 1 == lines {
            width * between(rng, 0.3, 0.8)
        } else {
            width
        };
        let mut line = String::new();
        loop {
            let w = WORDS[pick(rng, WORDS.len())];
            let next = if line.is_empty() {
                w.to_owned()
            } else {
                format!("{line} {w}")
            };
            if text_width(font, px, &next) > limit {
                break;
            }
            line = next;
        }
        out.push(line);
    }
    out
}

/// A document page of `width` x `height` pixels drawn from `seed`: white paper with a page
/// header, a title, section headers, paragraphs, a table (a ruled grid of cells with words and
/// figures), a picture (a shaded block with shapes) with its caption, and a page number, in
/// an order and with sizes drawn from the seed. Text sizes scale with `width` (13 px body
/// text at 768 px, a page at about 90 dpi).
pub fn page(fonts: &Fonts, seed: u64, width: u32, height: u32) -> RgbImage {
    let mut rng = Uniform(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let s = width as f32 / 768.0;
    let mut img = RgbImage::from_pixel(width, height, Rgb([255, 255, 255]));
    let margin = (between(&mut rng, 50.0, 80.0) * s).round();
    let text_w = width as f32 - 2.0 * margin;
    let ink = [20, 20, 20];
    let body = between(&mut rng, 12.0, 15.0) * s;
    let serif = rng.draw() > 0.0;
    let body_font = if serif { &fonts.serif } else { &fonts.sans };

    // Page header, in gray.
    let header = sentence(&mut rng, 4, 3);
    draw_text(
        &mut img,
        &fonts.sans,
        10.0 * s,
        margin,
        24.0 * s,
        &header,
        [110; 3],
    );
    let mut y = margin + 10.0 * s;

    // Title, one or two lines.
    let title_px = between(&mut rng, 24.0, 32.0) * s;
    let title_lines = 1 + pick(&mut rng, 2);
    for line in wrapped(&mut rng, &fonts.bold, title_px, text_w * 0.9, title_lines) {
        draw_text(&mut img, &fonts.bold, title_px, margin, y, &line, ink);
        y += title_px * 1.3;
    }
    y += body;

    let bottom = height as f32 - margin - 20.0 * s;
    let mut blocks = 0;
    let mut figure = 1;
    while y < bottom - 4.0 * body {
        let kind = if blocks == 0 { 0 } else { pick(&mut rng, 6) };
        blocks += 1;
        match kind {
            // A section header and a paragraph.
            0..=2 => {
                if kind == 0 {
                    let px = body * 1.35;
                    let text = format!("{}. {}", blocks, sentence(&mut rng, 2, 3));
                    draw_text(&mut img, &fonts.bold, px, margin, y, &text, ink);
                    y += px * 1.8;
                }
                let lines = 3 + pick(&mut rng, 6);
                for line in wrapped(&mut rng, body_font, body, text_w, lines) {
                    if y + body > bottom {
                        break;
                    }
                    draw_text(&mut img, body_font, body, margin, y, &line, ink);
                    y += body * 1.45;
                }
                y += body;
            }
            // A table: a ruled grid with a bold header row.
            3 => {
                let cols = 3 + pick(&mut rng, 3);
                let rows = 3 + pick(&mut rng, 5);
                let row_h = body * 1.8;
                if y + row_h * rows as f32 > bottom {
                    continue;
                }
                let col_w = text_w / cols as f32;
                for r in 0..=rows {
                    let ry = (y + r as f32 * row_h) as u32;
                    fill_rect(
                        &mut img,
                        margin as u32,
                        ry,
                        (margin + text_w) as u32,
                        ry + 1,
                        ink,
                    );
                }
                for c in 0..=cols {
                    let cx = (margin + c as f32 * col_w) as u32;
                    let y1 = (y + rows as f32 * row_h) as u32 + 1;
                    fill_rect(&mut img, cx, y as u32, cx + 1, y1, ink);
                }
                for r in 0..rows {
                    for c in 0..cols {
                        let text = if r == 0 {
                            sentence(&mut rng, 1, 1)
                        } else if c == 0 {
                            WORDS[pick(&mut rng, WORDS.len())].to_owned()
                        } else {
                            format!("{:.1}", between(&mut rng, 0.0, 999.0))
                        };
                        let font = if r == 0 { &fonts.bold } else { body_font };
                        let px = body * 0.95;
                        let tx = margin + c as f32 * col_w + 0.3 * body;
                        let ty = y + r as f32 * row_h + 0.4 * body;
                        let fits: String = text
                            .chars()
                            .take_while({
                                let mut w = 0.0;
                                move |ch| {
                                    w += text_width(font, px, &ch.to_string());
                                    w < col_w - 0.6 * body
                                }
                            })
                            .collect();
                        draw_text(&mut img, font, px, tx, ty, &fits, ink);
                    }
                }
                y += row_h * rows as f32 + body * 1.5;
            }
            // A picture: a shaded block with shapes, and its caption.
            4 => {
                let pw = text_w * between(&mut rng, 0.5, 1.0);
                let ph = pw * between(&mut rng, 0.4, 0.75);
                if y + ph + 3.0 * body > bottom {
                    continue;
                }
                let x0 = margin + (text_w - pw) / 2.0;
                let base = [
                    between(&mut rng, 60.0, 200.0),
                    between(&mut rng, 60.0, 200.0),
                    between(&mut rng, 60.0, 200.0),
                ];
                for py in 0..ph as u32 {
                    for px in 0..pw as u32 {
                        let t = px as f32 / pw + py as f32 / ph;
                        let c = base.map(|b| (b + 40.0 * (t - 1.0)).clamp(0.0, 255.0) as u8);
                        img.put_pixel(x0 as u32 + px, y as u32 + py, Rgb(c));
                    }
                }
                for _ in 0..3 + pick(&mut rng, 4) {
                    let (cx, cy) = (
                        between(&mut rng, 0.1, 0.9) * pw,
                        between(&mut rng, 0.1, 0.9) * ph,
                    );
                    let r = between(&mut rng, 0.05, 0.2) * ph;
                    let color = [
                        pick(&mut rng, 256) as u8,
                        pick(&mut rng, 256) as u8,
                        pick(&mut rng, 256) as u8,
                    ];
                    for py in (cy - r).max(0.0) as u32..(cy + r).min(ph) as u32 {
                        for px in (cx - r).max(0.0) as u32..(cx + r).min(pw) as u32 {
                            let (dx, dy) = (px as f32 - cx, py as f32 - cy);
                            if dx * dx + dy * dy <= r * r {
                                img.put_pixel(x0 as u32 + px, y as u32 + py, Rgb(color));
                            }
                        }
                    }
                }
                y += ph + 0.6 * body;
                let caption = format!("Figure {figure}: {}", sentence(&mut rng, 5, 6));
                figure += 1;
                draw_text(&mut img, body_font, body * 0.9, x0, y, &caption, ink);
                y += body * 2.5;
            }
            // A list: bulleted items.
            _ => {
                for _ in 0..2 + pick(&mut rng, 4) {
                    if y + body > bottom {
                        break;
                    }
                    let item = sentence(&mut rng, 4, 6);
                    draw_text(&mut img, body_font, body, margin + body, y, "\u{2022}", ink);
                    draw_text(
                        &mut img,
                        body_font,
                        body,
                        margin + 2.2 * body,
                        y,
                        &item,
                        ink,
                    );
                    y += body * 1.6;
                }
                y += body;
            }
        }
    }
    // Page number.
    let number = format!("{}", 1 + pick(&mut rng, 300));
    let nx = (width as f32 - text_width(&fonts.sans, 11.0 * s, &number)) / 2.0;
    draw_text(
        &mut img,
        &fonts.sans,
        11.0 * s,
        nx,
        height as f32 - margin * 0.6,
        &number,
        [60; 3],
    );
    img
}

/// One text line 48 pixels high drawn from `seed`: two to six words (and figures) in one of
/// the DejaVu faces at 26-34 px, dark ink on light paper, with a few pixels of margin: what a
/// text detector's crop hands the recognizer.
pub fn text_line(fonts: &Fonts, seed: u64) -> RgbImage {
    let mut rng = Uniform(seed.wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1);
    let text = sentence(&mut rng, 2, 5);
    let font = [&fonts.sans, &fonts.serif, &fonts.mono, &fonts.bold][pick(&mut rng, 4)];
    let px = between(&mut rng, 26.0, 34.0);
    let pad = between(&mut rng, 4.0, 12.0);
    let w = (text_width(font, px, &text) + 2.0 * pad).ceil() as u32;
    let paper = [pick(&mut rng, 40) as u8 + 215; 3];
    let ink = [pick(&mut rng, 60) as u8; 3];
    let mut img = RgbImage::from_pixel(w, 48, Rgb(paper));
    let top = (48.0 - px * 1.16) / 2.0 + between(&mut rng, -2.0, 2.0);
    draw_text(&mut img, font, px, pad, top, &text, ink);
    img
}

/// Ultralytics' YOLOv8 input: letterboxed into `size` x `size` (scaled to fit, centred,
/// padding 114), RGB, 0-1.
pub fn yolo_input(img: &RgbImage, size: u32) -> Array4<f32> {
    let (w, h) = img.dimensions();
    let r = (size as f32 / w as f32).min(size as f32 / h as f32);
    let (nw, nh) = (
        ((w as f32 * r).round() as u32).clamp(1, size),
        ((h as f32 * r).round() as u32).clamp(1, size),
    );
    let resized;
    let img = if (nw, nh) == (w, h) {
        img
    } else {
        resized = image::imageops::resize(img, nw, nh, image::imageops::FilterType::Triangle);
        &resized
    };
    let (ox, oy) = ((size - nw) / 2, (size - nh) / 2);
    let s = size as usize;
    let mut out = Array4::<f32>::from_elem((1, 3, s, s), 114.0 / 255.0);
    for (x, y, p) in img.enumerate_pixels() {
        for c in 0..3 {
            out[[0, c, (y + oy) as usize, (x + ox) as usize]] = f32::from(p[c]) / 255.0;
        }
    }
    out
}

/// PaddleOCR's det input: BGR, ImageNet's mean and standard deviation (listed in RGB order,
/// applied to the BGR channels as PaddleOCR's `NormalizeImage` does). The page's sides must
/// be multiples of 32.
pub fn det_input(img: &RgbImage) -> Array4<f32> {
    const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
    const STD: [f32; 3] = [0.229, 0.224, 0.225];
    let (w, h) = img.dimensions();
    assert!(
        w % 32 == 0 && h % 32 == 0,
        "{w}x{h}: sides must be multiples of 32"
    );
    let mut out = Array4::<f32>::zeros((1, 3, h as usize, w as usize));
    for (x, y, p) in img.enumerate_pixels() {
        for c in 0..3 {
            out[[0, c, y as usize, x as usize]] = (f32::from(p[2 - c]) / 255.0 - MEAN[c]) / STD[c];
        }
    }
    out
}

/// PaddleOCR's rec input (`resize_norm_img`): scaled to 48 high keeping the aspect ratio, at
/// most `width` wide, BGR, `(x / 255 - 0.5) / 0.5`, padded on the right with zeros to `width`.
pub fn rec_input(img: &RgbImage, width: u32) -> Array4<f32> {
    let (w, h) = img.dimensions();
    let nw = ((48.0 * w as f32 / h as f32).ceil() as u32).clamp(1, width);
    let img = image::imageops::resize(img, nw, 48, image::imageops::FilterType::Triangle);
    let mut out = Array4::<f32>::zeros((1, 3, 48, width as usize));
    for (x, y, p) in img.enumerate_pixels() {
        for c in 0..3 {
            out[[0, c, y as usize, x as usize]] = (f32::from(p[2 - c]) / 255.0 - 0.5) / 0.5;
        }
    }
    out
}

/// One detection: class, confidence and corners `[x1, y1, x2, y2]` in input pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Detection {
    /// Class index.
    pub class: usize,
    /// Its score.
    pub score: f32,
    /// Corners in input pixels.
    pub corners: [f32; 4],
}

/// Intersection over union of two boxes given by corners.
pub fn iou(a: &[f32; 4], b: &[f32; 4]) -> f32 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = w * h;
    let union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
    if union > 0.0 {
        inter / union
    } else {
        0.0
    }
}

/// Confidence threshold of [`decode_yolo`] (Ultralytics' default for prediction).
pub const YOLO_CONFIDENCE: f32 = 0.25;
/// NMS IoU threshold of [`decode_yolo`] (Ultralytics' default for prediction).
pub const YOLO_NMS_IOU: f32 = 0.45;

/// The detections of YOLOv8n DocLayNet's output `[1, 4 + 11, anchors]`: [`decode_yolo`] with
/// [`DOCLAYNET_CLASSES`] at [`YOLO_CONFIDENCE`] and [`YOLO_NMS_IOU`].
pub fn decode_doclaynet(output: &[f32]) -> Vec<Detection> {
    decode_yolo(
        output,
        DOCLAYNET_CLASSES.len(),
        YOLO_CONFIDENCE,
        YOLO_NMS_IOU,
    )
}

/// Decodes a YOLOv8 head `[1, 4 + classes, anchors]` (channel-first: row `k` holds channel `k`
/// of every anchor; boxes as centre x, centre y, width, height, then one score per class):
/// each anchor's best class at or above `confidence`, then class-wise non-maximum suppression
/// at `nms_iou`, best first.
pub fn decode_yolo(
    output: &[f32],
    classes: usize,
    confidence: f32,
    nms_iou: f32,
) -> Vec<Detection> {
    let channels = 4 + classes;
    assert_eq!(
        output.len() % channels,
        0,
        "output is not [1, {channels}, N]"
    );
    let n = output.len() / channels;
    let at = |ch: usize, a: usize| output[ch * n + a];
    let mut candidates: Vec<Detection> = (0..n)
        .filter_map(|a| {
            let (class, score) = (0..classes)
                .map(|c| (c, at(4 + c, a)))
                .max_by(|x, y| x.1.total_cmp(&y.1))?;
            (score >= confidence).then(|| {
                let (cx, cy, w, h) = (at(0, a), at(1, a), at(2, a), at(3, a));
                Detection {
                    class,
                    score,
                    corners: [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0],
                }
            })
        })
        .collect();
    candidates.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut kept: Vec<Detection> = Vec::new();
    for d in candidates {
        if !kept
            .iter()
            .any(|k| k.class == d.class && iou(&k.corners, &d.corners) > nms_iou)
        {
            kept.push(d);
        }
    }
    kept
}

/// How a model's detections match the reference's on one or more inputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DetectionMatch {
    /// The reference's detections.
    pub reference: usize,
    /// Of them, those matched by a detection of the same class at IoU ≥ 0.5 (each candidate
    /// matches at most one).
    pub matched: usize,
    /// The candidate's detections matching none of the reference's.
    pub extra: usize,
}

impl DetectionMatch {
    /// IoU a candidate detection needs to match a reference one.
    pub const IOU: f32 = 0.5;

    /// Greedy matching, reference detections by descending score, each to the unmatched
    /// candidate of its class with the largest IoU (at least [`Self::IOU`]).
    pub fn of(reference: &[Detection], candidate: &[Detection]) -> Self {
        let mut order: Vec<&Detection> = reference.iter().collect();
        order.sort_by(|a, b| b.score.total_cmp(&a.score));
        let mut used = vec![false; candidate.len()];
        let mut matched = 0;
        for r in order {
            let best = (candidate.iter().enumerate())
                .filter(|(i, c)| !used[*i] && c.class == r.class)
                .map(|(i, c)| (i, iou(&r.corners, &c.corners)))
                .filter(|(_, v)| *v >= Self::IOU)
                .max_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((i, _)) = best {
                used[i] = true;
                matched += 1;
            }
        }
        Self {
            reference: reference.len(),
            matched,
            extra: candidate.len() - matched,
        }
    }

    /// Share of the reference's detections matched (1 when it has none).
    pub fn matched_share(&self) -> f64 {
        if self.reference == 0 {
            1.0
        } else {
            self.matched as f64 / self.reference as f64
        }
    }

    /// Extra detections per reference detection.
    pub fn extra_share(&self) -> f64 {
        self.extra as f64 / self.reference.max(1) as f64
    }
}

impl std::ops::Add for DetectionMatch {
    type Output = Self;

    /// Sums two inputs' counts.
    fn add(self, other: Self) -> Self {
        Self {
            reference: self.reference + other.reference,
            matched: self.matched + other.matched,
            extra: self.extra + other.extra,
        }
    }
}

/// Greedy CTC decoding of `[steps, classes]` scores: each step's arg-max, repeats collapsed,
/// blanks (class 0) dropped.
pub fn ctc_greedy(output: &[f32], classes: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut last = usize::MAX;
    for step in output.chunks_exact(classes) {
        let k = crate::argmax(step);
        if k != last && k != 0 {
            out.push(k);
        }
        last = k;
    }
    out
}

/// Pixel counts of two probability maps binarized at `threshold`: `(intersection, union)`.
pub fn binary_overlap(a: &[f32], b: &[f32], threshold: f32) -> (u64, u64) {
    assert_eq!(a.len(), b.len());
    let (mut inter, mut union) = (0, 0);
    for (x, y) in a.iter().zip(b) {
        let (p, q) = (*x > threshold, *y > threshold);
        inter += u64::from(p && q);
        union += u64::from(p || q);
    }
    (inter, union)
}

/// Binarization threshold of PaddleOCR's DB post-processing (`det_db_thresh`).
pub const DET_THRESHOLD: f32 = 0.3;

/// The classes of the YOLOv8n DocLayNet model, in output order.
pub const DOCLAYNET_CLASSES: [&str; 11] = [
    "Caption",
    "Footnote",
    "Formula",
    "List-item",
    "Page-footer",
    "Page-header",
    "Picture",
    "Section-header",
    "Table",
    "Text",
    "Title",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctc_collapses_repeats_and_drops_blanks() {
        // steps: 1 1 0 1 2 2 0 -> 1 1 2
        let mut out = vec![0.0f32; 7 * 3];
        for (t, k) in [1, 1, 0, 1, 2, 2, 0].iter().enumerate() {
            out[t * 3 + k] = 1.0;
        }
        assert_eq!(ctc_greedy(&out, 3), vec![1, 1, 2]);
    }

    #[test]
    fn yolo_decode_suppresses_overlaps_of_one_class() {
        // 3 anchors, 2 classes: anchors 0 and 1 overlap (class 0), anchor 2 is class 1.
        let rows: [[f32; 3]; 6] = [
            [10.0, 11.0, 50.0],
            [10.0, 10.0, 50.0],
            [8.0, 8.0, 8.0],
            [8.0, 8.0, 8.0],
            [0.9, 0.8, 0.1],
            [0.0, 0.0, 0.6],
        ];
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        let d = decode_yolo(&flat, 2, 0.25, 0.45);
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].class, d[1].class), (0, 1));
        let m = DetectionMatch::of(&d, &d[..1]);
        assert_eq!((m.reference, m.matched, m.extra), (2, 1, 0));
    }
}
