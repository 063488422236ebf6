//! Why a node stays FP32: [`FloatReason`], the typed reason of each [`super::plan::FloatNode`]
//! of the report. Its `Display` is the report's text; the JSON report keeps that text, and
//! reading a report back recognizes it again (see [`FloatReason::from_text`]), so reports
//! stay readable and cache entries written before the type existed still parse.

use crate::calibrate::runnable::Blocked;

/// Reason given for ops outside the default domain (ONNX Runtime contrib ops such as
/// `com.microsoft` `BiasSoftmax`) other than the `QuickGelu`, `Gelu` and `FastGelu`
/// normalization writes:
/// their semantics are not ours to assume, so they stay FP32.
pub const CUSTOM_DOMAIN_REASON: &str = "custom-domain op";

/// Reason given for ONNX Runtime's `Gelu` and `FastGelu` (written by
/// [`crate::normalize::gelu`] or found in the model): these contrib ops have no integer
/// kernel.
pub const GELU_REASON: &str =
    "GELU as ONNX Runtime's Gelu or FastGelu: float between one DequantizeLinear and one QuantizeLinear";

/// Reason given for the `QuickGelu` nodes normalization wrote for SiLUs
/// (see [`crate::normalize::silu`]).
pub const FUSED_SILU_REASON: &str =
    "SiLU as ONNX Runtime's QuickGelu: float between one DequantizeLinear and one QuantizeLinear, faster than QLinearSigmoid + QLinearMul";

/// The report's reason for a MatMul a fidelity target returned from 4-bit to int8 weights
/// (listed with the FP32 nodes, which is where the target's choices are reported).
pub const INT8_FALLBACK_REASON: &str =
    "int8 weights with dynamic activations instead of 4-bit ones, to meet the fidelity target (not FP32)";

/// Why a MatMul or Gemm the dynamic form could take stays FP32 by the target's kernel costs.
pub const DYNAMIC_SLOWER_REASON: &str =
    "estimated faster in FP32 on the target: its weight is too small to repay quantizing its input at run time";

/// Why a lookup in a constant table smaller than
/// [`crate::quantize::dynamic::MIN_WEIGHTS`] stays FP32.
pub const SMALL_TABLE_REASON: &str =
    "embedding table too small to repay int8: a few bytes saved for one more conversion";

/// How the reason of [`FloatReason::FasterInFp32`] starts (and
/// [`DYNAMIC_SLOWER_REASON`]'s).
pub const REASON_PREFIX: &str = "estimated faster in FP32 on the target";

/// Why a node reading or writing a tensor without a calibrated range stays FP32.
const UNCALIBRATED_TENSOR_REASON: &str =
    "was not observed in calibration (nodes kept in FP32 afterwards changed which tensors are quantized), so it has no range";

/// Why a node reading or writing a tensor that holds NaN or ±inf stays FP32.
const NON_FINITE_REASON: &str =
    "holds non-finite values (NaN or ±inf, e.g. a -inf mask), which no int8 code represents";

/// Why the writer and readers of an activation the fidelity target left unquantized stay
/// FP32.
const TARGET_TENSOR_REASON: &str = "is kept float to meet the fidelity target";

const REQUESTED_REASON: &str = "kept in FP32 by request";

const FIDELITY_TARGET_REASON: &str = "kept in FP32 to meet the fidelity target";

const CONTROL_FLOW_REASON: &str = "control flow: its subgraphs are left FP32";

const RECURRENT_REASON: &str = "recurrent op: ONNX Runtime has no QDQ kernel for it";

const NO_QUANTIZED_READER_REASON: &str =
    "no quantized reader: an integer kernel would gain nothing";

const ISOLATED_DEPTHWISE_REASON: &str =
    "depthwise convolution larger than 3x3 with no quantized neighbour: ONNX Runtime's int8 kernel for it is slower than FP32, and its Q/DQ would add to that";

const ISOLATED_TINY_REASON: &str =
    "MatMul/Gemm with fewer than 4096 weights and no quantized neighbour: its integer kernel cannot repay the Q/DQ it needs";

const OUTPUT_CONV_REASON: &str =
    "writes a graph output (through element-wise ops at most): its range is the prediction itself, and graph outputs stay FP32";

const SE_BRANCH_REASON: &str =
    "squeeze-and-excitation branch: it runs on one pooled value per channel, so FP32 costs nothing, and per-tensor ranges calibrated on so few values misjudge real inputs";

const FASTER_IN_FP32_TAIL: &str =
    "in INT8 its kernel would save less time than the QuantizeLinear/DequantizeLinear and layout changes around it cost";

