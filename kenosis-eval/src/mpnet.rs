//! sentence-transformers' all-mpnet-base-v2 (MPNet-base, 110M parameters) as an ONNX graph
//! built here from its FP32 `model.safetensors` and `config.json`, as an exporter would
//! write it: the model is published without an ONNX file.
//!
//! The graph (default domain, opset 13, IR version 8) follows Hugging Face's `MPNetModel`
//! followed by the sentence-transformers pipeline of the model's `modules.json`
//! (Transformer, mean Pooling, Normalize):
//! - inputs `input_ids` and `attention_mask`, int64 `[batch, seq]` (symbolic dims), `seq` at
//!   most `max_position_embeddings - pad_token_id - 1` (512);
//! - embeddings: word + position embeddings, then LayerNorm. Position ids are those of HF's
//!   `create_position_ids_from_input_ids`: `cumsum(ids != pad) * (ids != pad) + pad`, so
//!   `pad + 1, pad + 2, …` over the tokens and `pad` on padding. No token type embeddings;
//! - a relative position bias `[1, heads, seq, seq]` computed once and added to the scores
//!   of every layer: T5's bidirectional bucket of `key position - query position`
//!   ([`relative_position_bucket`]) looked up in `encoder.relative_attention_bias`. The
//!   buckets come from a table indexed by the relative distance (an initializer of
//!   `2 * max_relative + 1` int64), gathered with indices computed from `seq` by `Range`;
//! - per layer: q, k, v linear layers, scores `q·kᵀ / sqrt(head_dim) + bias + mask` where the
//!   mask adds `f32::MIN` (PyTorch's `finfo(float32).min`, as HF does) at padding, softmax,
//!   the `o` linear layer, residual and LayerNorm, then the feed-forward layer with exact
//!   (erf) GELU, residual and LayerNorm. LayerNorm and GELU are written out in primitive ops
//!   as `torch.onnx.export` does below opset 17; linear layers as `MatMul` with the transposed
//!   weight and `Add` of the bias;
//! - outputs, in this order: `token_embeddings`, f32 `[batch, seq, hidden]` (the last hidden
//!   state), and `sentence_embedding`, f32 `[batch, hidden]`: the mean over the tokens whose
//!   `attention_mask` is 1 (sentence-transformers' `Pooling`, `mean_tokens`), L2-normalized
//!   (its `Normalize`: `x / max(‖x‖, 1e-12)`), i.e. what `SentenceTransformer.encode`
//!   returns for this model. Cosine similarities do not depend on the normalization.
//!
//! `python/mpnet_reference.py` computes the same forward pass in NumPy straight from the
//! safetensors file; `tests/tests/mpnet.rs` checks one against the other.

use std::path::{Path, PathBuf};

use kenosis_quantize::onnx::{self, attr, tensor, GraphProto, TensorProto};
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use crate::graph::{model, raw_f32, value_info, Dim, GraphWriter};

/// The model's folder in [`crate::fetched_models_dir`], as fetched from its publisher
/// (`config.json`, `model.safetensors`, `tokenizer.json`, …).
pub const MODEL_DIR: &str = "all-mpnet-base-v2";

/// The ONNX file [`ensure_onnx`] writes next to [`MODEL_DIR`] for the benchmark.
pub const ONNX_FILE: &str = "all-mpnet-base-v2.onnx";

/// Output index of `token_embeddings`.
pub const TOKENS_OUTPUT: usize = 0;
/// Output index of `sentence_embedding`.
pub const SENTENCE_OUTPUT: usize = 1;

/// T5's `max_distance` as MPNet uses it: relative distances from this on share the last
/// bucket of their direction.
pub const MAX_DISTANCE: i64 = 128;

/// The value the attention mask adds to the scores of padding keys: `torch.finfo(float32)
/// .min`, as HF's `get_extended_attention_mask` does.
pub const MASKED: f32 = f32::MIN;

/// sentence-transformers' `Normalize` floor of the norm (`F.normalize`'s `eps`).
pub const NORMALIZE_EPS: f32 = 1e-12;

