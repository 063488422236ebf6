//! Hashes the quantizer's sources into `KENOSIS_SOURCE_HASH`, which enters every cache key
//! and names the quantizer a front end accepts ([`IDENTITY`](src/lib.rs)): a changed quantizer
//! (a git or path dependency between releases, or development) must not be served artifacts
//! the previous one made.
//!
//! The sources are this crate's `src` (the request both sides read), `kenosis-quantize`'s
//! and `kenosis-numerics`'s. kenosis-numerics hands its folder over through `links`
//! (`DEP_KENOSIS_NUMERICS_SRC`): this crate depends on it without its kernels, for that only.
//! kenosis-quantize depends on this crate, so its folder is found beside this one
//! (`kenosis-quantize` in a checkout, a git dependency or a vendor folder;
//! `kenosis-quantize-<version>` in an unpacked package). A published package (unpacked from
//! a registry, `.cargo-ok`, or vendored, `.cargo-checksum.json`) is identified by its version
//! alone, which pins every source: the front end of a downstream build has no
//! kenosis-quantize beside it, and must agree with the `kenosis` binary built from the same
//! release, which has. Each file enters with its path relative to its crate, so the hash
//! does not depend on where the crates lie.

use std::path::{Path, PathBuf};

/// Hashes every file under `dir`, in path order, each as its path relative to `root` (with
/// `label` in front) and its bytes.
fn hash_dir(root: &Path, dir: &Path, label: &str, hasher: &mut blake3::Hasher) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| {
            panic!(
                "the quantizer's sources at {} are readable: {e}",
                dir.display()
            )
        })
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            hash_dir(root, &path, label, hasher);
        } else {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            hasher.update(format!("{label}/{}", rel.to_string_lossy()).as_bytes());
            hasher.update(&std::fs::read(&path).unwrap_or_else(|e| {
                panic!("the quantizer's source {} is readable: {e}", path.display())
            }));
        }
    }
}

/// kenosis-quantize's `src` beside this crate, unless this crate is a published package.
fn quantize_sources(manifest_dir: &Path) -> Option<PathBuf> {
    let published = [".cargo-ok", ".cargo-checksum.json"]
        .iter()
        .any(|marker| manifest_dir.join(marker).exists());
    if published {
        return None;
    }
    let parent = manifest_dir.parent()?;
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    [
        "kenosis-quantize".to_owned(),
        format!("kenosis-quantize-{version}"),
    ]
    .iter()
    .map(|name| parent.join(name).join("src"))
    .find(|src| src.is_dir())
}

fn main() {
    println!("cargo:rerun-if-changed=src");
    let mut hasher = blake3::Hasher::new();
    hash_dir(
        Path::new("src"),
        Path::new("src"),
        "kenosis-request/src",
        &mut hasher,
    );
    let numerics = std::env::var("DEP_KENOSIS_NUMERICS_SRC")
        .expect("kenosis-numerics's build script names its source folder");
    println!("cargo:rerun-if-changed={numerics}");
    let numerics = Path::new(&numerics);
    hash_dir(numerics, numerics, "kenosis-numerics/src", &mut hasher);
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    if let Some(quantize) = quantize_sources(&manifest_dir) {
        println!("cargo:rerun-if-changed={}", quantize.display());
        hash_dir(&quantize, &quantize, "kenosis-quantize/src", &mut hasher);
    }
    println!(
        "cargo:rustc-env=KENOSIS_SOURCE_HASH={}",
        hasher.finalize().to_hex()
    );
}
