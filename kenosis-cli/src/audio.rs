//! `--audio DIR [--sample-rate HZ]`: a folder of WAV files as a model's samples, for
//! `quantize` (calibration) and `validate` (agreement), for a model that takes raw audio.
//!
//! Each file is decoded with `hound` (PCM of 8 to 32 bits, or 32-bit float), its channels
//! averaged to mono, scaled to `[-1, 1)`, resampled to `--sample-rate` with `rubato`'s FFT
//! resampler (which filters against aliasing) when its own rate differs, and cut into
//! consecutive windows of the model's input length, one sample each; the tail shorter than
//! a window is dropped, and a file shorter than one window gives one window padded with
//! silence. Samples stay in memory, in file-name order. A model that wants spectral features
//! (a mel spectrogram computed outside it) takes `.npy` samples instead.

use std::path::{Path, PathBuf};

use kenosis_quantize::model::DataType;
use kenosis_quantize::samples::InputSpec;
use kenosis_quantize::samples::{CalibrationData, SampleValue};
use ndarray::{ArrayD, IxDyn};

use crate::error::{Error, Result};

/// The sample rate `--sample-rate` defaults to: what speech models mostly take.
pub const DEFAULT_SAMPLE_RATE: u32 = 16_000;

/// File extensions (compared case-insensitively) read as WAV.
const WAV_EXTENSIONS: &[&str] = &["wav", "wave"];

/// Frames the resampler takes per call.
const RESAMPLE_CHUNK: usize = 1024;

/// The WAV files of `dir` as samples of the model at `model` with inputs `inputs`: windows
/// of `rate` Hz mono audio as long as the model's one float input (its last dimension,
/// which must be fixed), shaped as that input (`[1, N]`, `[N]`, `[1, 1, N]`); and the
/// window length in samples.
///
/// # Errors
/// [`Error::Input`] naming the model when it has not exactly one float input whose last
/// dimension is fixed and whose others are 1; naming `dir` when it cannot be listed or holds
/// no WAV file; naming the file that cannot be decoded.
pub fn samples(
    dir: &Path,
    rate: u32,
    model: &Path,
    inputs: &[InputSpec],
) -> Result<(CalibrationData, usize)> {
    let shape = fit_input(model, inputs)?;
    let window = shape.last().copied().unwrap_or(1);
    let files = wav_files(dir)?;
    let bar = crate::progress::bar(files.len(), "decoding audio");
    let mut samples = Vec::new();
    for file in &files {
        bar.inc(1);
        let audio = read_mono(file, rate)?;
        for chunk in windows(&audio, window) {
            let x = ArrayD::from_shape_vec(IxDyn(&shape), chunk).map_err(|e| Error::Input {
                path: file.clone(),
                reason: e.to_string(),
            })?;
            samples.push(vec![SampleValue::F32(x)]);
        }
    }
    bar.finish_and_clear();
    let data = CalibrationData {
        samples,
        files,
        synthetic: false,
    };
    Ok((data, window))
}

/// Consecutive windows of `window` samples of `audio`; one padded with silence when
/// `audio` is shorter than a window.
fn windows(audio: &[f32], window: usize) -> Vec<Vec<f32>> {
    if audio.len() < window {
        let mut padded = audio.to_vec();
        padded.resize(window, 0.0);
        return vec![padded];
    }
    audio.chunks_exact(window).map(<[f32]>::to_vec).collect()
}

/// The shape of one sample of the model's one input: its declared dims, each 1 but the last.
fn fit_input(model: &Path, inputs: &[InputSpec]) -> Result<Vec<usize>> {
    let bad = |reason: String| Error::Input {
        path: model.to_owned(),
        reason,
    };
    let [input] = inputs else {
        return Err(bad(format!(
            "--audio feeds a model with one input (raw audio); this one has {}: give .npy \
             samples (one subfolder per input)",
            inputs.len()
        )));
    };
    if input.elem_type != DataType::Float {
        return Err(bad(format!(
            "--audio makes float32 samples; input `{}` is {}: give .npy samples",
            input.name, input.elem_type
        )));
    }
    let Some((last, rest)) = input.dims.split_last() else {
        return Err(bad(format!(
            "input `{}` is a scalar; --audio feeds a window of audio ([N] or [1, N])",
            input.name
        )));
    };
    let window = match last {
        Some(n) if *n > 0 => usize::try_from(*n).unwrap_or(usize::MAX),
        _ => {
            return Err(bad(format!(
                "input `{}` has no fixed length (its last dimension): --audio cuts windows of \
                 the model's input length; give .npy samples of the length you want",
                input.name
            )))
        }
    };
    if rest.iter().any(|d| d.is_some_and(|d| d != 1)) {
        return Err(bad(format!(
            "input `{}` is not one window of mono audio (every dimension but the last 1): \
             a model that wants spectral features takes .npy samples",
            input.name
        )));
    }
    Ok(rest.iter().map(|_| 1).chain([window]).collect())
}

