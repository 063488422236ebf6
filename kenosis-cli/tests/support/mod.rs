//! Running the `kenosis` binary from the integration tests, shared by each test file (each
//! uses part of it).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// One run of the `kenosis` binary with `args`.
pub fn kenosis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kenosis"))
        .args(args)
        .output()
        .expect("kenosis runs")
}

/// stdout of a run that must succeed.
pub fn ok(args: &[&str]) -> String {
    let out = kenosis(args);
    assert!(
        out.status.success(),
        "kenosis {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// stdout of a run that must succeed, as JSON.
pub fn json(args: &[&str]) -> serde_json::Value {
    let text = ok(args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("kenosis {args:?}: {e}:\n{text}"))
}

/// stderr of a run that must fail.
pub fn fails(args: &[&str]) -> String {
    let out = kenosis(args);
    assert!(!out.status.success(), "kenosis {args:?} succeeded");
    String::from_utf8(out.stderr).expect("UTF-8")
}

/// `path` as an argument.
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}
