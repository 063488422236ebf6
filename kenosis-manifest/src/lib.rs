//! The manifest `kenosis-build` writes into `OUT_DIR` and `include_quantized!` reads.
//!
//! It is a small JSON file, `$OUT_DIR/kenosis-manifest.json`, so that the proc macro stays
//! light (no `ort`, no protobuf) and the hand-off between build script and macro is plain
//! data a user can open and read.
//!
//! Reading and writing the file (serde, serde_json) is the `json` feature, which
//! `kenosis-build` and `include_quantized!` enable. Without it the crate is the plain types:
//! `kenosis-runtime` needs only [`ElementType`], and keeping serde out of its dependencies
//! keeps it out of the compile of every binary that embeds a model.

use std::path::{Path, PathBuf};

#[cfg(feature = "json")]
use serde::{Deserialize, Serialize};

/// File name of the manifest inside `OUT_DIR`.
pub const MANIFEST_FILE_NAME: &str = "kenosis-manifest.json";

/// Format version; bumped whenever a field changes meaning.
pub const MANIFEST_VERSION: u32 = 2;

/// Everything one build script run quantized, one entry per model.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "json", derive(Serialize, Deserialize))]
pub struct Manifest {
    /// Always [`MANIFEST_VERSION`] when written by this crate version.
    pub version: u32,
    /// One entry per quantized model, in registration order.
    pub models: Vec<ModelEntry>,
}

/// One quantized model: where its FP32 source was, where its INT8 artifact is, and its I/O.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "json", derive(Serialize, Deserialize))]
pub struct ModelEntry {
    /// The FP32 model path as written by the user (relative to `CARGO_MANIFEST_DIR`, or absolute).
    pub source: String,
    /// Absolute, canonicalized path of the FP32 model; the key the macro looks models up by.
    pub source_path: PathBuf,
    /// Absolute path of the INT8 QDQ model inside `OUT_DIR`, for `include_bytes!`.
    pub artifact_path: PathBuf,
    /// Hex content hash (the cache key) the artifact was produced under.
    pub hash: String,
    /// BLAKE3 of the artifact's bytes (64 lowercase hex digits): `include_quantized!`
    /// embeds the file only when its bytes hash to this.
    pub artifact_blake3: String,
    /// Absolute path of the JSON quantization report written next to the artifact.
    pub report_path: PathBuf,
    /// Graph inputs of the artifact, in ONNX order (initializers excluded).
    pub inputs: Vec<TensorInfo>,
    /// Graph outputs of the artifact, in ONNX order.
    pub outputs: Vec<TensorInfo>,
    /// The call-site options the artifact was built with, in the canonical form of
    /// `kenosis_options::Options::canonical` (empty for none, e.g. a model registered with
    /// `Config::model`). `include_quantized!` embeds only an entry whose options equal its own.
    #[cfg_attr(feature = "json", serde(default))]
    pub options: String,
    /// The intra-op thread count the build's speed check timed the artifact at and the
    /// application's session uses for it (option `intra_threads`); `None`:
    /// [`default_intra_threads`] for the machine the program runs on.
    #[cfg_attr(feature = "json", serde(default))]
    pub intra_threads: Option<usize>,
}

/// The most intra-op threads a session gets by default: see [`default_intra_threads`].
pub const MAX_DEFAULT_INTRA_THREADS: usize = 4;

/// The intra-op thread count `kenosis-runtime` gives a model's session on a machine with
/// `logical_cpus` when the build set none (option `intra_threads`): `None`, ONNX Runtime's
/// own choice (one thread per physical core), up to [`MAX_DEFAULT_INTRA_THREADS`] logical
/// CPUs, and [`MAX_DEFAULT_INTRA_THREADS`] above. A 4-core board keeps every core; a large
/// host does not spread the small models embedded in edge binaries over all its cores,
/// where each operator's work is too short to repay the threads' synchronization.
///
/// The build's speed check times the artifact at this count too, so the rule lives here,
/// beside the manifest both read.
pub fn default_intra_threads(logical_cpus: usize) -> Option<usize> {
    (logical_cpus > MAX_DEFAULT_INTRA_THREADS).then_some(MAX_DEFAULT_INTRA_THREADS)
}

/// Name, element type and shape of one graph input or output.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "json", derive(Serialize, Deserialize))]
pub struct TensorInfo {
    /// The ONNX value name.
    pub name: String,
    /// Element type.
    pub dtype: ElementType,
    /// Dimensions; `None` for a symbolic or unknown dimension (e.g. a dynamic batch).
    pub shape: Vec<Option<i64>>,
}

/// ONNX tensor element types Kenosis passes through its manifest
/// (`TensorProto.DataType` in `onnx.proto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "json", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "json", serde(rename_all = "lowercase"))]
pub enum ElementType {
    /// `FLOAT` (1): IEEE 754 binary32.
    F32,
    /// `UINT8` (2).
    U8,
    /// `INT8` (3).
    I8,
    /// `UINT16` (4).
    U16,
    /// `INT16` (5).
    I16,
    /// `INT32` (6).
    I32,
    /// `INT64` (7).
    I64,
    /// `STRING` (8).
    String,
    /// `BOOL` (9).
    Bool,
    /// `FLOAT16` (10).
    F16,
    /// `DOUBLE` (11).
    F64,
    /// `UINT32` (12).
    U32,
    /// `UINT64` (13).
    U64,
}

