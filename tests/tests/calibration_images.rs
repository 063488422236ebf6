//! `kenosis_build::calibration_images` on real JPEGs (the detect example's calibration
//! images): one `.npy` per image holding exactly what the preprocessing function returned,
//! and a corrupt image reported by name.

use std::path::{Path, PathBuf};

use ndarray::{Array3, ArrayD};
use ndarray_npy::ReadNpyExt;

fn images() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/detect/calib-images")
}

/// A small stand-in for a model's preprocessing: RGB, 32×32, `[3, 32, 32]`, scaled to [0, 1].
fn preprocess(bytes: &[u8]) -> Result<Array3<f32>, image::ImageError> {
    let rgb = image::load_from_memory(bytes)?
        .resize_exact(32, 32, image::imageops::FilterType::Triangle)
        .to_rgb8();
    Ok(Array3::from_shape_fn((3, 32, 32), |(c, y, x)| {
        f32::from(rgb.get_pixel(x as u32, y as u32)[c]) / 255.0
    }))
}

#[test]
fn each_image_becomes_the_tensor_its_preprocessing_returns() {
    let out = tempfile::tempdir().expect("tempdir");
    let count = kenosis_build::calibration_images(images(), out.path(), preprocess)
        .expect("calibration images");
    let mut jpegs: Vec<PathBuf> = std::fs::read_dir(images())
        .expect("images")
        .map(|e| e.expect("entry").path())
        .collect();
    jpegs.sort();
    assert_eq!(count, jpegs.len());
    assert!(count >= 8, "{count} images");
    for jpeg in &jpegs {
        let name = format!("{}.npy", jpeg.file_name().expect("name").to_string_lossy());
        let npy = std::fs::read(out.path().join(&name)).expect("sample written");
        let sample = ArrayD::<f32>::read_npy(&npy[..]).expect("f32 .npy");
        let expected = preprocess(&std::fs::read(jpeg).expect("jpeg")).expect("decodes");
        assert_eq!(sample, expected.into_dyn(), "{name}");
    }
}

#[test]
fn a_corrupt_jpeg_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let jpeg = std::fs::read_dir(images())
        .expect("images")
        .map(|e| e.expect("entry").path())
        .next()
        .expect("an image");
    // A real JPEG without its start-of-image marker.
    let mut bytes = std::fs::read(&jpeg).expect("jpeg");
    bytes[..2].fill(0);
    let broken = dir.path().join("broken.jpg");
    std::fs::write(&broken, &bytes).expect("write");
    let out = dir.path().join("calib");
    let err = kenosis_build::calibration_images(dir.path(), &out, preprocess)
        .expect_err("a corrupt JPEG does not decode");
    assert!(
        matches!(&err, kenosis_build::Error::Calibration { path, .. } if *path == broken),
        "{err}"
    );
    assert!(err.to_string().contains("broken.jpg"), "{err}");
}
