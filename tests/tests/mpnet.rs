//! all-mpnet-base-v2 as the ONNX graph `kenosis_eval::mpnet` builds from its safetensors
//! weights (issue 56), run in ONNX Runtime:
//! - against an independent NumPy forward pass of the same weights
//!   (`kenosis-eval/python/mpnet_reference.py`, float64), on a padded batch of sentences and
//!   on one long sequence (the relative position buckets up to and past 128 positions);
//! - a padded row against the same sentence run alone (padding does not leak);
//! - as a sentence embedder: paraphrases embed closer than unrelated sentences.
//!
//! The model (440 MB) is fetched by hand into `$KENOSIS_MODELS/all-mpnet-base-v2` and is not
//! in CI: without it each test skips with a note, under `CI=true` too
//! (`kenosis_eval::mpnet::fetched_dir`). With it, the reference needs `python3` (or
//! `$KENOSIS_PYTHON`) with NumPy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kenosis_eval::mpnet::{self, SENTENCE_OUTPUT, TOKENS_OUTPUT};
use kenosis_eval::{run_sample, session};
use kenosis_quantize::calibrate::SampleValue;
use kenosis_quantize::fidelity::cosine;
use ndarray::{ArrayD, IxDyn};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer};

/// Two pairs of paraphrases (0 and 1, 2 and 3) and two sentences unrelated to either pair.
const SENTENCES: [&str; 6] = [
    "A man is playing a guitar.",
    "Someone is strumming a guitar on stage.",
    "The company's revenue fell by ten percent in the last quarter.",
    "Quarterly sales at the firm dropped by a tenth.",
    "A cat sleeps in the warm afternoon sun.",
    "Mix the flour with the eggs, then bake it for twenty minutes.",
];

/// The paraphrase pairs of [`SENTENCES`].
const PAIRS: [(usize, usize); 2] = [(0, 1), (2, 3)];

/// Tokens of the long sequence: past MPNet's `max_distance` of 128.
const LONG: usize = 300;

/// Largest absolute difference allowed between ONNX Runtime (f32) and the float64 reference
/// on any value of the token embeddings (of magnitude up to a few units).
const MAX_ABS_DIFF: f32 = 1e-4;

/// Smallest cosine allowed between ONNX Runtime's and the reference's embeddings.
const MIN_COSINE: f64 = 0.9999;

/// The model folder and its encoded ONNX graph, built once per test process.
fn model() -> Option<&'static (PathBuf, Vec<u8>)> {
    static MODEL: OnceLock<Option<(PathBuf, Vec<u8>)>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = mpnet::fetched_dir()?;
            let bytes = mpnet::build_model(&dir).unwrap_or_else(|e| panic!("build: {e}"));
            Some((dir, bytes))
        })
        .as_ref()
        .or_else(|| {
            // `fetched_dir` said why, once per process: say so in every test.
            eprintln!("note: skipping, all-mpnet-base-v2 not fetched");
            None
        })
}

/// The model's tokenizer, padding a batch to its longest row (`tokenizer.json` pads to a
/// fixed 128).
fn tokenizer(dir: &Path) -> Tokenizer {
    let path = dir.join("tokenizer.json");
    let mut tok = Tokenizer::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let padding = tok.get_padding().cloned().unwrap_or_default();
    tok.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::BatchLongest,
        ..padding
    }));
    tok
}

/// Token ids and attention mask of a batch, `[rows, seq]` each.
struct Batch {
    ids: Vec<Vec<i64>>,
    mask: Vec<Vec<i64>>,
}

impl Batch {
    fn encode(tok: &Tokenizer, texts: &[&str]) -> Batch {
        let enc = tok
            .encode_batch(texts.to_vec(), true)
            .unwrap_or_else(|e| panic!("tokenize: {e}"));
        let row = |v: &[u32]| v.iter().map(|&x| i64::from(x)).collect::<Vec<_>>();
        Batch {
            ids: enc.iter().map(|e| row(e.get_ids())).collect(),
            mask: enc.iter().map(|e| row(e.get_attention_mask())).collect(),
        }
    }

    fn seq(&self) -> usize {
        self.ids[0].len()
    }

    fn sample(&self) -> Vec<SampleValue> {
        let shape = IxDyn(&[self.ids.len(), self.seq()]);
        let array = |rows: &[Vec<i64>]| {
            SampleValue::I64(
                ArrayD::from_shape_vec(shape.clone(), rows.concat()).expect("rectangular batch"),
            )
        };
        vec![array(&self.ids), array(&self.mask)]
    }
}

