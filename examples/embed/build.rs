//! Quantizes paraphrase-MiniLM-L3-v2 to INT8 at build time.
//!
//! 1. Each line of `data/calibration.txt` is tokenized by `src/tokenize.rs` (the code
//!    `main.rs` runs at inference) and written as one calibration sample: `input_ids` and
//!    `attention_mask`, i64 `[1, tokens]`, one subfolder per model input in `$OUT_DIR/calib`.
//! 2. `kenosis_build::discover()` finds the `include_quantized!` call in `src/main.rs`, whose
//!    `calibration = "$OUT_DIR/calib"` names that folder, and quantizes the model.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use ndarray_npy::WriteNpyExt;

#[path = "src/tokenize.rs"]
mod tokenize;

const MODEL: &str = "models/paraphrase-MiniLM-L3-v2.onnx";
const SENTENCES: &str = "data/calibration.txt";

fn main() {
    if !Path::new(MODEL).is_file() {
        panic!(
            "embed: {MODEL} is missing. The model (69 MB) is not in the repository: copy \
             paraphrase-MiniLM-L3-v2.onnx into models/ (`cargo xtask test` fetches it into \
             target/kenosis-models; see README.md)"
        );
    }
    let out_dir = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    if let Err(err) = write_calibration(&Path::new(&out_dir).join("calib")) {
        panic!("embed: preparing calibration data failed: {err:#}");
    }
    kenosis_build::discover().expect("kenosis: quantization failed");
}

/// One sample per non-empty line of [`SENTENCES`]: `calib/input_ids/NNN.npy` and
/// `calib/attention_mask/NNN.npy`, written only when their bytes change.
fn write_calibration(calib: &Path) -> Result<()> {
    println!("cargo:rerun-if-changed={SENTENCES}");
    let text =
        std::fs::read_to_string(SENTENCES).with_context(|| format!("reading {SENTENCES}"))?;
    let tokenizer = tokenize::tokenizer().map_err(anyhow::Error::msg)?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    ensure!(!lines.is_empty(), "{SENTENCES} has no sentences");
    for (n, line) in lines.iter().enumerate() {
        let (ids, mask) = tokenize::encode(&tokenizer, line).map_err(anyhow::Error::msg)?;
        for (input, tensor) in [("input_ids", ids), ("attention_mask", mask)] {
            let dir = calib.join(input);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let mut npy = Vec::new();
            tensor.write_npy(&mut npy)?;
            let path = dir.join(format!("{n:03}.npy"));
            if std::fs::read(&path).ok().as_deref() != Some(npy.as_slice()) {
                std::fs::write(&path, &npy)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    // Samples of lines since removed must not linger in the calibration set.
    for input in ["input_ids", "attention_mask"] {
        let dir = calib.join(input);
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            let index = path
                .file_stem()
                .and_then(|s| s.to_str()?.parse::<usize>().ok());
            if index.is_none_or(|i| i >= lines.len()) {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
        }
    }
    Ok(())
}
