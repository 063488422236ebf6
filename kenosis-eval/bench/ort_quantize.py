"""ONNX Runtime's own static quantizer, for comparison in `cargo xtask bench`.

Runs `onnxruntime.quantization.quantize_static` at its best settings for CPU: QDQ format,
per-channel weights, reduce_range (7-bit weights, for x86 without VNNI), QUInt8 activations,
QInt8 weights, MinMax calibration on the `.npy` samples the Rust bench wrote (one sample
per file, sorted by name, for the model's single input). Before quantizing:

- models below opset 13 are converted with `onnx.version_converter` (per-channel QDQ needs
  DequantizeLinear's `axis`, opset 13; ORT's quantizer only warns and writes a model that
  does not load);
- `quant_pre_process` (symbolic shape inference + ORT basic optimizations + ONNX shape
  inference), the pre-processing ORT's documentation recommends; if it fails the model is
  quantized without it and the JSON says so.

Prints one JSON object on stdout: {"ok", "seconds", "steps", "error"?}. Exits 0 even when
quantization fails (the error is in the JSON), so the bench can report it.
"""

import argparse
import glob
import json
import os
import sys
import tempfile
import time
import traceback


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="FP32 ONNX model")
    ap.add_argument("--calib-dir", required=True, help="folder of .npy samples")
    ap.add_argument("--out", required=True, help="INT8 QDQ model to write")
    ap.add_argument("--no-preprocess", action="store_true", help="skip quant_pre_process")
    args = ap.parse_args()

    steps = []
    started = time.perf_counter()
    try:
        import numpy as np
        import onnx
        import onnxruntime
        from onnx import version_converter
        from onnxruntime.quantization import (
            CalibrationDataReader,
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quantize_static,
        )
        from onnxruntime.quantization.shape_inference import quant_pre_process

        # Imports are not quantization work.
        started = time.perf_counter()
        steps.append(f"onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}")
        files = sorted(glob.glob(os.path.join(args.calib_dir, "*.npy")))
        if not files:
            raise RuntimeError(f"no .npy files in {args.calib_dir}")

        model = onnx.load(args.model)
        opset = next(
            (o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None
        )
        if opset is not None and opset < 13:
            model = version_converter.convert_version(model, 13)
            steps.append(f"converted opset {opset} -> 13 (onnx.version_converter)")

        tmp = tempfile.mkdtemp(prefix="ort-quantize-")
        src = os.path.join(tmp, "fp32.onnx")
        onnx.save(model, src)
        if not args.no_preprocess:
            pre = os.path.join(tmp, "fp32.pre.onnx")
            try:
                quant_pre_process(src, pre)
                src = pre
                steps.append("quant_pre_process")
            except Exception as e:  # noqa: BLE001 - reported, quantization goes on
                steps.append(f"quant_pre_process failed, skipped: {type(e).__name__}: {e}")

        # IR < 4 models (SqueezeNet) also list their initializers as graph inputs.
        graph = onnx.load(src, load_external_data=False).graph
        initializers = {t.name for t in graph.initializer}
        input_name = next(i.name for i in graph.input if i.name not in initializers)

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.i = 0

            def get_next(self):
                if self.i >= len(files):
                    return None
                x = np.load(files[self.i]).astype(np.float32)
                self.i += 1
                return {input_name: x}

            def rewind(self):
                self.i = 0

        quantize_static(
            src,
            args.out,
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            reduce_range=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
        )
        steps.append(f"quantize_static on {len(files)} samples")
        result = {"ok": True, "seconds": time.perf_counter() - started, "steps": steps}
    except Exception as e:  # noqa: BLE001 - reported to the bench, which goes on
        traceback.print_exc(file=sys.stderr)
        result = {
            "ok": False,
            "seconds": time.perf_counter() - started,
            "steps": steps,
            "error": f"{type(e).__name__}: {e}",
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
