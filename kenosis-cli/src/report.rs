//! `kenosis report [--manifest-path Cargo.toml]`: what the last `cargo build` of a package
//! quantized, read from the manifest its build script wrote (`kenosis-manifest.json` in the
//! newest `OUT_DIR` of the package, under any profile or target) and the report of each model.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use kenosis_build::cargo::MetadataFailure;
use kenosis_manifest::{Manifest, ModelEntry};
use kenosis_quantize::Report;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::Format;
use crate::inspect::{first_names, megabytes};

/// How many node names a group of FP32 nodes shows.
const NAMES_SHOWN: usize = 5;

/// The arguments of `kenosis report`.
#[derive(clap::Args)]
pub struct Args {
    /// The package's Cargo.toml (default: the one cargo finds from the current folder)
    #[arg(long, value_name = "PATH")]
    manifest_path: Option<PathBuf>,
    /// Print lines for people (text) or one JSON document for scripts (see
    /// docs/cli-json.md)
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// What `kenosis report --format json` prints (see `docs/cli-json.md`).
#[derive(Debug, Serialize)]
pub struct Described<'a> {
    /// The manifest the build script wrote (`kenosis-manifest.json`).
    pub manifest: String,
    /// The package it belongs to.
    pub package: &'a str,
    /// One entry per model, in the manifest's order.
    pub models: Vec<DescribedModel<'a>>,
}

/// One model of [`Described`]: its manifest entry's fields (`source`, `artifact_path`,
/// `report_path`, `options`, `inputs`, `outputs`, ...) and its report.
#[derive(Debug, Serialize)]
pub struct DescribedModel<'a> {
    /// The manifest entry, its fields inline.
    #[serde(flatten)]
    pub entry: &'a ModelEntry,
    /// The build's JSON report of the model, exactly as written beside the artifact (every
    /// field, including any this version of the command does not know).
    pub report: &'a serde_json::Value,
}

/// Prints what the package's last build quantized.
///
/// # Errors
/// [`Error::CargoMetadata`] when cargo cannot describe the package; [`Error::Mismatch`] when
/// no package holds the folder or no build of it wrote a manifest; [`Error::Kenosis`] when a
/// report cannot be read.
pub fn run(args: &Args) -> Result<()> {
    let metadata = kenosis_build::cargo::metadata(args.manifest_path.as_deref())?;
    // The member whose folder holds the given manifest, or the current folder.
    let here = match &args.manifest_path {
        Some(path) => path.parent().map(Path::to_owned).unwrap_or_default(),
        None => std::env::current_dir()
            .map_err(|e| Error::Mismatch(format!("the current folder: {e}")))?,
    };
    let here = here.canonicalize().unwrap_or(here);
    let (name, _) = (packages(&metadata)?.into_iter())
        .filter(|(_, manifest)| manifest.parent().is_some_and(|dir| here.starts_with(dir)))
        .max_by_key(|(_, manifest)| manifest.as_os_str().len())
        .ok_or_else(|| {
            Error::Mismatch(format!(
                "no package of the workspace holds {}: give --manifest-path",
                here.display()
            ))
        })?;
    let target = metadata["target_directory"]
        .as_str()
        .map(Path::new)
        .ok_or(MetadataFailure::Missing("target_directory"))?;
    let manifest = newest_manifest(target, name).ok_or_else(|| {
        Error::Mismatch(format!(
            "no build of `{name}` under {} wrote a Kenosis manifest: run `cargo build` first",
            target.display()
        ))
    })?;
    let models = Manifest::read(&manifest)
        .map_err(|e| Error::Mismatch(format!("{}: {e}", manifest.display())))?;
    let reports = (models.models.iter())
        .map(|entry| {
            let bytes = std::fs::read(&entry.report_path).map_err(|source| {
                kenosis_quantize::Error::Io {
                    path: entry.report_path.clone(),
                    source,
                }
            })?;
            let bad = |e: serde_json::Error| {
                Error::Mismatch(format!("{}: {e}", entry.report_path.display()))
            };
            // Typed, to check it is a report; as written, for the JSON output.
            let report = serde_json::from_slice::<Report>(&bytes).map_err(bad)?;
            let raw = serde_json::from_slice::<serde_json::Value>(&bytes).map_err(bad)?;
            Ok((report, raw))
        })
        .collect::<Result<Vec<(Report, serde_json::Value)>>>()?;
    if args.format == Format::Json {
        return crate::format::print_json(&Described {
            manifest: manifest.display().to_string(),
            package: name,
            models: (models.models.iter().zip(&reports))
                .map(|(entry, (_, report))| DescribedModel { entry, report })
                .collect(),
        });
    }
    println!(
        "{} (package `{}`): {} model(s)",
        manifest.display(),
        name,
        models.models.len()
    );
    for (entry, (report, _)) in models.models.iter().zip(&reports) {
        print!("{}", describe(entry, report));
    }
    Ok(())
}

/// The name and manifest path of each package `metadata` lists (with `--no-deps`, the
/// workspace's members).
///
/// # Errors
/// [`MetadataFailure::Missing`] when it has no `packages` list, or a package no `name` or
/// `manifest_path`.
fn packages(
    metadata: &serde_json::Value,
) -> std::result::Result<Vec<(&str, &Path)>, MetadataFailure> {
    let packages = metadata["packages"]
        .as_array()
        .ok_or(MetadataFailure::Missing("packages"))?;
    let listed = packages.iter().map(|p| {
        let name = p["name"]
            .as_str()
            .ok_or(MetadataFailure::Missing("packages[].name"))?;
        let manifest = (p["manifest_path"].as_str())
            .ok_or(MetadataFailure::Missing("packages[].manifest_path"))?;
        Ok((name, Path::new(manifest)))
    });
    listed.collect()
}

