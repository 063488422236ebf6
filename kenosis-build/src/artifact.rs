//! The files of one model in `OUT_DIR`: its artifact and its report, and the manifest entry
//! naming them.

use std::path::{Path, PathBuf};

use kenosis_manifest::{ModelEntry, TensorInfo};

use crate::cache;
use crate::config::ModelConfig;
use crate::error::Result;

/// What [`write_entry`] writes and records for one model.
pub(crate) struct ArtifactFiles<'a> {
    pub(crate) artifact: &'a [u8],
    pub(crate) report_json: &'a [u8],
    pub(crate) inputs: Vec<TensorInfo>,
    pub(crate) outputs: Vec<TensorInfo>,
    /// The `intra_threads` option: the thread count the speed check timed, which the
    /// runtime's wrapper then uses.
    pub(crate) intra_threads: Option<usize>,
}

/// Writes the artifact and the report of the model at `path` built under cache `key` into
/// `artifacts_dir` (atomically; an artifact already there with the same bytes is left
/// alone), and returns `model`'s manifest entry for them.
///
/// # Errors
/// [`Error::Io`] when a file cannot be written.
pub(crate) fn write_entry(
    model: &ModelConfig,
    path: &Path,
    source_path: PathBuf,
    artifacts_dir: &Path,
    key: String,
    files: ArtifactFiles<'_>,
) -> Result<ModelEntry> {
    let (artifact_path, report_path) = artifact_paths(path, artifacts_dir, &key);
    if std::fs::read(&artifact_path).ok().as_deref() != Some(files.artifact) {
        cache::write_atomic(&artifact_path, files.artifact)?;
    }
    cache::write_atomic(&report_path, files.report_json)?;
    Ok(ModelEntry {
        source: model.path.display().to_string(),
        source_path,
        artifact_path,
        hash: key,
        artifact_blake3: blake3::hash(files.artifact).to_hex().to_string(),
        report_path,
        inputs: files.inputs,
        outputs: files.outputs,
        options: model
            .call
            .as_ref()
            .map_or_else(String::new, |c| c.options.canonical()),
        intra_threads: files.intra_threads,
    })
}

/// Where the artifact and the report of the model at `path` built under cache `key` go.
fn artifact_paths(path: &Path, artifacts_dir: &Path, key: &str) -> (PathBuf, PathBuf) {
    let stem = path
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned());
    let short = key.get(..16).unwrap_or(key);
    (
        artifacts_dir.join(format!("{stem}-{short}.int8.onnx")),
        artifacts_dir.join(format!("{stem}-{short}.report.json")),
    )
}