/// `(token embeddings, sentence embeddings)` of ONNX Runtime, flattened.
fn run_ort(session: &mut Session, batch: &Batch) -> (Vec<f32>, Vec<f32>) {
    let names = vec!["input_ids".to_owned(), "attention_mask".to_owned()];
    let mut out = run_sample(session, &names, &batch.sample());
    (
        std::mem::take(&mut out[TOKENS_OUTPUT]),
        std::mem::take(&mut out[SENTENCE_OUTPUT]),
    )
}

/// `(token embeddings, sentence embeddings)` of the NumPy reference, flattened.
fn run_reference(dir: &Path, batch: &Batch) -> (Vec<f32>, Vec<f32>) {
    let script = kenosis_eval::workspace_root().join("kenosis-eval/python/mpnet_reference.py");
    let input = tempfile::NamedTempFile::new().expect("temp file");
    let json = serde_json::json!({"input_ids": batch.ids, "attention_mask": batch.mask});
    std::fs::write(input.path(), json.to_string()).expect("write inputs");
    let python = std::env::var_os("KENOSIS_PYTHON").unwrap_or_else(|| "python3".into());
    let output = Command::new(&python)
        .arg(&script)
        .arg(dir)
        .arg(input.path())
        .output()
        .unwrap_or_else(|e| panic!("starting {python:?}: {e}"));
    assert!(
        output.status.success(),
        "{} failed (it needs NumPy: pip install numpy): {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let result: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the reference prints JSON");
    let floats = |key: &str| -> Vec<f32> {
        result[key]
            .as_array()
            .unwrap_or_else(|| panic!("reference output lacks {key}"))
            .iter()
            .map(|v| v.as_f64().expect("a number") as f32)
            .collect()
    };
    (floats("token_embeddings"), floats("sentence_embedding"))
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "output sizes differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The smallest cosine between corresponding `dim`-wide rows of `a` and `b`.
fn min_row_cosine(a: &[f32], b: &[f32], dim: usize) -> f64 {
    a.chunks(dim)
        .zip(b.chunks(dim))
        .map(|(x, y)| cosine(x, y))
        .fold(f64::INFINITY, f64::min)
}

/// Checks ONNX Runtime against the reference on `batch`, printing what was measured.
fn check_against_reference(what: &str, dir: &Path, session: &mut Session, batch: &Batch) {
    let dim = 768;
    let (tokens, sentences) = run_ort(session, batch);
    let (ref_tokens, ref_sentences) = run_reference(dir, batch);
    assert_eq!(tokens.len(), batch.ids.len() * batch.seq() * dim, "{what}");
    assert_eq!(sentences.len(), batch.ids.len() * dim, "{what}");
    let token_diff = max_abs_diff(&tokens, &ref_tokens);
    let sentence_diff = max_abs_diff(&sentences, &ref_sentences);
    let token_cos = min_row_cosine(&tokens, &ref_tokens, dim);
    let sentence_cos = min_row_cosine(&sentences, &ref_sentences, dim);
    eprintln!(
        "{what} ({} x {} tokens): max |diff| tokens {token_diff:.2e}, sentences \
         {sentence_diff:.2e}; min cosine tokens {token_cos:.7}, sentences {sentence_cos:.7}",
        batch.ids.len(),
        batch.seq()
    );
    assert!(
        token_diff <= MAX_ABS_DIFF,
        "{what}: token diff {token_diff}"
    );
    assert!(
        sentence_diff <= MAX_ABS_DIFF,
        "{what}: sentence diff {sentence_diff}"
    );
    assert!(token_cos > MIN_COSINE, "{what}: token cosine {token_cos}");
    assert!(
        sentence_cos > MIN_COSINE,
        "{what}: sentence cosine {sentence_cos}"
    );
}

/// A sequence of [`LONG`] tokens: `<s>`, running text (the sentences over and over), `</s>`.
fn long_batch(tok: &Tokenizer) -> Batch {
    let mut tok = tok.clone();
    // `tokenizer.json` truncates to 128 tokens.
    tok.with_truncation(None).expect("no truncation");
    let text = SENTENCES.join(" ").repeat(LONG / 40 + 2);
    let enc = tok.encode(text, false).expect("tokenize");
    let id = |t: &str| i64::from(tok.token_to_id(t).unwrap_or_else(|| panic!("no {t}")));
    let mut ids = vec![id("<s>")];
    ids.extend(enc.get_ids()[..LONG - 2].iter().map(|&x| i64::from(x)));
    ids.push(id("</s>"));
    Batch {
        mask: vec![vec![1; ids.len()]],
        ids: vec![ids],
    }
}

#[test]
fn onnx_graph_matches_numpy_reference() {
    let Some((dir, bytes)) = model() else { return };
    let mut session = session(bytes, GraphOptimizationLevel::All, None);
    let tok = tokenizer(dir);
    let batch = Batch::encode(&tok, &SENTENCES);
    assert!(
        batch.mask.iter().any(|m| m.contains(&0)),
        "the batch should hold padding"
    );
    check_against_reference("padded batch", dir, &mut session, &batch);
    check_against_reference("long sequence", dir, &mut session, &long_batch(&tok));
}

#[test]
fn padded_rows_match_unpadded_runs() {
    let Some((dir, bytes)) = model() else { return };
    let mut session = session(bytes, GraphOptimizationLevel::All, None);
    let tok = tokenizer(dir);
    let batch = Batch::encode(&tok, &SENTENCES);
    let (tokens, sentences) = run_ort(&mut session, &batch);
    let (dim, seq) = (768, batch.seq());
    let mut checked = 0;
    for (row, text) in SENTENCES.iter().enumerate() {
        let len = batch.mask[row].iter().filter(|&&m| m == 1).count();
        if len == seq {
            continue;
        }
        let alone = Batch::encode(&tok, &[text]);
        assert_eq!(alone.seq(), len, "{text}");
        let (t, s) = run_ort(&mut session, &alone);
        let padded_tokens = &tokens[row * seq * dim..(row * seq + len) * dim];
        let diff = max_abs_diff(padded_tokens, &t)
            .max(max_abs_diff(&sentences[row * dim..(row + 1) * dim], &s));
        eprintln!("{text:?}: {len} of {seq} tokens, max |diff| alone vs padded {diff:.2e}");
        assert!(
            diff < 1e-4,
            "{text:?}: padding changes the output by {diff}"
        );
        checked += 1;
    }
    assert!(checked > 0, "no sentence was padded");
}

#[test]
fn paraphrases_embed_closer_than_unrelated_sentences() {
    let Some((dir, bytes)) = model() else { return };
    let mut session = session(bytes, GraphOptimizationLevel::All, None);
    let batch = Batch::encode(&tokenizer(dir), &SENTENCES);
    let (_, sentences) = run_ort(&mut session, &batch);
    let e: Vec<&[f32]> = sentences.chunks(768).collect();
    for (i, row) in e.iter().enumerate() {
        let norm = row
            .iter()
            .map(|x| f64::from(*x).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "sentence {i}: norm {norm}");
    }
    for &(a, b) in &PAIRS {
        let pair = cosine(e[a], e[b]);
        let (other, closest) = (0..SENTENCES.len())
            .filter(|&k| k != a && k != b)
            .flat_map(|k| [(k, cosine(e[a], e[k])), (k, cosine(e[b], e[k]))])
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .expect("unrelated sentences");
        eprintln!(
            "paraphrases {a}-{b}: cosine {pair:.4}; closest unrelated: {other} at {closest:.4}"
        );
        assert!(
            pair > closest,
            "{:?} and {:?} ({pair:.4}) are no closer than sentence {other} ({closest:.4})",
            SENTENCES[a],
            SENTENCES[b]
        );
    }
}

/// `mpnet::ensure_onnx`, which the benchmark uses: builds the ONNX file next to the model
/// folder when absent (the same bytes as `build_model`, no partial file left), and leaves a
/// present file alone.
#[test]
fn bench_onnx_file_is_built_when_absent_only() {
    let Some((dir, bytes)) = model() else { return };
    let models = tempfile::tempdir_in(kenosis_eval::target_dir()).expect("temp dir");
    std::os::unix::fs::symlink(dir, models.path().join(mpnet::MODEL_DIR)).expect("symlink");
    let path = mpnet::ensure_onnx(models.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(path, models.path().join(mpnet::ONNX_FILE));
    assert!(
        std::fs::read(&path).expect("written") == *bytes,
        "other bytes written"
    );
    let names: Vec<_> = std::fs::read_dir(models.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    std::fs::write(&path, b"present").expect("overwrite");
    assert_eq!(mpnet::ensure_onnx(models.path()), Ok(path.clone()));
    assert_eq!(std::fs::read(&path).expect("read"), b"present");
}