/// The newest `kenosis-manifest.json` in `<target>/**/build/<package>-*/out/`.
fn newest_manifest(target: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}-");
    let mut build_dirs = Vec::new();
    let mut stack = vec![(target.to_owned(), 0)];
    // `<target>/<profile>/build` or `<target>/<triple>/<profile>/build`.
    while let Some((dir, depth)) = stack.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if entry.file_name() == "build" {
                build_dirs.push(path);
            } else if depth < 2 {
                stack.push((path, depth + 1));
            }
        }
    }
    build_dirs
        .iter()
        .filter_map(|b| std::fs::read_dir(b).ok())
        .flat_map(|d| d.flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path().join("out").join("kenosis-manifest.json"))
        .filter_map(|m| Some((m.metadata().ok()?.modified().ok()?, m)))
        .max()
        .map(|(_, m)| m)
}

/// One model's section.
fn describe(entry: &ModelEntry, report: &Report) -> String {
    let mut out = String::new();
    let options = if entry.options.is_empty() {
        "default options"
    } else {
        &entry.options
    };
    let _ = writeln!(out, "\n{} ({options})", entry.source);
    let _ = writeln!(out, "  {}", report.summary_line());
    if report.shipped_fp32().is_some() {
        // The summary says why; there is no INT8 placement to list.
        let _ = writeln!(
            out,
            "  size: {} FP32, shipped as FP32 ({})",
            megabytes(report.size_fp32),
            megabytes(report.size_int8)
        );
        let _ = writeln!(out, "  INT8: none (the speed check kept the FP32 model)");
        let _ = writeln!(out, "  artifact: {}", entry.artifact_path.display());
        let _ = writeln!(out, "  report:   {}", entry.report_path.display());
        return out;
    }
    let _ = writeln!(
        out,
        "  size: {} FP32 -> {} INT8",
        megabytes(report.size_fp32),
        megabytes(report.size_int8)
    );
    let ops: Vec<String> = report
        .ops_quantized
        .iter()
        .map(|(op, n)| format!("{n} {op}"))
        .collect();
    let _ = writeln!(out, "  INT8: {}", ops.join(", "));
    let mut reasons: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for node in &report.nodes_fp32 {
        (reasons.entry(node.reason.to_string()).or_default()).push(&node.name);
    }
    let _ = writeln!(out, "  FP32: {} node(s)", report.nodes_fp32.len());
    for (reason, names) in reasons {
        let _ = writeln!(
            out,
            "    {} ({}): {reason}",
            names.len(),
            first_names(&names, NAMES_SHOWN)
        );
    }
    let _ = writeln!(out, "  artifact: {}", entry.artifact_path.display());
    let _ = writeln!(out, "  report:   {}", entry.report_path.display());
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use kenosis_manifest::ModelEntry;
    use kenosis_quantize::Report;

    /// A report as a build writes it when the speed check shipped the FP32 model: INT8 ran
    /// at half FP32's speed, no op quantized, no fidelity.
    const SHIPPED_FP32: &str = r#"{
      "source": "models/m.onnx", "key": "0123abcd", "artifact_blake3": "ffee",
      "normalize": {"opset_before": 13, "opset_after": 13, "constants_extracted": 0,
        "layout_ops_folded": 0, "pads_folded": 0, "bias_adds_folded": 0,
        "scale_muls_folded": 0, "batchnorms_folded": 0, "channel_shuffles_rewritten": 0,
        "splits_as_slices": 0, "dropouts_removed": 0, "sums_as_adds": 0, "silus_fused": 0,
        "gelus_fused": 0, "hardswishes_fused": 0, "layernorms_fused": 0},
      "ops_quantized": {}, "nodes_fp32": [], "activations_absorbed": 0,
      "rewrite": {"activation_qdq": 0, "weights_quantized": 0, "biases_quantized": 0,
        "weights_gptq_rounded": 0, "weights_pair_safe": 0, "dynamic_nodes": [],
        "static_matmuls": []},
      "calibration_method": "minmax", "calibration_samples": 16,
      "calibration_synthetic": false, "fidelity": null,
      "speed": {"Measured": {"fp32_ms": 1.0, "int8_ms": 2.0, "speedup": 0.5,
        "min_speedup": 1.0, "kept_fp32": true, "revisions": 0}},
      "options": "", "size_fp32": 4800000, "size_int8": 4800000, "seconds": 10.6,
      "inputs": [], "outputs": []
    }"#;

    #[test]
    fn a_model_shipped_as_fp32_is_described_as_fp32() {
        let report: Report = serde_json::from_str(SHIPPED_FP32).expect("a report");
        let entry = ModelEntry {
            source: "models/m.onnx".into(),
            source_path: PathBuf::from("/p/models/m.onnx"),
            artifact_path: PathBuf::from("/out/m.onnx"),
            hash: "0123abcd".into(),
            artifact_blake3: "ffee".into(),
            report_path: PathBuf::from("/out/m.json"),
            inputs: Vec::new(),
            outputs: Vec::new(),
            options: String::new(),
            intra_threads: None,
        };
        let text = super::describe(&entry, &report);
        assert!(
            text.contains(
                "kenosis: kept models/m.onnx in FP32: INT8 against FP32 on this machine: 0.50x \
                 at 1 thread"
            ),
            "{text}"
        );
        assert!(text.contains("shipped as FP32 (4.80 MB)"), "{text}");
        assert!(text.contains("INT8: none"), "{text}");
        assert!(!text.contains("MB INT8"), "{text}");
    }
}
