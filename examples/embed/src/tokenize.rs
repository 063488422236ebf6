//! Text → MiniLM inputs, in one place for `build.rs` (calibration) and `main.rs` (inference).

use ndarray::Array2;
use tokenizers::{Tokenizer, TruncationParams};

/// The model's tokenizer: BERT's uncased WordPiece vocabulary with its normalizer,
/// pre-tokenizer and `[CLS] … [SEP]` template, as Hugging Face's `tokenizer.json`.
const TOKENIZER_JSON: &[u8] = include_bytes!("../tokenizer/tokenizer.json");

/// The longest input the model was trained on, in tokens (longer text is truncated).
pub const MAX_TOKENS: usize = 128;

/// The tokenizer, truncating to [`MAX_TOKENS`] and not padding (`tokenizer.json` pads every
/// input to 128 tokens; one sentence at a time needs no padding).
pub fn tokenizer() -> tokenizers::Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_bytes(TOKENIZER_JSON)?;
    tokenizer
        .with_padding(None)
        .with_truncation(Some(TruncationParams {
            max_length: MAX_TOKENS,
            ..Default::default()
        }))?;
    Ok(tokenizer)
}

/// The model inputs for one sentence: token ids and attention mask, both i64 `[1, tokens]`.
pub fn encode(tokenizer: &Tokenizer, text: &str) -> tokenizers::Result<(Array2<i64>, Array2<i64>)> {
    let encoding = tokenizer.encode(text, true)?;
    let row =
        |values: &[u32]| Array2::from_shape_fn((1, values.len()), |(_, i)| i64::from(values[i]));
    Ok((row(encoding.get_ids()), row(encoding.get_attention_mask())))
}
