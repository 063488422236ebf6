//! What the build script's front end asks of the `kenosis` quantizer on a cache miss, and the
//! part of the answer it reads.
//!
//! The front end writes a [`Request`] as JSON to the quantizer's standard input
//! (`kenosis build-request`, see `quantizer`); the quantizer (`serve`) writes the artifact and
//! its report to the request's paths and prints the summary line on standard output. Both
//! sides are this crate at the same version and source hash (the quantizer's `--version`
//! says which), so the format needs no versioning of its own.

use std::path::PathBuf;

use kenosis_manifest::TensorInfo;
use kenosis_options::Options;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::options::QuantizeOptions;

/// One model to quantize, as a build script resolved it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The FP32 ONNX model (absolute).
    pub model: PathBuf,
    /// The model as the build names it (registered path or call-site literal), recorded in
    /// the report's `source`.
    pub source: String,
    /// The calibration folder of `.npy` samples (absolute); `None`: synthetic inputs.
    pub calibration: Option<PathBuf>,
    /// The option layers over the defaults, in `include_quantized!` syntax
    /// ([`Options::canonical`]).
    pub options: String,
    /// The build target's triple (cargo's `TARGET`).
    pub target: String,
    /// The build target's features (cargo's `CARGO_CFG_TARGET_FEATURE`), comma-separated.
    pub target_features: String,
    /// The cache folder: the kernel costs measured on this machine are kept under it.
    pub cache_dir: PathBuf,
    /// The cache key the artifact will be stored under, recorded in the report's `key`.
    pub key: String,
    /// Where to write the INT8 model.
    pub artifact: PathBuf,
    /// Where to write its report (JSON).
    pub report: PathBuf,
}

impl Request {
    /// The resolved options this request quantizes with: the same value, and so the same
    /// cache key text, as the front end computed.
    ///
    /// # Errors
    /// [`Error::Config`] when [`Request::options`] does not parse.
    pub fn quantize_options(&self) -> Result<QuantizeOptions> {
        let layers = Options::parse_str(&self.options).map_err(|e| {
            Error::Config(format!("the quantizer's options `{}`: {e}", self.options))
        })?;
        Ok(QuantizeOptions::for_target(
            &layers,
            &self.target,
            &self.target_features,
        ))
    }
}

/// The fields of a build report (the quantizer's `report::Report`, written beside each
/// artifact) that the front end reads: the rest passes through as JSON.
#[derive(Debug, Clone, Deserialize)]
pub struct ReportHead {
    /// BLAKE3 of the artifact (hex), checked against the cached artifact.
    pub artifact_blake3: String,
    /// The artifact's graph inputs, for the manifest.
    pub inputs: Vec<TensorInfo>,
    /// The artifact's graph outputs, for the manifest.
    pub outputs: Vec<TensorInfo>,
    /// `keep_float` names that matched no node.
    #[serde(default)]
    pub keep_float_unmatched: Vec<String>,
}

impl ReportHead {
    /// Parses the head of report JSON `json`; `None` when it is not a report.
    pub fn parse(json: &[u8]) -> Option<Self> {
        serde_json::from_slice(json).ok()
    }
}

/// `json` (a report) with its `source` replaced by `source`: byte-identical models share cache
/// entries, and the report written for a build names the build's own model.
///
/// Only the value of the top-level `source` member changes (it is added first when absent):
/// the other members keep their order, layout and bytes, so a report read from the cache
/// is the one the quantizer wrote on the miss. (Re-serializing it through
/// `serde_json::Value` would sort its keys, whose maps are ordered by name without
/// serde_json's `preserve_order` feature, a dependency the front end does without.)
///
/// # Errors
/// [`Error::Config`] when `json` is not a JSON object.
pub fn with_source(json: &[u8], source: &str) -> Result<Vec<u8>> {
    let value: serde_json::Value = serde_json::from_slice(json)
        .map_err(|e| Error::Config(format!("a cached report does not parse: {e}")))?;
    if !value.is_object() {
        return Err(Error::Config("a cached report is not a JSON object".into()));
    }
    let source = serde_json::to_vec(source)
        .map_err(|e| Error::Config(format!("a report does not serialize: {e}")))?;
    let (span, replacement) = match json_text::member_value(json, "source") {
        Some(span) => (span, source),
        None => {
            // Right after the object's `{`: `"source": "...",` before the first member.
            let open = json_text::skip_whitespace(json, 0) + 1;
            let has_members = json.get(json_text::skip_whitespace(json, open)) != Some(&b'}');
            let mut member = b"\"source\": ".to_vec();
            member.extend(source);
            if has_members {
                member.push(b',');
            }
            (open..open, member)
        }
    };
    let mut out = Vec::with_capacity(json.len() + replacement.len());
    out.extend_from_slice(&json[..span.start]);
    out.extend(replacement);
    out.extend_from_slice(&json[span.end..]);
    Ok(out)
}

/// Byte positions in JSON text that `serde_json` has already parsed: the scans assume it is
/// valid and answer `None` where it is not.
mod json_text {
    use std::ops::Range;

    /// The first position at or after `i` that is not JSON whitespace.
    pub fn skip_whitespace(json: &[u8], mut i: usize) -> usize {
        while json.get(i).is_some_and(|b| b" \t\n\r".contains(b)) {
            i += 1;
        }
        i
    }

