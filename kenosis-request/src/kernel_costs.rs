//! What ONNX Runtime's CPU kernels cost per target class: the prices the placement's time
//! estimate (`kenosis_quantize::quantize::domain`) weighs INT8 against FP32 with.
//!
//! Costs are relative, in units of one FP32 multiply-add of a dense Conv or MatMul on the
//! same CPU, because only ratios decide a placement. Three things make INT8 slower than FP32
//! in ONNX Runtime 1.31's CPU provider, and the table prices each:
//! - its int8 depthwise convolution kernel is slower than its FP32 one, which on x86 runs in
//!   the blocked NCHWc layout;
//! - every tensor that changes domain pays a QuantizeLinear or a DequantizeLinear, and a
//!   layout change too where it meets an FP32 Conv or pooling: integer Convs run in NHWC
//!   (ORT's `NhwcTransformer`), float ones in NCHWc on x86 (`NchwcTransformer`), NCHW
//!   elsewhere;
//! - a float op between integer kernels (a HardSwish, or a SiLU run as `QuickGelu`) pays
//!   both, a DequantizeLinear before it and a QuantizeLinear after it.
//!
//! The transformer path's two kernels are priced too: a MatMul whose input is quantized at
//! run time (`DynamicQuantizeMatMul`, see `kenosis_quantize::quantize::dynamic`) and
//! `MatMulNBits` with 4-bit weights and float activations (`weights = "int4"`).
//!
//! The table is what a build prices with when it cannot measure: a cross build, or a build
//! for a CPU class other than the build machine's. A build for the build machine's own class
//! measures the costs there instead (`kenosis_quantize::kernel_bench`). The x86-with-VNNI row was
//! measured with the same micro-benchmarks (`cargo xtask bench --kernel-costs-only`, section
//! "Kernel costs" of `docs/benchmarks.md`); the other two rows are estimates from it, each
//! with its reason below.

use serde::{Deserialize, Serialize};

use crate::kernels::TargetCpu;

/// Version of the micro-benchmarks that measure the costs (`kenosis_quantize::kernel_bench`),
/// part of the cache key of their results and written into device profiles: a change of
/// chains or arithmetic invalidates costs measured before it. Version 2 added the
/// transformer kernels ([`KernelCosts::int8_dynamic_dense`], [`KernelCosts::int4_dense`]).
pub const PROTOCOL: u32 = 2;

/// Relative kernel costs, in FP32 dense multiply-adds (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KernelCosts {
    /// One multiply-add of an int8 dense Conv, ConvTranspose, Gemm or MatMul.
    pub int8_dense: f64,
    /// One multiply-add of an FP32 depthwise Conv.
    pub fp32_depthwise: f64,
    /// One multiply-add of an int8 depthwise Conv.
    pub int8_depthwise: f64,
    /// One element through a QuantizeLinear or a DequantizeLinear.
    pub conversion: f64,
    /// One element through a layout change, where an integer kernel (NHWC) meets an FP32
    /// Conv or pooling (NCHWc on x86, NCHW elsewhere).
    pub layout: f64,
    /// One multiply-add of a MatMul with int8 weights whose input is quantized at run time
    /// (ONNX Runtime's fused `DynamicQuantizeMatMul`), without the quantization of its
    /// input, which is priced as [`conversion`](Self::conversion)s.
    pub int8_dynamic_dense: f64,
    /// One multiply-add of `MatMulNBits` with 4-bit weights in blocks of 32 and float
    /// activations (`accuracy_level` 0), the kernel of `weights = "int4"`.
    pub int4_dense: f64,
}

impl KernelCosts {
    /// The names of the costs, in the order of [`values`](Self::values): the fields' names.
    pub const NAMES: [&'static str; 7] = [
        "int8_dense",
        "fp32_depthwise",
        "int8_depthwise",
        "conversion",
        "layout",
        "int8_dynamic_dense",
        "int4_dense",
    ];

    /// The costs in the order of [`NAMES`](Self::NAMES).
    pub fn values(&self) -> [f64; 7] {
        [
            self.int8_dense,
            self.fp32_depthwise,
            self.int8_depthwise,
            self.conversion,
            self.layout,
            self.int8_dynamic_dense,
            self.int4_dense,
        ]
    }

    /// The costs from `values`, in the order of [`NAMES`](Self::NAMES).
    pub fn from_values(values: [f64; 7]) -> Self {
        let [int8_dense, fp32_depthwise, int8_depthwise, conversion, layout, int8_dynamic_dense, int4_dense] =
            values;
        Self {
            int8_dense,
            fp32_depthwise,
            int8_depthwise,
            conversion,
            layout,
            int8_dynamic_dense,
            int4_dense,
        }
    }

    /// Whether every cost is a finite number above zero, as a price must be.
    pub fn all_positive(&self) -> bool {
        self.values().iter().all(|c| c.is_finite() && *c > 0.0)
    }