/// Why a node stays FP32 (or, for [`FloatReason::Int8Fallback`], runs int8 rather than
/// 4-bit), for the build report. `Display` gives the report's text; in JSON it is that text
/// (see [`FloatReason::from_text`] for reading it back).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FloatReason {
    /// Named in `keep_float`.
    Requested,
    /// Returned to FP32 by the fidelity search to meet the fidelity target.
    FidelityTarget,
    /// A `QuickGelu` normalization wrote for a SiLU (`FUSED_SILU_REASON`).
    FusedSilu,
    /// ONNX Runtime's `Gelu` or `FastGelu` (`GELU_REASON`).
    Gelu,
    /// An op outside the default domain (`CUSTOM_DOMAIN_REASON`).
    CustomDomain {
        /// The op's domain.
        domain: String,
    },
    /// `If`, `Loop` or `Scan`.
    ControlFlow,
    /// `LSTM`, `GRU` or `RNN`.
    Recurrent,
    /// A weighted op whose layout is not one the placement quantizes.
    Unplannable(Unplannable),
    /// A candidate no quantized node reads.
    NoQuantizedReader,
    /// A depthwise convolution larger than 3x3 with no quantized neighbour.
    IsolatedDepthwise,
    /// A MatMul/Gemm with fewer than 4096 weights and no quantized neighbour.
    IsolatedTiny,
    /// A Conv writing a graph output (through element-wise ops at most).
    OutputConv,
    /// A node of a squeeze-and-excitation branch.
    SeBranch,
    /// It reads or writes an activation whose calibrated range is set by rare outliers.
    OutlierDominated {
        /// The activation.
        tensor: String,
        /// The uint8 steps 99% of its values span, to one decimal (see
        /// [`FloatReason::outlier_dominated`]).
        steps: f64,
    },
    /// It reads or writes an activation feeding a depthwise Conv whose channels vary by
    /// less than one uint8 step (see `quantize::channel_spread`).
    UnresolvedChannels {
        /// The activation.
        tensor: String,
        /// The depthwise Conv.
        conv: String,
        /// Channels varying by less than one step.
        unresolved: usize,
        /// Channels varying at all.
        varying: usize,
        /// The uint8 step, as the report prints it (3 decimals).
        step: String,
    },
    /// It reads or writes a tensor calibration did not observe.
    UncalibratedTensor {
        /// The tensor.
        tensor: String,
    },
    /// It reads a weight, or reads or writes an activation, that holds NaN or ±inf (a
    /// `-inf` attention mask): quantized, those values would become finite ones.
    NonFinite {
        /// The weight or activation.
        tensor: String,
    },
    /// It writes or reads an activation the fidelity target left unquantized.
    TargetTensor {
        /// The activation.
        tensor: String,
    },
    /// The target's kernel costs price it faster in FP32 (see
    /// `quantize::domain::slower_in_int8`).
    FasterInFp32 {
        /// Which kernel costs (`Pricing::describe`).
        costs: String,
    },
    /// A MatMul or Gemm whose weight is too small to repay dynamic activations.
    DynamicSlower,
    /// An embedding table too small to repay int8.
    SmallTable,
    /// A MatMul a fidelity target returned from 4-bit to int8 weights (not FP32).
    Int8Fallback,
    /// It depends on an op ONNX Runtime cannot run.
    Uncalibratable(Blocked),
    /// A text this version does not recognize (a report written by another version).
    Other(String),
}

/// Why a weighted op's layout is not one the placement quantizes; the op stays FP32 with
/// this as its reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unplannable {
    /// The op reads no data input.
    #[error("no data input")]
    NoDataInput,
    /// Its data input or output is not float.
    #[error("not a float op")]
    NotFloat,
    /// The op reads no weight input.
    #[error("no weight input")]
    NoWeight,
    /// The weight is computed, not a constant.
    #[error("weight is not a constant initializer")]
    ComputedWeight,
    /// The weight is not FLOAT.
    #[error("weight is not float")]
    WeightNotFloat,
    /// A grouped ConvTranspose: its weight has no single output-channel axis.
    #[error("grouped ConvTranspose")]
    GroupedConvTranspose,
    /// A Gemm with `transA`.
    #[error("Gemm with transA")]
    GemmTransA,
    /// A weight rank the op's rule does not take.
    #[error("weight of rank {rank} is not supported for {op}")]
    Rank {
        /// The weight's rank.
        rank: usize,
        /// The op.
        op: String,
    },
    /// A broadcast or computed bias.
    #[error("bias is not a constant vector with one value per output channel")]
    Bias,
}

