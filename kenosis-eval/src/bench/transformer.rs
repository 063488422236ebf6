//! Transformer encoders against ONNX Runtime's dynamic quantizer: Kenosis with default
//! options (for the generic x86-64 target, with 4-bit weights, and for this CPU's class as `-C
//! target-cpu=native` builds), ORT's `quantize_dynamic` with per-channel and with
//! per-tensor (its default) int8 weights, all calibrated (Kenosis) and evaluated on real
//! English prose (`kenosis_eval::prose`), timed interleaved in one process at 1 thread.
//!
//! Metrics against FP32 over the evaluation windows: the cosine of the mean-pooled sentence
//! embedding (mean and min over windows) and of each token's embedding (mean over tokens).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kenosis_eval::mpnet;
use kenosis_eval::prose::{self, CALIBRATION_TEXTS, EVALUATION_TEXTS};
use kenosis_quantize::calibrate::session::{borrowed, sample_inputs};
use kenosis_quantize::calibrate::{CalibrationData, SampleValue};
use kenosis_quantize::fidelity::cosine;
use kenosis_quantize::{quantize, Calibration, QuantizeOptions, Weights};
use kenosis_request::kernels::{IntegerKernels, TargetCpu};
use ort::session::Session;
use serde::Serialize;
use tokenizers::Tokenizer;

use super::measure::{self, Latency};

/// Calibration windows (Kenosis).
pub const CALIBRATION_WINDOWS: usize = 50;
/// Evaluation windows.
pub const EVALUATION_WINDOWS: usize = 100;
/// Tokens per window.
pub const TOKENS: usize = 64;

/// An encoder of the section: its file in the fetched-models folder, where its outputs are,
/// and how its windows of prose are tokenized.
#[derive(Debug, Clone, Copy)]
pub struct Encoder {
    pub file: &'static str,
    /// Output index of the token embeddings `[1, tokens, dim]`.
    pub tokens_output: usize,
    /// Output index of the mean-pooled embedding `[1, dim]` (cosines do not depend on an L2
    /// normalization after the pooling).
    pub pooled_output: usize,
    pub dim: usize,
    /// Its `tokenizer.json`, given the fetched-models folder.
    pub tokenizer: fn(&Path) -> PathBuf,
    /// The tokens opening and closing each window: `[CLS]` and `[SEP]` for BERT, `<s>` and
    /// `</s>` for MPNet (whose vocabulary also holds `[CLS]` and `[SEP]`, as plain tokens).
    pub frame: (&'static str, &'static str),
    /// For a model published without an ONNX file: builds `file` in the fetched-models
    /// folder when it is absent, returning its path.
    pub build: Option<BuildOnnx>,
}

/// Builds an encoder's ONNX file in the fetched-models folder (given) when absent, returning
/// its path.
pub type BuildOnnx = fn(&Path) -> Result<PathBuf, String>;

/// The encoders measured. paraphrase-MiniLM-L3-v2 is the only FP32 BERT-family ONNX encoder
/// found in a PyPI wheel (`fetch-models.sh`); all-mpnet-base-v2 (MPNet-base, 110M
/// parameters) is fetched by hand as safetensors and built into ONNX by
/// [`kenosis_eval::mpnet`] (its rows are an error note without it).
pub const ENCODERS: [Encoder; 2] = [
    Encoder {
        file: "paraphrase-MiniLM-L3-v2.onnx",
        tokens_output: 2,
        pooled_output: 3,
        dim: 384,
        tokenizer: |_| prose::minilm_tokenizer_path(),
        frame: ("[CLS]", "[SEP]"),
        build: None,
    },
    Encoder {
        file: mpnet::ONNX_FILE,
        tokens_output: mpnet::TOKENS_OUTPUT,
        pooled_output: mpnet::SENTENCE_OUTPUT,
        dim: 768,
        tokenizer: |dir| dir.join(mpnet::MODEL_DIR).join("tokenizer.json"),
        frame: ("<s>", "</s>"),
        build: Some(mpnet::ensure_onnx),
    },
];

/// One quantizer's row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub quantizer: String,
    pub pooled_cosine_mean: f64,
    pub pooled_cosine_min: f64,
    pub token_cosine_mean: f64,
    pub bytes: usize,
    pub latency: Latency,
    /// FP32 median latency over this row's.
    pub speedup_vs_fp32: f64,
    /// This row's median latency over ORT dynamic per-channel's (< 1: faster).
    pub latency_vs_ort_dynamic: Option<f64>,
    /// The Kenosis build's summary line.
    pub summary: Option<String>,
}

/// One encoder's section.
#[derive(Debug, Clone, Serialize)]
pub struct EncoderResult {
    pub model: String,
    pub fp32_bytes: usize,
    pub fp32_latency: Option<Latency>,
    pub rows: Vec<Row>,
    pub error: Option<String>,
}