/// The fields of the model's `config.json` the graph needs (HF `MPNetConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub layer_norm_eps: f32,
    pub pad_token_id: i64,
    pub relative_attention_num_buckets: i64,
    /// Must be `gelu` (exact, erf): the only activation built.
    pub hidden_act: String,
}

impl Config {
    /// Reads `config.json` of `dir`.
    ///
    /// # Errors
    /// When it cannot be read or parsed, or describes a model this builder does not cover
    /// (heads not dividing the hidden size, an activation other than `gelu`).
    pub fn read(dir: &Path) -> Result<Self, String> {
        let path = dir.join("config.json");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let config: Config =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return Err(format!(
                "{}: {} heads do not divide hidden size {}",
                path.display(),
                config.num_attention_heads,
                config.hidden_size
            ));
        }
        if config.hidden_act != "gelu" {
            return Err(format!(
                "{}: hidden_act {:?}, only \"gelu\" (erf) is built",
                path.display(),
                config.hidden_act
            ));
        }
        if config.max_position_embeddings as i64 <= config.pad_token_id + 1 {
            return Err(format!(
                "{}: max_position_embeddings {} leaves no position after padding_idx {}",
                path.display(),
                config.max_position_embeddings,
                config.pad_token_id
            ));
        }
        Ok(config)
    }

    /// Dimensions per head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// The longest sequence the position embeddings cover: positions run from
    /// `pad_token_id + 1` to `max_position_embeddings - 1`.
    pub fn max_seq(&self) -> usize {
        self.max_position_embeddings - self.pad_token_id as usize - 1
    }
}

/// T5's bidirectional relative position bucket (`MPNetEncoder.relative_position_bucket`) of
/// `relative = key position - query position`, for `num_buckets` buckets in all: half for
/// keys before the query, half for keys after; in each half, distances below a quarter of
/// `num_buckets` get a bucket each, larger ones share logarithmically spaced buckets up to
/// `max_distance`, beyond which they share the last one.
///
/// The logarithm is computed in f32 as PyTorch computes it for the model
/// (`log(n / max_exact) / log(max_distance / max_exact) * (half - max_exact)`, truncated),
/// so that buckets at the boundaries match it.
pub fn relative_position_bucket(relative: i64, num_buckets: i64, max_distance: i64) -> i64 {
    let half = num_buckets / 2;
    let n = -relative;
    let mut bucket = if n < 0 { half } else { 0 };
    let n = n.abs();
    let max_exact = half / 2;
    if n < max_exact {
        bucket += n;
    } else {
        let scale = ((max_distance as f64) / (max_exact as f64)).ln() as f32;
        let log = (n as f32 / max_exact as f32).ln() / scale * (half - max_exact) as f32;
        bucket += (max_exact + log as i64).min(half - 1);
    }
    bucket
}

/// The FP32 weights of `model.safetensors`, read whole.
pub struct Weights {
    bytes: Vec<u8>,
    path: PathBuf,
}

impl Weights {
    /// Reads `model.safetensors` of `dir` and checks its header.
    ///
    /// # Errors
    /// When the file cannot be read or is not a safetensors file.
    pub fn read(dir: &Path) -> Result<Self, String> {
        let path = dir.join("model.safetensors");
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self { bytes, path })
    }

    /// The little-endian f32 bytes of tensor `name`, checked to be F32 of shape `dims`.
    ///
    /// # Errors
    /// When the tensor is missing, not F32, or of another shape.
    pub fn f32_bytes(&self, name: &str, dims: &[usize]) -> Result<&[u8], String> {
        let st = SafeTensors::deserialize(&self.bytes)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let view = st
            .tensor(name)
            .map_err(|e| format!("{}: {name}: {e}", self.path.display()))?;
        if view.dtype() != Dtype::F32 || view.shape() != dims {
            return Err(format!(
                "{}: {name} is {:?} {:?}, expected F32 {dims:?}",
                self.path.display(),
                view.dtype(),
                view.shape()
            ));
        }
        Ok(view.data())
    }

    /// Tensor `name` (F32 of shape `dims`) as an initializer of the same name.
    ///
    /// # Errors
    /// As [`Weights::f32_bytes`].
    pub fn initializer(&self, name: &str, dims: &[usize]) -> Result<TensorProto, String> {
        Ok(raw_f32(name, dims, self.f32_bytes(name, dims)?.to_vec()))
    }

    /// The `[out, in]` weight of the PyTorch linear layer `name` transposed to the `[in, out]`
    /// initializer `name` that `MatMul` takes.
    ///
    /// # Errors
    /// As [`Weights::f32_bytes`].
    pub fn transposed(
        &self,
        name: &str,
        out_features: usize,
        in_features: usize,
    ) -> Result<TensorProto, String> {
        let src = self.f32_bytes(name, &[out_features, in_features])?;
        let mut dst = vec![0u8; src.len()];
        for o in 0..out_features {
            for i in 0..in_features {
                let (s, d) = ((o * in_features + i) * 4, (i * out_features + o) * 4);
                dst[d..d + 4].copy_from_slice(&src[s..s + 4]);
            }
        }
        Ok(raw_f32(name, &[in_features, out_features], dst))
    }
}

