//! Sentence embeddings with paraphrase-MiniLM-L3-v2, quantized to INT8 by `build.rs` and
//! embedded in this binary: tokenize with Hugging Face's `tokenizers`, run the model, mean-pool
//! its token embeddings over the attention mask, and compare sentences by cosine similarity.
//!
//! ```text
//! embed                      # built-in pairs: paraphrases and unrelated sentences
//! embed "SENTENCE" "SENTENCE"...   # the similarity of each sentence to the first
//! ```

mod tokenize;

use std::process::ExitCode;

use anyhow::{anyhow, bail, Result};
use ndarray::{Array1, ArrayView2, ArrayView3, Axis};
use tokenizers::Tokenizer;

// paraphrase-MiniLM-L3-v2 (a 3-layer BERT, 384-dim embeddings), quantized to INT8 by build.rs
// (which finds this call) and calibrated on the sentences build.rs tokenized into
// `$OUT_DIR/calib`. Its typed `run` takes `MiniLmInputs { input_ids, attention_mask }` (i64
// [batch, tokens]) and returns `MiniLmOutputs`, whose `onnx__Shape_422` field holds the token
// embeddings (f32 [batch, tokens, 384]).
kenosis_runtime::include_quantized!(
    struct MiniLm = "models/paraphrase-MiniLM-L3-v2.onnx",
    calibration = "$OUT_DIR/calib",
);

/// Pairs the program compares without arguments: three paraphrases, then three unrelated.
const PAIRS: [(&str, &str); 6] = [
    (
        "A man is playing a guitar.",
        "Someone is playing an instrument.",
    ),
    ("The cat sits on the mat.", "A cat is sitting on a rug."),
    (
        "How do I reset my password?",
        "I forgot my password, how can I change it?",
    ),
    (
        "A man is playing a guitar.",
        "The stock market fell sharply today.",
    ),
    ("The cat sits on the mat.", "Quantum computers use qubits."),
    (
        "How do I reset my password?",
        "The weather is sunny in Madrid.",
    ),
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("embed: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let tokenizer = tokenize::tokenizer().map_err(|e| anyhow!("loading the tokenizer: {e}"))?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {
            for (a, b) in PAIRS {
                let similarity = cosine(&embed(&tokenizer, a)?, &embed(&tokenizer, b)?);
                println!("{similarity:>6.3}  {a:?} ~ {b:?}");
            }
        }
        [_] => bail!("usage: embed [SENTENCE SENTENCE...]: give at least two sentences"),
        [first, rest @ ..] => {
            let reference = embed(&tokenizer, first)?;
            for other in rest {
                let similarity = cosine(&reference, &embed(&tokenizer, other)?);
                println!("{similarity:>6.3}  {first:?} ~ {other:?}");
            }
        }
    }
    Ok(())
}

/// The sentence embedding of `text`: 384 floats.
fn embed(tokenizer: &Tokenizer, text: &str) -> Result<Array1<f32>> {
    let (input_ids, attention_mask) =
        tokenize::encode(tokenizer, text).map_err(|e| anyhow!("tokenizing {text:?}: {e}"))?;
    let outputs = MiniLm.run(MiniLmInputs {
        input_ids: input_ids.view(),
        attention_mask: attention_mask.view(),
    })?;
    let pooled = mean_pool(outputs.onnx__Shape_422.view(), attention_mask.view());
    Ok(pooled.index_axis_move(Axis(0), 0))
}

/// Sentence-Transformers' mean pooling: the average of each sentence's token embeddings
/// (`[batch, tokens, dim]`) over the tokens its attention mask (`[batch, tokens]`, 1 or 0)
/// keeps, so that padding does not count. Returns `[batch, dim]`.
fn mean_pool(tokens: ArrayView3<f32>, mask: ArrayView2<i64>) -> ndarray::Array2<f32> {
    let weights = mask.mapv(|m| m as f32);
    let mut pooled = ndarray::Array2::zeros((tokens.dim().0, tokens.dim().2));
    for ((mut out, sentence), weights) in pooled
        .outer_iter_mut()
        .zip(tokens.outer_iter())
        .zip(weights.outer_iter())
    {
        let count = weights.sum().max(1.0);
        for (token, &w) in sentence.outer_iter().zip(&weights) {
            out.scaled_add(w / count, &token);
        }
    }
    pooled
}

