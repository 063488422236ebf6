//! The files a model's build reads besides the model itself: tensors in external data files,
//! and calibration samples (`.npy` files, images, text). The front end hashes exactly these
//! into the cache key and watches them; the quantizer reads exactly these.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::onnx::{self, outline::Outline};

/// The folder external data locations of the model at `path` are relative to.
pub fn model_dir(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// The data files the model at `path` (its [`Outline`]) keeps tensors in (see
/// [`onnx::external`]); empty for a self-contained model. They are build inputs: the cache key
/// covers their bytes.
///
/// # Errors
/// [`Error::InvalidModel`] when a tensor's data location is malformed or leaves the
/// model's folder; [`Error::UnsafePath`] when it holds a line break.
pub fn external_files(path: &Path, model: &Outline) -> Result<Vec<std::path::PathBuf>> {
    onnx::external::files(&model.external, model_dir(path)).map_err(|e| external_error(path, e))
}

/// The build error for an external data error `e` of the model at `path`.
pub fn external_error(path: &Path, e: onnx::external::ExternalDataError) -> Error {
    match e {
        onnx::external::ExternalDataError::Invalid(reason) => Error::InvalidModel {
            path: path.to_owned(),
            reason,
        },
        onnx::external::ExternalDataError::Io(file, source) => Error::Io { path: file, source },
        onnx::external::ExternalDataError::LineBreak(file) => Error::UnsafePath { path: file },
    }
}

/// The `.npy` files calibration reads for `inputs` (graph input names, in order): every
/// `*.npy` directly in `dir` for a single-input model, `dir/<input name>/*.npy` for a
/// multi-input model; one sorted list per input. The build hashes exactly these files into
/// the cache key, and `calibrate::data::load_npy_dir` reads exactly these.
///
/// Input names come from the model, which may be hostile: a name that is absolute or holds
/// `.` or `..` components is refused, and so is every folder or file whose resolved path
/// (links followed) lies outside the resolved `dir`. A `.npy` that is not a regular file
/// once links are followed (a FIFO, a link to `/dev/zero`) is refused before it is opened:
/// reading it would hang or never end.
///
/// # Errors
/// [`Error::Calibration`] naming the folder or file for a model without inputs, an input
/// name that cannot name a subfolder, a folder with no `.npy` file, a file that is not
/// regular, or a folder or file outside `dir`; [`Error::Io`] when a folder cannot be
/// listed or resolved.
pub fn npy_files(dir: &Path, inputs: &[&str]) -> Result<Vec<Vec<PathBuf>>> {
    let bad = |path: &Path, reason: String| Error::Calibration {
        path: path.to_owned(),
        reason,
    };
    if inputs.is_empty() {
        return Err(bad(
            dir,
            "the model has no inputs besides its initializers, so there is nothing to \
             calibrate with these files; remove the calibration folder"
                .into(),
        ));
    }
    let root = dir.canonicalize().map_err(|e| Error::io(dir, e))?;
    let inside = |path: &Path| -> Result<()> {
        let real = path.canonicalize().map_err(|e| Error::io(path, e))?;
        if real.starts_with(&root) {
            Ok(())
        } else {
            Err(bad(
                path,
                format!(
                    "resolves to {}, outside the calibration folder {}",
                    real.display(),
                    root.display()
                ),
            ))
        }
    };
    let mut per_input = Vec::with_capacity(inputs.len());
    for &name in inputs {
        let folder = if inputs.len() == 1 {
            dir.to_owned()
        } else {
            let rel = Path::new(name);
            let plain = rel
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            if !plain || name.is_empty() {
                return Err(bad(
                    dir,
                    format!(
                        "input `{name}` cannot name a subfolder of the calibration folder \
                         (an absolute path, or `.` or `..` components); rename the model input"
                    ),
                ));
            }
            dir.join(rel)
        };
        inside(&folder)?;
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&folder).map_err(|e| Error::io(&folder, e))? {
            let path = entry.map_err(|e| Error::io(&folder, e))?.path();
            if path.extension().is_none_or(|x| x != "npy") || path.is_dir() {
                continue;
            }
            if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                return Err(bad(
                    &path,
                    "not a regular file (a FIFO, device, socket or broken link)".into(),
                ));
            }
            inside(&path)?;
            files.push(path);
        }
        files.sort();
        if files.is_empty() {
            return Err(bad(&folder, format!("no .npy files for input `{name}`")));
        }
        per_input.push(files);
    }
    Ok(per_input)
}

/// File extensions (compared case-insensitively) read as images: by
/// `kenosis_build::calibration_images`, a call site's `calibration_images` and the `kenosis`
/// command's `--images`.
pub const IMAGE_EXTENSIONS: &[&str] = &[
    "jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "pnm", "ppm", "pgm", "qoi", "avif",
    "tga",
];

/// The image files directly in `dir` (by [`IMAGE_EXTENSIONS`]; subfolders and other files
/// are skipped), sorted by path.
///
/// # Errors
/// [`Error::Io`] when `dir` cannot be listed; [`Error::Calibration`] naming a file with an
/// image extension that is not a regular file (a FIFO or device: reading it would hang), or
/// `dir` when it holds no image.
pub fn image_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let files = regular_files(dir, |path| {
        path.extension().is_some_and(|x| {
            IMAGE_EXTENSIONS
                .iter()
                .any(|known| x.eq_ignore_ascii_case(known))
        })
    })?;
    if files.is_empty() {
        return Err(Error::Calibration {
            path: dir.to_owned(),
            reason: format!(
                "no images (files ending in .{}) in this folder",
                IMAGE_EXTENSIONS.join(", .")
            ),
        });
    }
    Ok(files)
}

/// The text files a text sample source names: `path` itself when it is a file, else every
/// file directly in the folder `path` (subfolders are skipped), sorted by path.
///
/// # Errors
/// [`Error::Io`] when `path` cannot be read or listed; [`Error::Calibration`] naming a file
/// that is not a regular file, or `path` when the folder holds no file.
pub fn text_files(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_file() {
        return Ok(vec![path.to_owned()]);
    }
    let files = regular_files(path, |_| true)?;
    if files.is_empty() {
        return Err(Error::Calibration {
            path: path.to_owned(),
            reason: "no text files in this folder".into(),
        });
    }
    Ok(files)
}

/// The entries directly in `dir` that `wanted` accepts, folders skipped, sorted; an accepted
/// entry that is not a regular file once links are followed is an error.
fn regular_files(dir: &Path, wanted: impl Fn(&Path) -> bool) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if !wanted(&path) || path.is_dir() {
            continue;
        }
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            return Err(Error::Calibration {
                path,
                reason: "not a regular file (a FIFO, device, socket or broken link)".into(),
            });
        }
        files.push(path);
    }
    files.sort();
    Ok(files)
}
