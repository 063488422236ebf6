//! The artifact cache shared by every profile of a target directory.
//!
//! Entries are `<key>.onnx` (the INT8 model) and `<key>.json` (its report, whose [`ReportHead`] records
//! the artifact's own BLAKE3 hash). Both are written to a temporary file in the cache folder
//! and renamed into place, the report last, so a reader sees either a complete entry or none;
//! a damaged artifact fails the hash check on read and is rebuilt.
//!
//! The hash check proves an entry is whole, not that Kenosis wrote it: keys are computed from
//! public inputs, so anyone who can write the folder can plant an entry under the right key.
//! A cache opened with a secret ([`Cache::authenticated`], `KENOSIS_CACHE_KEY` for
//! `kenosis_build::Config`) also writes `<key>.mac`, a keyed BLAKE3 hash of the cache key, the
//! artifact and the report; [`Cache::get`] then returns only entries whose MAC verifies,
//! so that a writer without the secret cannot forge one (see `docs/cache-trust.md`).
//!
//! Builds of one key are serialized by an advisory lock on `<key>.lock`
//! ([`Cache::lock`]), so that concurrent builds of one model quantize it once. Temporary
//! files a killed build left behind are removed by [`Cache::open`] once they are
//! [`ORPHAN_AGE`] old.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::request::ReportHead;

/// Environment variable holding the secret that authenticates cache entries (any non-empty
/// string; a CI secret). See [`Cache::authenticated`].
pub const CACHE_KEY_ENV: &str = "KENOSIS_CACHE_KEY";

/// Prefix of the temporary files [`write_atomic`] creates before renaming them into place.
pub const TEMP_PREFIX: &str = ".kenosis-tmp-";

/// Age after which a temporary file in the cache folder is taken to be a killed build's
/// orphan and removed by [`Cache::open`]. A live write finishes in far less.
pub const ORPHAN_AGE: Duration = Duration::from_secs(60 * 60);

/// BLAKE3 `derive_key` context for the MAC key (fixed, per the BLAKE3 spec's advice).
const MAC_CONTEXT: &str = "kenosis 2026 cache entry MAC v1";

/// Bumped whenever the quantizer's output for the same inputs changes, to invalidate caches.
const CACHE_FORMAT: u32 = 1;

/// Computes cache keys: BLAKE3 over everything that determines an artifact.
#[derive(Debug)]
pub struct KeyHasher(blake3::Hasher);

/// The ONNX Runtime that calibrates, as far as the key can tell without loading it: the `ort`
/// crate kenosis-quantize is built with (pinned in the workspace's `Cargo.toml`) and the ONNX Runtime API
/// version that crate requires. Keep in step with that dependency. A cache hit then needs no
/// ONNX Runtime call; a different build of the same ONNX Runtime minor version is not told
/// apart (change `KENOSIS_CACHE_DIR` to rebuild with it).
pub const ORT_IDENTITY: &str = "ort 2.0.0-rc.15, ONNX Runtime API 1.31";

impl Default for KeyHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyHasher {
    /// A hasher seeded with the tool identity: cache format, version, the hash of the
    /// quantizer's sources (this crate's, kenosis-quantize's and kenosis-numerics', see
    /// `build.rs` and [`crate::IDENTITY`]), and [`ORT_IDENTITY`].
    pub fn new() -> Self {
        let mut h = blake3::Hasher::new();
        h.update(&CACHE_FORMAT.to_le_bytes());
        Self::field(&mut h, env!("CARGO_PKG_VERSION").as_bytes());
        Self::field(&mut h, env!("KENOSIS_SOURCE_HASH").as_bytes());
        Self::field(&mut h, ORT_IDENTITY.as_bytes());
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

    /// Adds the bytes of the file at `path`, streamed (never held in memory whole).
    ///
    /// # Errors
    /// [`Error::Io`] naming `path` when it cannot be read.
    pub fn add_file(&mut self, path: &Path) -> Result<&mut Self> {
        let io = |e| Error::io(path, e);
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        self.0.update(&len.to_le_bytes());
        // At most the length announced above, so that the field boundary holds.
        let mut reader = std::io::Read::take(file, len);
        let read = std::io::copy(&mut reader, &mut self.0).map_err(io)?;
        if read != len {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("changed while being read ({read} of {len} bytes)"),
            )));
        }
        Ok(self)
    }

    /// The key, as 64 hex digits.
    pub fn finish(&self) -> String {
        self.0.finalize().to_hex().to_string()
    }
}

/// A cache folder.
#[derive(Clone)]
pub struct Cache {
    dir: PathBuf,
    /// The key entries are authenticated with, derived from the secret.
    mac_key: Option<[u8; 32]>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("dir", &self.dir)
            .field("authenticated", &self.mac_key.is_some())
            .finish()
    }
}

