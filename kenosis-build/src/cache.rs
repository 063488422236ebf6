//! The artifact cache shared by every profile of a target directory.
//!
//! Entries are `<key>.onnx` (the INT8 model) and `<key>.json` (its [`Report`], which records
//! the artifact's own BLAKE3 hash). Both are written to a temporary file in the cache folder
//! and renamed into place, the report last, so a reader sees either a complete entry or none;
//! a damaged artifact fails the hash check on read and is rebuilt.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::report::Report;

/// Bumped whenever the quantizer's output for the same inputs changes, to invalidate caches.
const CACHE_FORMAT: u32 = 1;

/// Computes cache keys: BLAKE3 over everything that determines an artifact.
#[derive(Debug)]
pub struct KeyHasher(blake3::Hasher);

impl KeyHasher {
    /// A hasher seeded with the tool identity: cache format, kenosis-build version and source
    /// hash, and the ONNX Runtime build that calibrates.
    pub fn new(ort_build: &str) -> Self {
        let mut h = blake3::Hasher::new();
        h.update(&CACHE_FORMAT.to_le_bytes());
        Self::field(&mut h, env!("CARGO_PKG_VERSION").as_bytes());
        Self::field(&mut h, env!("KENOSIS_SOURCE_HASH").as_bytes());
        Self::field(&mut h, ort_build.as_bytes());
        Self(h)
    }

    fn field(h: &mut blake3::Hasher, bytes: &[u8]) {
        // Length-prefixed, so that field boundaries cannot shift between inputs.
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }

    /// Adds one input (model bytes, a calibration file's name or bytes, the options).
    pub fn add(&mut self, bytes: &[u8]) -> &mut Self {
        Self::field(&mut self.0, bytes);
        self
    }

    /// The key, as 64 hex digits.
    pub fn finish(&self) -> String {
        self.0.finalize().to_hex().to_string()
    }
}

/// A cache folder.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// Opens (creating if needed) the cache at `dir`.
    ///
    /// # Errors
    /// [`Error::Io`] when the folder cannot be created or is not writable.
    pub fn open(dir: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        // Probe writability now, so the error names the cache folder, not a temp file.
        tempfile::NamedTempFile::new_in(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(Self { dir })
    }

    fn paths(&self, key: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{key}.onnx")),
            self.dir.join(format!("{key}.json")),
        )
    }

    /// The artifact bytes and report for `key`, if a complete and intact entry exists.
    pub fn get(&self, key: &str) -> Option<(Vec<u8>, Report)> {
        let (model, report) = self.paths(key);
        let report: Report = serde_json::from_slice(&std::fs::read(report).ok()?).ok()?;
        let bytes = std::fs::read(model).ok()?;
        (blake3::hash(&bytes).to_hex().as_str() == report.artifact_blake3)
            .then_some((bytes, report))
    }

    /// Stores an entry atomically.
    ///
    /// # Errors
    /// [`Error::Io`] when writing or renaming fails.
    pub fn put(&self, key: &str, bytes: &[u8], report: &Report) -> Result<()> {
        let (model, report_path) = self.paths(key);
        write_atomic(&model, bytes)?;
        write_atomic(
            &report_path,
            &serde_json::to_vec_pretty(report).expect("report serializes"),
        )
    }
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename.
///
/// # Errors
/// [`Error::Io`] naming `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let io = |e: std::io::Error| Error::io(path, e);
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_every_field_and_its_boundaries() {
        let key = |parts: &[&[u8]]| {
            let mut h = KeyHasher::new("ort");
            for p in parts {
                h.add(p);
            }
            h.finish()
        };
        assert_eq!(key(&[b"ab", b"c"]), key(&[b"ab", b"c"]));
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_ne!(key(&[b"ab"]), key(&[b"ac"]));
    }
}
