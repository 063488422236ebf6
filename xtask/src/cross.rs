//! Cross-compiling set-up: the tools a target needs on this host, and the `.cargo/config.toml`
//! fragment that gives cargo both ONNX Runtime libraries.
//!
//! `ort-sys` is built twice in a cross build: for the host (under `kenosis-build`, which runs
//! ONNX Runtime in build scripts) and for the target (under `kenosis-runtime`). Both builds
//! read the one `ORT_LIB_PATH`, so the fragment keeps that on the host's library (cargo's
//! `[env]` reaches build scripts) and replaces `ort-sys`'s build script for the target with
//! cargo's links override, `[target.<triple>.onnxruntime]`, which names the target's library.
//! Its extra `dylib` key reaches `kenosis-runtime`'s build script as `DEP_ONNXRUNTIME_DYLIB`,
//! for the `bundled-ort` feature. Links overrides are read from config files (or `--config`),
//! never from `CARGO_TARGET_*` variables, hence a fragment rather than variables.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::ort::{Platform, LIB_FILE, ORT_VERSION};

/// Installs what building for and running on `target` needs on this host, when missing: the
/// Debian C cross compiler (the linker) and `qemu-user` (to run the binary here), with
/// `apt-get`, and the Rust standard library for the target, with `rustup`.
///
/// # Errors
/// When `apt-get` or `rustup` fail or are missing; the message gives the command to run.
pub fn provision(target: &Platform) -> Result<()> {
    host_tools(&[
        (target.cross_gcc, target.cross_gcc_package),
        (target.qemu, "qemu-user"),
    ])?;
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("running `rustup target list --installed`: is rustup installed?")?;
    let has_target = String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|t| t.trim() == target.triple);
    if !has_target {
        eprintln!("xtask: rustup target add {} ...", target.triple);
        if !quiet(Command::new("rustup").args(["target", "add", target.triple])) {
            bail!("`rustup target add {}` failed", target.triple);
        }
    }
    Ok(())
}

/// Installs the Debian package of each `(command, package)` whose command is not on `PATH`,
/// with `apt-get`: the host tools a fresh machine with only Rust and Python may lack (a cross
/// linker, `qemu-user`, `unzip` for the shared model script, a C++ compiler for libFuzzer).
///
/// # Errors
/// When `apt-get` fails or is missing (it needs root); the message gives the command to run.
pub fn host_tools(tools: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&str> = (tools.iter())
        .filter(|(command, _)| !on_path(command))
        .map(|&(_, package)| package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let install = format!("apt-get install -y {}", missing.join(" "));
    eprintln!("xtask: installing {} (Debian) ...", missing.join(", "));
    let ok = quiet(Command::new("apt-get").arg("update"))
        && quiet(
            Command::new("apt-get")
                .args(["install", "-y"])
                .args(&missing),
        );
    if !ok {
        bail!(
            "`{install}` failed; run it (as root, after `apt-get update`) or install the \
             equivalent packages of your system, then run this again"
        );
    }
    Ok(())
}

/// Whether `command` is an executable file on `PATH`.
fn on_path(command: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(command).is_file()))
}

/// Runs `cmd` with its output on stderr (stdout is the fragment's); true when it succeeded.
fn quiet(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .is_ok_and(|s| s.success())
}

/// The `.cargo/config.toml` fragment for building with the host's ONNX Runtime in `host_dir`
/// and, when cross-compiling, `target`'s in `target_dir`.
pub fn config_fragment(host_dir: &Path, target: Option<(&Platform, &Path)>) -> String {
    let mut out = format!(
        "# ONNX Runtime {ORT_VERSION} from PyPI's onnxruntime wheels, for Kenosis \
         (cargo xtask setup-ort).\n\
         [env]\n\
         # The build machine's library: the `kenosis` quantizer links and runs it.\n\
         ORT_LIB_PATH = {}\n\
         ORT_PREFER_DYNAMIC_LINK = \"1\"\n",
        toml_string(host_dir)
    );
    if let Some((platform, dir)) = target {
        let triple = platform.triple;
        // `write!` to a String cannot fail.
        let _ = write!(
            out,
            "\n[target.{triple}]\n\
             linker = \"{}\"\n\
             \n\
             # The device's library: the binary links it, or embeds it with kenosis-runtime's\n\
             # bundled-ort feature (`dylib`). Replaces ort-sys's build script for this target.\n\
             [target.{triple}.onnxruntime]\n\
             rustc-link-search = [{}]\n\
             rustc-link-lib = [\"onnxruntime\"]\n\
             dylib = {}\n",
            platform.cross_gcc,
            toml_string(format!("native={}", dir.display())),
            toml_string(dir.join(LIB_FILE)),
        );
    }
    out
}

/// `s` as a TOML basic string.
fn toml_string(s: impl AsRef<std::ffi::OsStr>) -> String {
    let s = s.as_ref().to_string_lossy();
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cross_fragment_keeps_the_host_library_in_env_and_the_target_one_in_its_table() {
        let aarch64 = Platform::of("aarch64-unknown-linux-gnu").unwrap();
        let text = config_fragment(
            Path::new("/o/x86_64-unknown-linux-gnu"),
            Some((aarch64, Path::new("/o/aarch64-unknown-linux-gnu"))),
        );
        assert!(
            text.contains("ORT_LIB_PATH = \"/o/x86_64-unknown-linux-gnu\"\n"),
            "{text}"
        );
        assert!(
            text.contains("[target.aarch64-unknown-linux-gnu]\nlinker = \"aarch64-linux-gnu-gcc\"")
        );
        assert!(text.contains(
            "rustc-link-search = [\"native=/o/aarch64-unknown-linux-gnu\"]\n\
             rustc-link-lib = [\"onnxruntime\"]\n\
             dylib = \"/o/aarch64-unknown-linux-gnu/libonnxruntime.so.1.31.1\"\n"
        ));
        let native = config_fragment(Path::new("/o/x"), None);
        assert!(!native.contains("[target."), "{native}");
    }

    #[test]
    fn paths_are_escaped_as_toml_strings() {
        assert_eq!(toml_string(r#"/a "b"\c"#), r#""/a \"b\"\\c""#);
        assert_eq!(toml_string("a\nb"), r#""a\u000Ab""#);
    }

    #[test]
    fn targets_without_a_wheel_are_refused_with_what_to_provide() {
        for triple in ["armv7-unknown-linux-gnueabihf", "x86_64-unknown-linux-musl"] {
            let err = Platform::of(triple).unwrap_err().to_string();
            assert!(err.contains(&format!("not for {triple}")), "{err}");
            assert!(
                err.contains(&format!("[target.{triple}.onnxruntime]")),
                "{err}"
            );
        }
    }
}