/// An exclusive lock on one cache key, held until dropped (see [`Cache::lock`]).
#[derive(Debug)]
pub struct KeyLock {
    _file: std::fs::File,
}

impl Cache {
    /// Opens (creating if needed) the cache at `dir`, and removes the temporary files a
    /// killed build left there (those of [`TEMP_PREFIX`], last modified [`ORPHAN_AGE`] ago or
    /// earlier). Entries are not authenticated:
    /// see [`Cache::authenticated`].
    ///
    /// # Errors
    /// [`Error::Io`] when the folder cannot be created or is not writable.
    pub fn open(dir: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        // Probe writability now, so the error names the cache folder, not a temp file.
        let (probe, _) = create_temp(&dir).map_err(|e| Error::io(&dir, e))?;
        let _ = std::fs::remove_file(probe);
        remove_orphans(&dir, ORPHAN_AGE);
        Ok(Self { dir, mac_key: None })
    }

    /// This cache with entries authenticated by `secret` (a CI secret, at least 16 bytes
    /// recommended): [`Cache::put`] writes `<key>.mac`, a keyed BLAKE3 hash (key derived from
    /// `secret`) over the cache key, the artifact bytes and the report bytes, and
    /// [`Cache::get`] ignores every entry whose MAC is missing or wrong, so it is rebuilt.
    pub fn authenticated(mut self, secret: &[u8]) -> Self {
        self.mac_key = Some(blake3::derive_key(MAC_CONTEXT, secret));
        self
    }

    /// Whether entries are authenticated (see [`Cache::authenticated`]).
    pub fn is_authenticated(&self) -> bool {
        self.mac_key.is_some()
    }

    /// The cache folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A path in the cache folder for a file the quantizer writes for `key` before it enters
    /// the cache (`ext`: its extension), named with [`TEMP_PREFIX`] and this process's id, so
    /// that a killed build's leftover is removed as an orphan.
    pub fn scratch_path(&self, key: &str, ext: &str) -> PathBuf {
        let id = std::process::id();
        self.dir.join(format!("{TEMP_PREFIX}{key}-{id}.{ext}"))
    }

    fn paths(&self, key: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{key}.onnx")),
            self.dir.join(format!("{key}.json")),
        )
    }

    fn mac_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.mac"))
    }

    fn mac(mac_key: &[u8; 32], key: &str, artifact: &[u8], report: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(mac_key);
        for field in [key.as_bytes(), artifact, report] {
            h.update(&(field.len() as u64).to_le_bytes());
            h.update(field);
        }
        h.finalize()
    }

    /// Blocks until this process holds the lock of `key` (`<key>.lock`, an advisory
    /// `flock`-style lock from the standard library), so that of several builds of one key
    /// one quantizes while the others wait and then find its entry. Released when the
    /// returned guard is dropped, or when the process dies.
    ///
    /// The file is opened read-only (a lock needs no write access, so users sharing a cache
    /// folder can lock each other's lock files), without following a link (`O_NOFOLLOW`) and
    /// without blocking (`O_NONBLOCK`: opening a FIFO for reading would wait for a writer),
    /// and must be a regular file.
    ///
    /// # Errors
    /// [`Error::Io`] naming the lock file when it cannot be created, opened or locked, is a
    /// link, or is not a regular file.
    pub fn lock(&self, key: &str) -> Result<KeyLock> {
        let path = self.dir.join(format!("{key}.lock"));
        let io = |e| Error::io(&path, e);
        let file = open_lock_file(&path).map_err(io)?;
        if !file.metadata().map_err(io)?.is_file() {
            return Err(io(std::io::Error::other(
                "not a regular file (a FIFO, device or socket); remove it",
            )));
        }
        file.lock().map_err(io)?;
        Ok(KeyLock { _file: file })
    }

    /// The artifact bytes and report for `key`, if a complete and intact entry exists (and,
    /// for an authenticated cache, its MAC verifies). Entry files that are not regular
    /// files (links to devices, FIFOs) or are larger than protobuf's 2 GiB limit are
    /// ignored, never read.
    ///
    /// In an authenticated cache the MAC is checked before the report is parsed, so that a
    /// writer without the secret never has its JSON read.
    pub fn get(&self, key: &str) -> Option<(Vec<u8>, Vec<u8>)> {
        self.lookup(key).ok()
    }

    /// [`Cache::get`], saying which check an entry failed first.
    fn lookup(&self, key: &str) -> std::result::Result<(Vec<u8>, Vec<u8>), Miss> {
        let (model, report_path) = self.paths(key);
        let report_bytes = read_bounded(&report_path, MAX_REPORT_BYTES).ok_or(Miss::Unreadable)?;
        let bytes = read_bounded(&model, MAX_ARTIFACT_BYTES).ok_or(Miss::Unreadable)?;
        if let Some(mac_key) = &self.mac_key {
            let stored = read_bounded(&self.mac_path(key), 128).ok_or(Miss::Mac)?;
            let stored = std::str::from_utf8(&stored)
                .ok()
                .and_then(|text| blake3::Hash::from_hex(text.trim()).ok())
                .ok_or(Miss::Mac)?;
            // `blake3::Hash` compares in constant time.
            if Self::mac(mac_key, key, &bytes, &report_bytes) != stored {
                return Err(Miss::Mac);
            }
        }
        let report = ReportHead::parse(&report_bytes).ok_or(Miss::Report)?;
        if blake3::hash(&bytes).to_hex().as_str() != report.artifact_blake3 {
            return Err(Miss::Hash);
        }
        Ok((bytes, report_bytes))
    }

    /// Stores an entry atomically (the MAC of an authenticated cache last, so that a reader
    /// never verifies a MAC against a half-replaced entry).
    ///
    /// # Errors
    /// [`Error::Io`] when writing or renaming fails.
    pub fn put(&self, key: &str, bytes: &[u8], report_bytes: &[u8]) -> Result<()> {
        let (model, report_path) = self.paths(key);
        write_atomic(&model, bytes)?;
        write_atomic(&report_path, report_bytes)?;
        if let Some(mac_key) = &self.mac_key {
            let mac = Self::mac(mac_key, key, bytes, report_bytes);
            write_atomic(&self.mac_path(key), mac.to_hex().as_bytes())?;
        }
        Ok(())
    }
}

