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
#[cfg(feature = "quantizer")]
use super::{
    tensor_proto::DataLocation, AttributeProto, GraphProto, ModelProto, SparseTensorProto,
    TensorProto,
};

/// Why a model's external data could not be read. The caller adds the model file's name.
#[derive(Debug)]
pub enum ExternalDataError {
    /// The tensor's `external_data` entries are malformed or point outside the model folder.
    Invalid(String),
    /// The data file could not be opened or read.
    Io(PathBuf, std::io::Error),
    /// The location (joined to the model's folder) holds a line break, which no path printed
    /// to cargo may hold (see `crate::cargo`).
    LineBreak(PathBuf),
}

/// The data files the external tensors of a model (as [`super::outline::read`] lists them)
/// refer to, resolved against `model_dir`, sorted and deduplicated. Each is checked as
/// `inline` would read it: a regular file (symlinks followed) whose resolved path stays inside
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

#[cfg(feature = "quantizer")]
/// [`inline`] reads at most this many times protobuf's 2 GiB limit in total: past it, even
/// a model with every FP32 weight in INT8 (a quarter of the size) could not be written as
/// one ONNX file. (It also reads no more than the data files hold, so that N tensors naming
/// one byte range cannot cost N times its length.)
pub const MAX_INLINED_FACTOR_OF_PROTOBUF_LIMIT: u64 = 4;

#[cfg(feature = "quantizer")]
/// Reads every external tensor of `model` into its `raw_data`, so that the model is
/// self-contained. Returns the number of tensors read.
///
/// # Errors
/// [`ExternalDataError::Invalid`] for a bad location (see [`files`]), an `offset`/`length`
/// outside the file, tensors naming more bytes in total than their data files hold (shared
/// or overlapping ranges) or more than [`MAX_INLINED_FACTOR_OF_PROTOBUF_LIMIT`] × 2 GiB,
/// all checked before any tensor is read; [`ExternalDataError::Io`] when a data file cannot
/// be read.
pub fn inline(model: &mut ModelProto, model_dir: &Path) -> Result<usize, ExternalDataError> {
    check_total(model, model_dir)?;
    let mut count = 0;
    visit_model_mut(model, &mut |t| {
        if is_external(t) {
            let bytes = Location::of(t)?.read(model_dir)?;
            t.raw_data = Some(bytes);
            t.external_data.clear();
            t.data_location = None;
            count += 1;
        }
        Ok(())
    })?;
    // Every place a tensor can be was visited above; this holds the walk to that promise,
    // since a reference left behind would be resolved by ONNX Runtime against whatever folder
    // the model is loaded from.
    let mut left = 0;
    visit_model(model, &mut |t| {
        left += usize::from(is_external(t));
        Ok(())
    })?;
    if left > 0 {
        return Err(ExternalDataError::Invalid(format!(
            "{left} external tensor reference(s) remain after inlining"
        )));
    }
    Ok(count)
}

#[cfg(feature = "quantizer")]
/// Checks, before any tensor is read, that the bytes the external tensors of `model` would
/// inline in total are no more than their data files hold (distinct files counted once)
/// and at most [`MAX_INLINED_FACTOR_OF_PROTOBUF_LIMIT`] × 2 GiB.
fn check_total(model: &ModelProto, model_dir: &Path) -> Result<(), ExternalDataError> {
    let mut sizes = std::collections::BTreeMap::new();
    let mut total = 0u64;
    visit_model(model, &mut |t| {
        if is_external(t) {
            let location = Location::of(t)?;
            let file = location.file(model_dir)?;
            let size = match sizes.get(&file) {
                Some(&size) => size,
                None => {
                    let (_, size) = location.checked_file(model_dir)?;
                    sizes.insert(file, size);
                    size
                }
            };
            let length = location
                .length
                .unwrap_or(size.saturating_sub(location.offset));
            total = total.saturating_add(length);
        }
        Ok(())
    })?;
    let present: u64 = sizes.values().sum();
    if total > present {
        return Err(ExternalDataError::Invalid(format!(
            "external tensors name {total} bytes in total but their data files hold {present}: \
             tensors share or overlap byte ranges, which is refused so that a small file \
             cannot expand into a large model"
        )));
    }
    let limit = MAX_INLINED_FACTOR_OF_PROTOBUF_LIMIT * i32::MAX as u64;
    if total > limit {
        return Err(ExternalDataError::Invalid(format!(
            "external tensors hold {total} bytes, over {limit}: even with every weight in \
             INT8 the model would exceed protobuf's 2 GB limit for one ONNX file"
        )));
    }
    Ok(())
}

#[cfg(feature = "quantizer")]
/// True when `t` keeps its bytes in an external file.
pub fn is_external(t: &TensorProto) -> bool {
    t.data_location == Some(DataLocation::External as i32) || !t.external_data.is_empty()
}