/// The WAV files directly in `dir`, sorted.
fn wav_files(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::samples::files_in(dir, WAV_EXTENSIONS, "no WAV files (.wav) in this folder")
}

/// The audio of the WAV file at `path` as mono samples in `[-1, 1)` at `rate` Hz.
fn read_mono(path: &Path, rate: u32) -> Result<Vec<f32>> {
    let bad = |reason: String| Error::Input {
        path: path.to_owned(),
        reason,
    };
    let mut reader =
        hound::WavReader::open(path).map_err(|e| bad(format!("not a WAV file: {e}")))?;
    let spec = reader.spec();
    let channels = usize::from(spec.channels.max(1));
    let interleaved: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => reader
            .samples::<f32>()
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad(format!("cannot be decoded: {e}")))?,
        hound::SampleFormat::Int => {
            let full_scale = 2f32.powi(i32::from(spec.bits_per_sample.clamp(1, 32)) - 1);
            reader
                .samples::<i32>()
                .map(|s| s.map(|s| s as f32 / full_scale))
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| bad(format!("cannot be decoded: {e}")))?
        }
    };
    let mono: Vec<f32> = interleaved
        .chunks(channels)
        .map(|frame| frame.iter().sum::<f32>() / frame.len() as f32)
        .collect();
    if spec.sample_rate == rate {
        return Ok(mono);
    }
    resample(&mono, spec.sample_rate, rate).map_err(|e| {
        bad(format!(
            "cannot be resampled from {} Hz to {rate} Hz: {e}",
            spec.sample_rate
        ))
    })
}

/// `audio` at `from` Hz resampled to `to` Hz with `rubato`'s synchronous FFT resampler, its
/// delay removed and its length `audio.len() * to / from` (rounded down).
fn resample(audio: &[f32], from: u32, to: u32) -> std::result::Result<Vec<f32>, String> {
    use rubato::Resampler;
    let (from, to) = (from as usize, to as usize);
    let mut resampler = rubato::FftFixedIn::<f32>::new(from, to, RESAMPLE_CHUNK, 2, 1)
        .map_err(|e| e.to_string())?;
    let delay = resampler.output_delay();
    let wanted = audio.len() * to / from;
    let mut out = Vec::with_capacity(wanted + delay + RESAMPLE_CHUNK);
    let mut rest = audio;
    while rest.len() >= resampler.input_frames_next() {
        let (chunk, tail) = rest.split_at(resampler.input_frames_next());
        let done = resampler
            .process(&[chunk], None)
            .map_err(|e| e.to_string())?;
        out.extend_from_slice(&done[0]);
        rest = tail;
    }
    // The tail, then silence until the delayed output is complete.
    let done = (resampler.process_partial(Some(&[rest]), None)).map_err(|e| e.to_string())?;
    out.extend_from_slice(&done[0]);
    while out.len() < wanted + delay {
        let done = (resampler.process_partial::<&[f32]>(None, None)).map_err(|e| e.to_string())?;
        if done[0].is_empty() {
            break;
        }
        out.extend_from_slice(&done[0]);
    }
    Ok(out.into_iter().skip(delay).take(wanted).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_file_is_one_padded_window_and_a_long_one_drops_its_tail() {
        assert_eq!(windows(&[0.5, 0.5], 4), [vec![0.5, 0.5, 0.0, 0.0]]);
        let long: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let w = windows(&long, 4);
        assert_eq!(w, [vec![0.0, 1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0, 7.0]]);
    }

    #[test]
    fn resampling_keeps_a_tone_at_its_frequency_and_the_length_in_proportion() {
        // 440 Hz at 22.05 kHz, to 16 kHz: the same tone, 16/22.05 of the samples.
        let (from, to, seconds) = (22_050u32, 16_000u32, 0.5f64);
        let tone = |rate: u32, n: usize| {
            (0..n)
                .map(|i| {
                    (2.0 * std::f64::consts::PI * 440.0 * i as f64 / f64::from(rate)).sin() as f32
                })
                .collect::<Vec<f32>>()
        };
        let input = tone(from, (f64::from(from) * seconds) as usize);
        let out = resample(&input, from, to).expect("resamples");
        assert_eq!(out.len(), input.len() * to as usize / from as usize);
        let expected = tone(to, out.len());
        // Away from the edges, where the filter has no signal on one side.
        let middle = 500..out.len() - 500;
        let worst = (middle.clone())
            .map(|i| (out[i] - expected[i]).abs())
            .fold(0f32, f32::max);
        assert!(
            worst < 0.01,
            "largest difference from the 16 kHz tone: {worst}"
        );
    }
}