/// A FLOAT initializer from little-endian bytes.
/// The graph under construction and the model's sizes.
struct Builder<'w> {
    g: GraphProto,
    config: Config,
    weights: &'w Weights,
}

impl GraphWriter for Builder<'_> {
    fn graph(&mut self) -> &mut GraphProto {
        &mut self.g
    }
}

impl Builder<'_> {
    /// The constants the graph shares (scalars, axes, shapes), as initializers.
    fn constants(&mut self) {
        let c = &self.config;
        let (heads, head_dim) = (c.num_attention_heads as i64, c.head_dim() as i64);
        self.g.initializer.extend([
            tensor::from_f32("one", &[], &[1.0]),
            tensor::from_f32("two", &[], &[2.0]),
            tensor::from_f32("half", &[], &[0.5]),
            tensor::from_f32("sqrt_two", &[], &[std::f32::consts::SQRT_2]),
            tensor::from_f32("ln_eps", &[], &[c.layer_norm_eps]),
            tensor::from_f32("score_scale", &[], &[(head_dim as f32).sqrt()]),
            tensor::from_f32("masked", &[], &[MASKED]),
            tensor::from_f32("count_floor", &[], &[1e-9]),
            tensor::from_f32("norm_floor", &[], &[NORMALIZE_EPS]),
            tensor::from_i64("pad_id", &[], &[c.pad_token_id]),
            tensor::from_i64("i0", &[], &[0]),
            tensor::from_i64("i1", &[], &[1]),
            tensor::from_i64("axes_0", &[1], &[0]),
            tensor::from_i64("axes_1", &[1], &[1]),
            tensor::from_i64("axes_2", &[1], &[2]),
            tensor::from_i64("axes_1_2", &[2], &[1, 2]),
            tensor::from_i64("heads_shape", &[4], &[0, 0, heads, head_dim]),
            tensor::from_i64("hidden_shape", &[3], &[0, 0, heads * head_dim]),
        ]);
    }

    /// `x · W + b` for the PyTorch linear layer `prefix` (`prefix.weight` `[out, in]`,
    /// `prefix.bias` `[out]`).
    fn linear(
        &mut self,
        x: &str,
        prefix: &str,
        in_f: usize,
        out_f: usize,
    ) -> Result<String, String> {
        let (w, b) = (format!("{prefix}.weight"), format!("{prefix}.bias"));
        let weight = self.weights.transposed(&w, out_f, in_f)?;
        let bias = self.weights.initializer(&b, &[out_f])?;
        self.g.initializer.extend([weight, bias]);
        Ok(self.matmul_add(x, prefix))
    }

    /// LayerNorm over the last axis with `prefix.weight` and `prefix.bias`, in primitive ops.
    fn layer_norm(&mut self, x: &str, prefix: &str) -> Result<String, String> {
        let h = self.config.hidden_size;
        let (w, b) = (format!("{prefix}.weight"), format!("{prefix}.bias"));
        let gamma = self.weights.initializer(&w, &[h])?;
        let beta = self.weights.initializer(&b, &[h])?;
        self.g.initializer.extend([gamma, beta]);
        Ok(self.layer_norm_ops(x, prefix))
    }

    /// Word + position embeddings and LayerNorm: `[batch, seq, hidden]`.
    fn embeddings(&mut self) -> Result<String, String> {
        let c = self.config.clone();
        let word = "embeddings.word_embeddings.weight";
        let pos = "embeddings.position_embeddings.weight";
        let w = self
            .weights
            .initializer(word, &[c.vocab_size, c.hidden_size])?;
        let p = self
            .weights
            .initializer(pos, &[c.max_position_embeddings, c.hidden_size])?;
        self.g.initializer.extend([w, p]);
        // HF's create_position_ids_from_input_ids.
        let is_pad = self.node("Equal", &["input_ids", "pad_id"], "positions/is_pad");
        let token = self.node("Not", &[&is_pad], "positions/is_token");
        let token = self.node_with(
            "Cast",
            &[&token],
            "positions/token_i64",
            vec![attr::make_int("to", onnx::DataType::Int64 as i64)],
        );
        let count = self.node("CumSum", &[&token, "i1"], "positions/cumsum");
        let count = self.node("Mul", &[&count, &token], "positions/masked");
        let ids = self.node("Add", &[&count, "pad_id"], "position_ids");
        let we = self.node("Gather", &[word, "input_ids"], "embeddings/word");
        let pe = self.node("Gather", &[pos, &ids], "embeddings/position");
        let sum = self.node("Add", &[&we, &pe], "embeddings/sum");
        self.layer_norm(&sum, "embeddings.LayerNorm")
    }

    /// The relative position bias shared by the layers: `[1, heads, seq, seq]`.
    fn position_bias(&mut self) -> Result<String, String> {
        let c = self.config.clone();
        let name = "encoder.relative_attention_bias.weight";
        let table = self.weights.initializer(
            name,
            &[
                c.relative_attention_num_buckets as usize,
                c.num_attention_heads,
            ],
        )?;
        self.g.initializer.push(table);
        let max_rel = c.max_seq() as i64 - 1;
        let buckets: Vec<i64> = (-max_rel..=max_rel)
            .map(|r| relative_position_bucket(r, c.relative_attention_num_buckets, MAX_DISTANCE))
            .collect();
        self.g.initializer.extend([
            tensor::from_i64("bias/bucket_of_distance", &[2 * max_rel + 1], &buckets),
            tensor::from_i64("bias/max_rel", &[], &[max_rel]),
        ]);
        let shape = self.node("Shape", &["input_ids"], "bias/input_shape");
        let seq = self.node_with(
            "Gather",
            &[&shape, "i1"],
            "bias/seq",
            vec![attr::make_int("axis", 0)],
        );
        let pos = self.node("Range", &["i0", &seq, "i1"], "bias/positions");
        let query = self.node("Unsqueeze", &[&pos, "axes_1"], "bias/query");
        let key = self.node("Unsqueeze", &[&pos, "axes_0"], "bias/key");
        let rel = self.node("Sub", &[&key, &query], "bias/relative");
        let idx = self.node("Add", &[&rel, "bias/max_rel"], "bias/distance_index");
        let bucket = self.node("Gather", &["bias/bucket_of_distance", &idx], "bias/bucket");
        let values = self.node("Gather", &[name, &bucket], "bias/values");
        let heads_first = self.node_with(
            "Transpose",
            &[&values],
            "bias/heads_first",
            vec![attr::make_ints("perm", &[2, 0, 1])],
        );
        Ok(self.node("Unsqueeze", &[&heads_first, "axes_0"], "position_bias"))
    }

    /// The additive attention mask `[batch, 1, 1, seq]`: 0 on tokens, [`MASKED`] on padding.
    fn additive_mask(&mut self) -> String {
        let m = self.node_with(
            "Cast",
            &["attention_mask"],
            "mask/f32",
            vec![attr::make_int("to", onnx::DataType::Float as i64)],
        );
        let inv = self.node("Sub", &["one", &m], "mask/inverted");
        let add = self.node("Mul", &[&inv, "masked"], "mask/additive");
        self.node("Unsqueeze", &[&add, "axes_1_2"], "extended_mask")
    }

    /// Self-attention of layer `prefix` (`…attention`), residual and LayerNorm.
    fn attention(
        &mut self,
        x: &str,
        prefix: &str,
        bias: &str,
        mask: &str,
    ) -> Result<String, String> {
        let h = self.config.hidden_size;
        let attn = format!("{prefix}.attn");
        let heads = |b: &mut Self, which: &str, perm: &[i64]| -> Result<String, String> {
            let y = b.linear(x, &format!("{attn}.{which}"), h, h)?;
            let r = b.node(
                "Reshape",
                &[&y, "heads_shape"],
                &format!("{attn}/{which}_heads"),
            );
            Ok(b.node_with(
                "Transpose",
                &[&r],
                &format!("{attn}/{which}_t"),
                vec![attr::make_ints("perm", perm)],
            ))
        };
        let q = heads(self, "q", &[0, 2, 1, 3])?;
        let k = heads(self, "k", &[0, 2, 3, 1])?;
        let v = heads(self, "v", &[0, 2, 1, 3])?;
        let s = self.node("MatMul", &[&q, &k], &format!("{attn}/scores"));
        let s = self.node("Div", &[&s, "score_scale"], &format!("{attn}/scaled"));
        let s = self.node("Add", &[&s, bias], &format!("{attn}/biased"));
        let s = self.node("Add", &[&s, mask], &format!("{attn}/masked"));
        let ctx = self.attention_context(&s, &v, &attn, "hidden_shape");
        let o = self.linear(&ctx, &format!("{attn}.o"), h, h)?;
        let r = self.node("Add", &[&o, x], &format!("{prefix}/residual"));
        self.layer_norm(&r, &format!("{prefix}.LayerNorm"))
    }

    /// Encoder layer `index`: attention, then the feed-forward layer, residual and LayerNorm.
    fn layer(&mut self, x: &str, index: usize, bias: &str, mask: &str) -> Result<String, String> {
        let (h, i) = (self.config.hidden_size, self.config.intermediate_size);
        let prefix = format!("encoder.layer.{index}");
        let a = self.attention(x, &format!("{prefix}.attention"), bias, mask)?;
        let up = self.linear(&a, &format!("{prefix}.intermediate.dense"), h, i)?;
        let act = self.gelu(&up, &format!("{prefix}.intermediate"));
        let down = self.linear(&act, &format!("{prefix}.output.dense"), i, h)?;
        let r = self.node("Add", &[&down, &a], &format!("{prefix}.output/residual"));
        self.layer_norm(&r, &format!("{prefix}.output.LayerNorm"))
    }

    /// Mean pooling over the attention mask, then L2 normalization: `[batch, hidden]`.
    fn pool(&mut self, tokens: &str) -> String {
        let m = self.node_with(
            "Cast",
            &["attention_mask"],
            "pool/mask_f32",
            vec![attr::make_int("to", onnx::DataType::Float as i64)],
        );
        let m = self.node("Unsqueeze", &[&m, "axes_2"], "pool/mask");
        let kept = self.node("Mul", &[tokens, &m], "pool/masked_tokens");
        let keep = || vec![attr::make_int("keepdims", 0)];
        let sum = self.node_with("ReduceSum", &[&kept, "axes_1"], "pool/sum", keep());
        let count = self.node_with("ReduceSum", &[&m, "axes_1"], "pool/count", keep());
        let count = self.node("Max", &[&count, "count_floor"], "pool/count_floor");
        let mean = self.node("Div", &[&sum, &count], "pool/mean");
        let norm = self.node_with(
            "ReduceL2",
            &[&mean],
            "pool/norm",
            vec![attr::make_ints("axes", &[1]), attr::make_int("keepdims", 1)],
        );
        let norm = self.node("Max", &[&norm, "norm_floor"], "pool/norm_floor");
        self.node("Div", &[&mean, &norm], "sentence_embedding")
    }
}

