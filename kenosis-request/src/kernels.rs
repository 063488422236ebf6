//! Which integer kernels will run a QDQ model, and so how the build measures what they compute.
//!
//! ONNX Runtime's CPU provider fuses QDQ node groups into integer kernels (QLinearConv, QGemm,
//! MatMulInteger, ...) from its MLAS library, which picks its code path from the CPU at run
//! time. The paths differ in one way that changes results (ONNX Runtime's quantization
//! documentation, "When and why do I need to try U8U8?" and reduce-range):
//! - x86 without VNNI multiplies u8 activations by s8 weights with `VPMADDUBSW`, which adds
//!   adjacent products in saturating 16-bit lanes: two full-range products (255 · 127 · 2)
//!   overflow. 7-bit weights (reduce-range) keep every pair sum in range.
//! - x86 with VNNI (`VPDPBUSD`) and aarch64 (`SDOT`/`UDOT`, or widening multiplies) accumulate
//!   in 32 bits: the integer result is exact, and equals QDQ's float arithmetic up to float
//!   rounding.
//!
//! The artifact is planned for the target's kernels (reduce-range, see
//! [`IntegerKernels::wants_reduce_range`]) and measured for them: when the build machine's
//! kernels saturate where the target's are exact, ONNX Runtime runs the QDQ graph unfused
//! instead ([`Evaluation::QdqReference`]).
//!
//! The other mismatch, exact kernels on the build machine for a target whose kernels
//! saturate, needs nothing: the target's default is reduce-range, whose pair sums cannot
//! saturate, so both compute the same. Only a user who turns reduce-range off for such a
//! target ships what the build cannot measure (neither evaluation saturates).

use serde::{Deserialize, Serialize};

/// How a CPU's integer kernels accumulate u8 · s8 products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntegerKernels {
    /// Pairs of products summed in saturating 16-bit lanes: x86 without VNNI.
    SaturatingPairs,
    /// 32-bit accumulation, exact: x86 with VNNI, aarch64 and every other architecture.
    Exact,
}

impl IntegerKernels {
    /// The kernels ONNX Runtime picks on the machine this code runs on (the build machine,
    /// inside a build script), from the CPU's features at run time, as MLAS does.
    pub fn of_host() -> Self {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        {
            if std::arch::is_x86_feature_detected!("avx512vnni")
                || std::arch::is_x86_feature_detected!("avxvnni")
            {
                Self::Exact
            } else {
                Self::SaturatingPairs
            }
        }
        #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
        {
            Self::Exact
        }
    }

    /// Whether the machine this code runs on runs the code of target `triple` (empty: this
    /// machine) whose kernels are `self`: the same architecture, and the same integer kernels
    /// chosen, so that a latency ratio measured here is the target's.
    pub fn run_here(self, triple: &str) -> bool {
        let arch = triple.split('-').next().unwrap_or_default();
        (triple.is_empty() || arch == std::env::consts::ARCH) && self == Self::of_host()
    }

    /// Whether a latency measured on the machine this code runs on speaks for target
    /// `triple` (empty: this machine) whose kernels are `self`: the same architecture, and
    /// either the same integer kernels ([`run_here`](Self::run_here)) or a target that may
    /// lack VNNI on a build machine that has it. The generic x86-64 target is the second
    /// case: its binary runs on this machine too, and an INT8 model slower than FP32 with
    /// VNNI's kernels is slower without them, whose dense int8 kernel is the slower one.
    pub fn timed_here(self, triple: &str) -> bool {
        let arch = triple.split('-').next().unwrap_or_default();
        let same_arch = triple.is_empty() || arch == std::env::consts::ARCH;
        same_arch && (self == Self::of_host() || self == Self::SaturatingPairs)
    }

    /// Whether weights should be 7-bit (reduce-range) for these kernels: only where pair sums
    /// saturate; elsewhere 8-bit weights halve the rounding error at the same speed.
    pub fn wants_reduce_range(self) -> bool {
        self == Self::SaturatingPairs
    }
}

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
    /// comma-separated enabled target features (cargo's `CARGO_CFG_TARGET_FEATURE`). An x86
    /// target lacks VNNI unless its features enable `avxvnni` or `avx512vnni` (e.g.
    /// `-C target-cpu=native` on such a CPU): a generic x86-64 binary may run on any x86-64
    /// CPU.
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

    /// The integer kernels of this class.
    pub fn integer_kernels(self) -> IntegerKernels {
        match self {
            Self::X86 => IntegerKernels::SaturatingPairs,
            Self::X86Vnni | Self::Aarch64 => IntegerKernels::Exact,
        }
    }
}

/// How the fidelity check runs the INT8 model, so that it measures what the target computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Evaluation {
    /// ONNX Runtime at its default optimization level on the build machine, as users run the
    /// model: its integer kernels are the target's kind.
    #[default]
    HostKernels,
    /// ONNX Runtime with its QDQ fusions off (session option `session.disable_quant_qdq`):
    /// every DequantizeLinear → float op → QuantizeLinear group runs as written, which is
    /// what exact integer kernels compute, up to float rounding. Used when the build
    /// machine's kernels saturate and the target's do not.
    QdqReference,
}

