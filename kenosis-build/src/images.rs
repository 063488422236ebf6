//! A folder of images → a folder of `.npy` calibration tensors, through the user's own
//! preprocessing function (see [`calibration_images`]).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use ndarray::{Array, Dimension};

use crate::error::{Error, Result};

/// File extensions (compared case-insensitively) that [`calibration_images`] reads as images.
pub const IMAGE_EXTENSIONS: &[&str] = &[
    "jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "pnm", "ppm", "pgm", "qoi", "avif",
    "tga",
];

/// Writes one calibration sample per image of `images` into `out`, as
/// [`Config::calibration_npy_dir`](crate::Config::calibration_npy_dir) and a call site's
/// `calibration = "..."` read them.
///
/// Every regular file of `images` whose extension is one of [`IMAGE_EXTENSIONS`] (not
/// recursing into subfolders; other files are ignored) is read and passed, as its raw
/// bytes, to `preprocess`, which decodes it and returns the model input for it: an f32
/// array shaped like the model's input, with or without its batch dimension (e.g.
/// `[3, 224, 224]` for an input `[N, 3, 224, 224]`). Pass the same function the program
/// applies at run time, so that calibration sees exactly the numbers inference sees.
///
/// The sample of `photo.jpg` goes to `out/photo.jpg.npy` (created with its parent folders).
/// A file is written only when its bytes change, so an unchanged rebuild leaves the
/// calibration data, and so the quantization cache key, as it was; `.npy` files in `out`
/// whose image is gone are removed, so `out` should hold nothing else. Images are read in
/// sorted order. Relative paths are resolved against the current directory, which for a
/// build script is the crate root. Prints `cargo:rerun-if-changed` for `images`, so the
/// build script re-runs when an image is added, changed or removed.
///
/// Returns the number of samples written (or left unchanged).
///
/// ```no_run
/// // build.rs, with `image` and `ndarray` as build-dependencies
/// use ndarray::Array3;
///
/// /// JPEG bytes → RGB, `[3, 224, 224]`, scaled to [0, 1]: what main.rs does too.
/// fn preprocess(bytes: &[u8]) -> Result<Array3<f32>, image::ImageError> {
///     let rgb = image::load_from_memory(bytes)?
///         .resize_exact(224, 224, image::imageops::FilterType::Triangle)
///         .to_rgb8();
///     Ok(Array3::from_shape_fn((3, 224, 224), |(c, y, x)| {
///         f32::from(rgb.get_pixel(x as u32, y as u32)[c]) / 255.0
///     }))
/// }
///
/// fn main() {
///     let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("calib");
///     kenosis_build::calibration_images("calib-images", &out, preprocess)
///         .expect("kenosis: preparing calibration data failed");
///     kenosis_build::Config::new()
///         .model("models/net.onnx")
///         .calibration_npy_dir(&out)
///         .compile()
///         .expect("kenosis: quantization failed");
/// }
/// ```
///
/// # Errors
/// [`Error::Io`] naming the folder or file that could not be listed, read, written or
/// removed; [`Error::UnsafePath`] when `images` holds a line break; [`Error::Calibration`]
/// naming the image `preprocess` failed on (with its message), an image path that is not a
/// regular file, or `images` when it holds no image.
pub fn calibration_images<D, E>(
    images: impl AsRef<Path>,
    out: impl AsRef<Path>,
    mut preprocess: impl FnMut(&[u8]) -> std::result::Result<Array<f32, D>, E>,
) -> Result<usize>
where
    D: Dimension,
    E: Display,
{
    let (images, out) = (images.as_ref(), out.as_ref());
    crate::cargo::rerun_if_changed(images)?;
    let files = image_files(images)?;
    if files.is_empty() {
        return Err(Error::Calibration {
            path: images.to_owned(),
            reason: format!(
                "no images (files ending in .{}) in this folder",
                IMAGE_EXTENSIONS.join(", .")
            ),
        });
    }
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;

    let mut wanted = BTreeSet::new();
    for file in &files {
        let bytes = std::fs::read(file).map_err(|e| Error::io(file, e))?;
        let tensor = preprocess(&bytes).map_err(|e| Error::Calibration {
            path: file.clone(),
            reason: format!("preprocessing failed: {e}"),
        })?;
        let npy = npy_f32(&tensor);
        let mut name = file.file_name().map(OsString::from).unwrap_or_default();
        name.push(".npy");
        let target = out.join(&name);
        if std::fs::read(&target).ok().as_deref() != Some(npy.as_slice()) {
            crate::cache::write_atomic(&target, &npy)?;
        }
        wanted.insert(name);
    }

    // An image removed from `images` must not linger in the calibration set.
    for entry in std::fs::read_dir(out).map_err(|e| Error::io(out, e))? {
        let path = entry.map_err(|e| Error::io(out, e))?.path();
        let stale = path.extension().is_some_and(|x| x == "npy")
            && !path.file_name().is_some_and(|n| wanted.contains(n));
        if stale {
            std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(files.len())
}

/// `tensor` as an `.npy` file (format version 1.0: little-endian float32, C order), laid
/// out as NumPy's `np.save` writes it: the magic string, the header length, a Python dict
/// literal padded with spaces and a line feed so that the data starts on a 64-byte
/// boundary, then the elements in logical order. Source: NumPy's NEP 1, "A Simple File
/// Format for NumPy Arrays".
fn npy_f32<D: Dimension>(tensor: &Array<f32, D>) -> Vec<u8> {
    const MAGIC: &[u8] = b"\x93NUMPY\x01\x00";
    let dims: Vec<String> = tensor.shape().iter().map(usize::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = MAGIC.len() + 2 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut npy = Vec::with_capacity(MAGIC.len() + 2 + header.len() + 4 * tensor.len());
    npy.extend_from_slice(MAGIC);
    // A header of a few dims is far below the 64 KiB version 1.0 allows.
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    for value in tensor.iter() {
        npy.extend_from_slice(&value.to_le_bytes());
    }
    npy
}

/// The image files directly in `dir` (by [`IMAGE_EXTENSIONS`]), sorted.
fn image_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        let is_image = path.extension().is_some_and(|x| {
            IMAGE_EXTENSIONS
                .iter()
                .any(|known| x.eq_ignore_ascii_case(known))
        });
        if !is_image {
            continue;
        }
        let meta = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
        if meta.is_dir() {
            continue;
        }
        if !meta.is_file() {
            // Reading a FIFO or a device would hang or never end.
            return Err(Error::Calibration {
                path,
                reason: "not a regular file (a FIFO, device or socket)".into(),
            });
        }
        files.push(path);
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array1, Array3};

    /// A stand-in decoder: the file's bytes as a `[1, 1, len]` tensor; fails on `bad`.
    fn bytes_as_tensor(bytes: &[u8]) -> std::result::Result<Array3<f32>, String> {
        if bytes == b"bad" {
            return Err("not an image".into());
        }
        Array1::from_iter(bytes.iter().map(|&b| f32::from(b)))
            .into_shape_with_order((1, 1, bytes.len()))
            .map_err(|e| e.to_string())
    }

    fn npy_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_one_sample_per_image_and_removes_stale_ones() {
        let images = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let calib = out.path().join("calib");
        std::fs::write(images.path().join("b.JPG"), [1u8, 2, 3]).unwrap();
        std::fs::write(images.path().join("a.png"), [4u8, 5]).unwrap();
        std::fs::write(images.path().join("notes.txt"), b"bad").unwrap();
        std::fs::create_dir(images.path().join("sub.jpg")).unwrap();

        let n = calibration_images(images.path(), &calib, bytes_as_tensor).unwrap();
        assert_eq!(n, 2);
        assert_eq!(npy_names(&calib), ["a.png.npy", "b.JPG.npy"]);
        let bytes = std::fs::read(calib.join("b.JPG.npy")).unwrap();
        let read = <ndarray::ArrayD<f32> as ndarray_npy::ReadNpyExt>::read_npy(&bytes[..]).unwrap();
        assert_eq!(read.shape(), [1, 1, 3]);
        assert_eq!(read.iter().copied().collect::<Vec<_>>(), [1.0, 2.0, 3.0]);

        // An unchanged image leaves its file untouched; a removed one loses its sample.
        let before = std::fs::metadata(calib.join("b.JPG.npy"))
            .unwrap()
            .modified()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::remove_file(images.path().join("a.png")).unwrap();
        assert_eq!(
            calibration_images(images.path(), &calib, bytes_as_tensor).unwrap(),
            1
        );
        assert_eq!(npy_names(&calib), ["b.JPG.npy"]);
        let after = std::fs::metadata(calib.join("b.JPG.npy"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(before, after);
    }

    #[test]
    fn errors_name_the_file() {
        let images = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let err = calibration_images(images.path(), out.path(), bytes_as_tensor).unwrap_err();
        assert!(
            matches!(&err, Error::Calibration { path, .. } if path == images.path()),
            "{err}"
        );
        assert!(err.to_string().contains("no images"), "{err}");

        std::fs::write(images.path().join("ok.jpg"), [1u8]).unwrap();
        std::fs::write(images.path().join("broken.jpeg"), b"bad").unwrap();
        let err = calibration_images(images.path(), out.path(), bytes_as_tensor).unwrap_err();
        let broken = images.path().join("broken.jpeg");
        assert!(
            matches!(&err, Error::Calibration { path, .. } if *path == broken),
            "{err}"
        );
        assert!(err.to_string().contains("not an image"), "{err}");

        let missing = images.path().join("missing");
        let err = calibration_images(&missing, out.path(), bytes_as_tensor).unwrap_err();
        assert!(
            matches!(&err, Error::Io { path, .. } if *path == missing),
            "{err}"
        );
    }
}
