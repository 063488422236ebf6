//! Quantizes EfficientNet-Lite0 to INT8 at build time.
//!
//! 1. `kenosis_build::calibration_images` runs every JPEG in `calib-images/` through
//!    `src/preprocess.rs` (the code `main.rs` runs at inference) and writes the f32
//!    `[3, 224, 224]` tensors to `$OUT_DIR/calib`.
//! 2. `kenosis_build::discover()` finds the `include_quantized!` call in `src/main.rs`, whose
//!    `calibration = "$OUT_DIR/calib"` names that folder, calibrates the model on those
//!    tensors, quantizes it to INT8 QDQ and records it for the macro. No model is named here.

#[path = "src/preprocess.rs"]
mod preprocess;

fn main() {
    let out_dir = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    let calib = std::path::Path::new(&out_dir).join("calib");
    kenosis_build::calibration_images("calib-images", &calib, preprocess::preprocess)
        .expect("classify: preparing calibration data failed");
    kenosis_build::discover().expect("kenosis: quantization failed");
}
