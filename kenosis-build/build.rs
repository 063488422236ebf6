//! Hashes this crate's own sources into `KENOSIS_SOURCE_HASH`, which enters every cache key:
//! a changed quantizer (a git or path dependency between releases, or development) must not
//! be served artifacts the previous one made.
//!
//! `kenosis-numerics` (the quantizer's numeric kernels) is not hashed: the front end does not
//! depend on it, so where its sources lie depends on the layout (a sibling folder in a
//! checkout, absent from a registry front end), and a hash that differed by layout made the
//! front end refuse a quantizer built from the same sources. It is pinned to this crate's
//! exact version; a change to it between releases also changes a file under `src` here or
//! leaves cached artifacts to be cleared by hand (`KENOSIS_CACHE_DIR`, the target folder).

use std::path::Path;

fn hash_dir(dir: &Path, hasher: &mut blake3::Hasher) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("kenosis-build sources are readable")
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            hash_dir(&path, hasher);
        } else {
            hasher.update(
                path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .as_bytes(),
            );
            hasher.update(&std::fs::read(&path).expect("kenosis-build source file is readable"));
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=src");
    let mut hasher = blake3::Hasher::new();
    hash_dir(Path::new("src"), &mut hasher);
    println!(
        "cargo:rustc-env=KENOSIS_SOURCE_HASH={}",
        hasher.finalize().to_hex()
    );
}
