//! The quick start is the README's: its two files appear there verbatim, and the binary runs.

use std::path::Path;

#[test]
fn the_readme_shows_these_files_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../../README.md")).expect("README.md");
    for file in ["build.rs", "src/main.rs"] {
        let text = std::fs::read_to_string(root.join(file)).expect("quick start file");
        let block = format!("```rust\n{text}```\n");
        assert!(
            readme.contains(&block),
            "README.md does not show {file} verbatim"
        );
    }
}

#[test]
fn the_quick_start_classifies() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quickstart"))
        .output()
        .expect("the quick start runs");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let class: usize = stdout
        .trim()
        .strip_prefix("class Some(")
        .and_then(|s| s.strip_suffix(')'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {stdout}"));
    assert!(class < 1000);
}
