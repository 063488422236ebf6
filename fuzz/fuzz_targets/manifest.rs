//! Arbitrary bytes as a `kenosis-manifest.json` (see `kenosis_manifest::Manifest::parse`):
//! any panic is a bug, and a manifest that parses must serialize and parse back unchanged.
//! Run with `cargo xtask fuzz`.
#![no_main]

use std::path::Path;

use kenosis_manifest::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.json");
    let Ok(manifest) = Manifest::parse(data, path) else {
        return;
    };
    // JSON carries UTF-8 strings only, so every parsed path serializes.
    let text = serde_json::to_vec_pretty(&manifest).expect("a parsed manifest serializes");
    let back = Manifest::parse(&text, path).expect("a serialized manifest parses");
    assert_eq!(back, manifest);
});
