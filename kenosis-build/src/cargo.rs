//! Everything the build script tells cargo, and every environment variable it reads
//! (each read is reported with `cargo:rerun-if-env-changed`).
//!
//! Every `cargo:` line goes through `directive`, which refuses a value holding a line
//! break: cargo reads build-script output line by line, so a `\n` in a file name would end
//! Kenosis's line and start one of the file's choosing (`cargo:rustc-link-arg=…`). Models are
//! downloaded from strangers; their folders must not be able to write directives.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Prints `cargo:{key}={value}`, the one place that writes to cargo.
///
/// # Errors
/// [`LineBreak`] when `value` holds `\n` or `\r` (nothing is printed).
fn directive(key: &str, value: &str) -> std::result::Result<(), LineBreak> {
    if value.contains(['\n', '\r']) {
        return Err(LineBreak);
    }
    println!("cargo:{key}={value}");
    Ok(())
}

/// A value for a `cargo:` line holds a line break.
#[derive(Debug)]
struct LineBreak;

/// Reads `name`, telling cargo to rerun the build script when it changes.
pub fn env(name: &'static str) -> Option<String> {
    // Kenosis's own variable names hold no line break.
    let _ = directive("rerun-if-env-changed", name);
    std::env::var(name).ok()
}

/// Reads a variable cargo always sets for build scripts (no rerun line needed).
pub fn cargo_env(name: &'static str) -> Result<String> {
    std::env::var(name).map_err(|_| Error::MissingEnv { name })
}

/// `cargo:rerun-if-changed=<path>` (a folder makes cargo watch every file inside it).
///
/// # Errors
/// [`Error::UnsafePath`] naming `path` when it holds `\n` or `\r`, or is not UTF-8 (cargo
/// would watch a lossily converted path, which is another file).
pub fn rerun_if_changed(path: &Path) -> Result<()> {
    check_path(path)?;
    let text = path.to_str().unwrap_or_default();
    directive("rerun-if-changed", text).map_err(|LineBreak| unsafe_path(path))
}

/// Refuses a path that could not be printed in a `cargo:` line as it is (see
/// [`rerun_if_changed`]); also for paths that are read but not printed, such as an external
/// data location, so that one rule holds for every file a model names.
///
/// # Errors
/// [`Error::UnsafePath`] naming `path`.
pub fn check_path(path: &Path) -> Result<()> {
    match path.to_str() {
        Some(text) if !text.contains(['\n', '\r']) => Ok(()),
        _ => Err(unsafe_path(path)),
    }
}

fn unsafe_path(path: &Path) -> Error {
    Error::UnsafePath {
        path: PathBuf::from(path),
    }
}

/// One `cargo:warning=` line. Line breaks would start new, unprefixed lines, so `\n` and `\r`
/// become spaces: a warning can quote node names and paths from the model.
pub fn warning(message: &str) {
    let flat = message.replace(['\n', '\r'], " ");
    // Flattened above: no line break remains.
    let _ = directive("warning", &flat);
}

/// `cargo metadata --no-deps --offline --format-version 1` for the package of `manifest`
/// (a `Cargo.toml`), or the one cargo finds from the current folder: the workspace's
/// packages, without their dependencies, as a [`serde_json::Value`]. Its fields
/// (`packages[].name`, `manifest_path`, `targets[].kind` and `src_path`, `target_directory`)
/// are stable since format version 1; the build script's discovery and `kenosis report`
/// read it, without a crate for the format. Runs `$CARGO`, else `cargo` from `PATH`.
///
/// # Errors
/// [`MetadataFailure`]: cargo cannot be run, fails, or prints something other than JSON.
pub fn metadata(
    manifest: Option<&Path>,
) -> std::result::Result<serde_json::Value, MetadataFailure> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command.args([
        "metadata",
        "--no-deps",
        "--offline",
        "--format-version",
        "1",
    ]);
    if let Some(manifest) = manifest {
        command.arg("--manifest-path").arg(manifest);
    }
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(MetadataFailure::Spawn)?;
    if !output.status.success() {
        return Err(MetadataFailure::Failed {
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    serde_json::from_slice(&output.stdout).map_err(MetadataFailure::Json)
}

/// Why [`metadata`] has no answer.
#[derive(Debug, thiserror::Error)]
pub enum MetadataFailure {
    /// cargo could not be started.
    #[error("could not run cargo: {0}")]
    Spawn(#[source] std::io::Error),
    /// cargo exited with an error.
    #[error("{stderr} ({status})")]
    Failed {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed on stderr, trimmed.
        stderr: String,
    },
    /// Its output is not JSON.
    #[error("unreadable output: {0}")]
    Json(#[source] serde_json::Error),
    /// Its JSON lacks a field every version of the format has.
    #[error("its output has no `{0}`")]
    Missing(&'static str),
}

/// The target directory that `out_dir` lives in: the nearest ancestor holding cargo's
/// `CACHEDIR.TAG`, else the conventional `<target>/<profile>/build/<pkg>/out` layout.
pub fn target_dir_of(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|a| a.join("CACHEDIR.TAG").is_file())
        .or_else(|| out_dir.ancestors().nth(4))
        .unwrap_or(out_dir)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_break_in_a_value_is_refused_before_printing() {
        for value in ["a\nb", "a\rb", "w.bin\ncargo:warning=x", "\r"] {
            assert!(directive("rerun-if-changed", value).is_err(), "{value:?}");
        }
        assert!(directive("rerun-if-changed", "models/a b.onnx").is_ok());
    }

    #[test]
    fn paths_with_line_breaks_are_typed_errors_naming_the_path() {
        let path = Path::new("models/w.bin\ncargo:rustc-link-arg=-x");
        let err = rerun_if_changed(path).expect_err("refused");
        assert!(matches!(&err, Error::UnsafePath { path: p } if p == path));
        assert!(matches!(
            check_path(Path::new("calib/x\r.npy")),
            Err(Error::UnsafePath { .. })
        ));
        assert!(check_path(Path::new("calib/x.npy")).is_ok());
    }
}
