//! Tensors whose bytes live in files beside the model (ONNX "external data", used for models
//! over protobuf's 2 GB limit and by `onnx.save_model(..., save_as_external_data=True)`).
//!
//! A tensor is external when `data_location` is `EXTERNAL`; its `external_data` entries give
//! `location` (a path relative to the model's folder), and optionally `offset` and `length`
//! in bytes (ONNX IR spec, "External Tensor Data"). The model file is a build input like any
//! other, so a location is treated as untrusted: it must be a relative path that stays inside
//! the model's folder, and `offset`/`length` must lie within the file.
//!
//! Tensors are looked for wherever `onnx.proto` can hold one: initializers and sparse
//! initializers (their `values` and `indices`), tensor and sparse-tensor attributes (also of
//! nodes inside subgraphs and `ModelProto.functions`, and function attribute defaults), and
//! the graphs of `ModelProto.training_info`.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use super::outline::ExternalTensor;

/// Why a model's external data could not be read. The caller adds the model file's name.
#[derive(Debug)]
pub enum ExternalDataError {
    /// The tensor's `external_data` entries are malformed or point outside the model folder.
    Invalid(String),
    /// The data file could not be opened or read.
    Io(PathBuf, std::io::Error),
    /// The location (joined to the model's folder) holds a line break, which no path printed
    /// to cargo may hold (see `kenosis_build`'s `cargo`).
    LineBreak(PathBuf),
}

/// The data files the external tensors of a model (as [`super::outline::read`] lists them)
/// refer to, resolved against `model_dir`, sorted and deduplicated. Each is checked as
/// the quantizer's `inline` reads it: a regular file (symlinks followed) whose resolved path stays inside
/// `model_dir`, so that callers may hash it safely.
///
/// # Errors
/// [`ExternalDataError::Invalid`] when a location is missing, absolute, leaves `model_dir`
/// (also through a symlink), or is not a regular file (a FIFO, a device such as
/// `/dev/zero`); [`ExternalDataError::Io`] when it cannot be resolved.
pub fn files(
    tensors: &[ExternalTensor],
    model_dir: &Path,
) -> Result<Vec<PathBuf>, ExternalDataError> {
    let mut files = BTreeSet::new();
    for t in tensors {
        let location = Location::parse(&t.name, t.entries.iter().map(|(k, v)| (&**k, &**v)))?;
        let file = location.file(model_dir)?;
        if !files.contains(&file) {
            location.checked_file(model_dir)?;
            files.insert(file);
        }
    }
    Ok(files.into_iter().collect())
}

/// One tensor's `external_data` entries, parsed.
pub struct Location {
    /// The tensor's name.
    pub tensor: String,
    /// Its data file, relative to the model's folder.
    pub location: String,
    /// Where its bytes start in that file.
    pub offset: u64,
    /// How many bytes it holds; `None`: to the end of the file.
    pub length: Option<u64>,
}

impl Location {
    /// The location of the tensor `name` with the `external_data` entries (key, value)
    /// `entries`.
    pub fn parse<'a>(
        name: &str,
        entries: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, ExternalDataError> {
        let invalid =
            |what: String| ExternalDataError::Invalid(format!("external tensor `{name}`: {what}"));
        let number = |key: &str, value: &str| {
            value
                .parse::<u64>()
                .map_err(|_| invalid(format!("`{key}` is `{value}`, not a byte count")))
        };
        let mut location = None;
        let mut offset = 0;
        let mut length = None;
        for entry in entries {
            match entry {
                ("location", v) => location = Some(v.to_owned()),
                ("offset", v) => offset = number("offset", v)?,
                ("length", v) => length = Some(number("length", v)?),
                _ => {} // `checksum` and unknown keys do not change where the bytes are.
            }
        }
        let location = location
            .filter(|l| !l.is_empty())
            .ok_or_else(|| invalid("no `location` entry".into()))?;
        Ok(Self {
            tensor: name.to_owned(),
            location,
            offset,
            length,
        })
    }

    /// The data file, which must stay inside `model_dir` (as `onnx.checker` requires).
    pub fn file(&self, model_dir: &Path) -> Result<PathBuf, ExternalDataError> {
        let rel = Path::new(&self.location);
        if self.location.contains(['\n', '\r']) {
            return Err(ExternalDataError::LineBreak(model_dir.join(rel)));
        }
        if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(ExternalDataError::Invalid(format!(
                "external tensor `{}`: location `{}` must be a relative path inside the model's folder",
                self.tensor, self.location
            )));
        }
        Ok(model_dir.join(rel))
    }

    /// The data file and its size, once checked: its resolved path (symlinks followed) must
    /// stay inside the resolved `model_dir`, and it must be a regular file. Checked before
    /// the file is opened: a FIFO would block, a device such as `/dev/zero` never ends.
    pub fn checked_file(&self, model_dir: &Path) -> Result<(PathBuf, u64), ExternalDataError> {
        let path = self.file(model_dir)?;
        let io = |e| ExternalDataError::Io(path.clone(), e);
        // A symlink could still lead out of the folder: compare resolved paths.
        let (real, real_dir) = (
            path.canonicalize().map_err(io)?,
            model_dir.canonicalize().map_err(io)?,
        );
        if !real.starts_with(&real_dir) {
            return Err(ExternalDataError::Invalid(format!(
                "external tensor `{}`: `{}` resolves outside the model's folder",
                self.tensor, self.location
            )));
        }
        let meta = std::fs::metadata(&real).map_err(io)?;
        if !meta.is_file() {
            return Err(ExternalDataError::Invalid(format!(
                "external tensor `{}`: `{}` is not a regular file (a FIFO, device or folder)",
                self.tensor, self.location
            )));
        }
        Ok((path, meta.len()))
    }

    /// The tensor's bytes, from its [`checked_file`](Self::checked_file).
    ///
    /// # Errors
    /// As [`checked_file`](Self::checked_file), and [`ExternalDataError::Invalid`] when the
    /// bytes lie beyond the end of the file; [`ExternalDataError::Io`] when it cannot be read.
    pub fn read(&self, model_dir: &Path) -> Result<Vec<u8>, ExternalDataError> {
        use std::io::{Read, Seek, SeekFrom};
        let (path, _) = self.checked_file(model_dir)?;
        let io = |e| ExternalDataError::Io(path.clone(), e);
        let mut file = std::fs::File::open(&path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        let length = self.length.unwrap_or(size.saturating_sub(self.offset));
        // Checked before allocating: a hostile length must not exhaust memory.
        if self.offset.checked_add(length).is_none_or(|end| end > size) {
            return Err(ExternalDataError::Invalid(format!(
                "external tensor `{}`: bytes {}..{} lie beyond the end of `{}` ({size} bytes)",
                self.tensor,
                self.offset,
                self.offset.saturating_add(length),
                self.location
            )));
        }
        #[allow(
            clippy::expect_used,
            reason = "the length was checked against the file size, which fits in memory addresses"
        )]
        let mut bytes = vec![0; usize::try_from(length).expect("length <= file size")];
        file.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        file.read_exact(&mut bytes).map_err(io)?;
        Ok(bytes)
    }
}
