//! Reading a model file for the commands: the same checks as a build's.

use std::path::Path;

use kenosis_quantize::model::ModelProto;

use crate::error::{Error, Result};

/// The model at `path`, decoded (see `kenosis_quantize::model::decode`), and its size in
/// bytes.
///
/// # Errors
/// [`Error::Kenosis`] naming the file when it cannot be read or is not an ONNX model.
pub fn read(path: &Path) -> Result<(ModelProto, usize)> {
    let bytes = std::fs::read(path).map_err(|source| kenosis_quantize::Error::Io {
        path: path.to_owned(),
        source,
    })?;
    let model =
        kenosis_quantize::model::decode(path, &bytes).map_err(kenosis_quantize::Error::from)?;
    Ok((model, bytes.len()))
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename, so
/// that a failed write never leaves a half-written file.
///
/// # Errors
/// [`Error::Write`] naming `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| Error::Write {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".kenosis-tmp-")
        .tempfile_in(dir)
        .map_err(io)?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}
