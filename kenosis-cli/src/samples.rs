//! The samples people have, for `quantize` and `validate`: `--images DIR --preprocess SPEC`
//! (read by the library, `kenosis_quantize::samples::from_images`), `--audio DIR
//! [--sample-rate HZ]` (see [`crate::audio`]) and, with the `text` feature, `--text FILE|DIR
//! --tokenizer tokenizer.json [--max-len N]` (`kenosis_quantize::samples::from_text`). `.npy`
//! folders (`--calibration`, `--data`) are read by the library itself.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use kenosis_options::preprocess::ImagePreprocess;
use kenosis_quantize::samples::CalibrationData;
use kenosis_quantize::samples::InputSpec;
use serde::Serialize;

use crate::error::Result;

/// The arguments of [`SampleArgs`] that a `.npy` folder argument conflicts with.
#[cfg(feature = "text")]
pub const CONFLICTS: [&str; 3] = ["images", "audio", "text"];
/// The arguments of [`SampleArgs`] that a `.npy` folder argument conflicts with.
#[cfg(not(feature = "text"))]
pub const CONFLICTS: [&str; 2] = ["images", "audio"];

/// The arguments that turn images or text into samples.
#[derive(Debug, clap::Args)]
pub struct SampleArgs {
    /// A folder of images (JPEG or PNG) as samples, each preprocessed as --preprocess says (the
    /// files directly in DIR, in name order; one sample each, for a model with one image
    /// input)
    #[arg(long, value_name = "DIR", requires = "preprocess")]
    images: Option<PathBuf>,
    /// How the model wants its images, written as its card states it: comma-separated
    /// `rgb|bgr`, `nchw|nhwc`, `WxH` (default: the model's),
    /// `stretch|crop[=F]|letterbox[=PAD[:topleft]]`, `scale=S`, `mean=M[:M:M]`,
    /// `std=S[:S:S]`. A pixel p (0-255) of channel c becomes `(p * scale - mean[c]) / std[c]`;
    /// without `scale=`, scale is 1/255 when every mean and std value is at most 1, else 1.
    /// E.g.
    /// "rgb,nchw,224x224,crop=0.875,mean=0.485:0.456:0.406,std=0.229:0.224:0.225" or
    /// "bgr,mean=104:117:123". See docs/preprocess.md
    #[arg(long, value_name = "SPEC", requires = "images", value_parser = parse_spec)]
    preprocess: Option<ImagePreprocess>,
    /// A folder of WAV files as samples, for a model whose one input is raw mono audio
    /// ([N] or [1, N], N fixed): each file mixed to mono, resampled to --sample-rate and cut
    /// into windows of N samples (the files directly in DIR, in name order). A model that
    /// wants spectral features: give .npy samples
    #[arg(long, value_name = "DIR", conflicts_with = "images")]
    audio: Option<PathBuf>,
    /// The sample rate the model takes, for --audio
    #[arg(long, value_name = "HZ", requires = "audio", default_value_t = crate::audio::DEFAULT_SAMPLE_RATE, value_parser = clap::value_parser!(u32).range(1..=384_000))]
    sample_rate: u32,
    /// UTF-8 text as samples: a file, or the files directly in a folder (in name order),
    /// tokenized with --tokenizer and cut into windows of --max-len tokens, one sample
    /// each, for a model whose inputs are token ids (and an attention mask, type ids or
    /// positions, by name). Audio, or a model that wants spectral features: give .npy
    /// samples
    #[cfg(feature = "text")]
    #[arg(
        long,
        value_name = "FILE|DIR",
        requires = "tokenizer",
        conflicts_with_all = ["images", "audio"]
    )]
    text: Option<PathBuf>,
    /// The model's `tokenizer.json` (Hugging Face tokenizers format), for --text
    #[cfg(feature = "text")]
    #[arg(long, value_name = "FILE", requires = "text")]
    tokenizer: Option<PathBuf>,
    /// Tokens per --text window, special tokens included (default: the model's fixed
    /// sequence length, else the tokenizer's truncation length, else 128)
    #[cfg(feature = "text")]
    #[arg(long, value_name = "N", requires = "text")]
    max_len: Option<usize>,
}

/// Where samples made by [`SampleArgs::make`] came from, as read.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// `--images`, the spec with its size resolved.
    Images {
        /// The folder.
        dir: PathBuf,
        /// The spec as read.
        spec: ImagePreprocess,
    },
    /// `--audio`.
    Audio {
        /// The folder.
        dir: PathBuf,
        /// The sample rate the audio was resampled to.
        rate: u32,
        /// Samples per window: the model's input length.
        window: usize,
    },
    /// `--text`.
    #[cfg_attr(not(feature = "text"), allow(dead_code))]
    Text {
        /// The file or folder.
        path: PathBuf,
        /// The `tokenizer.json`.
        tokenizer: PathBuf,
        /// Tokens per window.
        max_len: usize,
    },
}

impl Source {
    /// `images`, `text`: the JSON `data.kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Images { .. } => "images",
            Source::Audio { .. } => "audio",
            Source::Text { .. } => "text",
        }
    }

    /// The folder or file given.
    pub fn path(&self) -> &Path {
        match self {
            Source::Images { dir, .. } => dir,
            Source::Audio { dir, .. } => dir,
            Source::Text { path, .. } => path,
        }
    }
}

impl fmt::Display for Source {
    /// `images in DIR as SPEC`, `windows of N samples of the WAV files in DIR at R Hz`,
    /// `windows of N tokens of the text in PATH (tokenizer T)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Images { dir, spec } => write!(f, "images in {} as {spec}", dir.display()),
            Source::Audio { dir, rate, window } => write!(
                f,
                "windows of {window} samples of the WAV files in {} at {rate} Hz",
                dir.display()
            ),
            Source::Text {
                path,
                tokenizer,
                max_len,
            } => write!(
                f,
                "windows of {max_len} tokens of the text in {} (tokenizer {})",
                path.display(),
                tokenizer.display()
            ),
        }
    }
}

