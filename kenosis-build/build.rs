//! Hashes the quantizer's own sources into `KENOSIS_SOURCE_HASH`, which enters every cache key
//! and names the quantizer a front end accepts: a changed quantizer (a git or path dependency
//! between releases, or development) must not be served artifacts the previous one made.
//!
//! The sources are this crate's `src` and `kenosis-numerics`'s (the quantizer's numeric
//! kernels), whose folder its build script hands over (`DEP_KENOSIS_NUMERICS_SRC`, through
//! `links`): cargo says where that crate is in every layout (a checkout, the registry, a vendor
//! folder), and the front end, which depends on it without its kernels, hashes the same files
//! as the quantizer. Each file enters with its path relative to its crate, so the hash does
//! not depend on where the crates lie.

use std::path::Path;

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

fn main() {
    println!("cargo:rerun-if-changed=src");
    let mut hasher = blake3::Hasher::new();
    hash_dir(Path::new("src"), Path::new("src"), "src", &mut hasher);
    let numerics = std::env::var("DEP_KENOSIS_NUMERICS_SRC")
        .expect("kenosis-numerics's build script names its source folder");
    println!("cargo:rerun-if-changed={numerics}");
    let numerics = Path::new(&numerics);
    hash_dir(numerics, numerics, "kenosis-numerics/src", &mut hasher);
    println!(
        "cargo:rustc-env=KENOSIS_SOURCE_HASH={}",
        hasher.finalize().to_hex()
    );
}
