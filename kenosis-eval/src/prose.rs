//! Real English prose as inputs of a BERT-family encoder: text files of the machine cut into
//! fixed-length token windows with the model's own `tokenizer.json` (Hugging Face
//! `tokenizers`), for calibration and evaluation of transformer encoders.
//!
//! The text is the licence texts of `/usr/share/common-licenses` (Debian and Ubuntu ship
//! them with `base-files`): long, edited English prose. Calibration and evaluation read
//! different licences, so that no evaluated window was seen in calibration.

use std::path::{Path, PathBuf};

use kenosis_quantize::calibrate::SampleValue;
use ndarray::{ArrayD, IxDyn};
use tokenizers::Tokenizer;

/// Where the licence texts are.
pub const LICENSES_DIR: &str = "/usr/share/common-licenses";

/// Licences whose windows calibrate.
pub const CALIBRATION_TEXTS: [&str; 3] = ["GPL-3", "Apache-2.0", "MPL-2.0"];

/// Licences whose windows evaluate (none of them in [`CALIBRATION_TEXTS`]).
pub const EVALUATION_TEXTS: [&str; 5] = ["LGPL-2.1", "GFDL-1.3", "MPL-1.1", "GPL-2", "Artistic"];

/// The tokenizer of paraphrase-MiniLM-L3-v2 (BERT uncased WordPiece), the one
/// `examples/embed` ships.
pub fn minilm_tokenizer_path() -> PathBuf {
    crate::workspace_root().join("examples/embed/tokenizer/tokenizer.json")
}

/// The `texts` of [`LICENSES_DIR`] that exist; `None` (skip, with a note) when one is
/// missing, except under `CI=true`, where it panics.
pub fn licence_files(texts: &[&str]) -> Option<Vec<PathBuf>> {
    let files: Vec<PathBuf> = texts
        .iter()
        .map(|t| Path::new(LICENSES_DIR).join(t))
        .collect();
    if let Some(missing) = files.iter().find(|f| !f.is_file()) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{} not found (CI=true: refusing to skip)",
            missing.display()
        );
        eprintln!("note: skipping, {} not found", missing.display());
        return None;
    }
    Some(files)
}

/// `count` windows of `tokens` token ids each (`[CLS]`, `tokens - 2` ids of running text,
/// `[SEP]`), taken evenly spaced from every non-overlapping window of `files` in order.
///
/// # Panics
/// When the tokenizer or a file cannot be read, the vocabulary lacks `[CLS]` or `[SEP]`, or
/// the files hold fewer than `count` windows: test and benchmark inputs, not user data.
pub fn windows(tokenizer: &Path, files: &[PathBuf], count: usize, tokens: usize) -> Vec<Vec<i64>> {
    let mut tok =
        Tokenizer::from_file(tokenizer).unwrap_or_else(|e| panic!("{}: {e}", tokenizer.display()));
    // Whole files: `tokenizer.json` truncates and pads to the model's input length.
    tok.with_padding(None)
        .with_truncation(None)
        .unwrap_or_else(|e| panic!("{}: {e}", tokenizer.display()));
    let special = |t: &str| {
        i64::from(
            tok.token_to_id(t)
                .unwrap_or_else(|| panic!("{}: no {t} token", tokenizer.display())),
        )
    };
    let (cls, sep) = (special("[CLS]"), special("[SEP]"));
    let body = tokens - 2;
    let mut all = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ids = tok
            .encode(text, false)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ids: Vec<i64> = ids.get_ids().iter().map(|&i| i64::from(i)).collect();
        for chunk in ids.chunks_exact(body) {
            let mut w = Vec::with_capacity(tokens);
            w.push(cls);
            w.extend_from_slice(chunk);
            w.push(sep);
            all.push(w);
        }
    }
    assert!(
        all.len() >= count,
        "{} windows of {tokens} tokens in {files:?}, {count} asked",
        all.len()
    );
    (0..count)
        .map(|i| all[i * all.len() / count].clone())
        .collect()
}

/// BERT inputs of one window: `input_ids` and an all-ones `attention_mask`, i64 `[1, n]`.
pub fn bert_inputs(ids: &[i64]) -> Vec<SampleValue> {
    let n = ids.len();
    let ids = ArrayD::from_shape_vec(IxDyn(&[1, n]), ids.to_vec()).expect("[1, n] holds n ids");
    vec![
        SampleValue::I64(ids),
        SampleValue::I64(ArrayD::from_elem(IxDyn(&[1, n]), 1)),
    ]
}
