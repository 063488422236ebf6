//! A folder of images → a folder of `.npy` calibration tensors, through the user's own
//! preprocessing function (see [`calibration_images`]).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Display;
use std::path::Path;

use ndarray::{Array, Dimension};

use crate::error::{Error, Result};

pub use kenosis_request::model_files::IMAGE_EXTENSIONS;

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
    let files = kenosis_request::model_files::image_files(images)?;
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

/// The preprocessing function of `spec` at `size`, to pass to [`calibration_images`]: each
/// image's bytes through [`preprocess_image`]. `size` is `spec.size` when the spec gives
/// one, else the model's input height and width.
///
/// ```no_run
/// // build.rs, with kenosis-build's `image-preprocess` feature
/// let spec: kenosis_build::preprocess::ImagePreprocess =
///     "rgb,nchw,224x224,crop=0.875,mean=0.485:0.456:0.406,std=0.229:0.224:0.225"
///         .parse()
///         .expect("a preprocessing spec");
/// let size = spec.size.expect("the spec gives the size");
/// let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("calib");
/// kenosis_build::calibration_images(
///     "calib-images",
///     &out,
///     kenosis_build::image_preprocessor(&spec, size),
/// )
/// .expect("kenosis: preparing calibration data failed");
/// ```
#[cfg(feature = "image-preprocess")]
pub fn image_preprocessor(
    spec: &kenosis_options::preprocess::ImagePreprocess,
    size: kenosis_options::preprocess::Size,
) -> impl FnMut(&[u8]) -> std::result::Result<ndarray::Array3<f32>, kenosis_request::images::ImageError>
{
    let spec = spec.clone();
    move |bytes| preprocess_image(bytes, &spec, size)
}

#[cfg(feature = "image-preprocess")]
pub use kenosis_request::images::preprocess_image;

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

    /// A `w` x `h` JPEG whose left half is black and right half white.
    #[cfg(feature = "image-preprocess")]
    fn half_white_jpeg(w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbImage::from_fn(w, h, |x, _| {
            image::Rgb(if x < w / 2 {
                [0, 0, 0]
            } else {
                [255, 255, 255]
            })
        });
        let mut bytes = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 100)
            .encode_image(&img)
            .unwrap();
        bytes
    }

    #[cfg(feature = "image-preprocess")]
    #[test]
    fn a_spec_decodes_resizes_and_normalizes() {
        use kenosis_options::preprocess::{ImagePreprocess, Size};

        let size = Size {
            width: 8,
            height: 8,
        };
        let jpeg = half_white_jpeg(32, 16);
        // Stretched: black left, white right, (x - 127) / 128 in NCHW.
        let spec: ImagePreprocess = "rgb,nchw,mean=127,std=128".parse().unwrap();
        let x = preprocess_image(&jpeg, &spec, size).unwrap();
        assert_eq!(x.shape(), [3, 8, 8]);
        assert!((x[[0, 4, 0]] - (-127.0 / 128.0)).abs() < 0.05, "{x}");
        assert!((x[[2, 4, 7]] - (128.0 / 128.0)).abs() < 0.05, "{x}");
        // Letterboxed: the 2:1 image fills the middle 8x4 rows, pad 0 above and below.
        let spec: ImagePreprocess = "nhwc,letterbox=0".parse().unwrap();
        let x = preprocess_image(&jpeg, &spec, size).unwrap();
        assert_eq!(x.shape(), [8, 8, 3]);
        assert_eq!(x[[0, 7, 1]], 0.0);
        assert!(x[[4, 7, 1]] > 240.0, "{x}");
        // At the top left: rows 0 to 3 hold the image, 4 to 7 the pad.
        let spec: ImagePreprocess = "nhwc,letterbox=0:topleft".parse().unwrap();
        let x = preprocess_image(&jpeg, &spec, size).unwrap();
        assert!(x[[0, 7, 1]] > 240.0, "{x}");
        assert_eq!(x[[7, 7, 1]], 0.0);
        // Centre-cropped: the middle of a 2:1 image, half black half white still.
        let spec: ImagePreprocess = "crop,scale=1/255".parse().unwrap();
        let x = preprocess_image(&jpeg, &spec, size).unwrap();
        assert!(x[[1, 4, 0]] < 0.05 && x[[1, 4, 7]] > 0.95, "{x}");
        // crop=0.5: the middle half of that (8 x 8 of the 16 x 16 centre), all white on the
        // right of the centre line, black on the left.
        let spec: ImagePreprocess = "crop=0.5,scale=1/255".parse().unwrap();
        let x = preprocess_image(&jpeg, &spec, size).unwrap();
        assert!(x[[0, 0, 0]] < 0.05 && x[[0, 7, 7]] > 0.95, "{x}");
        // A 2000 x 1 strip cropped: a 1-pixel-high centre cut, stretched, not a 448000-wide
        // image.
        let strip = image::RgbImage::from_pixel(2000, 1, image::Rgb([9, 9, 9]));
        let mut bytes = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 100)
            .encode_image(&strip)
            .unwrap();
        let spec: ImagePreprocess = "crop".parse().unwrap();
        let x = preprocess_image(&bytes, &spec, size).unwrap();
        assert_eq!(x.shape(), [3, 8, 8]);
        assert!((x[[0, 7, 7]] - 9.0).abs() < 2.0, "{x}");
        // Not an image: the decoder's error.
        assert!(preprocess_image(b"not an image", &spec, size).is_err());
    }

    /// PNG is lossless: a bgr spec reads each pixel exactly, in the model's channel order.
    #[cfg(feature = "image-preprocess")]
    #[test]
    fn a_png_decodes_exactly() {
        use kenosis_options::preprocess::{ImagePreprocess, Size};

        let img = image::RgbImage::from_fn(4, 2, |x, y| image::Rgb([x as u8 * 60, y as u8, 7]));
        let mut png = Vec::new();
        img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        let spec: ImagePreprocess = "bgr,nchw,mean=1,std=2".parse().unwrap();
        let size = Size {
            width: 4,
            height: 2,
        };
        let x = preprocess_image(&png, &spec, size).unwrap();
        for (xx, yy) in [(0, 0), (3, 1), (2, 0)] {
            let p = img.get_pixel(xx as u32, yy as u32);
            for (c, rgb) in [(0, 2), (1, 1), (2, 0)] {
                let want = (f32::from(p[rgb]) - 1.0) / 2.0;
                assert_eq!(x[[c, yy, xx]], want, "channel {c} at ({xx}, {yy})");
            }
        }
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
