//! What ONNX Runtime's CPU kernels cost per target class: the prices the placement's time
//! estimate ([`crate::quantize::domain`]) weighs INT8 against FP32 with.
//!
//! Costs are relative, in units of one FP32 multiply-add of a dense Conv or MatMul on the
//! same CPU, because only ratios decide a placement. Three things make INT8 slower than FP32
//! in ONNX Runtime 1.31's CPU provider, and the table prices each:
//! - its int8 depthwise convolution kernel is slower than its FP32 one, which on x86 runs in
//!   the blocked NCHWc layout;
//! - every tensor that changes domain pays a QuantizeLinear or a DequantizeLinear, and on
//!   x86 a layout change with it: integer Convs run in NHWC (ORT's `NhwcTransformer`),
//!   float ones in NCHWc (`NchwcTransformer`);
//! - a float op between integer kernels (a HardSwish, or a SiLU run as `QuickGelu`) pays
//!   both, a DequantizeLinear before it and a QuantizeLinear after it.
//!
//! The x86-with-VNNI row is measured by `cargo xtask bench` (section "Kernel costs" of
//! `docs/benchmarks.md`: chains of one op kind, FP32 against QDQ, one thread). The other two
//! rows are estimates from it, each with its reason below, until a machine of that class
//! measures them.

use serde::{Deserialize, Serialize};

/// The class of CPU a build targets, as far as ONNX Runtime's kernel speeds go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TargetCpu {
    /// x86 without VNNI: u8 · s8 products summed in 16-bit pairs (`VPMADDUBSW`), the
    /// generic x86-64 target.
    X86,
    /// x86 with AVX-VNNI or AVX-512 VNNI enabled in the target's features (`VPDPBUSD`).
    X86Vnni,
    /// aarch64, and every other architecture: no NCHWc layout in ONNX Runtime.
    Aarch64,
}

impl TargetCpu {
    /// The class of cargo target `triple` (empty: the machine this code runs on) with its
    /// comma-separated enabled target features (cargo's `CARGO_CFG_TARGET_FEATURE`); an x86
    /// target lacks VNNI unless its features enable `avxvnni` or `avx512vnni`, as in
    /// [`crate::kernels::IntegerKernels::of_target`].
    pub fn of_target(triple: &str, target_features: &str) -> Self {
        let is_x86 = if triple.is_empty() {
            cfg!(any(target_arch = "x86", target_arch = "x86_64"))
        } else {
            triple.starts_with("x86") || triple.starts_with("i686") || triple.starts_with("i586")
        };
        let vnni = target_features
            .split(',')
            .any(|f| matches!(f, "avxvnni" | "avx512vnni"));
        match (is_x86, vnni) {
            (true, false) => Self::X86,
            (true, true) => Self::X86Vnni,
            (false, _) => Self::Aarch64,
        }
    }

    /// Its name in the cache key's options text: the serialized name.
    pub fn canonical(self) -> &'static str {
        match self {
            Self::X86 => "x86",
            Self::X86Vnni => "x86_vnni",
            Self::Aarch64 => "aarch64",
        }
    }

    /// The kernel costs of this class.
    pub fn costs(self) -> KernelCosts {
        match self {
            // Measured (see the module documentation).
            Self::X86Vnni => KernelCosts {
                int8_dense: 0.33,
                fp32_depthwise: 2.2,
                int8_depthwise: 2.9,
                conversion: 10.0,
                layout: 15.0,
            },
            // Estimated: without VNNI one `VPDPBUSD` becomes `VPMADDUBSW` + `VPMADDWD` +
            // `VPADDD`, about twice the dense int8 time; the depthwise kernel and the
            // conversions do not use VNNI and keep their measured costs.
            Self::X86 => KernelCosts {
                int8_dense: 0.66,
                ..Self::X86Vnni.costs()
            },
            // Estimated: `SDOT` (or widening multiplies on cores without it) is priced
            // between the two x86 rows; without NCHWc, FP32 depthwise is assumed no faster
            // than int8; conversions and layout changes (NHWC against NCHW) as measured.
            Self::Aarch64 => KernelCosts {
                int8_dense: 0.5,
                int8_depthwise: 2.2,
                ..Self::X86Vnni.costs()
            },
        }
    }
}

/// Relative kernel costs, in FP32 dense multiply-adds (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
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
}

#[cfg(test)]
mod tests {
    use super::TargetCpu;

    #[test]
    fn classes_follow_the_triple_and_vnni() {
        let of = TargetCpu::of_target;
        assert_eq!(of("x86_64-unknown-linux-gnu", "avx2,fma"), TargetCpu::X86);
        assert_eq!(
            of("x86_64-unknown-linux-gnu", "avx2,avx512vnni"),
            TargetCpu::X86Vnni
        );
        assert_eq!(of("i686-pc-windows-msvc", "avxvnni"), TargetCpu::X86Vnni);
        assert_eq!(of("aarch64-unknown-linux-gnu", "neon"), TargetCpu::Aarch64);
        // Only the dense int8 kernel differs between the two x86 classes.
        let (x86, vnni) = (TargetCpu::X86.costs(), TargetCpu::X86Vnni.costs());
        assert!(x86.int8_dense > vnni.int8_dense);
        assert_eq!(x86.int8_depthwise, vnni.int8_depthwise);
    }
}