/// Measures the encoders of [`ENCODERS`] whose file starts with one of `only` (all when
/// empty) found in `dir`; `python` runs ORT's quantizer (its rows are missing without it).
pub fn measure(
    dir: &Path,
    python: Option<&Path>,
    out: &Path,
    only: &[String],
    warmup: usize,
    runs: usize,
    log: impl Fn(String),
) -> Vec<EncoderResult> {
    ENCODERS
        .iter()
        .filter(|e| only.is_empty() || only.iter().any(|o| e.file.starts_with(o.as_str())))
        .map(|e| {
            log(format!("transformer: {}", e.file));
            let mut result = EncoderResult {
                model: e.file.to_owned(),
                fp32_bytes: 0,
                fp32_latency: None,
                rows: Vec::new(),
                error: None,
            };
            if let Err(err) = measure_one(dir, *e, python, out, warmup, runs, &mut result) {
                result.error = Some(err);
            }
            result
        })
        .collect()
}

/// Default options for this machine's CPU class, as a `-C target-cpu=native` build resolves
/// them (`None` where that class is the generic one).
fn native_options() -> Option<QuantizeOptions> {
    if !(cfg!(target_arch = "x86_64") && IntegerKernels::of_host() == IntegerKernels::Exact) {
        return None;
    }
    let cpu = TargetCpu::of_target("", "avx512vnni");
    Some(QuantizeOptions {
        target_cpu: cpu,
        reduce_range: cpu.integer_kernels().wants_reduce_range(),
        ..QuantizeOptions::default()
    })
}

fn measure_one(
    dir: &Path,
    encoder: Encoder,
    python: Option<&Path>,
    out: &Path,
    warmup: usize,
    runs: usize,
    result: &mut EncoderResult,
) -> Result<(), String> {
    let path = match encoder.build {
        Some(build) => build(dir)?,
        None => dir.join(encoder.file),
    };
    let path = path.as_path();
    if !path.is_file() {
        return Err(format!(
            "{} not found (../shared/fetch-models.sh)",
            path.display()
        ));
    }
    let (calib_files, eval_files) = prose::licence_files(&CALIBRATION_TEXTS)
        .zip(prose::licence_files(&EVALUATION_TEXTS))
        .ok_or_else(|| format!("licence texts missing from {}", prose::LICENSES_DIR))?;
    let tokenizer = (encoder.tokenizer)(dir);
    let calibration = CalibrationData {
        samples: (windows(encoder, &tokenizer, &calib_files, CALIBRATION_WINDOWS)?.iter())
            .map(|w| prose::bert_inputs(w))
            .collect(),
        files: Vec::new(),
        synthetic: false,
    };
    let evaluation: Vec<Vec<SampleValue>> =
        (windows(encoder, &tokenizer, &eval_files, EVALUATION_WINDOWS)?.iter())
            .map(|w| prose::bert_inputs(w))
            .collect();
    let fp32 = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    result.fp32_bytes = fp32.len();

    // (label, bytes, summary line)
    let mut candidates: Vec<(String, Vec<u8>, Option<String>)> = Vec::new();
    let mut builds = vec![(
        "Kenosis, default options (x86-64)".to_owned(),
        QuantizeOptions::default(),
    )];
    builds.push((
        "Kenosis, weights = \"int4\", speed_check = false (x86-64)".to_owned(),
        // Weight-only int4 is asked for size: with the speed check, a CPU whose 4-bit
        // kernels run slower than FP32 ships the FP32 model and the row would show nothing.
        QuantizeOptions {
            weights: Weights::Int4 {
                block_size: Weights::DEFAULT_BLOCK_SIZE,
            },
            speed_check: false,
            ..QuantizeOptions::default()
        },
    ));
    if let Some(native) = native_options() {
        builds.push((
            format!(
                "Kenosis, default options ({})",
                native.target_cpu.canonical()
            ),
            native,
        ));
    }
    for (label, options) in builds {
        let q = quantize(
            path,
            &fp32,
            &Calibration::Data(calibration.clone()),
            &options,
        )
        .map_err(|e| e.to_string())?;
        candidates.push((label, q.bytes, Some(q.report.summary_line())));
    }
    if let Some(python) = python {
        let (pc, pt) = (
            out.join("ort_dynamic_pc.onnx"),
            out.join("ort_dynamic_pt.onnx"),
        );
        ort_dynamic(python, path, &pc, &pt)?;
        for (label, p) in [
            ("ORT quantize_dynamic, per-channel", &pc),
            ("ORT quantize_dynamic, per-tensor (default)", &pt),
        ] {
            let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
            candidates.push((label.to_owned(), bytes, None));
        }
    }

    let names: Vec<String> = vec!["input_ids".into(), "attention_mask".into()];
    let mut sessions: Vec<Session> = std::iter::once(&fp32)
        .chain(candidates.iter().map(|c| &c.1))
        .map(|b| measure::session(b, None))
        .collect::<Result<_, _>>()?;
    let outputs = |s: &mut Session, sample: &[SampleValue]| -> Result<Vec<Vec<f32>>, String> {
        let inputs = sample_inputs(&names, sample, path).map_err(|e| e.to_string())?;
        let out = s.run(borrowed(&inputs)).map_err(|e| e.to_string())?;
        Ok(out
            .iter()
            .map(|(_, v)| {
                v.try_extract_tensor::<f32>()
                    .map(|(_, x)| x.to_vec())
                    .unwrap_or_default()
            })
            .collect())
    };
    let reference: Vec<Vec<Vec<f32>>> = evaluation
        .iter()
        .map(|s| outputs(&mut sessions[0], s))
        .collect::<Result<_, _>>()?;
    let mut fidelity = Vec::new();
    for session in &mut sessions[1..] {
        let (mut pooled, mut tokens) = (Vec::new(), Vec::new());
        for (s, r) in evaluation.iter().zip(&reference) {
            let o = outputs(session, s)?;
            let p = encoder.pooled_output;
            pooled.push(cosine(&r[p], &o[p]));
            let t = encoder.tokens_output;
            for (a, b) in r[t].chunks(encoder.dim).zip(o[t].chunks(encoder.dim)) {
                tokens.push(cosine(a, b));
            }
        }
        fidelity.push((pooled, tokens));
    }

    let inputs = sample_inputs(&names, &evaluation[0], path).map_err(|e| e.to_string())?;
    let mut refs: Vec<&mut Session> = sessions.iter_mut().collect();
    let latency = measure::interleaved(&mut refs, warmup, runs, |s| {
        let t = Instant::now();
        s.run(borrowed(&inputs)).map_err(|e| e.to_string())?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    })?;
    let ort_pc = candidates
        .iter()
        .position(|c| c.0.contains("per-channel"))
        .map(|k| latency[k + 1].median_ms);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    for (k, ((label, bytes, summary), (pooled, tokens))) in
        candidates.into_iter().zip(fidelity).enumerate()
    {
        let l = latency[k + 1];
        result.rows.push(Row {
            quantizer: label,
            pooled_cosine_mean: mean(&pooled),
            pooled_cosine_min: pooled.iter().copied().fold(f64::INFINITY, f64::min),
            token_cosine_mean: mean(&tokens),
            bytes: bytes.len(),
            latency: l,
            speedup_vs_fp32: latency[0].median_ms / l.median_ms,
            latency_vs_ort_dynamic: ort_pc.map(|o| l.median_ms / o),
            summary,
        });
    }
    result.fp32_latency = Some(latency[0]);
    Ok(())
}

