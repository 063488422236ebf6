//! Plain text as a language model's samples: a call site's `calibration_text` with its
//! `tokenizer` (and `max_len`), and the `kenosis` command's `--text FILE|DIR --tokenizer
//! tokenizer.json [--max-len N]`.
//!
//! Each file is tokenized whole with the model's own `tokenizer.json` (Hugging Face
//! `tokenizers`), without its truncation and padding, and its tokens are cut into
//! consecutive windows of `N` minus the special tokens the tokenizer adds (`[CLS]` and
//! `[SEP]` for BERT). Each window then goes through the tokenizer's post-processor, which adds
//! those tokens and gives the type ids and the attention mask. The last window of a file is
//! padded to `N` with the tokenizer's pad token, under a zero attention mask. One window is
//! one sample, in file-name order, then text order.
//!
//! The model's inputs are fed by name: one whose name holds `mask` gets the attention mask,
//! `type` (`token_type_ids`) the type ids, `position` the positions 0 to N - 1, and the one
//! other input the token ids. Each is `[1, N]` (or `[N]`), int64 or int32 as declared.

use std::path::Path;

use kenosis_options::check::MAX_TEXT_WINDOW;
use ndarray::{ArrayD, IxDyn};
use tokenizers::{Encoding, PaddingParams, PaddingStrategy, PostProcessor, Token, Tokenizer};

use crate::calibrate::data::InputSpec;
use crate::calibrate::{CalibrationData, SampleValue};
use crate::error::{Error, Result};
use crate::model_files::text_files;
use crate::onnx::DataType;

/// The window length (tokens) when none is given, the model declares none and the tokenizer
/// truncates at none.
pub const DEFAULT_MAX_LEN: usize = 128;

/// What a model input is fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Ids,
    Mask,
    TypeIds,
    Positions,
}

/// The samples of the text at `path` (a file, or every regular file directly in a folder,
/// in name order) for the model at `model` with inputs `inputs`, tokenized by the tokenizer
/// at `tokenizer` into windows of `max_len` tokens (default: the model's fixed sequence
/// length, else the tokenizer's truncation length, else [`DEFAULT_MAX_LEN`]); and the
/// window length used.
///
/// # Errors
/// [`Error::Calibration`] (or [`Error::Io`]) naming the text file or folder when it cannot
/// be listed, or holds no file; the tokenizer when it cannot be read or leaves no room for text in a window; the
/// model when an input is not an int64 or int32 `[1, N]` or `[N]` tensor
/// it can feed, `max_len` differs from the sequence length it declares, or no input takes
/// the token ids; the text when it cannot be read, is not UTF-8 or holds no token.
pub fn samples(
    path: &Path,
    tokenizer: &Path,
    max_len: Option<usize>,
    model: &Path,
    inputs: &[InputSpec],
) -> Result<(CalibrationData, usize)> {
    let bad = |path: &Path, reason: String| Error::Calibration {
        path: path.to_owned(),
        reason,
    };
    let files = text_files(path)?;
    let mut tok = Tokenizer::from_file(tokenizer)
        .map_err(|e| bad(tokenizer, format!("not a tokenizer: {e}")))?;
    let roles = roles(model, inputs)?;
    let declared = fixed_length(model, inputs)?;
    let len = match (max_len, declared) {
        (Some(n), Some(d)) if n != d => {
            return Err(bad(
                model,
                format!(
                "windows of {n} tokens were asked for, but the model takes sequences of {d} tokens"
            ),
            ))
        }
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => tok
            .get_truncation()
            .map_or(DEFAULT_MAX_LEN, |t| t.max_length),
    };
    if len > MAX_TEXT_WINDOW {
        return Err(bad(
            model,
            format!("windows of {len} tokens: at most {MAX_TEXT_WINDOW} are supported"),
        ));
    }
    let special = tok
        .get_post_processor()
        .map_or(0, |p| p.added_tokens(false));
    let body = len.checked_sub(special).filter(|b| *b > 0).ok_or_else(|| {
        bad(
            tokenizer,
            format!(
                "windows of {len} tokens leave no room for text beside {special} special tokens"
            ),
        )
    })?;
    let pad = tok.get_padding().cloned().unwrap_or_default();
    // Whole files in; windows padded to exactly `len` by the post-processing below.
    tok.with_truncation(None)
        .map_err(|e| bad(tokenizer, e.to_string()))?;
    tok.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::Fixed(len),
        ..pad
    }));

    let mut samples = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|e| bad(file, e.to_string()))?;
        let ids = tok
            .encode(text.as_str(), false)
            .map_err(|e| bad(file, format!("cannot be tokenized: {e}")))?;
        for chunk in ids.get_ids().chunks(body) {
            let tokens = (chunk.iter())
                .map(|&id| Token::new(id, String::new(), (0, 0)))
                .collect();
            let window = tok
                .post_process(Encoding::from_tokens(tokens, 0), None, true)
                .map_err(|e| bad(tokenizer, e.to_string()))?;
            samples.push(sample(&window, &roles, inputs));
        }
    }
    if samples.is_empty() {
        return Err(bad(path, "holds no text to tokenize".into()));
    }
    let data = CalibrationData {
        samples,
        files,
        synthetic: false,
    };
    Ok((data, len))
}

