"""The two 4-bit MatMul forms of issue 41 on paraphrase-MiniLM-L3-v2, as ONNX Runtime's own
`MatMulNBitsQuantizer` writes them: `com.microsoft.MatMulNBits` (QOperator) against an opset-21
int4 `DequantizeLinear` with `block_size` before each MatMul (QDQ). Prints size, the ops, the
median single-thread latency (60 interleaved runs of a 64-token input) and the mean-pooled
embedding's cosine to FP32.

Usage: python int4_forms.py MODEL  (onnx, onnx_ir, onnxruntime==1.31.1, numpy).
"""
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import QuantFormat
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

src = sys.argv[1]
out_dir = os.path.dirname(os.path.abspath(__file__)) if len(sys.argv) < 3 else sys.argv[2]
out = {}
for fmt, name in [(QuantFormat.QOperator, "nbits"), (QuantFormat.QDQ, "dq21")]:
    q = MatMulNBitsQuantizer(onnx.load(src), block_size=32, is_symmetric=True, quant_format=fmt)
    q.process()
    p = os.path.join(out_dir, f"int4_{name}.onnx")
    q.model.save_model_to_file(p, use_external_data_format=False)
    out[name] = p
    ops = {}
    for n in onnx.load(p).graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    kept = {k: v for k, v in ops.items() if k in ("MatMulNBits", "DequantizeLinear", "MatMul")}
    print(f"{name}: {os.path.getsize(p) / 1e6:.2f} MB, {kept}")
opts = ort.SessionOptions()
opts.intra_op_num_threads = opts.inter_op_num_threads = 1
ids = np.random.default_rng(0).integers(1000, 5000, (1, 64)).astype(np.int64)
feeds = {"input_ids": ids, "attention_mask": np.ones((1, 64), np.int64)}
sessions = {k: ort.InferenceSession(v, opts, providers=["CPUExecutionProvider"])
            for k, v in [("fp32", src)] + list(out.items())}
for s in sessions.values():
    for _ in range(3):
        s.run(None, feeds)
times = {k: [] for k in sessions}
for _ in range(60):
    for k, s in sessions.items():
        start = time.perf_counter()
        s.run(None, feeds)
        times[k].append(time.perf_counter() - start)
pooled = {k: s.run(None, feeds)[3].ravel() for k, s in sessions.items()}
for k in sessions:
    cos = pooled[k] @ pooled["fp32"] / np.linalg.norm(pooled[k]) / np.linalg.norm(pooled["fp32"])
    print(f"{k}: median {np.median(times[k]) * 1e3:.3f} ms, pooled cosine {cos:.5f}")
