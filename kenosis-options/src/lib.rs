//! The argument grammar of `include_quantized!`, in one place for the two programs that read
//! it: the proc macro (`kenosis-macros`) and the build script's discovery
//! (`kenosis_build::discover`). Both parse a call site with [`Invocation`], so they can never
//! disagree on what a call means.
//!
//! ```text
//! include_quantized!("models/x.onnx")
//! include_quantized!("models/x.onnx", calibration = "calib/x", method = "percentile",
//!                    per_channel = false, min_cosine = 0.99, keep_float = ["head/Conv"])
//! include_quantized!(pub struct Net = "models/x.onnx", method = "mse")   // item form
//! ```
//!
//! Every option is declared once, in [`table`]: its key, value type, doc line, check, merge
//! and (in `kenosis-build`) its `Config` setter, default and cache-key line. The keys and
//! their values are listed on [`Options`], one field per key.
//!
//! Unknown keys, repeated keys and bad values are [`syn::Error`]s spanned at the offending
//! token.
//!
//! [`preprocess`] holds the image preprocessing spec (`"rgb,224x224,mean=127,std=128"`) the
//! `kenosis` command's `--preprocess` reads, for the build side to read the same way.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitStr, Token, Visibility};

pub mod check;
pub mod merge;
pub mod preprocess;
pub mod table;
pub mod value;

pub use check::MAX_SYNTHETIC_SAMPLES;
use value::Value;

/// What option defaults depend on besides the table: the build target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildTarget {
    /// The target's u8·s8 integer kernels sum pairs of products in saturating 16-bit lanes
    /// (x86 without VNNI), which makes `reduce_range` default to on.
    pub saturating_kernels: bool,
}

/// The prefix of a `calibration` path that stands for the build script's `OUT_DIR`.
pub const OUT_DIR_PREFIX: &str = "$OUT_DIR";

/// Default percentile of `method = "percentile"`.
pub const DEFAULT_PERCENTILE: f64 = 99.99;

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
                check::percentile(p)?;
                Method::Percentile(p)
            }
        })
    }
}

/// How MatMul and Gemm activations with a constant weight are quantized, as written at a call
/// site (`activations = "..."`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activations {
    /// `"auto"`: chosen per model by the fidelity measured on held-out samples (see
    /// `kenosis-build`'s `quantize::dynamic`).
    #[default]
    Auto,
    /// `"static"`: calibrated ranges, QuantizeLinear/DequantizeLinear pairs (QDQ).
    Static,
    /// `"dynamic"`: ranges computed at run time by `DynamicQuantizeLinear`, read by
    /// `MatMulInteger`; an input whose outlier channels the calibration statistics say cost
    /// precision is first divided per channel, its weights' rows multiplied to match
    /// (SmoothQuant, Xiao et al. 2023; see `quantize::smooth`).
    Dynamic,
}

impl Activations {
    /// The call-site spelling.
    pub fn canonical(&self) -> &'static str {
        match self {
            Activations::Auto => "auto",
            Activations::Static => "static",
            Activations::Dynamic => "dynamic",
        }
    }

    /// Parses a call-site spelling.
    ///
    /// # Errors
    /// A message naming the unknown spelling and the accepted ones.
    pub fn parse_value(text: &str) -> Result<Self, String> {
        match text.trim() {
            "auto" => Ok(Activations::Auto),
            "static" => Ok(Activations::Static),
            "dynamic" => Ok(Activations::Dynamic),
            other => Err(format!(
                "unknown activations mode `{other}`; expected \"auto\", \"static\" or \"dynamic\""
            )),
        }
    }
}

/// Weight precision of MatMul nodes with a constant weight, as written at a call site
/// (`weights = "..."`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Weights {
    /// `"int8"`: int8 weights, per output channel.
    #[default]
    Int8,
    /// `"int4"` (block size 32) or `"int4(B)"`: 4-bit weights with one scale per block of `B`
    /// consecutive input rows of each output column, `B` a power of two from 16 to 256.
    Int4 {
        /// Rows per block.
        block_size: u32,
    },
}