    /// The kernel costs of target class `cpu`.
    pub fn of(cpu: TargetCpu) -> Self {
        match cpu {
            // Measured (see the module documentation).
            TargetCpu::X86Vnni => Self {
                int8_dense: 0.33,
                fp32_depthwise: 2.2,
                int8_depthwise: 2.9,
                conversion: 10.0,
                layout: 15.0,
                // Estimated from a sentence encoder's latency with 18 such MatMuls
                // (`docs/benchmarks.md`, "Transformer encoders"), about a quarter of FP32's.
                int8_dynamic_dense: 0.3,
                // Estimated likewise: `MatMulNBits` dequantizes its weights for a float
                // product, a little faster than FP32 with half-byte weights to read.
                int4_dense: 0.8,
            },
            // Estimated: without VNNI one `VPDPBUSD` becomes `VPMADDUBSW` + `VPMADDWD` +
            // `VPADDD`, about twice the dense int8 time; the depthwise kernel and the
            // conversions do not use VNNI and keep their measured costs.
            // The transformer kernels measured on an AMD EPYC without VNNI
            // (`cargo xtask bench --kernel-costs-only`).
            TargetCpu::X86 => Self {
                int8_dense: 0.66,
                int8_dynamic_dense: 0.55,
                int4_dense: 1.05,
                ..Self::of(TargetCpu::X86Vnni)
            },
            // Estimated: `SDOT` (or widening multiplies on cores without it) is priced
            // between the two x86 rows; without NCHWc, FP32 depthwise is assumed no faster
            // than int8; conversions and layout changes (NHWC against NCHW) as measured.
            // The transformer kernels as the dense one; `MatMulNBits` as FP32.
            TargetCpu::Aarch64 => Self {
                int8_dense: 0.5,
                int8_depthwise: 2.2,
                int8_dynamic_dense: 0.5,
                int4_dense: 1.0,
                ..Self::of(TargetCpu::X86Vnni)
            },
        }
    }
}

/// The kernel costs a placement prices with, and where they come from (for the report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pricing {
    /// The target's CPU class.
    pub cpu: TargetCpu,
    /// The costs: measured on the build machine, or the class's row of the table.
    pub costs: KernelCosts,
    /// Whether [`costs`](Self::costs) were measured on the build machine
    /// (`kenosis_quantize::kernel_bench`), which builds for the build machine's own class do,
    /// or on a device (see [`device`](Self::device)).
    pub measured: bool,
    /// The device whose profile gave the costs (its CPU's name; see
    /// [`crate::device_profile`]); `None` when measured here or taken from the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

impl Pricing {
    /// Prices for class `cpu`: `measured` costs when given, else the class's table row.
    pub fn new(cpu: TargetCpu, measured: Option<KernelCosts>) -> Self {
        Self {
            cpu,
            costs: measured.unwrap_or_else(|| KernelCosts::of(cpu)),
            measured: measured.is_some(),
            device: None,
        }
    }

    /// Prices for class `cpu` from a device profile's `costs`, measured on `device`.
    pub fn of_device(cpu: TargetCpu, costs: KernelCosts, device: &str) -> Self {
        Self {
            device: Some(device.to_owned()),
            ..Self::new(cpu, Some(costs))
        }
    }

    /// These prices with every domain change (conversions and layout changes) costing
    /// `factor` times more: the placement then returns to FP32 the regions whose estimated
    /// saving covers their boundaries by the thinnest margin first. The speed check's
    /// revision, when a finished artifact measures slower than FP32.
    pub fn with_boundaries_scaled(self, factor: f64) -> Self {
        Self {
            costs: KernelCosts {
                conversion: self.costs.conversion * factor,
                layout: self.costs.layout * factor,
                ..self.costs
            },
            ..self
        }
    }

    /// `kernel costs measured on this machine`, `kernel costs measured on <device CPU>` (a
    /// device profile), or `x86_vnni kernel costs estimated for the target class` (the
    /// class's table row), for the build's reasons and report.
    pub fn describe(&self) -> String {
        if let Some(device) = &self.device {
            format!("kernel costs measured on {device}")
        } else if self.measured {
            "kernel costs measured on this machine".to_owned()
        } else {
            format!(
                "{} kernel costs estimated for the target class",
                self.cpu.canonical()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::KernelCosts;
    use crate::kernels::TargetCpu;

    #[test]
    fn only_the_matmul_kernels_differ_between_the_x86_classes() {
        let (x86, vnni) = (
            KernelCosts::of(TargetCpu::X86),
            KernelCosts::of(TargetCpu::X86Vnni),
        );
        assert!(x86.int8_dense > vnni.int8_dense);
        assert!(x86.int8_dynamic_dense > vnni.int8_dynamic_dense);
        assert_eq!(
            KernelCosts {
                int8_dense: vnni.int8_dense,
                int8_dynamic_dense: vnni.int8_dynamic_dense,
                int4_dense: vnni.int4_dense,
                ..x86
            },
            vnni
        );
    }

    #[test]
    fn values_and_names_follow_the_fields() {
        let c = KernelCosts::of(TargetCpu::Aarch64);
        assert_eq!(KernelCosts::from_values(c.values()), c);
        let json = serde_json::to_value(c).unwrap();
        for (name, value) in KernelCosts::NAMES.iter().zip(c.values()) {
            assert_eq!(json[name].as_f64(), Some(value), "{name}");
        }
    }
}