/// One tensor's `external_data` entries, parsed.
struct Location {
    tensor: String,
    location: String,
    offset: u64,
    length: Option<u64>,
}

impl Location {
    /// The location of the tensor `t` of a decoded model.
    #[cfg(feature = "quantizer")]
    fn of(t: &TensorProto) -> Result<Self, ExternalDataError> {
        Self::parse(
            t.name(),
            (t.external_data.iter()).map(|entry| (entry.key(), entry.value())),
        )
    }

    /// The location of the tensor `name` with the `external_data` entries (key, value)
    /// `entries`.
    fn parse<'a>(
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
    fn file(&self, model_dir: &Path) -> Result<PathBuf, ExternalDataError> {
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
    fn checked_file(&self, model_dir: &Path) -> Result<(PathBuf, u64), ExternalDataError> {
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

    #[cfg(feature = "quantizer")]
    fn read(&self, model_dir: &Path) -> Result<Vec<u8>, ExternalDataError> {
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

#[cfg(feature = "quantizer")]
type Visit<'a> = dyn FnMut(&TensorProto) -> Result<(), ExternalDataError> + 'a;
#[cfg(feature = "quantizer")]
type VisitMut<'a> = dyn FnMut(&mut TensorProto) -> Result<(), ExternalDataError> + 'a;

#[cfg(feature = "quantizer")]
/// Defines the walks over every tensor of a model (see the module documentation), once for
/// shared and once for mutable access: the same code with and without `mut`.
macro_rules! tensor_walks {
    ($model:ident, $graph:ident, $attrs:ident, $sparse:ident, $visit:ident $(, $m:tt)?) => {
        /// Every tensor of `model`, in a fixed order.
        fn $model(model: &$($m)? ModelProto, f: &mut $visit<'_>) -> Result<(), ExternalDataError> {
            if let Some(g) = &$($m)? model.graph {
                $graph(g, f)?;
            }
            for func in &$($m)? model.functions {
                $attrs(&$($m)? func.attribute_proto, f)?;
                for n in &$($m)? func.node {
                    $attrs(&$($m)? n.attribute, f)?;
                }
            }
            for info in &$($m)? model.training_info {
                for g in (&$($m)? info.initialization).into_iter().chain(&$($m)? info.algorithm) {
                    $graph(g, f)?;
                }
            }
            Ok(())
        }

        /// Every tensor of `g` and its subgraphs.
        fn $graph(g: &$($m)? GraphProto, f: &mut $visit<'_>) -> Result<(), ExternalDataError> {
            for t in &$($m)? g.initializer {
                f(t)?;
            }
            for s in &$($m)? g.sparse_initializer {
                $sparse(s, f)?;
            }
            for n in &$($m)? g.node {
                $attrs(&$($m)? n.attribute, f)?;
            }
            Ok(())
        }

        /// Every tensor of `attrs`: tensor and sparse-tensor values, and their subgraphs.
        fn $attrs(attrs: &$($m)? [AttributeProto], f: &mut $visit<'_>) -> Result<(), ExternalDataError> {
            for a in attrs {
                for t in (&$($m)? a.t).into_iter().chain(&$($m)? a.tensors) {
                    f(t)?;
                }
                for s in (&$($m)? a.sparse_tensor).into_iter().chain(&$($m)? a.sparse_tensors) {
                    $sparse(s, f)?;
                }
                for sub in (&$($m)? a.g).into_iter().chain(&$($m)? a.graphs) {
                    $graph(sub, f)?;
                }
            }
            Ok(())
        }

        /// The `values` and `indices` tensors of a sparse tensor.
        fn $sparse(s: &$($m)? SparseTensorProto, f: &mut $visit<'_>) -> Result<(), ExternalDataError> {
            for t in (&$($m)? s.values).into_iter().chain(&$($m)? s.indices) {
                f(t)?;
            }
            Ok(())
        }
    };
}

/// The names of the external tensors of `model`, in walk order: what the front end's reader
/// ([`super::outline`]) must find too.
#[cfg(all(test, feature = "quantizer"))]
pub(crate) fn external_names(model: &ModelProto) -> Vec<String> {
    let mut names = Vec::new();
    let walked = visit_model(model, &mut |t| {
        if is_external(t) {
            names.push(t.name().to_owned());
        }
        Ok(())
    });
    assert!(walked.is_ok(), "the walk itself never fails");
    names
}

#[cfg(feature = "quantizer")]
tensor_walks!(visit_model, visit_graph, visit_attrs, visit_sparse, Visit);
#[cfg(feature = "quantizer")]
tensor_walks!(
    visit_model_mut,
    visit_graph_mut,
    visit_attrs_mut,
    visit_sparse_mut,
    VisitMut,
    mut
);