impl ElementType {
    /// The Rust element type name (`f32`, `i64`, `bool`, ...), as used in generated code.
    pub fn rust_name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::U8 => "u8",
            Self::I8 => "i8",
            Self::U16 => "u16",
            Self::I16 => "i16",
            Self::I32 => "i32",
            Self::I64 => "i64",
            Self::String => "String",
            Self::Bool => "bool",
            Self::F16 => "f16",
            Self::F64 => "f64",
            Self::U32 => "u32",
            Self::U64 => "u64",
        }
    }
}

/// Reading or writing a manifest failed.
#[cfg(feature = "json")]
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read or written.
    #[error("kenosis manifest {path}: {source}")]
    Io {
        /// The manifest file.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The file is not a manifest of this version.
    #[error("kenosis manifest {path} is malformed: {source}")]
    Json {
        /// The manifest file.
        path: PathBuf,
        /// What the JSON parser said.
        source: serde_json::Error,
    },
    /// A path to record is not valid UTF-8: JSON (and the macro's `include_bytes!`) can only
    /// carry UTF-8 paths.
    #[error("kenosis manifest {path}: {} is not valid UTF-8; move the model and OUT_DIR to UTF-8 paths", .entry.display())]
    NotUtf8 {
        /// The manifest file.
        path: PathBuf,
        /// The path that cannot be recorded (shown lossily).
        entry: PathBuf,
    },
    /// Written by an incompatible kenosis-build.
    #[error("kenosis manifest {path} has version {found}, expected {MANIFEST_VERSION}; kenosis-build and kenosis-runtime versions differ")]
    Version {
        /// The manifest file.
        path: PathBuf,
        /// The version found in the file.
        found: u32,
    },
}

impl Manifest {
    /// An empty manifest of the current version.
    pub fn new() -> Self {
        Self {
            version: MANIFEST_VERSION,
            models: Vec::new(),
        }
    }

    /// Path of the manifest inside `out_dir`.
    pub fn path_in(out_dir: &Path) -> PathBuf {
        out_dir.join(MANIFEST_FILE_NAME)
    }

    /// The first entry whose canonical FP32 source path is `source_path`.
    pub fn find(&self, source_path: &Path) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.source_path == source_path)
    }

    /// The entry for `source_path` built with exactly the canonical call-site `options`.
    pub fn find_with_options(&self, source_path: &Path, options: &str) -> Option<&ModelEntry> {
        self.models
            .iter()
            .find(|m| m.source_path == source_path && m.options == options)
    }
}

#[cfg(feature = "json")]
impl Manifest {
    /// Reads and validates the manifest at `path`.
    ///
    /// # Errors
    /// [`ManifestError`] when the file is missing, unreadable, not valid JSON or of another version.
    pub fn read(path: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read(path).map_err(|source| ManifestError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates the bytes of a manifest file; `path` is only named in errors.
    ///
    /// # Errors
    /// [`ManifestError::Json`] when the bytes are not a manifest's JSON,
    /// [`ManifestError::Version`] when it is of another version.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self, ManifestError> {
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|source| ManifestError::Json {
                path: path.to_owned(),
                source,
            })?;
        if manifest.version != MANIFEST_VERSION {
            return Err(ManifestError::Version {
                path: path.to_owned(),
                found: manifest.version,
            });
        }
        Ok(manifest)
    }

    /// Writes the manifest to `path` atomically (temporary file in the same folder, then rename),
    /// so a macro never reads a half-written manifest.
    ///
    /// # Errors
    /// [`ManifestError::NotUtf8`] when a recorded path is not valid UTF-8 (nothing is
    /// written); [`ManifestError::Io`] when the folder is not writable.
    pub fn write(&self, path: &Path) -> Result<(), ManifestError> {
        let io = |source| ManifestError::Io {
            path: path.to_owned(),
            source,
        };
        let paths = self
            .models
            .iter()
            .flat_map(|m| [&m.source_path, &m.artifact_path, &m.report_path]);
        if let Some(entry) = paths.into_iter().find(|p| p.to_str().is_none()) {
            return Err(ManifestError::NotUtf8 {
                path: path.to_owned(),
                entry: entry.clone(),
            });
        }
        let text = serde_json::to_string_pretty(self).map_err(|source| ManifestError::Json {
            path: path.to_owned(),
            source,
        })?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

impl Default for Manifest {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, feature = "json"))]
mod tests {
    use super::*;

    fn entry(source_path: PathBuf) -> ModelEntry {
        ModelEntry {
            source: "m.onnx".into(),
            source_path,
            artifact_path: "/out/m.int8.onnx".into(),
            hash: "00".into(),
            artifact_blake3: String::new(),
            report_path: "/out/m.report.json".into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            options: String::new(),
            intra_threads: None,
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_path_that_is_not_utf8_is_an_error_naming_it_not_a_panic() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let manifest_path = Manifest::path_in(dir.path());
        let bad = PathBuf::from(std::ffi::OsStr::from_bytes(b"/models/caf\xe9.onnx"));
        let manifest = Manifest {
            version: MANIFEST_VERSION,
            models: vec![entry(bad)],
        };
        let err = manifest.write(&manifest_path).unwrap_err();
        assert!(matches!(err, ManifestError::NotUtf8 { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("caf\u{fffd}.onnx"), "{message}");
        assert!(message.contains("is not valid UTF-8"), "{message}");
        assert!(!manifest_path.exists(), "nothing written");
    }

    #[test]
    fn a_written_manifest_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = Manifest::path_in(dir.path());
        let manifest = Manifest {
            version: MANIFEST_VERSION,
            models: vec![entry("/models/m.onnx".into())],
        };
        manifest.write(&path).expect("written");
        assert_eq!(Manifest::read(&path).expect("read"), manifest);
    }
}