impl std::fmt::Display for FloatReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FloatReason::Requested => f.write_str(REQUESTED_REASON),
            FloatReason::FidelityTarget => f.write_str(FIDELITY_TARGET_REASON),
            FloatReason::FusedSilu => f.write_str(FUSED_SILU_REASON),
            FloatReason::Gelu => f.write_str(GELU_REASON),
            FloatReason::CustomDomain { domain } => write!(f, "{CUSTOM_DOMAIN_REASON} `{domain}`"),
            FloatReason::ControlFlow => f.write_str(CONTROL_FLOW_REASON),
            FloatReason::Recurrent => f.write_str(RECURRENT_REASON),
            FloatReason::Unplannable(u) => write!(f, "{u}"),
            FloatReason::NoQuantizedReader => f.write_str(NO_QUANTIZED_READER_REASON),
            FloatReason::IsolatedDepthwise => f.write_str(ISOLATED_DEPTHWISE_REASON),
            FloatReason::IsolatedTiny => f.write_str(ISOLATED_TINY_REASON),
            FloatReason::OutputConv => f.write_str(OUTPUT_CONV_REASON),
            FloatReason::SeBranch => f.write_str(SE_BRANCH_REASON),
            FloatReason::OutlierDominated { tensor, steps } => write!(
                f,
                "`{tensor}` is outlier-dominated: 99% of its values span {steps:.1} uint8 steps"
            ),
            FloatReason::UnresolvedChannels {
                tensor,
                conv,
                unresolved,
                varying,
                step,
            } => write!(
                f,
                "`{tensor}` feeds depthwise Conv `{conv}`: {unresolved} of its {varying} channels vary by less than one uint8 step ({step}), and a depthwise Conv never mixes them with the others; in the stem, FP32 needs no extra DequantizeLinear"
            ),
            FloatReason::UncalibratedTensor { tensor } => {
                write!(f, "`{tensor}` {UNCALIBRATED_TENSOR_REASON}")
            }
            FloatReason::TargetTensor { tensor } => write!(f, "`{tensor}` {TARGET_TENSOR_REASON}"),
            FloatReason::NonFinite { tensor } => write!(f, "`{tensor}` {NON_FINITE_REASON}"),
            FloatReason::FasterInFp32 { costs } => {
                write!(f, "{REASON_PREFIX} ({costs}): {FASTER_IN_FP32_TAIL}")
            }
            FloatReason::DynamicSlower => f.write_str(DYNAMIC_SLOWER_REASON),
            FloatReason::SmallTable => f.write_str(SMALL_TABLE_REASON),
            FloatReason::Int8Fallback => f.write_str(INT8_FALLBACK_REASON),
            FloatReason::Uncalibratable(b) => write!(f, "{b}"),
            FloatReason::Other(text) => f.write_str(text),
        }
    }
}

impl FloatReason {
    /// [`FloatReason::OutlierDominated`] for `tensor` spanning `steps` uint8 steps, kept to
    /// the one decimal the report prints, so that a reason read back from a report equals it.
    pub fn outlier_dominated(tensor: &str, steps: f64) -> Self {
        FloatReason::OutlierDominated {
            tensor: tensor.to_owned(),
            steps: format!("{steps:.1}").parse().unwrap_or(steps),
        }
    }

    /// The reason whose text is `text`: the variant that displays exactly as `text`, else
    /// [`FloatReason::Other`] holding it. So `from_text(&r.to_string())` gives back `r` for
    /// every reason this version writes, and any text round-trips unchanged.
    pub fn from_text(text: &str) -> Self {
        match Self::recognize(text) {
            Some(reason) if reason.to_string() == text => reason,
            _ => FloatReason::Other(text.to_owned()),
        }
    }

