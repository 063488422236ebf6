"""Measures the relative kernel costs of `kenosis_build::kernel_costs` on this machine.

Usage: python kernel_costs.py  (onnx, onnxruntime, numpy). Prints a markdown section.

Every figure is a slope: the time of a chain of 6 layers minus a chain of 1, over 5, so that
the model's input and output conversions cancel. One intra-op thread, ORT_ENABLE_ALL, median
of interleaved runs. Units: one FP32 multiply-add of a dense 1x1 Conv on this machine.
- int8_dense: QDQ 1x1 and 3x3 Convs (fused into QLinearConv) against FP32.
- fp32_depthwise / int8_depthwise: 3x3 and 5x5 depthwise Convs.
- conversion: an INT8 chain of 1x1 Convs with a float HardSwish between them (one
  DequantizeLinear and one QuantizeLinear per layer), minus the chain with Relu (absorbed),
  minus the HardSwish's own FP32 time, over 2.
- layout: INT8 1x1 Convs with an FP32 depthwise Conv between them, against all INT8, minus
  the two conversions and the depthwise kernels' difference, over 2.
"""
import platform
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)
ROUNDS = 60


class Chain:
    """A model of Conv layers with Q/DQ where asked."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}{self.n}"

    def qdq(self, t):
        s, z, q, d = (self.name(p) for p in ("s", "z", "q", "dq"))
        self.inits += [numpy_helper.from_array(np.array(0.05, np.float32), s),
                       numpy_helper.from_array(np.array(0, np.uint8), z)]
        self.nodes += [helper.make_node("QuantizeLinear", [t, s, z], [q]),
                       helper.make_node("DequantizeLinear", [q, s, z], [d])]
        return d

    def conv(self, x, c, k, depthwise, quantized):
        w = RNG.normal(0, 0.1, (c, 1 if depthwise else c, k, k)).astype(np.float32)
        wn, out = self.name("w"), self.name("c")
        if quantized:
            codes = np.clip(np.round(w / 0.01), -127, 127).astype(np.int8)
            q, s, z = wn + "q", wn + "s", wn + "z"
            self.inits += [numpy_helper.from_array(codes, q),
                           numpy_helper.from_array(np.full(c, 0.01, np.float32), s),
                           numpy_helper.from_array(np.zeros(c, np.int8), z)]
            self.nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [wn], axis=0))
        else:
            self.inits.append(numpy_helper.from_array(w, wn))
        self.nodes.append(helper.make_node("Conv", [x, wn], [out], pads=[k // 2] * 4,
                                           group=c if depthwise else 1))
        return out

    def act(self, x, op):
        out = self.name("a")
        self.nodes.append(helper.make_node(op, [x], [out]))
        return out

    def model(self, x, c, hw):
        self.nodes.append(helper.make_node("Identity", [x], ["y"]))
        info = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, hw, hw])
        graph = helper.make_graph(self.nodes, "g", [info("x")], [info("y")], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
        m.ir_version = 8
        return m.SerializeToString()


def layers(n, c, hw, layer):
    """`n` layers; `layer(chain, x, i)` adds one and returns its output."""
    chain, x = Chain(), "x"
    for i in range(n):
        x = layer(chain, x, i)
    return chain.model(x, c, hw)


def medians(models, c, hw):
    x = RNG.normal(0, 1, (1, c, hw, hw)).astype(np.float32)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sessions = [ort.InferenceSession(m, opts, providers=["CPUExecutionProvider"]) for m in models]
    for s in sessions:
        for _ in range(5):
            s.run(None, {"x": x})
    times = [[] for _ in sessions]
    for _ in range(ROUNDS):
        for s, t in zip(sessions, times):
            start = time.perf_counter()
            s.run(None, {"x": x})
            t.append(time.perf_counter() - start)
    return [float(np.median(t)) * 1e9 for t in times]  # ns


def per_layer(c, hw, layer_of):
    """ns per layer of each variant: the 6-layer chain minus the 1-layer one, over 5."""
    variants = list(layer_of)
    ones = medians([layers(1, c, hw, layer_of[v]) for v in variants], c, hw)
    sixes = medians([layers(6, c, hw, layer_of[v]) for v in variants], c, hw)
    return {v: (b - a) / 5 for v, a, b in zip(variants, ones, sixes)}


def conv_layer(c, k, depthwise, quantized, act="Relu"):
    def layer(ch, x, _):
        if quantized:
            x = ch.qdq(x)
        y = ch.act(ch.conv(x, c, k, depthwise, quantized), act)
        return ch.qdq(y) if quantized else y
    return layer


def island_layer(c, float_op, quantized):
    """1x1 Conv, then `float_op` in float between a DQ and a Q when quantized."""
    def layer(ch, x, _):
        if quantized:
            x = ch.qdq(x)
        y = ch.conv(x, c, 1, False, quantized)
        if quantized:
            y = ch.qdq(y)
        return float_op(ch, y)
    return layer


def main():
    rows, units = [], {}
    dense, fp32_dw, int8_dw = [], [], []
    for c, hw, k in [(64, 56, 1), (128, 28, 1), (32, 56, 3)]:
        t = per_layer(c, hw, {"f": conv_layer(c, k, False, False), "q": conv_layer(c, k, False, True)})
        macs = c * c * hw * hw * k * k
        dense.append((t["f"] / macs, t["q"] / macs))
        rows.append(f"| Conv {k}x{k}, {c} channels, {hw}x{hw} | {t['f']/1e3:.1f} | {t['q']/1e3:.1f} |")
    fp32_mac = float(np.mean([f for f, _ in dense]))
    units["int8_dense"] = float(np.mean([q / f for f, q in dense]))
    for c, hw, k in [(64, 56, 3), (128, 28, 5), (256, 14, 3)]:
        t = per_layer(c, hw, {"f": conv_layer(c, k, True, False), "q": conv_layer(c, k, True, True)})
        macs = c * hw * hw * k * k
        fp32_dw.append(t["f"] / macs / fp32_mac)
        int8_dw.append(t["q"] / macs / fp32_mac)
        rows.append(f"| depthwise {k}x{k}, {c} channels, {hw}x{hw} | {t['f']/1e3:.1f} | {t['q']/1e3:.1f} |")
    units["fp32_depthwise"] = float(np.mean(fp32_dw))
    units["int8_depthwise"] = float(np.mean(int8_dw))
    conversion, layout = [], []
    for c, hw in [(64, 56), (128, 28), (256, 14)]:
        hswish = lambda ch, y: ch.act(y, "HardSwish")
        relu = lambda ch, y: ch.act(y, "Relu")
        t = per_layer(c, hw, {
            "q_relu": island_layer(c, relu, True), "q_hswish": island_layer(c, hswish, True),
            "f_relu": island_layer(c, relu, False), "f_hswish": island_layer(c, hswish, False)})
        elements = c * hw * hw
        hswish_own = t["f_hswish"] - t["f_relu"]
        conversion.append((t["q_hswish"] - t["q_relu"] - hswish_own) / 2 / elements / fp32_mac)
        # INT8 1x1 Convs with the depthwise Conv between them FP32 against INT8.
        dw = lambda q: lambda ch, y: ch.act(ch.conv(ch.qdq(y) if q else y, c, 3, True, q), "Relu")
        t2 = per_layer(c, hw, {"all": island_layer(c, dw(True), True),
                               "fp32_dw": island_layer(c, dw(False), True)})
        t3 = per_layer(c, hw, {"f": conv_layer(c, 3, True, False), "q": conv_layer(c, 3, True, True)})
        island = (t2["fp32_dw"] - t2["all"]) - (t3["f"] - t3["q"])
        layout.append(island / 2 / elements / fp32_mac - conversion[-1])
        rows.append(f"| float HardSwish between INT8 1x1 Convs, {c} channels, {hw}x{hw} | "
                    f"{t['f_hswish']/1e3:.1f} | {t['q_hswish']/1e3:.1f} |")
        rows.append(f"| float depthwise 3x3 between INT8 1x1 Convs, {c} channels, {hw}x{hw} | "
                    f"— | {t2['fp32_dw']/1e3:.1f} (all INT8: {t2['all']/1e3:.1f}) |")
    units["conversion"] = float(np.mean(conversion))
    units["layout"] = float(np.mean(layout))
    print("## Kernel costs\n")
    print(f"ONNX Runtime {ort.__version__}, {platform.processor() or platform.machine()}, "
          f"1 thread; FP32 dense multiply-add: {fp32_mac*1e3:.2f} ps.\n")
    print("| chain layer | FP32 us/layer | INT8 us/layer |\n|---|---:|---:|")
    print("\n".join(rows))
    print("\nIn FP32 dense multiply-adds (the `x86_vnni` row of `kenosis_build::kernel_costs` "
          "on a VNNI machine):\n")
    print("| cost | measured |\n|---|---:|")
    for k, v in units.items():
        print(f"| {k} | {v:.2f} |")


if __name__ == "__main__":
    main()
