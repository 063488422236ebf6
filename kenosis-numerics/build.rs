//! Hands this crate's source folder to the build scripts of its dependents
//! (`DEP_KENOSIS_NUMERICS_SRC`, through `links`): kenosis-build's hashes it into
//! `KENOSIS_SOURCE_HASH`, wherever cargo found this crate (a checkout, the registry, a vendor
//! folder).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let src = std::path::Path::new(&dir).join("src");
    println!("cargo:src={}", src.display());
}
