//! Arbitrary bytes as a model with external data, through Kenosis's first stage (decode, read
//! the front end's outline, list and check the data files, read them in, normalize; see
//! `kenosis_quantize::pipeline::normalize_decoded`): any panic, hang or allocation failure is a
//! bug, and so is a file read from outside the model's folder. Run with `cargo xtask fuzz`.
//!
//! Input layout: a little-endian `u32` model length, the model's bytes, then the bytes of
//! `weights.bin`, written beside the model in a folder of this process (the seeds are the
//! hostile corpus's models, `kenosis-build/tests/hostile/`, most of which name that file).
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// The model's folder: `<temp>/kenosis-fuzz-external-<pid>/model`. Its sibling `outside.bin`
/// must never be read; the check is that it is never opened with its content.
fn folder() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("kenosis-fuzz-external-{}", std::process::id()));
        let dir = root.join("model");
        std::fs::create_dir_all(&dir).expect("fuzz folder");
        std::fs::write(root.join("outside.bin"), OUTSIDE).expect("outside file");
        dir
    })
}

/// What the file outside the model's folder holds: bytes no tensor may carry after inlining
/// unless the input itself holds them.
const OUTSIDE: &[u8] = b"KENOSIS-OUTSIDE-THE-MODEL-FOLDER";

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let len = (u32::from_le_bytes(*len) as usize).min(rest.len());
    let (model_bytes, weights) = rest.split_at(len);
    let dir = folder();
    let path = dir.join("model.onnx");
    std::fs::write(dir.join("weights.bin"), weights).expect("weights");
    let Ok(model) = kenosis_quantize::onnx::decode(&path, model_bytes) else {
        return;
    };
    // The front end's reading of the same bytes (it lists the files the cache key hashes).
    let Ok(outline) = kenosis_quantize::onnx::outline::read(&path, model_bytes) else {
        return;
    };
    if kenosis_quantize::pipeline::external_files(&path, &outline).is_err() {
        return;
    }
    let holds_marker = |bytes: &[u8]| bytes.windows(OUTSIDE.len()).any(|w| w == OUTSIDE);
    if let Ok(normalized) = kenosis_quantize::pipeline::normalize_decoded(&path, model) {
        // The fuzzer learns the marker from this comparison and may write it into the
        // input itself; only bytes that came from elsewhere count.
        if !holds_marker(data) {
            assert!(
                !holds_marker(&prost::Message::encode_to_vec(normalized.model())),
                "a file outside the model's folder was read in"
            );
        }
    }
});
