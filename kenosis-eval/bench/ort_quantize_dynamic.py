"""ONNX Runtime's dynamic quantizer, for the transformer section of `cargo xtask bench`.

Runs `onnxruntime.quantization.quantize_dynamic` twice on one FP32 model, as embedding
libraries ship their "quantized" encoders: with per-channel int8 weights (`--out-pc`) and
with its defaults, per-tensor int8 weights (`--out-pt`); QInt8 weights, reduce_range off
(its default), no calibration data (activation ranges are computed at run time).

Prints one JSON object on stdout: {"ok", "seconds", "error"?}. Exits 0 even when
quantization fails (the error is in the JSON), so the bench can report it.
"""

import argparse
import json
import time
import traceback


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="FP32 ONNX model")
    ap.add_argument("--out-pc", required=True, help="per-channel model to write")
    ap.add_argument("--out-pt", required=True, help="per-tensor model to write")
    args = ap.parse_args()
    started = time.perf_counter()
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        for out, per_channel in [(args.out_pc, True), (args.out_pt, False)]:
            quantize_dynamic(
                args.model, out, per_channel=per_channel, weight_type=QuantType.QInt8
            )
        print(json.dumps({"ok": True, "seconds": time.perf_counter() - started}))
    except Exception:  # noqa: BLE001 - reported to the bench
        print(
            json.dumps(
                {
                    "ok": False,
                    "seconds": time.perf_counter() - started,
                    "error": traceback.format_exc(limit=3),
                }
            )
        )


if __name__ == "__main__":
    main()