impl Weights {
    /// Default block size of `"int4"` (ONNX Runtime's `matmul_4bits_quantizer` default).
    pub const DEFAULT_BLOCK_SIZE: u32 = 32;

    /// The canonical spelling (`int4` always with its block size).
    pub fn canonical(&self) -> String {
        match self {
            Weights::Int8 => "int8".into(),
            Weights::Int4 { block_size } => format!("int4({block_size})"),
        }
    }

    /// Parses a call-site spelling.
    ///
    /// # Errors
    /// A message naming the unknown spelling or the bad block size.
    pub fn parse_value(text: &str) -> Result<Self, String> {
        let text = text.trim();
        match text {
            "int8" => return Ok(Weights::Int8),
            "int4" => {
                return Ok(Weights::Int4 {
                    block_size: Self::DEFAULT_BLOCK_SIZE,
                })
            }
            _ => {}
        }
        let b = text
            .strip_prefix("int4(")
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| {
                format!("unknown weights `{text}`; expected \"int8\", \"int4\" or \"int4(B)\"")
            })?;
        let block_size: u32 = b
            .trim()
            .parse()
            .map_err(|_| format!("`{b}` is not a block size in \"int4(B)\""))?;
        if !(16..=256).contains(&block_size) || !block_size.is_power_of_two() {
            return Err(format!(
                "int4 block size must be a power of two from 16 to 256, got {block_size}"
            ));
        }
        Ok(Weights::Int4 { block_size })
    }
}

