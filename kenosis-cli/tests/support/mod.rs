//! Running the `kenosis` binary from the integration tests, shared by each test file (each
//! uses part of it).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
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

/// A package `reported` under `dir`, built as a build script builds it: `kenosis_build::Config`
/// quantized the tiny Conv fixture into the `OUT_DIR` layout cargo gives a build script under
/// the target folder `dir/target`.
pub struct Reported {
    /// The package's folder.
    pub krate: PathBuf,
    /// Its target folder.
    pub target: PathBuf,
    /// Its build script's `OUT_DIR`.
    pub out_dir: PathBuf,
}

impl Reported {
    /// Writes and builds the package under `dir`.
    pub fn build(dir: &Path) -> Reported {
        let krate = dir.join("reported");
        std::fs::create_dir_all(krate.join("src")).expect("mkdir");
        std::fs::create_dir_all(krate.join("models")).expect("mkdir");
        std::fs::write(
            krate.join("Cargo.toml"),
            "[package]\nname = \"reported\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
        )
        .expect("write");
        std::fs::write(krate.join("src/lib.rs"), "").expect("write");
        let tiny = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/tiny/tiny_conv.onnx"
        );
        std::fs::copy(tiny, krate.join("models/tiny.onnx")).expect("copy");
        let target = dir.join("target");
        let out_dir = target.join("debug/build/reported-0123456789abcdef/out");
        kenosis_build::Config::new()
            .manifest_dir(&krate)
            .out_dir(&out_dir)
            .cache_dir(dir.join("cache"))
            .target("x86_64-unknown-linux-gnu")
            .fp32_where_faster(false)
            .model("models/tiny.onnx")
            .compile()
            .expect("builds");
        Reported {
            krate,
            target,
            out_dir,
        }
    }

    /// `kenosis report` of the package, with `args` after `report`, its target folder
    /// `target` (`CARGO_TARGET_DIR`).
    pub fn report(&self, args: &[&str], target: &Path) -> Output {
        Command::new(env!("CARGO_BIN_EXE_kenosis"))
            .arg("report")
            .args(args)
            .arg("--manifest-path")
            .arg(self.krate.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", target)
            .output()
            .expect("kenosis runs")
    }
}
