//! `--audio DIR [--sample-rate HZ]` driven as a user drives it: speech from espeak-ng
//! (`tests/data/speech_*.wav`, 22.05 kHz) into an audio model that computes its own
//! spectrogram from 16 kHz audio (`kenosis_eval::audio::audio_scorer`), through `quantize`
//! and `validate`; and WAV files already at the model's rate against `.npy` files of the
//! same windows, which must give the same figures.

use std::path::{Path, PathBuf};

use kenosis_eval::audio::{audio_scorer, WINDOW};
use serde_json::Value;

mod support;

use support::*;

fn workspace_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// The committed espeak-ng speech, copied into `dir/wav`.
fn speech(dir: &Path) -> PathBuf {
    let wav = dir.join("wav");
    std::fs::create_dir_all(&wav).expect("mkdir");
    for name in ["speech_a.wav", "speech_b.wav"] {
        std::fs::copy(
            workspace_file(&format!("tests/data/{name}")),
            wav.join(name),
        )
        .expect("copy");
    }
    wav
}

/// Windows of `WINDOW` samples that `rate` Hz files of these lengths (in frames at
/// `file_rate` Hz) give.
fn windows_of(frames: &[u32], file_rate: u32, rate: u32) -> usize {
    (frames.iter())
        .map(|&n| (u64::from(n) * u64::from(rate) / u64::from(file_rate)) as usize / WINDOW)
        .sum()
}

#[test]
fn speech_at_another_rate_calibrates_and_validates_an_audio_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("scorer.onnx");
    std::fs::write(&model, audio_scorer()).expect("model");
    let wav = speech(dir.path());
    let frames: Vec<u32> = ["speech_a.wav", "speech_b.wav"]
        .iter()
        .map(|f| hound::WavReader::open(wav.join(f)).expect("WAV").duration())
        .collect();
    let windows = windows_of(&frames, 22_050, 16_000);
    assert!(
        windows >= 10,
        "enough speech to hold some out: {windows} windows"
    );

    let int8 = dir.path().join("scorer.int8.onnx");
    let built = json(&[
        "quantize",
        arg(&model),
        "-o",
        arg(&int8),
        "--audio",
        arg(&wav),
        "--format",
        "json",
    ]);
    assert_eq!(built["data"]["kind"], "audio", "{built:#}");
    assert_eq!(built["data"]["sample_rate"], 16_000, "{built:#}");
    assert_eq!(built["data"]["window"].as_u64(), Some(WINDOW as u64));
    let report = &built["report"];
    assert_eq!(report["calibration_synthetic"], false, "{report:#}");
    let fitted = report["calibration_samples"].as_u64().expect("samples") as usize;
    let held_out = report
        .pointer("/fidelity/samples")
        .and_then(Value::as_u64)
        .expect("held-out samples") as usize;
    assert_eq!(fitted + held_out, windows, "{report:#}");
    assert!(
        held_out > 0,
        "real data of 10 or more samples holds some out"
    );

    let checked = json(&[
        "validate",
        arg(&model),
        arg(&int8),
        "--audio",
        arg(&wav),
        "--timed",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(checked["data"]["kind"], "audio", "{checked:#}");
    assert_eq!(
        checked.pointer("/fidelity/samples").and_then(Value::as_u64),
        Some(windows as u64)
    );
    let cosine = checked
        .pointer("/fidelity/measured/mean_cosine")
        .and_then(Value::as_f64)
        .expect("cosine");
    assert!(cosine > 0.0 && cosine <= 1.0, "{checked:#}");
}

#[test]
fn wav_at_the_models_rate_gives_the_figures_of_npy_files_of_the_same_windows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("scorer.onnx");
    std::fs::write(&model, audio_scorer()).expect("model");
    // The committed 16 kHz speech: three windows as one WAV file, and as three .npy files.
    let pcm: ndarray::Array1<i16> =
        ndarray_npy::read_npy(workspace_file("tests/data/speech_16k.npy")).expect("speech");
    let pcm: Vec<i16> = pcm.iter().copied().take(3 * WINDOW + 100).collect();
    let wav = dir.path().join("wav");
    let npy = dir.path().join("npy");
    std::fs::create_dir_all(&wav).expect("mkdir");
    std::fs::create_dir_all(&npy).expect("mkdir");
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut writer = hound::WavWriter::create(wav.join("speech.wav"), spec).expect("WAV");
    for &s in &pcm {
        writer.write_sample(s).expect("sample");
    }
    writer.finalize().expect("WAV written");
    for (k, window) in pcm.chunks_exact(WINDOW).enumerate() {
        let x: Vec<f32> = window.iter().map(|&s| f32::from(s) / 32768.0).collect();
        let x = ndarray::Array2::from_shape_vec((1, WINDOW), x).expect("window");
        ndarray_npy::write_npy(npy.join(format!("{k}.npy")), &x).expect("npy");
    }
    let validate = |source: &str, dir: &Path| {
        json(&[
            "validate",
            arg(&model),
            arg(&model),
            source,
            arg(dir),
            "--timed",
            "1",
            "--format",
            "json",
        ])
    };
    let (from_wav, from_npy) = (validate("--audio", &wav), validate("--data", &npy));
    assert_eq!(
        from_wav["fidelity"], from_npy["fidelity"],
        "{from_wav:#}\n{from_npy:#}"
    );
    assert_eq!(from_wav.pointer("/fidelity/samples"), Some(&Value::from(3)));
}

#[test]
fn a_model_that_is_not_one_window_of_audio_or_a_folder_without_wav_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wav = speech(dir.path());
    // The tiny Conv fixture takes an image.
    let images = workspace_file("tests/fixtures/tiny/tiny_conv.onnx");
    let out = dir.path().join("x.onnx");
    let err = fails(&[
        "quantize",
        arg(&images),
        "-o",
        arg(&out),
        "--audio",
        arg(&wav),
    ]);
    assert!(
        err.contains("tiny_conv.onnx") && err.contains("spectral features"),
        "{err}"
    );
    assert!(!out.exists(), "no artifact on an error");
    let model = dir.path().join("scorer.onnx");
    std::fs::write(&model, audio_scorer()).expect("model");
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let err = fails(&[
        "quantize",
        arg(&model),
        "-o",
        arg(&out),
        "--audio",
        arg(&empty),
    ]);
    assert!(
        err.contains("empty") && err.contains("no WAV files"),
        "{err}"
    );
}
