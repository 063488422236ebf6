//! The value types options take: how each is written at a call site and its canonical text.

use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, UnOp};

use crate::Method;

/// An option's value type: parsed from the expression after `key =`, and written back as
/// canonical text that parses to the same value.
pub trait Value: Sized + Clone {
    /// Parses the value of option `key`.
    ///
    /// # Errors
    /// A [`syn::Error`] spanned at the value, naming `key` and the expected syntax.
    fn parse(key: &str, value: &Expr) -> syn::Result<Self>;

    /// The canonical text: valid call-site syntax, one spelling per value.
    fn write(&self) -> String;
}

/// An error at `value` completing "option `key` ...".
fn bad(key: &str, value: &impl Spanned, what: &str) -> syn::Error {
    syn::Error::new(value.span(), format!("option `{key}` {what}"))
}

fn literal(value: &Expr) -> Option<&Lit> {
    match value {
        Expr::Lit(ExprLit { lit, .. }) => Some(lit),
        _ => None,
    }
}

fn string(key: &str, value: &Expr, what: &str) -> syn::Result<syn::LitStr> {
    match literal(value) {
        Some(Lit::Str(s)) => Ok(s.clone()),
        _ => Err(bad(key, value, what)),
    }
}

impl Value for bool {
    fn parse(key: &str, value: &Expr) -> syn::Result<Self> {
        match literal(value) {
            Some(Lit::Bool(b)) => Ok(b.value),
            _ => Err(bad(key, value, "expects `true` or `false`")),
        }
    }

    fn write(&self) -> String {
        self.to_string()
    }
}

impl Value for f64 {
    /// A float or integer literal, optionally negated.
    fn parse(key: &str, value: &Expr) -> syn::Result<Self> {
        let (negative, inner) = match value {
            Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => (true, &*u.expr),
            other => (false, other),
        };
        let v = match literal(inner) {
            Some(Lit::Float(f)) => f.base10_parse::<f64>()?,
            Some(Lit::Int(i)) => i.base10_parse::<f64>()?,
            _ => return Err(bad(key, value, "expects a number")),
        };
        Ok(if negative { -v } else { v })
    }

    /// Rust's shortest round-trip spelling (`1.0`, `0.99`).
    fn write(&self) -> String {
        format!("{self:?}")
    }
}

impl Value for usize {
    fn parse(key: &str, value: &Expr) -> syn::Result<Self> {
        match literal(value) {
            Some(Lit::Int(i)) => i.base10_parse(),
            _ => Err(bad(key, value, "expects a positive integer")),
        }
    }

    fn write(&self) -> String {
        self.to_string()
    }
}

impl Value for String {
    fn parse(key: &str, value: &Expr) -> syn::Result<Self> {
        Ok(string(key, value, "expects a string")?.value())
    }

    /// A Rust string literal.
    fn write(&self) -> String {
        format!("{self:?}")
    }
}

impl Value for Method {
    /// A string (`Method::parse_value`); its errors are spanned at the string.
    fn parse(key: &str, value: &Expr) -> syn::Result<Self> {
        let s = string(
            key,
            value,
            "expects a string: \"minmax\", \"percentile\", \"percentile(P)\", \"entropy\" or \
             \"mse\"",
        )?;
        Method::parse_value(&s.value()).map_err(|m| syn::Error::new(s.span(), m))
    }

    /// The quoted [`Method::canonical`] spelling.
    fn write(&self) -> String {
        format!("{:?}", self.canonical())
    }
}

impl Value for crate::Activations {
    /// A string (`Activations::parse_value`); its errors are spanned at the string.
    fn parse(key: &str, value: &Expr) -> syn::Result<Self> {
        let s = string(
            key,
            value,
            "expects a string: \"auto\", \"static\" or \"dynamic\"",
        )?;
        crate::Activations::parse_value(&s.value()).map_err(|m| syn::Error::new(s.span(), m))
    }

    /// The quoted [`Activations::canonical`](crate::Activations::canonical) spelling.
    fn write(&self) -> String {
        format!("{:?}", self.canonical())
    }
}

impl Value for crate::Weights {
    /// A string (`Weights::parse_value`); its errors are spanned at the string.
    fn parse(key: &str, value: &Expr) -> syn::Result<Self> {
        let s = string(
            key,
            value,
            "expects a string: \"int8\", \"int4\" or \"int4(B)\"",
        )?;
        crate::Weights::parse_value(&s.value()).map_err(|m| syn::Error::new(s.span(), m))
    }

    /// The quoted [`Weights::canonical`](crate::Weights::canonical) spelling.
    fn write(&self) -> String {
        format!("{:?}", self.canonical())
    }
}

impl Value for crate::preprocess::ImagePreprocess {
    /// A string in the preprocessing grammar (see [`crate::preprocess`]); its errors are
    /// spanned at the string.
    fn parse(key: &str, value: &Expr) -> syn::Result<Self> {
        let s = string(
            key,
            value,
            "expects a string such as \"rgb,nchw,224x224,mean=127,std=128\"",
        )?;
        s.value()
            .parse()
            .map_err(|e| syn::Error::new(s.span(), format!("option `{key}`: {e}")))
    }

    /// The quoted spec with every item explicit (its `Display`), which parses back to the
    /// same reading.
    fn write(&self) -> String {
        format!("{:?}", self.to_string())
    }
}

impl Value for [f32; 2] {
    /// A string `"[low, high]"` (spaces optional).
    fn parse(key: &str, value: &Expr) -> syn::Result<Self> {
        let text = string(key, value, "expects a string such as \"[0, 1]\"")?.value();
        let (low, high) = text
            .trim()
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|inner| inner.split_once(','))
            .ok_or_else(|| {
                bad(
                    key,
                    value,
                    &format!("expects \"[low, high]\", got \"{text}\""),
                )
            })?;
        let number = |v: &str| {
            v.trim().parse::<f32>().map_err(|_| {
                bad(
                    key,
                    value,
                    &format!("expects numbers, got `{}` in \"{text}\"", v.trim()),
                )
            })
        };
        Ok([number(low)?, number(high)?])
    }

    /// `"[low, high]"` with Rust's shortest round-trip spelling of each bound.
    fn write(&self) -> String {
        format!("\"[{:?}, {:?}]\"", self[0], self[1])
    }
}

impl Value for Vec<String> {
    /// An array of strings `["a", "b"]`, or one string `"a"` for a one-element list.
    fn parse(key: &str, value: &Expr) -> syn::Result<Self> {
        let what = "expects a string or an array of strings, e.g. [\"head/Conv\"]";
        match value {
            Expr::Array(array) => array
                .elems
                .iter()
                .map(|e| Ok(string(key, e, what)?.value()))
                .collect(),
            other => Ok(vec![string(key, other, what)?.value()]),
        }
    }

    /// `["a", "b"]`, each a Rust string literal.
    fn write(&self) -> String {
        let items: Vec<String> = self.iter().map(|s| format!("{s:?}")).collect();
        format!("[{}]", items.join(", "))
    }
}