    /// The variant `text` looks like, if any (checked by [`FloatReason::from_text`]).
    fn recognize(text: &str) -> Option<Self> {
        use Unplannable as U;
        let fixed = [
            FloatReason::Requested,
            FloatReason::FidelityTarget,
            FloatReason::FusedSilu,
            FloatReason::Gelu,
            FloatReason::ControlFlow,
            FloatReason::Recurrent,
            FloatReason::NoQuantizedReader,
            FloatReason::IsolatedDepthwise,
            FloatReason::IsolatedTiny,
            FloatReason::OutputConv,
            FloatReason::SeBranch,
            FloatReason::DynamicSlower,
            FloatReason::SmallTable,
            FloatReason::Int8Fallback,
            FloatReason::Unplannable(U::NoDataInput),
            FloatReason::Unplannable(U::NotFloat),
            FloatReason::Unplannable(U::NoWeight),
            FloatReason::Unplannable(U::ComputedWeight),
            FloatReason::Unplannable(U::WeightNotFloat),
            FloatReason::Unplannable(U::GroupedConvTranspose),
            FloatReason::Unplannable(U::GemmTransA),
            FloatReason::Unplannable(U::Bias),
        ];
        if let Some(reason) = fixed.into_iter().find(|r| r.to_string() == text) {
            return Some(reason);
        }
        let owned = |s: &str| s.to_owned();
        if let Some([domain]) = fields(text, &[&format!("{CUSTOM_DOMAIN_REASON} `"), "`"]) {
            return Some(FloatReason::CustomDomain {
                domain: owned(domain),
            });
        }
        if let Some([tensor, steps]) = fields(
            text,
            &[
                "`",
                "` is outlier-dominated: 99% of its values span ",
                " uint8 steps",
            ],
        ) {
            return Some(FloatReason::OutlierDominated {
                tensor: owned(tensor),
                steps: steps.parse().ok()?,
            });
        }
        if let Some([tensor, conv, unresolved, varying, step]) = fields(
            text,
            &[
                "`",
                "` feeds depthwise Conv `",
                "`: ",
                " of its ",
                " channels vary by less than one uint8 step (",
                "), and a depthwise Conv never mixes them with the others; in the stem, FP32 needs no extra DequantizeLinear",
            ],
        ) {
            return Some(FloatReason::UnresolvedChannels {
                tensor: owned(tensor),
                conv: owned(conv),
                unresolved: unresolved.parse().ok()?,
                varying: varying.parse().ok()?,
                step: owned(step),
            });
        }
        if let Some([tensor]) = fields(text, &["`", &format!("` {NON_FINITE_REASON}")]) {
            return Some(FloatReason::NonFinite {
                tensor: owned(tensor),
            });
        }
        if let Some([tensor]) = fields(text, &["`", &format!("` {UNCALIBRATED_TENSOR_REASON}")]) {
            return Some(FloatReason::UncalibratedTensor {
                tensor: owned(tensor),
            });
        }
        if let Some([tensor]) = fields(text, &["`", &format!("` {TARGET_TENSOR_REASON}")]) {
            return Some(FloatReason::TargetTensor {
                tensor: owned(tensor),
            });
        }
        if let Some([costs]) = fields(
            text,
            &[
                &format!("{REASON_PREFIX} ("),
                &format!("): {FASTER_IN_FP32_TAIL}"),
            ],
        ) {
            return Some(FloatReason::FasterInFp32 {
                costs: owned(costs),
            });
        }
        if let Some([rank, op]) = fields(text, &["weight of rank ", " is not supported for ", ""]) {
            return Some(FloatReason::Unplannable(U::Rank {
                rank: rank.parse().ok()?,
                op: owned(op),
            }));
        }
        Blocked::from_text(text).map(FloatReason::Uncalibratable)
    }

    /// Whether the op is of a custom domain (the report's summary names them).
    pub fn is_custom_domain(&self) -> bool {
        match self {
            FloatReason::CustomDomain { .. } => true,
            FloatReason::Other(text) => text.starts_with(CUSTOM_DOMAIN_REASON),
            _ => false,
        }
    }

    /// Whether the node depends on an op ONNX Runtime cannot run.
    pub fn is_uncalibratable(&self) -> bool {
        match self {
            FloatReason::Uncalibratable(_) => true,
            FloatReason::Other(text) => {
                text.starts_with(crate::calibrate::runnable::UNCALIBRATABLE_REASON)
            }
            _ => false,
        }
    }

    /// Whether the target's kernel costs keep the node FP32 ([`FloatReason::FasterInFp32`]
    /// or [`FloatReason::DynamicSlower`]).
    pub fn is_estimated_faster(&self) -> bool {
        match self {
            FloatReason::FasterInFp32 { .. } | FloatReason::DynamicSlower => true,
            FloatReason::Other(text) => text.starts_with(REASON_PREFIX),
            _ => false,
        }
    }
}

/// The `N` texts between the `N + 1` `literals` of a template (`literals[0]` a prefix of
/// `text`, the last one a suffix, each field ending at the next literal's first occurrence),
/// if `text` has that shape.
pub(crate) fn fields<'t, const N: usize>(text: &'t str, literals: &[&str]) -> Option<[&'t str; N]> {
    let (first, rest_literals) = literals.split_first()?;
    if rest_literals.len() != N {
        return None;
    }
    let mut rest = text.strip_prefix(first)?;
    let mut out = [""; N];
    for (k, literal) in rest_literals.iter().enumerate() {
        let end = if k + 1 == N {
            rest.strip_suffix(literal)?.len()
        } else {
            rest.find(literal)?
        };
        out[k] = &rest[..end];
        rest = &rest[end + literal.len()..];
    }
    Some(out)
}

