//! The argument grammar of `include_quantized!`, in one place for the two programs that read
//! it: the proc macro (`kenosis-macros`) and the build script's discovery
//! (`kenosis_build::discover`). Both parse a call site with [`Invocation`], so they can never
//! disagree on what a call means.
//!
//! ```text
//! include_quantized!("models/x.onnx")
//! include_quantized!("models/x.onnx", calibration = "calib/x", method = "percentile",
//!                    per_channel = false, min_cosine = 0.99)
//! include_quantized!(pub struct Net = "models/x.onnx", method = "mse")   // item form
//! ```
//!
//! | key | value | meaning |
//! |---|---|---|
//! | `calibration` | string | folder of `.npy` calibration samples, relative to the crate root; a leading `$OUT_DIR` is the build script's `OUT_DIR` |
//! | `method` | `"minmax"`, `"percentile"` (= `"percentile(99.99)"`), `"percentile(P)"`, `"entropy"`, `"mse"` | calibration range method |
//! | `per_channel` | bool | per-channel weight scales |
//! | `reduce_range` | bool | 7-bit weights where the integer kernel would saturate (depthwise Convs, and Convs whose simulated saturation costs less than the extra bit saves, keep 8 bits) |
//! | `bias_correction` | bool | bias correction |
//! | `gptq_rounding` | bool | GPTQ (error-compensating) weight rounding |
//! | `min_cosine` | number in `[-1, 1]` | fidelity floor (mean cosine vs FP32) |
//! | `min_top1_agreement` | number in `[0, 1]` | fidelity floor (top-1 agreement vs FP32) |
//! | `synthetic_samples` | integer in `[1, 4096]` | synthetic calibration samples when no data is given |
//! | `synthetic_image_range` | string `"[low, high]"` | value range of synthetic image inputs (default: inferred, `[-2.118, 2.64]` or `[0, 255]`) |
//!
//! Unknown keys, repeated keys and bad values are [`syn::Error`]s spanned at the offending
//! token.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, Lit, LitStr, Token, Visibility};

/// The prefix of a `calibration` path that stands for the build script's `OUT_DIR`.
pub const OUT_DIR_PREFIX: &str = "$OUT_DIR";

/// Default percentile of `method = "percentile"`.
pub const DEFAULT_PERCENTILE: f64 = 99.99;

/// Every option key, in canonical order.
pub const KEYS: &[&str] = &[
    "calibration",
    "method",
    "per_channel",
    "reduce_range",
    "bias_correction",
    "gptq_rounding",
    "min_cosine",
    "min_top1_agreement",
    "synthetic_samples",
    "synthetic_image_range",
];

const USAGE: &str = "include_quantized! expects a string literal with the path of an FP32 ONNX \
                     model, e.g. `include_quantized!(\"models/net.onnx\")`";

/// One parsed `include_quantized!(...)` argument list.
#[derive(Clone)]
pub struct Invocation {
    /// `pub struct Net =` in the item form, which declares a nameable wrapper type.
    pub item: Option<ItemName>,
    /// The FP32 model path literal.
    pub path: LitStr,
    /// The `key = value` options after the path.
    pub options: Options,
}

/// The `vis struct Name =` prefix of the item form.
#[derive(Clone)]
pub struct ItemName {
    /// Visibility of the generated types.
    pub vis: Visibility,
    /// Name of the generated wrapper struct.
    pub ident: Ident,
}

impl std::fmt::Debug for Invocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invocation")
            .field("item", &self.item.as_ref().map(|i| i.ident.to_string()))
            .field("path", &self.path.value())
            .field("options", &self.options)
            .finish()
    }
}

/// Calibration range method, as written at a call site.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Method {
    /// `"minmax"`.
    MinMax,
    /// `"percentile"` or `"percentile(P)"`, `0 < P <= 100`.
    Percentile(f64),
    /// `"entropy"`.
    Entropy,
    /// `"mse"`.
    Mse,
}

impl Method {
    /// The canonical spelling (`percentile` always with its value).
    pub fn canonical(&self) -> String {
        match self {
            Method::MinMax => "minmax".into(),
            Method::Percentile(p) => format!("percentile({p:?})"),
            Method::Entropy => "entropy".into(),
            Method::Mse => "mse".into(),
        }
    }