/// [`prose::windows`] of [`TOKENS`] tokens framed by `encoder`'s own tokens (`prose` frames
/// them with `[CLS]` and `[SEP]`).
fn windows(
    encoder: Encoder,
    tokenizer: &Path,
    files: &[PathBuf],
    count: usize,
) -> Result<Vec<Vec<i64>>, String> {
    let tok =
        Tokenizer::from_file(tokenizer).map_err(|e| format!("{}: {e}", tokenizer.display()))?;
    let id = |t: &str| {
        tok.token_to_id(t)
            .map(i64::from)
            .ok_or_else(|| format!("{}: no {t} token", tokenizer.display()))
    };
    let (open, close) = (id(encoder.frame.0)?, id(encoder.frame.1)?);
    let mut windows = prose::windows(tokenizer, files, count, TOKENS);
    for w in &mut windows {
        // `prose::windows` makes windows of TOKENS >= 2 ids.
        let n = w.len();
        w[0] = open;
        w[n - 1] = close;
    }
    Ok(windows)
}

/// Runs `bench/ort_quantize_dynamic.py` on `model`, writing `pc` and `pt`.
pub fn ort_dynamic(python: &Path, model: &Path, pc: &Path, pt: &Path) -> Result<(), String> {
    let script: PathBuf =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/ort_quantize_dynamic.py");
    let output = Command::new(python)
        .arg(&script)
        .args([
            "--model".as_ref(),
            model.as_os_str(),
            "--out-pc".as_ref(),
            pc.as_os_str(),
            "--out-pt".as_ref(),
            pt.as_os_str(),
        ])
        .output()
        .map_err(|e| format!("starting {}: {e}", python.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| {
            format!(
                "{} printed no result: {}",
                script.display(),
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    if result["ok"] == true {
        Ok(())
    } else {
        Err(format!("ORT quantize_dynamic failed: {}", result["error"]))
    }
}