/// Why [`Cache::lookup`] found no usable entry: the first check that failed.
#[derive(Debug, PartialEq, Eq)]
enum Miss {
    /// A file is missing, not a regular file, or too large.
    Unreadable,
    /// The MAC is missing, malformed or wrong (authenticated caches only).
    Mac,
    /// The report does not parse.
    Report,
    /// The artifact's BLAKE3 differs from the report's.
    Hash,
}

/// Largest artifact [`Cache::get`] reads: protobuf's limit for one message.
const MAX_ARTIFACT_BYTES: u64 = i32::MAX as u64;
/// Largest report [`Cache::get`] reads.
const MAX_REPORT_BYTES: u64 = 64 << 20;

/// The bytes of `path` when it is a regular file (symlinks followed) of at most `limit`
/// bytes; `None` otherwise or on any error.
fn read_bounded(path: &Path, limit: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    // Checked before opening too: opening a FIFO for reading blocks until a writer comes.
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > limit {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
    // `take`: the file may grow after the size check.
    file.take(limit + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= limit).then_some(bytes)
}

/// Removes the temporary files in `dir` (names starting with [`TEMP_PREFIX`], which only
/// Kenosis writes) last modified `age` ago or earlier. Best effort: errors are ignored. Returns how many
/// were removed.
pub fn remove_orphans(dir: &Path, age: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with(TEMP_PREFIX) {
            continue;
        }
        // `DirEntry::metadata` does not follow symlinks: only plain files are removed.
        let old = entry
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .is_some_and(|m| {
                m.modified()
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|elapsed| elapsed >= age)
            });
        if old && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Opens (creating if needed) the lock file at `path` read-only, without following a link
/// and without blocking (see [`Cache::lock`]).
#[cfg(unix)]
fn open_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    // `O_CREAT` through the custom flags: the standard library's `create` asks for write
    // access, which a lock does not need.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .mode(0o644)
        .open(path)
}

/// Opens (creating if needed) the lock file at `path` (see [`Cache::lock`]).
#[cfg(not(unix))]
fn open_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// Writes `bytes` to `path` through a temporary file (see `create_temp`) in the same
/// folder and a rename, so that a reader sees the old file or the new one, never part of it.
///
/// # Errors
/// [`Error::Io`] naming `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let io = |e: std::io::Error| Error::io(path, e);
    let (tmp, mut file) = create_temp(dir).map_err(io)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(io)
}

