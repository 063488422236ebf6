#!/usr/bin/env python3
"""all-mpnet-base-v2's forward pass in NumPy, straight from its model.safetensors.

The reference `tests/tests/mpnet.rs` checks the ONNX graph of `kenosis_eval::mpnet` against:
written from Hugging Face's `MPNetModel` semantics and sentence-transformers' pipeline (mean
pooling over the attention mask, then L2 normalization), independently of the Rust builder,
and computed in float64 (the relative position buckets as PyTorch computes them, in float32).

Usage: mpnet_reference.py MODEL_DIR INPUT_JSON
INPUT_JSON holds {"input_ids": [[...], ...], "attention_mask": [[...], ...]} (int, one row
per sentence, all rows of one length). Prints one JSON line on stdout:
{"token_embeddings": [...], "sentence_embedding": [...]}, each flattened row-major from
[batch, seq, hidden] and [batch, hidden]. Needs only NumPy.
"""

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "F16": np.float16}


def read_safetensors(path):
    """Every tensor of a safetensors file: an 8-byte little-endian header length, a JSON
    header of {name: {dtype, shape, data_offsets}}, then the data."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = np.dtype(DTYPES[info["dtype"]]).newbyteorder("<")
        tensors[name] = np.frombuffer(raw[base + start : base + end], dtype=dtype).reshape(
            info["shape"]
        )
    return tensors


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def linear(x, t, prefix):
    return x @ t[prefix + ".weight"].astype(np.float64).T + t[prefix + ".bias"]


def position_buckets(seq, num_buckets, max_distance=128):
    """T5's bidirectional bucket of key - query position, the logarithm in float32 as
    PyTorch computes it for the model."""
    pos = np.arange(seq)
    relative = pos[None, :] - pos[:, None]
    n = -relative
    half = num_buckets // 2
    ret = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    max_exact = half // 2
    is_small = n < max_exact
    nf = np.maximum(n, 1).astype(np.float32)
    scale = np.float32(math.log(max_distance / max_exact))
    large = max_exact + (
        np.log(nf / np.float32(max_exact)) / scale * np.float32(half - max_exact)
    ).astype(np.int64)
    large = np.minimum(large, half - 1)
    return ret + np.where(is_small, n, large)


def forward(model_dir, input_ids, attention_mask):
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    t = read_safetensors(model_dir / "model.safetensors")
    f64 = lambda name: t[name].astype(np.float64)  # noqa: E731
    eps = config["layer_norm_eps"]
    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    head_dim = hidden // heads
    pad = config["pad_token_id"]
    batch, seq = input_ids.shape

    # Embeddings: HF's create_position_ids_from_input_ids, no token types.
    not_pad = (input_ids != pad).astype(np.int64)
    position_ids = np.cumsum(not_pad, axis=1) * not_pad + pad
    h = f64("embeddings.word_embeddings.weight")[input_ids] + f64(
        "embeddings.position_embeddings.weight"
    )[position_ids]
    h = layer_norm(
        h, f64("embeddings.LayerNorm.weight"), f64("embeddings.LayerNorm.bias"), eps
    )

    # Relative position bias [1, heads, seq, seq], shared by the layers.
    buckets = position_buckets(seq, config["relative_attention_num_buckets"])
    bias = f64("encoder.relative_attention_bias.weight")[buckets].transpose(2, 0, 1)[None]
    mask = (1.0 - attention_mask.astype(np.float64))[:, None, None, :] * np.finfo(
        np.float32
    ).min

    def split(x):
        return x.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)

    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q = split(linear(h, t, p + ".attention.attn.q"))
        k = split(linear(h, t, p + ".attention.attn.k"))
        v = split(linear(h, t, p + ".attention.attn.v"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim) + bias + mask
        scores = scores - scores.max(-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        a = layer_norm(
            linear(ctx, t, p + ".attention.attn.o") + h,
            f64(p + ".attention.LayerNorm.weight"),
            f64(p + ".attention.LayerNorm.bias"),
            eps,
        )
        ff = linear(gelu(linear(a, t, p + ".intermediate.dense")), t, p + ".output.dense")
        h = layer_norm(
            ff + a,
            f64(p + ".output.LayerNorm.weight"),
            f64(p + ".output.LayerNorm.bias"),
            eps,
        )

    # sentence-transformers: mean pooling over the mask, then Normalize.
    m = attention_mask.astype(np.float64)[:, :, None]
    pooled = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    norm = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return h, pooled / norm


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    inputs = json.loads(Path(sys.argv[2]).read_text())
    ids = np.asarray(inputs["input_ids"], dtype=np.int64)
    mask = np.asarray(inputs["attention_mask"], dtype=np.int64)
    tokens, sentence = forward(sys.argv[1], ids, mask)
    print(
        json.dumps(
            {
                "token_embeddings": tokens.astype(np.float32).ravel().tolist(),
                "sentence_embedding": sentence.astype(np.float32).ravel().tolist(),
            }
        )
    )


if __name__ == "__main__":
    main()