impl SampleArgs {
    /// The samples of the images, audio or text given, for the model at `model` with inputs
    /// `inputs`; `None` when neither was given.
    ///
    /// # Errors
    /// [`crate::error::Error::Input`] naming the folder, file, tokenizer or model (see
    /// `kenosis_quantize::samples::from_images`, [`crate::audio::samples`] and
    /// `kenosis_quantize::samples::from_text`).
    pub fn make(
        &self,
        model: &Path,
        inputs: &[InputSpec],
    ) -> Result<Option<(CalibrationData, Source)>> {
        if let (Some(dir), Some(spec)) = (&self.images, &self.preprocess) {
            let bar = crate::progress::spinner("decoding images");
            let made = kenosis_quantize::samples::from_images(dir, spec, model, inputs);
            bar.finish_and_clear();
            let (data, spec) = made?;
            let source = Source::Images {
                dir: dir.clone(),
                spec,
            };
            return Ok(Some((data, source)));
        }
        if let Some(dir) = &self.audio {
            let rate = self.sample_rate;
            let (data, window) = crate::audio::samples(dir, rate, model, inputs)?;
            let source = Source::Audio {
                dir: dir.clone(),
                rate,
                window,
            };
            return Ok(Some((data, source)));
        }
        #[cfg(feature = "text")]
        if let (Some(path), Some(tokenizer)) = (&self.text, &self.tokenizer) {
            let (data, max_len) =
                kenosis_quantize::samples::from_text(path, tokenizer, self.max_len, model, inputs)?;
            let source = Source::Text {
                path: path.clone(),
                tokenizer: tokenizer.clone(),
                max_len,
            };
            return Ok(Some((data, source)));
        }
        Ok(None)
    }
}

/// Where the samples came from, as `validate` and `quantize` print it in JSON (`data`; see
/// `docs/cli-json.md`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataSource {
    /// `npy` (a folder of `.npy` files, `--data` or `--calibration`), `images`
    /// (`--images`), `audio` (`--audio`), `text` (`--text`) or `synthetic`.
    pub kind: &'static str,
    /// The folder or file given; `null` for synthetic samples.
    pub path: Option<String>,
    /// With `images`, the `--preprocess` spec as read, every item explicit (the size and
    /// the scale resolved); `null` otherwise.
    pub preprocess: Option<String>,
    /// With `text`, the `tokenizer.json` given; `null` otherwise.
    pub tokenizer: Option<String>,
    /// With `text`, the tokens per window; `null` otherwise.
    pub max_len: Option<usize>,
    /// With `audio`, the sample rate (Hz) the files were resampled to; `null` otherwise.
    pub sample_rate: Option<u32>,
    /// With `audio`, the samples per window (the model's input length); `null` otherwise.
    pub window: Option<usize>,
    /// Synthetic image input → the value range its images span (`"[0, 255]"`), as the build
    /// report's `synthetic_image_ranges`; empty with real data.
    pub synthetic_image_ranges: BTreeMap<String, String>,
}

impl DataSource {
    /// Samples made from `source`, else read from the `.npy` folder `npy`, else synthetic
    /// (with `synthetic_image_ranges`).
    pub fn new(
        source: Option<&Source>,
        npy: Option<&Path>,
        synthetic_image_ranges: BTreeMap<String, String>,
    ) -> Self {
        let text = |s: &Path| s.display().to_string();
        DataSource {
            kind: match (source, npy) {
                (Some(s), _) => s.kind(),
                (None, Some(_)) => "npy",
                (None, None) => "synthetic",
            },
            path: source.map(Source::path).or(npy).map(text),
            preprocess: match source {
                Some(Source::Images { spec, .. }) => Some(spec.to_string()),
                _ => None,
            },
            tokenizer: match source {
                Some(Source::Text { tokenizer, .. }) => Some(text(tokenizer)),
                _ => None,
            },
            max_len: match source {
                Some(Source::Text { max_len, .. }) => Some(*max_len),
                _ => None,
            },
            sample_rate: match source {
                Some(Source::Audio { rate, .. }) => Some(*rate),
                _ => None,
            },
            window: match source {
                Some(Source::Audio { window, .. }) => Some(*window),
                _ => None,
            },
            synthetic_image_ranges,
        }
    }
}

/// `--preprocess`'s value parsed (for clap).
///
/// # Errors
/// The spec's error, with its message.
fn parse_spec(text: &str) -> std::result::Result<ImagePreprocess, String> {
    text.parse()
        .map_err(|e: kenosis_options::preprocess::PreprocessError| e.to_string())
}

/// The files directly in `dir` whose extension is one of `extensions` (compared
/// case-insensitively), sorted.
///
/// # Errors
/// [`crate::error::Error::Input`] naming `dir` when it cannot be listed, or with `none` when
/// it holds no such file.
pub fn files_in(dir: &Path, extensions: &[&str], none: &str) -> Result<Vec<PathBuf>> {
    let bad = |reason: String| crate::error::Error::Input {
        path: dir.to_owned(),
        reason,
    };
    let entries = std::fs::read_dir(dir).map_err(|e| bad(e.to_string()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| bad(e.to_string()))?.path();
        let wanted = (path.extension())
            .is_some_and(|x| extensions.iter().any(|known| x.eq_ignore_ascii_case(known)));
        if wanted && path.is_file() {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(bad(none.to_owned()));
    }
    files.sort();
    Ok(files)
}