/// The graph of the model in `dir` (`config.json`, `model.safetensors`); see the module
/// documentation for its inputs and outputs.
///
/// # Errors
/// When a file cannot be read, the configuration is not one this builder covers, or a
/// tensor is missing or of another type or shape than the configuration implies.
pub fn build_graph(dir: &Path) -> Result<GraphProto, String> {
    let config = Config::read(dir)?;
    let weights = Weights::read(dir)?;
    let mut b = Builder {
        g: GraphProto {
            name: Some("all-mpnet-base-v2".into()),
            ..Default::default()
        },
        config: config.clone(),
        weights: &weights,
    };
    b.constants();
    let mut h = b.embeddings()?;
    let bias = b.position_bias()?;
    let mask = b.additive_mask();
    for index in 0..config.num_hidden_layers {
        h = b.layer(&h, index, &bias, &mask)?;
    }
    let tokens = b.node("Identity", &[&h], "token_embeddings");
    b.pool(&tokens);
    let seq = [Dim::Named("batch"), Dim::Named("seq")];
    let hidden = config.hidden_size;
    b.g.input = vec![
        value_info("input_ids", onnx::DataType::Int64, &seq),
        value_info("attention_mask", onnx::DataType::Int64, &seq),
    ];
    b.g.output = vec![
        value_info(
            "token_embeddings",
            onnx::DataType::Float,
            &[Dim::Named("batch"), Dim::Named("seq"), Dim::Fixed(hidden)],
        ),
        value_info(
            "sentence_embedding",
            onnx::DataType::Float,
            &[Dim::Named("batch"), Dim::Fixed(hidden)],
        ),
    ];
    Ok(b.g)
}