impl Evaluation {
    /// The evaluation that measures what `target`'s kernels compute on a build machine with
    /// `host`'s (see the module documentation).
    pub fn for_kernels(target: IntegerKernels, host: IntegerKernels) -> Self {
        match (target, host) {
            (IntegerKernels::Exact, IntegerKernels::SaturatingPairs) => Self::QdqReference,
            _ => Self::HostKernels,
        }
    }

    /// The ONNX Runtime session configuration entries (`key`, `value`) that run a model this
    /// way: none for the host's kernels, ORT's `kOrtSessionOptionsDisableQuantQDQ` for the
    /// reference.
    pub fn session_config(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::HostKernels => &[],
            Self::QdqReference => &[("session.disable_quant_qdq", "1")],
        }
    }

    /// Its name in the cache key's options text (see `QuantizeOptions::canonical`): the
    /// serialized name, `host_kernels` or `qdq_reference`.
    pub fn canonical(self) -> &'static str {
        match self {
            Self::HostKernels => "host_kernels",
            Self::QdqReference => "qdq_reference",
        }
    }

    /// For reports: what ran the model.
    pub fn describe(self) -> &'static str {
        match self {
            Self::HostKernels => "the build machine's integer kernels",
            Self::QdqReference => {
                "QDQ reference arithmetic (the build machine's integer kernels saturate, the target's do not)"
            }
        }
    }
}

/// What names this machine's CPU for its measured kernel costs (`kernel_bench::cached`, the
/// cache key's `kernel_costs` line): the first `model name` and `flags` (x86) or
/// `Features` (aarch64) lines of `/proc/cpuinfo`, else the architecture alone.
pub fn cpu_identity() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let first = |key: &str| {
        (text.lines())
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
            .unwrap_or_default()
            .to_owned()
    };
    format!(
        "{} | {} | {} | {}",
        std::env::consts::ARCH,
        first("model name"),
        first("flags"),
        first("Features")
    )
}

/// This machine's CPU as people name it, for lines that say where something was measured:
/// `/proc/cpuinfo`'s first `model name` (x86) or `Hardware` value, else the architecture with
/// the first `CPU implementer` and `CPU part` (aarch64), else the architecture alone.
pub fn cpu_name() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let value = |key: &str| {
        (text.lines())
            .filter_map(|l| l.split_once(':'))
            .find(|(k, v)| k.trim() == key && !v.trim().is_empty())
            .map(|(_, v)| v.trim().to_owned())
    };
    let arch = std::env::consts::ARCH;
    value("model name")
        .or_else(|| value("Hardware"))
        .or_else(|| {
            let (implementer, part) = (value("CPU implementer")?, value("CPU part")?);
            Some(format!(
                "{arch} (CPU implementer {implementer}, part {part})"
            ))
        })
        .unwrap_or_else(|| arch.to_owned())
}

#[cfg(test)]
mod tests {
    use super::{Evaluation, IntegerKernels, TargetCpu};

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
    }

    #[test]
    fn only_x86_without_vnni_saturates() {
        let of = |triple, features| TargetCpu::of_target(triple, features).integer_kernels();
        let avx2 = "avx,avx2,fma,sse,sse2";
        assert_eq!(
            of("x86_64-unknown-linux-gnu", avx2),
            IntegerKernels::SaturatingPairs
        );
        assert_eq!(
            of("i686-pc-windows-msvc", "sse2"),
            IntegerKernels::SaturatingPairs
        );
        assert_eq!(
            of("x86_64-unknown-linux-gnu", "avx2,avx512f,avx512vnni"),
            IntegerKernels::Exact
        );
        assert_eq!(
            of("x86_64-apple-darwin", "avx2,avxvnni"),
            IntegerKernels::Exact
        );
        assert_eq!(
            of("aarch64-unknown-linux-gnu", "neon"),
            IntegerKernels::Exact
        );
        assert!(of("x86_64-unknown-linux-gnu", avx2).wants_reduce_range());
        assert!(!of("aarch64-unknown-linux-gnu", "neon").wants_reduce_range());
    }

    #[test]
    fn a_generic_target_is_timed_on_its_architecture_and_a_vnni_one_only_with_vnni() {
        use IntegerKernels::{Exact, SaturatingPairs};
        let host = IntegerKernels::of_host();
        let here = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
        assert!(host.timed_here(""));
        assert!(host.timed_here(&here));
        if cfg!(target_arch = "x86_64") {
            // The generic x86-64 target, whatever this CPU has.
            assert!(SaturatingPairs.timed_here(&here));
            // A VNNI target only where this CPU has VNNI too.
            assert_eq!(Exact.timed_here(&here), host == Exact);
        }
        assert!(!host.timed_here("riscv64gc-unknown-linux-gnu"));
        assert!(!SaturatingPairs.timed_here("powerpc64le-unknown-linux-gnu"));
    }

    #[test]
    fn only_a_saturating_host_for_an_exact_target_needs_the_qdq_reference() {
        use IntegerKernels::{Exact, SaturatingPairs};
        assert_eq!(
            Evaluation::for_kernels(Exact, Exact),
            Evaluation::HostKernels
        );
        assert_eq!(
            Evaluation::for_kernels(SaturatingPairs, SaturatingPairs),
            Evaluation::HostKernels
        );
        assert_eq!(
            Evaluation::for_kernels(Exact, SaturatingPairs),
            Evaluation::QdqReference
        );
        assert_eq!(
            Evaluation::for_kernels(SaturatingPairs, Exact),
            Evaluation::HostKernels
        );
    }
}
