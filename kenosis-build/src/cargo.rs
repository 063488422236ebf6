//! Everything the build script tells cargo, and every environment variable it reads
//! (each read is reported with `cargo:rerun-if-env-changed`).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Reads `name`, telling cargo to rerun the build script when it changes.
pub fn env(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var(name).ok()
}

/// Reads a variable cargo always sets for build scripts (no rerun line needed).
pub fn cargo_env(name: &'static str) -> Result<String> {
    std::env::var(name).map_err(|_| Error::MissingEnv { name })
}

/// `cargo:rerun-if-changed=<path>` (a folder makes cargo watch every file inside it).
pub fn rerun_if_changed(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

/// One `cargo:warning=` line (newlines would start new, unprefixed lines, so they are
/// flattened).
pub fn warning(message: &str) {
    println!("cargo:warning={}", message.replace('\n', " "));
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