/// [`build_graph`] encoded as a model (opset 13, IR version 8): about the size of
/// `model.safetensors` (440 MB for all-mpnet-base-v2).
///
/// # Errors
/// As [`build_graph`].
pub fn build_model(dir: &Path) -> Result<Vec<u8>, String> {
    Ok(model(build_graph(dir)?))
}

/// The fetched model folder ([`MODEL_DIR`] in [`crate::fetched_models_dir`]) when it holds
/// `model.safetensors`; else `None` with a note on stderr, for a test to skip.
///
/// Unlike [`crate::fetched_model`], this skips under `CI=true` too: the model (440 MB) is not
/// among those CI fetches.
pub fn fetched_dir() -> Option<PathBuf> {
    let dir = crate::fetched_models_dir().join(MODEL_DIR);
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    eprintln!(
        "note: skipping, {} has no model.safetensors (all-mpnet-base-v2 is fetched by hand, \
         not in CI)",
        dir.display()
    );
    None
}

/// The ONNX file of the model in `models` ([`ONNX_FILE`] built from [`MODEL_DIR`]), written
/// by [`build_model`] when absent, for the benchmark. Returns its path.
///
/// # Errors
/// As [`build_model`], or when the file cannot be written.
pub fn ensure_onnx(models: &Path) -> Result<PathBuf, String> {
    let path = models.join(ONNX_FILE);
    if path.is_file() {
        return Ok(path);
    }
    let bytes = build_model(&models.join(MODEL_DIR))?;
    // Written aside and renamed: a build cut short leaves no truncated model behind.
    let partial = models.join(format!("{ONNX_FILE}.partial"));
    std::fs::write(&partial, &bytes).map_err(|e| format!("{}: {e}", partial.display()))?;
    std::fs::rename(&partial, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::relative_position_bucket;

    /// The buckets T5's function gives for MPNet's 32 buckets and distance 128, worked out
    /// by hand from its definition: exact below 8, logarithmic to 128, keys after the query in
    /// the upper half.
    #[test]
    fn buckets_follow_t5() {
        let b = |r| relative_position_bucket(r, 32, 128);
        assert_eq!(b(0), 0);
        assert_eq!(b(-3), 3);
        assert_eq!(b(3), 19);
        assert_eq!(b(-7), 7);
        // 8 + trunc(8 · log(n / 8) / log(16)): n = 8 → 8, 11 → 8 (log ratio 0.92), 12 → 9.
        assert_eq!(b(-8), 8);
        assert_eq!(b(-11), 8);
        assert_eq!(b(-12), 9);
        assert_eq!(b(12), 25);
        // At and beyond max_distance: the last bucket of each half.
        assert_eq!(b(-127), 15);
        assert_eq!(b(-500), 15);
        assert_eq!(b(500), 31);
        // Monotonic in distance on each side.
        for n in 1..511 {
            assert!(b(-n) <= b(-n - 1) && b(n) <= b(n + 1), "at distance {n}");
        }
    }
}
