//! Classifies an image with EfficientNet-Lite0, quantized to INT8 by `build.rs` and embedded
//! in this binary, and prints the five most probable ImageNet classes.
//!
//! ```text
//! classify [IMAGE.jpg]
//! classify --logits IMAGE.jpg...
//! ```
//! Without an argument it classifies an image compiled into the binary. With `--logits` it
//! prints the logits for each image, one line each (`path<TAB>l0,l1,...`), for comparing a
//! device's results with the build machine's.

mod preprocess;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use ndarray::{Array2, Axis};

// EfficientNet-Lite0, quantized to INT8 by build.rs (which finds this call) and calibrated on
// the tensors build.rs wrote to `$OUT_DIR/calib`. Generated (see its rustdoc):
//
//     fn run<'a>(&self, input: ArrayView<'a, f32, Ix4>)
//         -> Result<Array<f32, Ix2>, kenosis_runtime::Error>
//     // input: input `input`, f32[?, 3, 224, 224]
//     // returns output `logits`, f32[?, 1000]
kenosis_runtime::include_quantized!(
    struct EfficientNetLite0 = "models/efficientnet_lite0.onnx",
    calibration = "$OUT_DIR/calib",
);

/// ImageNet class names, one per line in class-index order: `n01440764 tench, Tinca tinca`.
const SYNSET_WORDS: &str = include_str!("../data/synset_words.txt");

const DEFAULT_IMAGE_NAME: &str = "images/n07873807_pizza.JPEG (built in)";
const DEFAULT_IMAGE: &[u8] = include_bytes!("../images/n07873807_pizza.JPEG");

const TOP_K: usize = 5;

const USAGE: &str = "usage: classify [IMAGE.jpg]\n       classify --logits IMAGE.jpg...\n\n\
Classifies a JPEG image (default: a built-in one) with EfficientNet-Lite0, quantized to INT8 at\n\
build time by Kenosis, and prints its top-5 ImageNet classes. With --logits, prints the logits\n\
of each image (path, tab, comma-separated).";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("classify: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args_os().skip(1).peekable();
    if args.next_if(|a| a == "--logits").is_some() {
        return print_logits(args.map(PathBuf::from));
    }
    let (image_name, jpeg) = match (args.next(), args.next()) {
        (None, _) => (DEFAULT_IMAGE_NAME.to_string(), DEFAULT_IMAGE.to_vec()),
        (Some(arg), None) if arg == "-h" || arg == "--help" => {
            println!("{USAGE}");
            return Ok(());
        }
        (Some(path), None) => {
            let path = Path::new(&path);
            let bytes = std::fs::read(path)
                .with_context(|| format!("cannot read image {}", path.display()))?;
            (path.display().to_string(), bytes)
        }
        (Some(_), Some(_)) => bail!("expected at most one image path\n\n{USAGE}"),
    };
    let labels = labels()?;
    let probs = softmax(
        logits(&jpeg)
            .with_context(|| image_name.clone())?
            .iter()
            .copied(),
    );
    println!("{image_name}");
    for (rank, (class, p)) in top_k(&probs, TOP_K).into_iter().enumerate() {
        println!("{:>2}. {:>6.2}%  {}", rank + 1, 100.0 * p, labels[class]);
    }
    Ok(())
}

/// The INT8 model's `[1, 1000]` logits for a JPEG image.
fn logits(jpeg: &[u8]) -> Result<Array2<f32>> {
    let input = preprocess::preprocess(jpeg)
        .context("cannot decode the image (JPEG images are supported)")?
        .insert_axis(Axis(0));
    Ok(EfficientNetLite0.run(input.view())?)
}

/// Prints `path<TAB>logits` for each image: the INT8 model's 1000 logits, comma-separated.
fn print_logits(images: impl Iterator<Item = PathBuf>) -> Result<()> {
    let mut any = false;
    for path in images {
        let jpeg = std::fs::read(&path)
            .with_context(|| format!("cannot read image {}", path.display()))?;
        let logits = logits(&jpeg).with_context(|| path.display().to_string())?;
        let text: Vec<String> = logits.iter().map(f32::to_string).collect();
        println!("{}\t{}", path.display(), text.join(","));
        any = true;
    }
    if !any {
        bail!("--logits needs at least one image\n\n{USAGE}");
    }
    Ok(())
}

fn softmax(logits: impl Iterator<Item = f32> + Clone) -> Vec<f32> {
    let max = logits.clone().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = logits.map(|x| (x - max).exp()).collect();
    let sum: f32 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

/// The `k` most probable classes as `(index, probability)`, most probable first.
fn top_k(probs: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut ranked: Vec<(usize, f32)> = probs.iter().copied().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked.truncate(k);
    ranked
}

/// Class names by index, without the WordNet id: `tench, Tinca tinca`.
fn labels() -> Result<Vec<&'static str>> {
    let labels: Vec<&str> = SYNSET_WORDS
        .lines()
        .map(|line| line.split_once(' ').map_or(line, |(_, name)| name))
        .collect();
    if labels.len() != 1000 {
        bail!(
            "data/synset_words.txt has {} lines, expected 1000",
            labels.len()
        );
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preprocess_224_jpeg() {
        let x = preprocess::preprocess(DEFAULT_IMAGE).unwrap();
        assert_eq!(x.shape(), [3, 224, 224]);
        assert!(x.is_standard_layout());
        assert!(x.iter().all(|&v| (-127.0 / 128.0..=1.0).contains(&v)));
    }

    #[test]
    fn preprocess_resizes_and_centre_crops() {
        // 300x200: a red band on the left 30 columns, blue elsewhere. Scaled to 336x224 and
        // centre-cropped to columns 56..280, the band (columns 0..~34) is cut away.
        let img = image::RgbImage::from_fn(300, 200, |x, _| {
            if x < 30 {
                image::Rgb([255, 0, 0])
            } else {
                image::Rgb([0, 0, 255])
            }
        });
        let mut jpeg = Vec::new();
        image::DynamicImage::ImageRgb8(img)
            .write_to(
                &mut std::io::Cursor::new(&mut jpeg),
                image::ImageFormat::Jpeg,
            )
            .unwrap();
        let x = preprocess::preprocess(&jpeg).unwrap();
        assert_eq!(x.shape(), [3, 224, 224]);
        let mean = |c: usize| x.index_axis(Axis(0), c).mean().unwrap();
        assert!(mean(0) < -0.8, "red channel mean {}", mean(0));
        assert!(mean(2) > 0.8, "blue channel mean {}", mean(2));
    }

    #[test]
    fn preprocess_rejects_non_jpeg() {
        assert!(preprocess::preprocess(b"not an image").is_err());
    }

    #[test]
    fn softmax_top_k_labels() {
        let p = softmax([1.0f32, 3.0, 2.0].into_iter());
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        let top: Vec<usize> = top_k(&p, 2).into_iter().map(|(i, _)| i).collect();
        assert_eq!(top, [1, 2]);
        assert_eq!(labels().unwrap()[963], "pizza, pizza pie");
    }

    #[test]
    fn the_int8_model_recognises_the_built_in_pizza() {
        let logits = logits(DEFAULT_IMAGE).unwrap();
        assert_eq!(logits.shape(), [1, 1000]);
        let probs = softmax(logits.iter().copied());
        assert_eq!(top_k(&probs, 1)[0].0, 963, "top-1 should be pizza");
    }
}