    fn parse_value(text: &str) -> Result<Self, String> {
        let text = text.trim();
        Ok(match text {
            "minmax" => Method::MinMax,
            "percentile" => Method::Percentile(DEFAULT_PERCENTILE),
            "entropy" => Method::Entropy,
            "mse" => Method::Mse,
            _ => {
                let p = text
                    .strip_prefix("percentile(")
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| {
                        format!(
                            "unknown calibration method `{text}`; expected \"minmax\", \
                             \"percentile\", \"percentile(99.9)\", \"entropy\" or \"mse\""
                        )
                    })?;
                let p: f64 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{p}` is not a number in \"percentile(P)\""))?;
                check_percentile(p)?;
                Method::Percentile(p)
            }
        })
    }
}

/// The options of one call site; `None` = not written (the build's default applies).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// `calibration = "dir"`.
    pub calibration: Option<String>,
    /// `method = "..."`.
    pub method: Option<Method>,
    /// `per_channel = bool`.
    pub per_channel: Option<bool>,
    /// `reduce_range = bool`.
    pub reduce_range: Option<bool>,
    /// `bias_correction = bool`.
    pub bias_correction: Option<bool>,
    /// `gptq_rounding = bool`.
    pub gptq_rounding: Option<bool>,
    /// `min_cosine = x`.
    pub min_cosine: Option<f64>,
    /// `min_top1_agreement = x`.
    pub min_top1_agreement: Option<f64>,
    /// `synthetic_samples = n`.
    pub synthetic_samples: Option<usize>,
    /// `synthetic_image_range = "[low, high]"`, as `[low, high]`.
    pub synthetic_image_range: Option<[f32; 2]>,
}

impl Options {
    /// The options in canonical form: written keys in [`KEYS`] order as `key = value`, joined
    /// by `", "`; empty when none is written. It is valid option syntax (it parses back to
    /// the same options), and is what the manifest records and the macro compares.
    pub fn canonical(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = &self.calibration {
            parts.push(format!("calibration = {c:?}"));
        }
        if let Some(m) = &self.method {
            parts.push(format!("method = {:?}", m.canonical()));
        }
        let mut flag = |key: &str, v: Option<bool>| {
            if let Some(v) = v {
                parts.push(format!("{key} = {v}"));
            }
        };
        flag("per_channel", self.per_channel);
        flag("reduce_range", self.reduce_range);
        flag("bias_correction", self.bias_correction);
        flag("gptq_rounding", self.gptq_rounding);
        if let Some(v) = self.min_cosine {
            parts.push(format!("min_cosine = {v:?}"));
        }
        if let Some(v) = self.min_top1_agreement {
            parts.push(format!("min_top1_agreement = {v:?}"));
        }
        if let Some(v) = self.synthetic_samples {
            parts.push(format!("synthetic_samples = {v}"));
        }
        if let Some([low, high]) = self.synthetic_image_range {
            parts.push(format!("synthetic_image_range = \"[{low:?}, {high:?}]\""));
        }
        parts.join(", ")
    }

    /// Parses options written as `key = value, ...` (e.g. a [`canonical`](Self::canonical)
    /// string).
    ///
    /// # Errors
    /// As for [`Invocation`].
    pub fn parse_str(text: &str) -> syn::Result<Self> {
        syn::parse::Parser::parse_str(|input: ParseStream<'_>| parse_options(input), text)
    }
}

impl Parse for Invocation {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(input.error(USAGE));
        }
        let item = if input.peek(LitStr) {
            None
        } else if input.peek(Token![pub]) || input.peek(Token![struct]) {
            let vis: Visibility = input.parse()?;
            input.parse::<Token![struct]>()?;
            let ident: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            Some(ItemName { vis, ident })
        } else {
            let span = input
                .cursor()
                .token_tree()
                .map_or_else(Span::call_site, |(tt, _)| tt.span());
            return Err(syn::Error::new(span, USAGE));
        };
        if !input.peek(LitStr) {
            return Err(input.error(USAGE));
        }
        let path: LitStr = input.parse()?;
        let options = if input.is_empty() {
            Options::default()
        } else {
            input.parse::<Token![,]>()?;
            parse_options(input)?
        };
        Ok(Self {
            item,
            path,
            options,
        })
    }
}

/// `key = value` pairs separated by commas, optional trailing comma, until the end.
fn parse_options(input: ParseStream<'_>) -> syn::Result<Options> {
    let mut options = Options::default();
    let mut seen: Vec<String> = Vec::new();
    while !input.is_empty() {
        let key = input.call(Ident::parse_any)?;
        let name = key.to_string();
        if !KEYS.contains(&name.as_str()) {
            return Err(syn::Error::new(
                key.span(),
                format!(
                    "unknown include_quantized! option `{name}`; expected one of: {}",
                    KEYS.join(", ")
                ),
            ));
        }
        if seen.contains(&name) {
            return Err(syn::Error::new(
                key.span(),
                format!("include_quantized! option `{name}` is given twice"),
            ));
        }
        seen.push(name.clone());
        input.parse::<Token![=]>()?;
        let value: Lit = input.parse()?;
        let bad = |what: &str| syn::Error::new(value.span(), format!("option `{name}` {what}"));
        match name.as_str() {
            "calibration" => {
                let Lit::Str(s) = &value else {
                    return Err(bad("expects a string: a folder of .npy files"));
                };
                let dir = s.value();
                if dir.trim().is_empty() {
                    return Err(bad("must not be empty"));
                }
                if dir.starts_with('$')
                    && !(dir == OUT_DIR_PREFIX || dir.starts_with(&format!("{OUT_DIR_PREFIX}/")))
                {
                    return Err(bad(
                        "may only start with `$OUT_DIR` (the build script's OUT_DIR); \
                         no other variable is expanded",
                    ));
                }
                options.calibration = Some(dir);
            }
            "method" => {
                let Lit::Str(s) = &value else {
                    return Err(bad(
                        "expects a string: \"minmax\", \"percentile\", \"percentile(P)\", \
                         \"entropy\" or \"mse\"",
                    ));
                };
                options.method = Some(
                    Method::parse_value(&s.value()).map_err(|m| syn::Error::new(s.span(), m))?,
                );
            }
            "per_channel" | "reduce_range" | "bias_correction" | "gptq_rounding" => {
                let Lit::Bool(b) = &value else {
                    return Err(bad("expects `true` or `false`"));
                };
                let slot = match name.as_str() {
                    "per_channel" => &mut options.per_channel,
                    "reduce_range" => &mut options.reduce_range,
                    "bias_correction" => &mut options.bias_correction,
                    _ => &mut options.gptq_rounding,
                };
                *slot = Some(b.value);
            }
            "min_cosine" | "min_top1_agreement" => {
                let v = match &value {
                    Lit::Float(f) => f.base10_parse::<f64>()?,
                    Lit::Int(i) => i.base10_parse::<f64>()?,
                    _ => return Err(bad("expects a number")),
                };
                let (checked, slot) = if name == "min_cosine" {
                    (check_min_cosine(v), &mut options.min_cosine)
                } else {
                    (check_min_top1_agreement(v), &mut options.min_top1_agreement)
                };
                checked.map_err(|m| bad(&m))?;
                *slot = Some(v);
            }
            "synthetic_samples" => {
                let Lit::Int(i) = &value else {
                    return Err(bad("expects a positive integer"));
                };
                let n: usize = i.base10_parse()?;
                check_synthetic_samples(n).map_err(|m| bad(&m))?;
                options.synthetic_samples = Some(n);
            }
            "synthetic_image_range" => {
                let Lit::Str(s) = &value else {
                    return Err(bad("expects a string such as \"[0, 1]\""));
                };
                options.synthetic_image_range = Some(parse_range(&s.value()).map_err(|m| bad(&m))?);
            }
            _ => unreachable!("every key in KEYS is handled"),
        }
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(options)
}

/// Parses `"[low, high]"` (spaces optional) into a range [`check_image_range`] accepts; the
/// error message completes "option `synthetic_image_range` ...".
fn parse_range(text: &str) -> Result<[f32; 2], String> {
    let (low, high) = text
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|inner| inner.split_once(','))
        .ok_or_else(|| format!("expects \"[low, high]\", got \"{text}\""))?;
    let number = |v: &str| {
        v.trim()
            .parse::<f32>()
            .map_err(|_| format!("expects numbers, got `{}` in \"{text}\"", v.trim()))
    };
    let range = [number(low)?, number(high)?];
    check_image_range(range[0], range[1])?;
    Ok(range)
}

// The value checks below are shared with `kenosis_build::QuantizeOptions::check`, so a
// value the macro rejects is rejected by every other entry point too. Except for the
// percentile's, each message completes "option `<name>` ...".

/// Checks a `percentile(P)` value: `0 < P <= 100` (percent of the histogram kept).
///
/// # Errors
/// A message naming the bad value (NaN included).
pub fn check_percentile(p: f64) -> Result<(), String> {
    if p > 0.0 && p <= 100.0 {
        Ok(())
    } else {
        Err(format!("percentile must be in (0, 100], got {p}"))
    }
}

/// Checks a `min_cosine` floor: a cosine similarity, in `[-1, 1]`.
///
/// # Errors
/// A message naming the bad value (NaN included).
pub fn check_min_cosine(v: f64) -> Result<(), String> {
    check_closed(v, -1.0)
}

/// Checks a `min_top1_agreement` floor: a fraction of samples, in `[0, 1]`.
///
/// # Errors
/// A message naming the bad value (NaN included).
pub fn check_min_top1_agreement(v: f64) -> Result<(), String> {
    check_closed(v, 0.0)
}

fn check_closed(v: f64, lo: f64) -> Result<(), String> {
    if (lo..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(format!("must be in [{lo:?}, 1.0], got {v}"))
    }
}

/// Most synthetic calibration samples one model may ask for. Synthetic data is generated
/// and held in memory whole (see `kenosis_build::calibrate::data::MAX_SYNTHETIC_TOTAL_ELEMENTS`
/// for the bound on their total size); past a few hundred samples, real calibration data
/// is the better use of the time.
pub const MAX_SYNTHETIC_SAMPLES: usize = 4096;

/// Checks a synthetic sample count: at least 1, at most [`MAX_SYNTHETIC_SAMPLES`].
///
/// # Errors
/// A message for zero or a count over the bound.
pub fn check_synthetic_samples(n: usize) -> Result<(), String> {
    if n == 0 {
        Err("must be at least 1".into())
    } else if n > MAX_SYNTHETIC_SAMPLES {
        Err(format!("must be at most {MAX_SYNTHETIC_SAMPLES}, got {n}"))
    } else {
        Ok(())
    }
}

/// Checks a synthetic image range: finite bounds with `low < high`. The error message
/// completes "option `synthetic_image_range` ...".
///
/// # Errors
/// A message naming the bad bounds.
pub fn check_image_range(low: f32, high: f32) -> Result<(), String> {
    if low.is_finite() && high.is_finite() && low < high {
        Ok(())
    } else {
        Err(format!(
            "needs finite bounds with low < high, got [{low}, {high}]"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> syn::Result<Invocation> {
        syn::parse_str(text)
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn path_only_and_trailing_comma() {
        let inv = parse(r#""models/x.onnx""#).unwrap();
        assert_eq!(inv.path.value(), "models/x.onnx");
        assert!(inv.item.is_none());
        assert_eq!(inv.options, Options::default());
        assert_eq!(inv.options.canonical(), "");
        let inv = parse(r#""m.onnx", "#).unwrap();
        assert_eq!(inv.options, Options::default());
    }

    #[test]
    fn every_option_and_canonical_round_trip() {
        let inv = parse(
            r#""m.onnx", synthetic_samples = 4, min_cosine = 0.99, per_channel = false,
               method = "percentile", calibration = "$OUT_DIR/calib", reduce_range = true,
               bias_correction = false, min_top1_agreement = 1, gptq_rounding = false,
               synthetic_image_range = " [0, 255] ","#,
        )
        .unwrap();
        let o = &inv.options;
        assert_eq!(o.calibration.as_deref(), Some("$OUT_DIR/calib"));
        assert_eq!(o.method, Some(Method::Percentile(99.99)));
        assert_eq!(o.per_channel, Some(false));
        assert_eq!(o.reduce_range, Some(true));
        assert_eq!(o.bias_correction, Some(false));
        assert_eq!(o.gptq_rounding, Some(false));
        assert_eq!(o.min_cosine, Some(0.99));
        assert_eq!(o.min_top1_agreement, Some(1.0));
        assert_eq!(o.synthetic_samples, Some(4));
        assert_eq!(o.synthetic_image_range, Some([0.0, 255.0]));
        let canonical = o.canonical();
        assert_eq!(
            canonical,
            "calibration = \"$OUT_DIR/calib\", method = \"percentile(99.99)\", \
             per_channel = false, reduce_range = true, bias_correction = false, \
             gptq_rounding = false, min_cosine = 0.99, min_top1_agreement = 1.0, \
             synthetic_samples = 4, synthetic_image_range = \"[0.0, 255.0]\""
        );
        assert_eq!(&Options::parse_str(&canonical).unwrap(), o);
    }

    #[test]
    fn methods() {
        let m = |s: &str| Method::parse_value(s);
        assert_eq!(m("minmax"), Ok(Method::MinMax));
        assert_eq!(m("entropy"), Ok(Method::Entropy));
        assert_eq!(m("mse"), Ok(Method::Mse));
        assert_eq!(m("percentile(99.9)"), Ok(Method::Percentile(99.9)));
        assert!(m("percentile(0)").is_err());
        assert!(m("kl")
            .unwrap_err()
            .contains("unknown calibration method `kl`"));
    }

    #[test]
    fn item_form() {
        let inv = parse(r#"pub struct Net = "m.onnx", per_channel = true"#).unwrap();
        let item = inv.item.unwrap();
        assert_eq!(item.ident, "Net");
        assert!(matches!(item.vis, Visibility::Public(_)));
        assert_eq!(inv.options.per_channel, Some(true));
        let inv = parse(r#"struct Net = "m.onnx""#).unwrap();
        assert!(matches!(inv.item.unwrap().vis, Visibility::Inherited));
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(
            err(r#""m.onnx", bits = 4"#).starts_with("unknown include_quantized! option `bits`")
        );
        assert_eq!(
            err(r#""m.onnx", per_channel = 1"#),
            "option `per_channel` expects `true` or `false`"
        );
        assert_eq!(
            err(r#""m.onnx", per_channel = true, per_channel = false"#),
            "include_quantized! option `per_channel` is given twice"
        );
        assert_eq!(
            err(r#""m.onnx", min_cosine = 1.5"#),
            "option `min_cosine` must be in [-1.0, 1.0], got 1.5"
        );
        assert_eq!(
            err(r#""m.onnx", synthetic_samples = 0"#),
            "option `synthetic_samples` must be at least 1"
        );
        assert_eq!(
            err(r#""m.onnx", synthetic_samples = 4097"#),
            "option `synthetic_samples` must be at most 4096, got 4097"
        );
        assert_eq!(
            err(r#""m.onnx", synthetic_samples = 99999999999999999999999"#),
            "number too large to fit in target type"
        );
        assert!(parse(r#""m.onnx", synthetic_samples = 4096"#).is_ok());
        assert_eq!(
            err(r#""m.onnx", synthetic_image_range = "[1, 0]""#),
            "option `synthetic_image_range` needs finite bounds with low < high, got [1, 0]"
        );
        assert_eq!(
            err(r#""m.onnx", synthetic_image_range = "[0, 1e39]""#),
            "option `synthetic_image_range` needs finite bounds with low < high, got [0, inf]"
        );
        assert_eq!(
            err(r#""m.onnx", synthetic_image_range = "0..1""#),
            "option `synthetic_image_range` expects \"[low, high]\", got \"0..1\""
        );
        assert_eq!(
            err(r#""m.onnx", synthetic_image_range = "[0, x]""#),
            "option `synthetic_image_range` expects numbers, got `x` in \"[0, x]\""
        );
        assert!(err(r#""m.onnx", calibration = "$HOME/x""#).contains("only start with `$OUT_DIR`"));
        assert!(err(r#""m.onnx", method = "kl""#).contains("unknown calibration method"));
        assert!(err("PATH").starts_with("include_quantized! expects a string literal"));
        assert!(err("").contains("include_quantized! expects a string literal"));
    }
}
