//! Hashes the quantizer's sources into `KENOSIS_SOURCE_HASH`, which enters every cache key and
//! the quantizer binary's identity: a changed quantizer (a git or path dependency between
//! releases, or development) must not be served artifacts the previous one made, nor run as
//! the quantizer of these sources. The sources are this crate's and, where it sits beside
//! this one (a checkout, a git dependency), `kenosis-numerics`'s, which holds the
//! quantizer's numeric kernels; a registry release depends on its exact version instead.

use std::path::Path;

/// Folds every file under `dir` into `hasher`: its path relative to `root`, then its bytes.
fn hash_dir(root: &Path, dir: &Path, hasher: &mut blake3::Hasher) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("the quantizer's sources are readable")
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            hash_dir(root, &path, hasher);
        } else {
            hasher.update(
                path.strip_prefix(root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .as_bytes(),
            );
            hasher.update(&std::fs::read(&path).expect("a quantizer source file is readable"));
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=src");
    let mut hasher = blake3::Hasher::new();
    hash_dir(Path::new(""), Path::new("src"), &mut hasher);
    let numerics = Path::new("../kenosis-numerics");
    if numerics.join("src").is_dir() {
        println!("cargo:rerun-if-changed=../kenosis-numerics/src");
        hash_dir(Path::new(".."), &numerics.join("src"), &mut hasher);
    }
    println!(
        "cargo:rustc-env=KENOSIS_SOURCE_HASH={}",
        hasher.finalize().to_hex()
    );
}