/// Cosine similarity of two vectors, in `[-1, 1]`.
fn cosine(a: &Array1<f32>, b: &Array1<f32>) -> f32 {
    a.dot(b) / (a.dot(a).sqrt() * b.dot(b).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kenosis_runtime::EmbeddedModel;
    use ndarray::{array, Array2};

    #[test]
    fn paraphrases_score_higher_than_unrelated_sentences() {
        let tokenizer = tokenize::tokenizer().unwrap();
        let scores: Vec<f32> = PAIRS
            .iter()
            .map(|(a, b)| {
                cosine(
                    &embed(&tokenizer, a).unwrap(),
                    &embed(&tokenizer, b).unwrap(),
                )
            })
            .collect();
        let (paraphrases, unrelated) = scores.split_at(3);
        let weakest = paraphrases.iter().copied().fold(f32::INFINITY, f32::min);
        let strongest = unrelated.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert!(weakest > strongest + 0.2, "{scores:?}");
    }

    /// The INT8 embeddings against the FP32 model's (read from `models/` at test time).
    #[test]
    fn int8_embeddings_stay_close_to_fp32() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/models/paraphrase-MiniLM-L3-v2.onnx"
        );
        let bytes: &'static [u8] = std::fs::read(path).unwrap().leak();
        let fp32 = EmbeddedModel::from_static_bytes("paraphrase-MiniLM-L3-v2 (FP32)", bytes);
        let tokenizer = tokenize::tokenizer().unwrap();
        for text in PAIRS.iter().flat_map(|(a, b)| [*a, *b]) {
            let (ids, mask) = tokenize::encode(&tokenizer, text).unwrap();
            let outputs = fp32
                .run([ids.view().into_dyn(), mask.view().into_dyn()])
                .unwrap();
            let tokens = outputs[2].as_f32().unwrap().into_dimensionality().unwrap();
            let reference = mean_pool(tokens, mask.view()).index_axis_move(Axis(0), 0);
            // The model's own pooled output (`461`) is the same mean.
            let model_pooled = outputs[3].as_f32().unwrap();
            assert!(reference
                .iter()
                .zip(model_pooled)
                .all(|(a, b)| (a - b).abs() < 1e-4));
            let similarity = cosine(&embed(&tokenizer, text).unwrap(), &reference);
            eprintln!("INT8 vs FP32 cosine {similarity:.4}  {text:?}");
            assert!(similarity > 0.98, "{similarity} for {text:?}");
        }
    }

    #[test]
    fn mean_pooling_skips_masked_tokens() {
        let tokens = array![[[1.0f32, 2.0], [3.0, 4.0], [100.0, 100.0]]];
        let pooled: Array2<f32> = mean_pool(tokens.view(), array![[1i64, 1, 0]].view());
        assert_eq!(pooled, array![[2.0, 3.0]]);
    }

    #[test]
    fn the_tokenizer_frames_sentences_with_cls_and_sep() {
        let tokenizer = tokenize::tokenizer().unwrap();
        let (ids, mask) = tokenize::encode(&tokenizer, "Hello world").unwrap();
        assert_eq!(ids.shape(), mask.shape());
        assert_eq!((ids[[0, 0]], ids[[0, ids.len() - 1]]), (101, 102));
        assert!(mask.iter().all(|&m| m == 1));
        let long = "word ".repeat(500);
        assert_eq!(
            tokenize::encode(&tokenizer, &long).unwrap().0.len(),
            tokenize::MAX_TOKENS
        );
    }
}