impl From<String> for FloatReason {
    fn from(text: String) -> Self {
        FloatReason::from_text(&text)
    }
}

impl From<FloatReason> for String {
    fn from(reason: FloatReason) -> Self {
        reason.to_string()
    }
}

impl serde::Serialize for FloatReason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for FloatReason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(FloatReason::from_text(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reason this version writes, with a text of each shape.
    fn every_reason() -> Vec<FloatReason> {
        use Unplannable as U;
        vec![
            FloatReason::Requested,
            FloatReason::FidelityTarget,
            FloatReason::FusedSilu,
            FloatReason::Gelu,
            FloatReason::CustomDomain {
                domain: "com.acme".into(),
            },
            FloatReason::ControlFlow,
            FloatReason::Recurrent,
            FloatReason::Unplannable(U::NoDataInput),
            FloatReason::Unplannable(U::NotFloat),
            FloatReason::Unplannable(U::NoWeight),
            FloatReason::Unplannable(U::ComputedWeight),
            FloatReason::Unplannable(U::WeightNotFloat),
            FloatReason::Unplannable(U::GroupedConvTranspose),
            FloatReason::Unplannable(U::GemmTransA),
            FloatReason::Unplannable(U::Rank {
                rank: 5,
                op: "MatMul".into(),
            }),
            FloatReason::Unplannable(U::Bias),
            FloatReason::NoQuantizedReader,
            FloatReason::IsolatedDepthwise,
            FloatReason::IsolatedTiny,
            FloatReason::OutputConv,
            FloatReason::SeBranch,
            FloatReason::outlier_dominated("sum", 2.71),
            FloatReason::UnresolvedChannels {
                tensor: "x".into(),
                conv: "dw".into(),
                unresolved: 3,
                varying: 16,
                step: format!("{:.3}", 0.0123),
            },
            FloatReason::UncalibratedTensor {
                tensor: "pool".into(),
            },
            FloatReason::TargetTensor { tensor: "t".into() },
            FloatReason::NonFinite {
                tensor: "mask".into(),
            },
            FloatReason::FasterInFp32 {
                costs: "kernel costs measured on this machine".into(),
            },
            FloatReason::DynamicSlower,
            FloatReason::SmallTable,
            FloatReason::Int8Fallback,
            FloatReason::Uncalibratable(Blocked::Reads { tensor: "b".into() }),
            FloatReason::Uncalibratable(Blocked::Subgraph {
                op: "Frob".into(),
                domain: "com.acme".into(),
            }),
        ]
    }

    #[test]
    fn every_reason_reads_back_from_its_text_and_json() {
        for reason in every_reason() {
            let text = reason.to_string();
            assert_eq!(FloatReason::from_text(&text), reason, "{text}");
            let json = serde_json::to_string(&reason).expect("serializes");
            assert_eq!(json, serde_json::to_string(&text).expect("a string"));
            let back: FloatReason = serde_json::from_str(&json).expect("parses");
            assert_eq!(back, reason);
        }
    }

    #[test]
    fn texts_are_the_reports_and_unknown_ones_are_kept_as_they_are() {
        assert_eq!(
            FloatReason::CustomDomain {
                domain: "com.acme".into()
            }
            .to_string(),
            "custom-domain op `com.acme`"
        );
        assert_eq!(
            FloatReason::outlier_dominated("sum", 2.71).to_string(),
            "`sum` is outlier-dominated: 99% of its values span 2.7 uint8 steps"
        );
        assert_eq!(
            FloatReason::Uncalibratable(Blocked::Reads { tensor: "b".into() }).to_string(),
            "depends on an op ONNX Runtime cannot run: it reads `b`"
        );
        for text in [
            "a reason from a later version",
            "`sum` is outlier-dominated: 99% of its values span many uint8 steps",
            "custom-domain op `a` `b`x",
            "",
        ] {
            let reason = FloatReason::from_text(text);
            assert_eq!(reason.to_string(), text);
            assert!(
                text.starts_with("custom-domain") == reason.is_custom_domain(),
                "{text}"
            );
        }
        assert_eq!(
            FloatReason::from_text("a reason from a later version"),
            FloatReason::Other("a reason from a later version".into())
        );
        assert!(FloatReason::DynamicSlower.is_estimated_faster());
    }
}
