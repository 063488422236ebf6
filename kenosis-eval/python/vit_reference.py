#!/usr/bin/env python3
"""A vision transformer's forward pass in NumPy, straight from its weights as safetensors.

The reference `tests/tests/vit.rs` checks the ONNX graph of `kenosis_eval::vit` against:
written from timm's `VisionTransformer` semantics (patch-embedding convolution, CLS token,
position embedding, pre-LN blocks with multi-head attention and an exact-GELU MLP, final
norm) plus the per-patch saliency head, independently of the Rust builder, in float64.

Usage: vit_reference.py WEIGHTS.safetensors CONFIG_JSON INPUT.npy
CONFIG_JSON is a JSON object {image, patch, channels, dim, depth, heads, mlp, classes,
ln_eps}; INPUT.npy holds float32 pixel values [batch, channels, image, image]. Prints one
JSON line on stdout: {"cls_embedding": [...], "saliency": [...], "logits": [...]}, each
flattened row-major from [batch, dim], [batch, grid, grid] and [batch, classes]. Needs only
NumPy.
"""

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np


def read_safetensors(path):
    """Every F32 tensor of a safetensors file: an 8-byte little-endian header length, a JSON
    header of {name: {dtype, shape, data_offsets}}, then the data."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        start, end = info["data_offsets"]
        data = np.frombuffer(raw[base + start : base + end], dtype="<f4")
        tensors[name] = data.reshape(info["shape"]).astype(np.float64)
    return tensors


def layer_norm(x, w, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def linear(x, t, prefix):
    """PyTorch's nn.Linear: weight [out, in]."""
    return x @ t[prefix + ".weight"].T + t[prefix + ".bias"]


ERF = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + ERF(x / math.sqrt(2.0)))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def patch_embed(pixels, w, b, patch):
    """A convolution of kernel and stride `patch`, as a matrix product over the patches:
    [batch, patches, dim] with patches row-major over the grid."""
    n, c, h, wd = pixels.shape
    g_h, g_w = h // patch, wd // patch
    p = pixels.reshape(n, c, g_h, patch, g_w, patch).transpose(0, 2, 4, 1, 3, 5)
    p = p.reshape(n, g_h * g_w, c * patch * patch)
    return p @ w.reshape(w.shape[0], -1).T + b


def forward(t, cfg, pixels):
    n = pixels.shape[0]
    d, heads = cfg["dim"], cfg["heads"]
    hd = d // heads
    eps = cfg["ln_eps"]
    x = patch_embed(pixels, t["patch_embed.proj.weight"], t["patch_embed.proj.bias"], cfg["patch"])
    cls = np.broadcast_to(t["cls_token"], (n, 1, d))
    x = np.concatenate([cls, x], axis=1) + t["pos_embed"]
    tokens = x.shape[1]
    for i in range(cfg["depth"]):
        p = f"blocks.{i}"
        y = layer_norm(x, t[p + ".norm1.weight"], t[p + ".norm1.bias"], eps)
        qkv = linear(y, t, p + ".attn.qkv").reshape(n, tokens, 3, heads, hd)
        q, k, v = (qkv[:, :, j].transpose(0, 2, 1, 3) for j in range(3))
        probs = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd))
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(n, tokens, d)
        x = x + linear(ctx, t, p + ".attn.proj")
        y = layer_norm(x, t[p + ".norm2.weight"], t[p + ".norm2.bias"], eps)
        x = x + linear(gelu(linear(y, t, p + ".mlp.fc1")), t, p + ".mlp.fc2")
    x = layer_norm(x, t["norm.weight"], t["norm.bias"], eps)
    cls = x[:, 0]
    grid = cfg["image"] // cfg["patch"]
    saliency = linear(x[:, 1:], t, "saliency_head").reshape(n, grid, grid)
    logits = linear(cls, t, "head")
    return cls, saliency, logits


def main():
    weights, config, inputs = sys.argv[1:4]
    t = read_safetensors(weights)
    cfg = json.loads(config)
    pixels = np.load(inputs).astype(np.float64)
    cls, saliency, logits = forward(t, cfg, pixels)
    print(
        json.dumps(
            {
                "cls_embedding": cls.ravel().tolist(),
                "saliency": saliency.ravel().tolist(),
                "logits": logits.ravel().tolist(),
            }
        )
    )


if __name__ == "__main__":
    main()
