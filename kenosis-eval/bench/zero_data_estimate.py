#!/usr/bin/env python3
"""Zero-data fidelity estimates vs real-data fidelity (issue 35, deliverable 3).

For an FP32 model and its INT8 artifact built with synthetic calibration, prints the
INT8-vs-FP32 output cosine on real images, on Kenosis-style 1/f image fields (the current
synthetic estimate), and on "BN-matched" fields: the same 1/f generator with per-channel
offset/scale, spectral slope and chroma weight fitted (Nelder-Mead) so the per-channel
mean/std at every BatchNormalization input match the running statistics the model
carries (the ZeroQ objective, Cai et al. 2020, restricted to 8 generator parameters
because Kenosis has no gradients through the model).

Needs numpy, onnx, onnxruntime, pillow, scipy. Real images: $KENOSIS_SHARED_DIR (default
../shared) images/imagenet-224, or coco-300 cropped to text lines with PRE=paddle.

usage: [PRE=bgr|paddle] [H=.. W=..] zero_data_estimate.py FP32.onnx INT8.onnx [n_real] [low,high of the Kenosis-like fields]
"""
import glob
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from PIL import Image
from scipy.optimize import minimize

FP32, INT8 = sys.argv[1], sys.argv[2]
N_REAL = int(sys.argv[3]) if len(sys.argv) > 3 else 100
SHARED = os.environ.get("KENOSIS_SHARED_DIR", "../shared")
H, W = int(os.environ.get("H", 224)), int(os.environ.get("W", 224))

so = ort.SessionOptions()
so.intra_op_num_threads = 2
so.log_severity_level = 3


def sess(m):
    return ort.InferenceSession(m if isinstance(m, str) else m.SerializeToString(), so)


def load(f):
    a = np.asarray(Image.open(f).convert("RGB"), np.float32)
    if os.environ.get("PRE") == "paddle":  # PP-OCR cls: a text-line-shaped crop, x/127.5 - 1
        img = Image.open(f).convert("RGB")
        img = img.resize((W, max(H, round(img.height * W / img.width))), Image.BILINEAR)
        top = (img.height - H) // 2
        a = np.asarray(img.crop((0, top, W, top + H)), np.float32)[..., ::-1]
        return (a / 127.5 - 1.0).transpose(2, 0, 1)[None].astype(np.float32).copy()
    if os.environ.get("PRE") == "bgr":  # SqueezeNet 1.0 (Caffe): BGR, x - [104, 117, 123]
        return (a - [123.0, 117.0, 104.0])[..., ::-1].transpose(2, 0, 1)[None].astype(np.float32).copy()
    return ((a - 127.0) / 128.0).transpose(2, 0, 1)[None]


files = sorted(glob.glob(SHARED + "/images/imagenet-224/*.JPEG"))
if os.environ.get("PRE") == "paddle":
    files = sorted(glob.glob(SHARED + "/images/coco-300/*.jpg"))
real = [load(f) for f in files[:: max(1, len(files) // N_REAL)][:N_REAL]]
f32, i8 = sess(FP32), sess(INT8)
name = f32.get_inputs()[0].name


def cos(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def fidelity(xs):
    c = [cos(f32.run(None, {name: x})[0], i8.run(None, {name: x})[0]) for x in xs]
    return float(np.mean(c)), float(np.min(c))


# BN statistics model: every BN input as an extra output.
model = onnx.load(FP32)
bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
init.update({n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t)
             for n in model.graph.node if n.op_type == "Constant" and n.attribute[0].name == "value"})
stats = [(init[n.input[3]], np.sqrt(init[n.input[4]] + 1e-3)) for n in bns]
for n in bns:
    model.graph.output.append(helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None))
stat_sess = sess(model) if bns else None


def bn_loss(xs):
    outs = stat_sess.run([n.input[0] for n in bns], {name: np.concatenate(xs)})
    total = 0.0
    for a, (mu, sd) in zip(outs, stats):
        m = a.mean(axis=(0, 2, 3))
        s = a.std(axis=(0, 2, 3)) + 1e-6
        total += np.mean(((m - mu) / sd) ** 2) + np.mean(np.log(s / sd) ** 2)
    return total / len(stats)


def fields(rng, n, slope=0.8, chroma=0.5):
    """Kenosis's image_like octaves, before the final normalization: [n,3,H,W] unit std."""
    out = np.zeros((n, 3, H, W), np.float32)
    for i in range(n):
        for octave in [32, 16, 8, 4, 2, 1]:
            gh, gw = H // octave + 2, W // octave + 2
            lum = rng.standard_normal((gh, gw))
            for c in range(3):
                grid = octave ** slope * (lum + chroma * rng.standard_normal((gh, gw)))
                ys = np.arange(H) / octave
                xs = np.arange(W) / octave
                y0, x0 = ys.astype(int), xs.astype(int)
                dy, dx = (ys - y0)[:, None], (xs - x0)[None, :]
                g = lambda a, b: grid[np.ix_(a, b)]
                out[i, c] += ((1 - dy) * ((1 - dx) * g(y0, x0) + dx * g(y0, x0 + 1))
                              + dy * ((1 - dx) * g(y0 + 1, x0) + dx * g(y0 + 1, x0 + 1)))
        out[i] = (out[i] - out[i].mean()) / out[i].std()
    return out


def kenosis_like(rng, n, low, high):
    u = np.clip(fields(rng, n) * 0.5, -1, 1)
    return [((low + high) / 2 + u[i : i + 1] * (high - low) / 2).astype(np.float32) for i in range(n)]


def parametrized(p, seed, n):
    off, scale, slope, chroma = p[0:3], p[3:6], p[6], p[7]
    u = fields(np.random.default_rng(seed), n, slope, abs(chroma))
    x = off[None, :, None, None] + np.abs(scale)[None, :, None, None] * u
    x = np.clip(x, -127 / 128, 1.0)  # the input range of (pixel - 127) / 128
    return [x[i : i + 1].astype(np.float32) for i in range(n)]


print(f"model {FP32}\nartifact {INT8}")
print("real images (%d): cosine mean %.4f min %.4f" % ((len(real),) + fidelity(real)))
if stat_sess:
    print("BN loss: real %.3f" % bn_loss(real[:8]))
low, high = (-2.118, 2.64) if len(sys.argv) < 5 else map(float, sys.argv[4].split(","))
syn = kenosis_like(np.random.default_rng(1), 16, low, high)
print("kenosis-like fields in [%g, %g] (16): cosine mean %.4f min %.4f" % ((low, high) + fidelity(syn)))
if stat_sess:
    print("BN loss: kenosis-like %.3f" % bn_loss(syn[:8]))
    p0 = np.array([0, 0, 0, 0.5, 0.5, 0.5, 0.8, 0.5])
    evals = []
    def objective(p):
        v = bn_loss(parametrized(p, 7, 8))
        evals.append(v)
        return v
    r = minimize(objective, p0, method="Nelder-Mead", options={"maxfev": 160, "xatol": 1e-3, "fatol": 1e-4})
    print("fit: %d evals, BN loss %.3f -> %.3f, params %s" % (len(evals), evals[0], r.fun, np.round(r.x, 3)))
    bnm = parametrized(r.x, 11, 16)
    print("BN-matched fields (16, fresh noise): BN loss %.3f, cosine mean %.4f min %.4f" % ((bn_loss(bnm[:8]),) + fidelity(bnm)))
    np.save(os.environ.get("PARAMS_OUT", "bn_matched_params.npy"), r.x)
