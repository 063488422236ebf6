//! Classifies an image with EfficientNet-Lite0, quantized to INT8 by `build.rs` and embedded in
//! this binary, next to the embedded FP32 original: top-5 labels, model sizes and latencies.
//!
//! ```text
//! classify [IMAGE.jpg]
//! classify --logits IMAGE.jpg...
//! ```
//! Without an argument it classifies an image compiled into the binary. With `--logits` it
//! prints the INT8 model's logits for each image, one line each (`path<TAB>l0,l1,...`), for
//! comparing a device's results with the build machine's.

mod preprocess;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kenosis_runtime::EmbeddedModel;
use ndarray::{Array4, Axis};

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

/// The original FP32 model, embedded as well to compare against.
static FP32: EmbeddedModel = EmbeddedModel::from_static_bytes(
    "efficientnet_lite0 (FP32)",
    include_bytes!("../models/efficientnet_lite0.onnx"),
);

/// ImageNet class names, one per line in class-index order: `n01440764 tench, Tinca tinca`.
const SYNSET_WORDS: &str = include_str!("../data/synset_words.txt");

const DEFAULT_IMAGE_NAME: &str = "images/n07873807_pizza.JPEG (built in)";
const DEFAULT_IMAGE: &[u8] = include_bytes!("../images/n07873807_pizza.JPEG");

/// Timed runs per model, after one warm-up run each.
const RUNS: usize = 20;
const TOP_K: usize = 5;

const USAGE: &str = "usage: classify [IMAGE.jpg]\n       classify --logits IMAGE.jpg...\n\n\
Classifies a JPEG image (default: a built-in one) with EfficientNet-Lite0, quantized to INT8 at\n\
build time by Kenosis, and with the FP32 original, and compares their top-5 labels, sizes and\n\
latencies. With --logits, prints the INT8 logits of each image (path, tab, comma-separated).";

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
    let int8: &'static EmbeddedModel = EfficientNetLite0.untyped();

    let mut args = std::env::args_os().skip(1).peekable();
    if args.next_if(|a| a == "--logits").is_some() {
        return print_logits(args.map(std::path::PathBuf::from));
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
    let input: Array4<f32> = preprocess::preprocess(&jpeg)
        .with_context(|| format!("cannot decode {image_name} (JPEG images are supported)"))?
        .insert_axis(Axis(0));
    let labels = labels()?;

    // Warm-up: creates both ONNX Runtime sessions and gives the first results. The INT8
    // model goes through its typed `run` (an `ArrayView4<f32>` in, an `Array2<f32>` out).
    let int8_logits = EfficientNetLite0.run(input.view())?;
    let int8_probs = softmax(int8_logits.iter().copied());
    let fp32_probs = classify(&FP32, &input)?;

    // Interleaved, so that both models see the same machine load.
    let mut int8_times = Vec::with_capacity(RUNS);
    let mut fp32_times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        int8_times.push(time(|| EfficientNetLite0.run(input.view()))?);
        fp32_times.push(time(|| FP32.run([&input]))?);
    }

    println!("image: {image_name}\n");
    let int8_top = top_k(&int8_probs, TOP_K);
    let fp32_top = top_k(&fp32_probs, TOP_K);
    println!("     {:<36}  FP32 (original)", "INT8 (Kenosis, embedded)");
    for (rank, (&(qi, qp), &(fi, fp))) in int8_top.iter().zip(&fp32_top).enumerate() {
        println!(
            "{:>2}.  {:<28} {:>6.2}%  {:<28} {:>6.2}%",
            rank + 1,
            truncate(labels[qi], 28),
            100.0 * qp,
            truncate(labels[fi], 28),
            100.0 * fp,
        );
    }
    println!();

    let (int8_size, fp32_size) = (int8.bytes().len(), FP32.bytes().len());
    let (int8_ms, fp32_ms) = (median_ms(&mut int8_times), median_ms(&mut fp32_times));
    println!("{:<26} {:>12} {:>12}", "", "INT8", "FP32");
    println!(
        "{:<26} {:>8.2} MiB {:>8.2} MiB   ({:.1}x smaller)",
        "model size",
        mib(int8_size),
        mib(fp32_size),
        fp32_size as f64 / int8_size as f64
    );
    println!(
        "{:<26} {:>9.2} ms {:>9.2} ms   ({:.2}x)",
        format!("latency (median of {RUNS})"),
        int8_ms,
        fp32_ms,
        fp32_ms / int8_ms
    );
    let agree = if int8_top[0].0 == fp32_top[0].0 {
        "yes"
    } else {
        "NO"
    };
    println!("{:<26} {agree}", "top-1 agrees");
    Ok(())
}