/// Generates, from the [`table`], the call-site [`Options`], [`KEYS`], and their grammar,
/// checks, merge and canonical text.
macro_rules! define_options {
    (
        inputs { $($inputs:tt)* }
        artifact { $($artifact:tt)* }
    ) => {
        define_options! { @all $($inputs)* $($artifact)* }
    };
    (@all $(
        $(#[doc = $doc:literal])+
        $name:ident: $ty:ty {
            check: $check:path,
            merge: $merge:ident,
            $(resolved: $resolved:ty = $default:expr, setter: { $($setter:tt)* },)?
        }
    )*) => {
        /// The options of one call site, or of a build script's `Config`: `None` = not
        /// written (an earlier layer's value, else the default, applies).
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct Options {
            $(
                $(#[doc = $doc])+
                pub $name: Option<$ty>,
            )*
        }

        /// Every option key, in canonical order (the [`table`]'s).
        pub const KEYS: &[&str] = &[$(stringify!($name)),*];

        impl Options {
            /// The options in canonical form: written keys in [`KEYS`] order as
            /// `key = value` (each value in its [`Value::write`] spelling), joined by `", "`;
            /// empty when none is written. It is valid option syntax (it parses back to the
            /// same options), and is what the manifest records and the macro compares.
            pub fn canonical(&self) -> String {
                let mut parts: Vec<String> = Vec::new();
                $(
                    if let Some(v) = &self.$name {
                        parts.push(format!("{} = {}", stringify!($name), Value::write(v)));
                    }
                )*
                parts.join(", ")
            }

            /// Lays `later` over these options, each option by its merge rule (see
            /// [`merge`]): a written value replaces this one, a written list extends it.
            pub fn merge(&mut self, later: &Options) {
                $(
                    if let Some(v) = &later.$name {
                        merge::$merge(&mut self.$name, v.clone());
                    }
                )*
            }

            /// Checks every written value against its bounds (see [`check`]).
            ///
            /// # Errors
            /// The key of the first value out of bounds and a message completing
            /// "option `<key>` ...".
            pub fn check(&self) -> Result<(), (&'static str, String)> {
                $(
                    if let Some(v) = &self.$name {
                        $check(v).map_err(|m| (stringify!($name), m))?;
                    }
                )*
                Ok(())
            }

            /// Parses `value` as the value of option `key` (a known key), checks it, and
            /// stores it.
            fn set(&mut self, key: &Ident, value: &syn::Expr) -> syn::Result<()> {
                let name = key.to_string();
                $(
                    if name == stringify!($name) {
                        let v = <$ty as Value>::parse(&name, value)?;
                        $check(&v).map_err(|m| {
                            syn::Error::new(
                                syn::spanned::Spanned::span(value),
                                format!("option `{name}` {m}"),
                            )
                        })?;
                        self.$name = Some(v);
                        return Ok(());
                    }
                )*
                Err(syn::Error::new(key.span(), format!("unknown option `{name}`")))
            }
        }
    };
}

options!(define_options);

impl Options {
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
        let value: syn::Expr = input.parse()?;
        options.set(&key, &value)?;
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(options)
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
               synthetic_image_range = " [0, 255] ", keep_float = ["a/Conv", "b\"c"],"#,
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
        assert_eq!(
            o.keep_float,
            Some(vec!["a/Conv".to_owned(), "b\"c".to_owned()])
        );
        let canonical = o.canonical();
        assert_eq!(
            canonical,
            "calibration = \"$OUT_DIR/calib\", method = \"percentile(99.99)\", \
             per_channel = false, reduce_range = true, bias_correction = false, \
             gptq_rounding = false, min_cosine = 0.99, min_top1_agreement = 1.0, \
             synthetic_samples = 4, synthetic_image_range = \"[0.0, 255.0]\", \
             keep_float = [\"a/Conv\", \"b\\\"c\"]"
        );
        assert_eq!(&Options::parse_str(&canonical).unwrap(), o);
    }

    #[test]
    fn keep_float_takes_one_name_or_a_list() {
        let o = Options::parse_str(r#"keep_float = "head/Conv""#).unwrap();
        assert_eq!(o.keep_float, Some(vec!["head/Conv".to_owned()]));
        assert_eq!(o.canonical(), r#"keep_float = ["head/Conv"]"#);
        let o = Options::parse_str("keep_float = []").unwrap();
        assert_eq!(o.canonical(), "keep_float = []");
        assert_eq!(
            Options::parse_str(r#"keep_float = ["a", 1]"#)
                .unwrap_err()
                .to_string(),
            "option `keep_float` expects a string or an array of strings, e.g. [\"head/Conv\"]"
        );
        assert_eq!(
            Options::parse_str(r#"keep_float = ["a", ""]"#)
                .unwrap_err()
                .to_string(),
            "option `keep_float` must not name an empty node name \"\""
        );
    }

    #[test]
    fn a_negative_cosine_floor_parses_and_round_trips() {
        let o = Options::parse_str("min_cosine = -0.5").unwrap();
        assert_eq!(o.min_cosine, Some(-0.5));
        assert_eq!(Options::parse_str(&o.canonical()).unwrap(), o);
        assert_eq!(
            Options::parse_str("min_cosine = -2")
                .unwrap_err()
                .to_string(),
            "option `min_cosine` must be in [-1.0, 1.0], got -2"
        );
    }

    #[test]
    fn a_later_layer_replaces_values_and_extends_lists() {
        let mut config =
            Options::parse_str(r#"per_channel = false, min_cosine = 0.9, keep_float = ["a"]"#)
                .unwrap();
        let call = Options::parse_str(r#"per_channel = true, keep_float = ["b"]"#).unwrap();
        config.merge(&call);
        assert_eq!(
            config.canonical(),
            r#"per_channel = true, min_cosine = 0.9, keep_float = ["a", "b"]"#
        );
        // An unwritten key leaves the earlier layer's value.
        config.merge(&Options::default());
        assert_eq!(config.min_cosine, Some(0.9));
    }

    #[test]
    fn check_names_the_key_of_a_value_out_of_bounds() {
        let mut o = Options::default();
        assert_eq!(o.check(), Ok(()));
        o.synthetic_samples = Some(0);
        assert_eq!(
            o.check(),
            Err(("synthetic_samples", "must be at least 1".to_owned()))
        );
        o.synthetic_samples = None;
        o.method = Some(Method::Percentile(150.0));
        assert_eq!(
            o.check(),
            Err((
                "method",
                "percentile must be in (0, 100], got 150".to_owned()
            ))
        );
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
