//! Quantizes EfficientNet-Lite0 to INT8 at build time.
//!
//! 1. Every JPEG in `calib-images/` is preprocessed exactly as `main.rs` does at run time and
//!    written as an f32 `[3, 224, 224]` tensor to `$OUT_DIR/calib/<name>.npy`.
//! 2. `kenosis_build::discover()` finds the `include_quantized!` call in `src/main.rs`, whose
//!    `calibration = "$OUT_DIR/calib"` names that folder, calibrates the model on those
//!    tensors, quantizes it to INT8 QDQ and records it for the macro. No model is named here.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use ndarray_npy::WriteNpyExt;

#[path = "src/preprocess.rs"]
mod preprocess;

const CALIBRATION_IMAGES: &str = "calib-images";

fn main() {
    println!("cargo:rerun-if-changed={CALIBRATION_IMAGES}");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // The call site in src/main.rs says `calibration = "$OUT_DIR/calib"`.
    let calib_dir = out_dir.join("calib");

    if let Err(message) = write_calibration_tensors(Path::new(CALIBRATION_IMAGES), &calib_dir) {
        panic!("classify: preparing calibration data failed: {message}");
    }

    kenosis_build::discover().expect("kenosis: quantization failed");
}

/// Writes one `.npy` per image in `images` to `out`, and removes `.npy` files whose image is
/// gone. A file is only written when its bytes change, so an unchanged rebuild leaves the
/// calibration data (and so kenosis-build's cache key) untouched.
fn write_calibration_tensors(images: &Path, out: &Path) -> Result<(), String> {
    let mut jpegs = Vec::new();
    let entries =
        fs::read_dir(images).map_err(|e| format!("cannot read {}: {e}", images.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", images.display()))?
            .path();
        let is_jpeg = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("jpg") || ext.eq_ignore_ascii_case("jpeg"));
        if is_jpeg {
            jpegs.push(path);
        }
    }
    if jpegs.is_empty() {
        return Err(format!("no .jpg/.jpeg files in {}", images.display()));
    }
    jpegs.sort();

    fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let mut wanted = BTreeSet::new();
    for jpeg in &jpegs {
        let bytes = fs::read(jpeg).map_err(|e| format!("cannot read {}: {e}", jpeg.display()))?;
        let tensor = preprocess::preprocess(&bytes)
            .map_err(|e| format!("cannot decode {}: {e}", jpeg.display()))?;
        let mut npy = Vec::new();
        tensor
            .write_npy(&mut npy)
            .map_err(|e| format!("cannot encode {} as .npy: {e}", jpeg.display()))?;

        let mut name = OsString::from(
            jpeg.file_stem()
                .expect("a file with an extension has a stem"),
        );
        name.push(".npy");
        let target = out.join(&name);
        if fs::read(&target).ok().as_deref() != Some(npy.as_slice()) {
            fs::write(&target, &npy)
                .map_err(|e| format!("cannot write {}: {e}", target.display()))?;
        }
        wanted.insert(name);
    }

    // An image removed from calib-images must not linger in the calibration set.
    for entry in fs::read_dir(out).map_err(|e| format!("cannot read {}: {e}", out.display()))? {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", out.display()))?
            .path();
        let stale = path.extension().is_some_and(|ext| ext == "npy")
            && !path.file_name().is_some_and(|name| wanted.contains(name));
        if stale {
            fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
        }
    }
    Ok(())
}