    /// The bytes of the value of the first top-level member named `key` of the JSON object
    /// `json`.
    pub fn member_value(json: &[u8], key: &str) -> Option<Range<usize>> {
        let mut i = skip_whitespace(json, 0);
        if json.get(i) != Some(&b'{') {
            return None;
        }
        i += 1;
        loop {
            i = skip_whitespace(json, i);
            if json.get(i) != Some(&b'"') {
                return None; // `}`: no such member
            }
            let name_end = string_end(json, i)?;
            let name: String = serde_json::from_slice(&json[i..name_end]).ok()?;
            i = skip_whitespace(json, name_end);
            if json.get(i) != Some(&b':') {
                return None;
            }
            let start = skip_whitespace(json, i + 1);
            let end = value_end(json, start)?;
            if name == key {
                return Some(start..end);
            }
            i = skip_whitespace(json, end);
            if json.get(i) != Some(&b',') {
                return None;
            }
            i += 1;
        }
    }

    /// One past the closing quote of the string whose opening quote is at `i`.
    fn string_end(json: &[u8], i: usize) -> Option<usize> {
        let mut j = i + 1;
        loop {
            match json.get(j)? {
                b'\\' => j += 2,
                b'"' => return Some(j + 1),
                _ => j += 1,
            }
        }
    }

    /// One past the end of the value that starts at `i`.
    fn value_end(json: &[u8], i: usize) -> Option<usize> {
        match json.get(i)? {
            b'"' => string_end(json, i),
            b'{' | b'[' => {
                let (mut depth, mut j) = (0usize, i);
                loop {
                    match json.get(j)? {
                        b'"' => {
                            j = string_end(json, j)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some(j + 1);
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
            }
            // A number, `true`, `false` or `null`.
            _ => {
                let mut j = i;
                while json.get(j).is_some_and(|b| !b",}] \t\n\r".contains(b)) {
                    j += 1;
                }
                Some(j)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request carries the resolved options as call-site text; the quantizer must resolve
    /// them to the very value the front end hashed, for every option the table declares.
    #[test]
    fn the_quantizer_resolves_the_options_the_front_end_hashed() {
        let written = [
            "",
            "method = \"percentile(99.9)\", per_channel = false, keep_float = [\"conv1\", \"a b\"]",
            "activations = \"dynamic\", weights = \"int4\", min_cosine = 0.99",
            "reduce_range = true, fp32_where_faster = false, synthetic_image_range = \"[0, 255]\"",
        ];
        for (text, target) in written.iter().zip([
            "x86_64-unknown-linux-gnu",
            "aarch64-unknown-linux-gnu",
            "x86_64-unknown-linux-gnu",
            "aarch64-unknown-linux-gnu",
        ]) {
            let layers = Options::parse_str(text).expect("parses");
            let front_end = QuantizeOptions::for_target(&layers, target, "");
            let request = Request {
                model: PathBuf::from("m.onnx"),
                source: "m.onnx".into(),
                calibration: None,
                options: front_end.to_options().canonical(),
                target: target.into(),
                target_features: String::new(),
                cache_dir: PathBuf::from("cache"),
                key: "k".into(),
                artifact: PathBuf::from("a.onnx"),
                report: PathBuf::from("a.json"),
            };
            let json = serde_json::to_vec(&request).expect("serializes");
            let back: Request = serde_json::from_slice(&json).expect("parses");
            let quantizer = back.quantize_options().expect("options parse");
            assert_eq!(quantizer, front_end, "{text}");
            assert_eq!(quantizer.canonical(), front_end.canonical(), "{text}");
        }
    }

    #[test]
    fn a_cached_report_is_renamed_for_the_build_that_reads_it() {
        let json = br#"{"source": "a.onnx", "artifact_blake3": "00", "inputs": [], "outputs": []}"#;
        let named = with_source(json, "models/b.onnx").expect("an object");
        let value: serde_json::Value = serde_json::from_slice(&named).expect("JSON");
        assert_eq!(value["source"], "models/b.onnx");
        assert_eq!(
            ReportHead::parse(&named).expect("a head").artifact_blake3,
            "00"
        );
        assert!(with_source(b"[1, 2]", "x").is_err());
        assert!(ReportHead::parse(b"{}").is_none());
    }

    /// Only `source` changes: the members keep the quantizer's order (not sorted by name),
    /// nested objects theirs, and the text its layout, whatever strings and brackets the
    /// values hold.
    #[test]
    fn a_renamed_report_keeps_its_key_order_and_layout() {
        let report = |source: &str| {
            format!(
                "{{\n  \"source\": {},\n  \"key\": \"k\",\n  \"nodes_fp32\": [{{\"name\": \"a, \\\"}}]\", \
                 \"op_type\": \"Conv\"}}],\n  \"seconds\": 1.5e-3,\n  \"fidelity\": null,\n  \
                 \"artifact_blake3\": \"00\",\n  \"inputs\": [],\n  \"outputs\": []\n}}",
                serde_json::to_string(source).expect("a string")
            )
        };
        for name in ["models/b.onnx", "a.onnx", "c \\ \"d\".onnx"] {
            let renamed = with_source(report("a.onnx").as_bytes(), name).expect("an object");
            assert_eq!(String::from_utf8(renamed).expect("UTF-8"), report(name));
        }
        // A report without `source` gets one, first.
        let named = with_source(br#"{"z": 1, "a": {"y": 2, "b": 3}}"#, "m.onnx").expect("object");
        assert_eq!(
            named,
            br#"{"source": "m.onnx","z": 1, "a": {"y": 2, "b": 3}}"#
        );
        let named = with_source(b" { } ", "m.onnx").expect("object");
        assert_eq!(named, br#" {"source": "m.onnx" } "#);
    }
}