/// One sample: each input's values from `window`, shaped as the input.
fn sample(window: &Encoding, roles: &[Role], inputs: &[InputSpec]) -> Vec<SampleValue> {
    let len = window.get_ids().len();
    (roles.iter().zip(inputs))
        .map(|(role, input)| {
            let values: Vec<i64> = match role {
                Role::Ids => window.get_ids().iter().map(|&v| i64::from(v)).collect(),
                Role::Mask => (window.get_attention_mask().iter())
                    .map(|&v| i64::from(v))
                    .collect(),
                Role::TypeIds => (window.get_type_ids().iter())
                    .map(|&v| i64::from(v))
                    .collect(),
                Role::Positions => (0..len as i64).collect(),
            };
            let shape = if input.dims.len() == 2 {
                vec![1, len]
            } else {
                vec![len]
            };
            if input.elem_type == DataType::Int32 {
                let values = values.iter().map(|&v| v as i32).collect();
                SampleValue::I32(ArrayD::from_shape_vec(IxDyn(&shape), values).unwrap_or_default())
            } else {
                SampleValue::I64(ArrayD::from_shape_vec(IxDyn(&shape), values).unwrap_or_default())
            }
        })
        .collect()
}

/// What each input is fed, by its name.
fn roles(model: &Path, inputs: &[InputSpec]) -> Result<Vec<Role>> {
    let bad = |reason: String| Error::Calibration {
        path: model.to_owned(),
        reason,
    };
    let mut roles = Vec::with_capacity(inputs.len());
    for input in inputs {
        if input.elem_type != DataType::Int64 && input.elem_type != DataType::Int32 {
            return Err(bad(format!(
                "text samples are int64 or int32 token inputs; input `{}` is {}: give .npy \
                 samples",
                input.name, input.elem_type
            )));
        }
        if !matches!(input.dims.len(), 1 | 2) {
            return Err(bad(format!(
                "input `{}` has {} dimensions; text samples are [batch, tokens] or [tokens]",
                input.name,
                input.dims.len()
            )));
        }
        if input.dims.len() == 2 && input.dims[0].is_some_and(|n| n != 1) {
            return Err(bad(format!(
                "input `{}` takes a batch of {} sequences; text samples are batches of one",
                input.name,
                input.dims[0].unwrap_or_default()
            )));
        }
        let name = input.name.to_ascii_lowercase();
        roles.push(if name.contains("mask") {
            Role::Mask
        } else if name.contains("type") || name.contains("segment") {
            Role::TypeIds
        } else if name.contains("position") {
            Role::Positions
        } else {
            Role::Ids
        });
    }
    let ids = roles.iter().filter(|r| **r == Role::Ids).count();
    if ids != 1 {
        let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
        return Err(bad(format!(
            "text samples need exactly one input for the token ids (the one whose name holds no \
             `mask`, `type` or `position`); the inputs are {}: give .npy samples",
            names.join(", ")
        )));
    }
    Ok(roles)
}

/// The sequence length the inputs declare, when any declares one (they must agree).
fn fixed_length(model: &Path, inputs: &[InputSpec]) -> Result<Option<usize>> {
    let mut found: Option<usize> = None;
    for input in inputs {
        let Some(Some(n)) = input.dims.last() else {
            continue;
        };
        let n = usize::try_from(*n).unwrap_or_default();
        if found.is_some_and(|f| f != n) {
            return Err(Error::Calibration {
                path: model.to_owned(),
                reason: format!(
                    "the inputs declare different sequence lengths ({} and {n})",
                    found.unwrap_or_default()
                ),
            });
        }
        found = Some(n);
    }
    Ok(found)
}