/// Creates a new, empty temporary file in `dir`: [`TEMP_PREFIX`], this process's id and a
/// counter, opened with `create_new` (`O_EXCL`: never an existing file or a link), the next
/// counter value when a name is taken. The prefix is the one [`Cache::scratch_path`]'s names
/// start with too, so that [`remove_orphans`] removes a killed build's leftovers of both.
///
/// Written here rather than with the `tempfile` crate, which would be compiled into every
/// downstream build for this one function (see docs/design.md, "Build cost").
///
/// # Errors
/// The error of creating the file, other than a name already taken.
fn create_temp(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = std::process::id();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{TEMP_PREFIX}{id}-{n}"));
        match std::fs::File::create_new(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_every_field_and_its_boundaries() {
        let key = |parts: &[&[u8]]| {
            let mut h = KeyHasher::new();
            for p in parts {
                h.add(p);
            }
            h.finish()
        };
        assert_eq!(key(&[b"ab", b"c"]), key(&[b"ab", b"c"]));
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_ne!(key(&[b"ab"]), key(&[b"ac"]));
    }

    #[test]
    fn an_atomic_write_replaces_the_file_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("entry.json");
        // A stale temporary file of this process's name scheme does not stop the write.
        let stale = dir
            .path()
            .join(format!("{TEMP_PREFIX}{}-0", std::process::id()));
        std::fs::write(&stale, b"stale").expect("write");
        write_atomic(&file, b"first").expect("first write");
        write_atomic(&file, b"second, longer").expect("second write");
        assert_eq!(std::fs::read(&file).expect("read"), b"second, longer");
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                stale.file_name().expect("name"),
                file.file_name().expect("name")
            ]
        );
        // A folder that does not exist is an error naming the file.
        let missing = dir.path().join("no/such/entry.json");
        let err = write_atomic(&missing, b"x").expect_err("no folder");
        assert!(
            matches!(err, Error::Io { ref path, .. } if path == &missing),
            "{err:?}"
        );
    }

    #[test]
    fn orphaned_temporary_files_are_removed_once_old_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, age_secs: u64| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"partial").expect("write");
            let when = std::time::SystemTime::now() - Duration::from_secs(age_secs);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("open")
                .set_modified(when)
                .expect("set mtime");
            path
        };
        let old_ours = file(".kenosis-tmp-a1b2c3", 2 * 3600);
        let old_other = file(".tmpXYZ123", 2 * 3600);
        let fresh = file(".kenosis-tmp-d4e5f6", 10);
        let entry = file("0123.onnx", 2 * 3600);
        Cache::open(dir.path().to_owned()).expect("cache");
        assert!(!old_ours.exists(), "Kenosis's orphan removed");
        assert!(
            old_other.exists(),
            "another program's temporary file is left alone"
        );
        assert!(fresh.exists(), "a write in progress is left alone");
        assert!(entry.exists(), "entries are not temporary files");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 3, "opening left no file of its own: {names:?}");
    }

    #[cfg(unix)]
    #[test]
    fn lock_files_are_opened_read_only_and_never_through_links_or_fifos() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::open(dir.path().to_owned()).expect("cache");
        // Another user's lock file: readable, not writable by this process.
        let theirs = dir.path().join("shared.lock");
        std::fs::write(&theirs, b"").expect("write");
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        drop(
            cache
                .lock("shared")
                .expect("a read-only lock file is locked"),
        );
        // A link is not followed, even to a regular file.
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"").expect("write");
        std::os::unix::fs::symlink(&target, dir.path().join("link.lock")).expect("symlink");
        let err = cache.lock("link").expect_err("a link is refused");
        assert!(err.to_string().contains("link.lock"), "{err}");
        // A FIFO is refused at once, not waited on.
        let fifo = dir.path().join("fifo.lock");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
        let err = cache.lock("fifo").expect_err("a FIFO is refused");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn an_authenticated_entry_is_verified_before_its_report_is_parsed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::open(dir.path().to_owned())
            .expect("cache")
            .authenticated(b"secret");
        // A report that does not parse: under a wrong MAC it is never parsed; under the
        // right one the parse is what fails.
        std::fs::write(dir.path().join("k.onnx"), b"model").expect("write");
        std::fs::write(dir.path().join("k.json"), b"{not json").expect("write");
        let wrong = blake3::hash(b"forged");
        std::fs::write(dir.path().join("k.mac"), wrong.to_hex().as_bytes()).expect("write");
        assert_eq!(cache.lookup("k").err(), Some(Miss::Mac));
        let mac_key = cache.mac_key.expect("key");
        let mac = Cache::mac(&mac_key, "k", b"model", b"{not json");
        std::fs::write(dir.path().join("k.mac"), mac.to_hex().as_bytes()).expect("write");
        assert_eq!(cache.lookup("k").err(), Some(Miss::Report));
    }

    #[cfg(unix)]
    #[test]
    fn entry_files_that_are_devices_or_fifos_are_never_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::open(dir.path().to_owned()).expect("cache");
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("k.json")).expect("symlink");
        assert!(cache.get("k").is_none());
        let fifo = dir.path().join("f.json");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
        // Opening a FIFO for reading blocks until a writer comes: a hang, were it opened.
        let (tx, rx) = std::sync::mpsc::channel();
        let c = cache.clone();
        std::thread::spawn(move || tx.send(c.get("f").is_none()).expect("send"));
        let result = rx.recv_timeout(Duration::from_secs(10));
        if result.is_err() {
            // Unblock the reader so the test process can exit.
            let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
        }
        assert_eq!(result, Ok(true), "a FIFO entry must be skipped, not opened");
    }
}