/// Prints `path<TAB>logits` for each image: the INT8 model's 1000 logits, comma-separated.
fn print_logits(images: impl Iterator<Item = std::path::PathBuf>) -> Result<()> {
    let mut any = false;
    for path in images {
        let jpeg = std::fs::read(&path)
            .with_context(|| format!("cannot read image {}", path.display()))?;
        let input = preprocess::preprocess(&jpeg)
            .with_context(|| format!("cannot decode {}", path.display()))?
            .insert_axis(Axis(0));
        let logits = EfficientNetLite0.run(input.view())?;
        let text: Vec<String> = logits.iter().map(f32::to_string).collect();
        println!("{}\t{}", path.display(), text.join(","));
        any = true;
    }
    if !any {
        bail!("--logits needs at least one image\n\n{USAGE}");
    }
    Ok(())
}

/// Runs `model` on the `[1, 3, 224, 224]` input and returns softmax probabilities.
fn classify(model: &EmbeddedModel, input: &Array4<f32>) -> Result<Vec<f32>> {
    let outputs = model.run([input])?;
    let logits = outputs[0]
        .as_f32()
        .with_context(|| format!("{}: the output is not an f32 tensor", model.source()))?;
    if logits.len() != 1000 {
        bail!(
            "{}: expected 1000 logits, got shape {:?}",
            model.source(),
            logits.shape()
        );
    }
    Ok(softmax(logits.iter().copied()))
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

fn time<T, E>(f: impl FnOnce() -> Result<T, E>) -> Result<Duration, E> {
    let start = Instant::now();
    f()?;
    Ok(start.elapsed())
}

fn median_ms(times: &mut [Duration]) -> f64 {
    times.sort();
    let mid = times.len() / 2;
    let median = if times.len().is_multiple_of(2) {
        (times[mid - 1] + times[mid]) / 2
    } else {
        times[mid]
    };
    median.as_secs_f64() * 1e3
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut cut: String = s.chars().take(max - 1).collect();
        cut.push('…');
        cut
    }
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
    fn softmax_top_k_median() {
        let p = softmax([1.0f32, 3.0, 2.0].into_iter());
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        let top: Vec<usize> = top_k(&p, 2).into_iter().map(|(i, _)| i).collect();
        assert_eq!(top, [1, 2]);
        let ms = Duration::from_millis;
        assert_eq!(median_ms(&mut [ms(3), ms(1), ms(2)]), 2.0);
        assert_eq!(median_ms(&mut [ms(4), ms(1), ms(2), ms(3)]), 2.5);
        assert_eq!(labels().unwrap()[963], "pizza, pizza pie");
    }

    #[test]
    fn both_models_classify_the_built_in_image() {
        let input = preprocess::preprocess(DEFAULT_IMAGE)
            .unwrap()
            .insert_axis(Axis(0));
        let fp32 = classify(&FP32, &input).unwrap();
        assert_eq!(top_k(&fp32, 1)[0].0, 963, "FP32 top-1 should be pizza");
        let int8 = classify(EfficientNetLite0.untyped(), &input).unwrap();
        assert_eq!(int8.len(), 1000);
        let typed = EfficientNetLite0.run(input.view()).unwrap();
        assert_eq!(typed.shape(), [1, 1000]);
        assert_eq!(top_k(&softmax(typed.iter().copied()), 1), top_k(&int8, 1));
        assert!(int8.iter().all(|p| p.is_finite()));
    }
}
