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
use serde_json::value::RawValue;

use crate::device_profile::DeviceProfile;
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
    /// Where the calibration samples come from (absolute paths); `None`: synthetic inputs.
    pub calibration: Option<CalibrationSource>,
    /// The option layers over the defaults, in `include_quantized!` syntax
    /// ([`Options::canonical`]).
    pub options: String,
    /// The build target's triple (cargo's `TARGET`).
    pub target: String,
    /// The build target's features (cargo's `CARGO_CFG_TARGET_FEATURE`), comma-separated.
    pub target_features: String,
    /// The device profile pricing the placement (absolute; see [`crate::device_profile`]);
    /// `None`: kernel costs measured here or the target class's table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_profile: Option<PathBuf>,
    /// The cache folder: the kernel costs measured on this machine are kept under it.
    pub cache_dir: PathBuf,
    /// The cache key the artifact will be stored under, recorded in the report's `key`.
    pub key: String,
    /// Where to write the INT8 model.
    pub artifact: PathBuf,
    /// Where to write its report (JSON).
    pub report: PathBuf,
}

/// The calibration data a build names, as files: what a call site's `calibration`,
/// `calibration_images` + `preprocess`, or `calibration_text` + `tokenizer` (+ `max_len`)
/// resolve to. The front end hashes exactly the files each reads (see [`crate::model_files`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CalibrationSource {
    /// A folder of `.npy` samples (see [`crate::model_files::npy_files`]).
    Npy {
        /// The folder.
        dir: PathBuf,
    },
    /// A folder of images, each one sample (see [`crate::model_files::image_files`]).
    Images {
        /// The folder.
        dir: PathBuf,
        /// The preprocessing spec (`kenosis_options::preprocess`), in its canonical text.
        preprocess: String,
    },
    /// UTF-8 text tokenized into windows (see [`crate::model_files::text_files`]).
    Text {
        /// A text file, or a folder of them.
        path: PathBuf,
        /// The model's `tokenizer.json`.
        tokenizer: PathBuf,
        /// Tokens per window; `None`: the model's or the tokenizer's length.
        max_len: Option<usize>,
    },
}

impl Request {
    /// The resolved options this request quantizes with: the same value, and so the same
    /// cache key text, as the front end computed.
    ///
    /// # Errors
    /// [`Error::Config`] when [`Request::options`] does not parse; as
    /// [`DeviceProfile::read`] and [`QuantizeOptions::with_device_profile`] for the device
    /// profile.
    pub fn quantize_options(&self) -> Result<QuantizeOptions> {
        let layers = Options::parse_str(&self.options).map_err(|e| {
            Error::Config(format!("the quantizer's options `{}`: {e}", self.options))
        })?;
        let options = QuantizeOptions::for_target(&layers, &self.target, &self.target_features);
        match &self.device_profile {
            None => Ok(options),
            Some(path) => {
                let (profile, hash) = DeviceProfile::read(path)?;
                options.with_device_profile(&profile, &hash, path)
            }
        }
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
/// the members keep their order and every value its text, laid out as
/// `serde_json::to_vec_pretty` lays out the quantizer's report, so a report read from the
/// cache is byte for byte the one a miss writes. (A `serde_json::Value` would sort the keys:
/// its maps are ordered by name without serde_json's `preserve_order` feature, a dependency
/// the front end does without.)
///
/// # Errors
/// [`Error::Config`] when `json` is not a JSON object.
pub fn with_source(json: &[u8], source: &str) -> Result<Vec<u8>> {
    let json_error = |e: serde_json::Error| Error::Config(format!("a cached report: {e}"));
    let Members(mut members) = serde_json::from_slice(json).map_err(json_error)?;
    let value = serde_json::to_string(source)
        .and_then(RawValue::from_string)
        .map_err(json_error)?;
    match members.iter_mut().find(|(key, _)| key == "source") {
        Some((_, old)) => *old = value,
        None => members.insert(0, ("source".to_owned(), value)),
    }
    let mut out = b"{".to_vec();
    for (i, (key, value)) in members.iter().enumerate() {
        out.extend_from_slice(if i == 0 { b"\n  " } else { b",\n  " });
        out.extend(serde_json::to_vec(key).map_err(json_error)?);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.get().as_bytes());
    }
    out.extend_from_slice(b"\n}");
    Ok(out)
}

/// The members of a JSON object in their order, each value as its JSON text.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct InOrder;
        impl<'de> serde::de::Visitor<'de> for InOrder {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(InOrder)
    }
}

/// The options the quantizer resolves from a request the front end wrote with `options` for
/// `target` (and `device_profile`), after a round trip through JSON.
#[cfg(test)]
pub(crate) fn through_a_request(
    options: &QuantizeOptions,
    target: &str,
    device_profile: Option<PathBuf>,
) -> QuantizeOptions {
    let request = Request {
        model: PathBuf::from("m.onnx"),
        source: "m.onnx".into(),
        calibration: None,
        options: options.to_options().canonical(),
        device_profile,
        target: target.into(),
        target_features: String::new(),
        cache_dir: PathBuf::from("cache"),
        key: "k".into(),
        artifact: PathBuf::from("a.onnx"),
        report: PathBuf::from("a.json"),
    };
    let json = serde_json::to_vec(&request).expect("serializes");
    let back: Request = serde_json::from_slice(&json).expect("parses");
    back.quantize_options().expect("options resolve")
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
            let quantizer = through_a_request(&front_end, target, None);
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

    /// Only `source` changes: the members keep the quantizer's order (not sorted by name) and
    /// the values their text, whatever strings and brackets they hold.
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
            String::from_utf8(named).expect("UTF-8"),
            "{\n  \"source\": \"m.onnx\",\n  \"z\": 1,\n  \"a\": {\"y\": 2, \"b\": 3}\n}"
        );
        let named = with_source(b" { } ", "m.onnx").expect("object");
        assert_eq!(named, b"{\n  \"source\": \"m.onnx\"\n}");
    }
}
