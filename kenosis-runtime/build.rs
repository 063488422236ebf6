//! Checks, before anything links, that the ONNX Runtime library the target will use was built
//! for the target, and with the `bundled-ort` feature hands its path to the crate.
//!
//! Where the library comes from, first match wins:
//! 1. `DEP_ONNXRUNTIME_DYLIB`: the `dylib` key of a `[target.<triple>.onnxruntime]` table in
//!    `.cargo/config.toml`. Cargo passes that table's extra keys to the build scripts of
//!    `ort-sys`'s direct dependents; the table also replaces `ort-sys`'s build script for that
//!    target (its `rustc-link-search` / `rustc-link-lib` keys), which is how a cross build
//!    gives the host and the target different libraries.
//! 2. `ORT_LIB_PATH`: the folder `ort-sys` links (`libonnxruntime.so` in it). When cross
//!    compiling this is usually the host's library, which is what the check below catches.
//! 3. Neither: `ort-sys` downloads ONNX Runtime for `TARGET` (needs internet) and links it
//!    statically, and there is nothing to check.
//!
//! With `bundled-ort` the library is compressed here ([`FRAMES`] zstd frames at [`LEVEL`], with
//! checksums) into `OUT_DIR`, unless `bundled-ort-uncompressed` asks for it as it is, and a `cargo:warning`
//! states the size the binary stores.

use std::env;
#[cfg(feature = "bundled-ort")]
use std::fs::File;
#[cfg(feature = "bundled-ort")]
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// ONNX Runtime file names `ORT_LIB_PATH` may hold, most specific first.
const LIB_NAMES: [&str; 3] = [
    "libonnxruntime.so.1",
    "libonnxruntime.so",
    "libonnxruntime.dylib",
];

/// zstd's compression level for the bundled library: 19, the highest before the `--ultra`
/// levels, whose larger windows would cost the device more memory while decompressing.
#[cfg(feature = "bundled-ort")]
const LEVEL: i32 = 19;

/// How many zstd frames the bundled library is cut into: as many threads decompress it on a
/// device (a 4-core board), for 1.4 % more bytes than one frame (measured on the x86-64
/// library, docs/bundled-runtime.md).
#[cfg(feature = "bundled-ort")]
const FRAMES: usize = 4;

fn main() {
    directive("rerun-if-env-changed", "ORT_LIB_PATH");
    directive("rerun-if-env-changed", "DEP_ONNXRUNTIME_DYLIB");
    let target = env::var("TARGET").unwrap_or_default();
    let bundled = env::var_os("CARGO_FEATURE_BUNDLED_ORT").is_some();
    directive("rerun-if-env-changed", "DOCS_RS");
    if env::var_os("DOCS_RS").is_some() {
        // docs.rs builds documentation without ONNX Runtime (`ort-sys` skips linking too):
        // nothing to check, and an empty stand-in for the library `bundled-ort` embeds.
        if bundled {
            let out = env::var_os("OUT_DIR")
                .map(std::path::PathBuf::from)
                .unwrap_or_default();
            let stand_in = out.join("libonnxruntime-docs-only.so");
            if let Err(e) = std::fs::write(&stand_in, []) {
                eprintln!("kenosis-runtime: writing {}: {e}", stand_in.display());
                std::process::exit(1);
            }
            directive(
                "rustc-env",
                &format!("KENOSIS_BUNDLED_ORT={}", stand_in.display()),
            );
        }
        return;
    }
    match library(&target, bundled) {
        Ok(Some(path)) if bundled => bundle(&path),
        Ok(_) => {}
        Err(message) => {
            // `cargo::error` would keep going to the link step and bury this under the
            // linker's own message; a failed build script stops the build here.
            eprintln!("{message}");
            warning(message.lines().next().unwrap_or_default());
            std::process::exit(1);
        }
    }
}

/// Stores `path`, the target's library, for the binary to embed (see [`store`]) and tells
/// rustc where it is; stops the build when it cannot.
#[cfg(feature = "bundled-ort")]
fn bundle(path: &Path) {
    directive("rerun-if-changed", &path.display().to_string());
    let uncompressed = env::var_os("CARGO_FEATURE_BUNDLED_ORT_UNCOMPRESSED").is_some();
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default());
    match store(path, uncompressed, &out) {
        Ok((stored, note)) => {
            directive(
                "rustc-env",
                &format!("KENOSIS_BUNDLED_ORT={}", stored.display()),
            );
            warning(&note);
        }
        Err(message) => {
            eprintln!("{message}");
            warning(&message);
            std::process::exit(1);
        }
    }
}

/// Without `bundled-ort` nothing is embedded (`main` never calls this).
#[cfg(not(feature = "bundled-ort"))]
fn bundle(_: &Path) {}

/// Prints `cargo::{key}={value}`, the one place this script writes to cargo. A value holding
/// a line break (a library path from `ORT_LIB_PATH` or a `dylib` key, say) would end the line
/// and start one of its own choosing, so it stops the build instead.
fn directive(key: &str, value: &str) {
    if value.contains(['\n', '\r']) {
        eprintln!(
            "kenosis-runtime: {value:?} holds a line break, which cannot be passed to cargo \
             (`cargo::{key}`); rename the file or folder"
        );
        std::process::exit(1);
    }
    println!("cargo::{key}={value}");
}

/// One `cargo::warning` line, line breaks turned into spaces.
fn warning(message: &str) {
    directive("warning", &message.replace(['\n', '\r'], " "));
}

/// The file the binary embeds for `library` (the library itself, or its zstd compression in
/// `out`), and the one line that states what the binary stores.
#[cfg(feature = "bundled-ort")]
fn store(library: &Path, uncompressed: bool, out: &Path) -> Result<(PathBuf, String), String> {
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let size = |path: &Path| {
        std::fs::metadata(path)
            .map(|m| m.len())
            .map_err(|e| format!("kenosis-runtime: reading {}: {e}", path.display()))
    };
    let raw = size(library)?;
    if uncompressed {
        let note = format!(
            "kenosis-runtime: bundled-ort stores ONNX Runtime uncompressed: {:.1} MiB              (bundled-ort-uncompressed)",
            mib(raw)
        );
        return Ok((library.to_path_buf(), note));
    }
    let compressed = out.join("libonnxruntime.so.zst");
    compress(library, &compressed).map_err(|e| {
        format!(
            "kenosis-runtime: compressing {} into {}: {e}",
            library.display(),
            compressed.display()
        )
    })?;
    let stored = size(&compressed)?;
    let note = format!(
        "kenosis-runtime: bundled-ort stores ONNX Runtime in {:.1} MiB (zstd level {LEVEL}, \
         {FRAMES} frames; {:.1} MiB once decompressed into memory on first use)",
        mib(stored),
        mib(raw)
    );
    Ok((compressed, note))
}

/// `library` as [`FRAMES`] zstd frames of equal parts, one after the other, each at [`LEVEL`]
/// with its content size and a checksum (compressed in parallel), written to `dest` through
/// a temporary file renamed into place. The device decompresses the frames in parallel.
#[cfg(feature = "bundled-ort")]
fn compress(library: &Path, dest: &Path) -> std::io::Result<()> {
    let bytes = std::fs::read(library)?;
    let part = bytes.len().div_ceil(FRAMES).max(1);
    let frames: Vec<std::io::Result<Vec<u8>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = bytes
            .chunks(part)
            .map(|chunk| scope.spawn(move || frame(chunk)))
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("panicked")))
            })
            .collect()
    });
    let partial = dest.with_extension("zst.partial");
    let mut file = BufWriter::new(File::create(&partial)?);
    for frame in frames {
        file.write_all(&frame?)?;
    }
    file.flush()?;
    drop(file);
    std::fs::rename(&partial, dest)
}

/// `chunk` as one zstd frame at [`LEVEL`], with its content size and a checksum.
#[cfg(feature = "bundled-ort")]
fn frame(chunk: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = zstd::stream::Encoder::new(Vec::new(), LEVEL)?;
    encoder.include_checksum(true)?;
    encoder.set_pledged_src_size(Some(chunk.len() as u64))?;
    encoder.write_all(chunk)?;
    encoder.finish()
}

/// The target's ONNX Runtime library, checked against the target; `None` when `ort-sys`
/// downloads it.
fn library(target: &str, bundled: bool) -> Result<Option<PathBuf>, String> {
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if bundled && !matches!(os.as_str(), "linux" | "android") {
        return Err(format!(
            "kenosis-runtime: the `bundled-ort` feature loads ONNX Runtime from memory with \
             Linux's memfd_create and is not available for {target}; build without it and \
             ship ONNX Runtime's library next to the binary"
        ));
    }
    let (path, origin) = if let Some(dylib) = env::var_os("DEP_ONNXRUNTIME_DYLIB") {
        let origin = format!("the `dylib` key of [target.{target}.onnxruntime]");
        (PathBuf::from(dylib), origin)
    } else if let Some(dir) = env::var_os("ORT_LIB_PATH").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        let Some(path) = LIB_NAMES.iter().map(|n| dir.join(n)).find(|p| p.is_file()) else {
            return Err(format!(
                "kenosis-runtime: ORT_LIB_PATH={} holds no libonnxruntime.so",
                dir.display()
            ));
        };
        (path, "ORT_LIB_PATH".to_owned())
    } else if bundled {
        return Err(format!(
            "kenosis-runtime: the `bundled-ort` feature embeds ONNX Runtime's shared library, \
             but none is configured for {target}: set `dylib = \"/path/to/libonnxruntime.so\"` \
             in a [target.{target}.onnxruntime] table of .cargo/config.toml (`cargo xtask \
             setup-ort --target {target}` in the Kenosis repository prints one), or \
             ORT_LIB_PATH when building for the host. ort's downloaded ONNX Runtime links \
             statically and needs no bundling."
        ));
    } else {
        return Ok(None);
    };
    check(&path).map_err(|problem| {
        format!(
            "kenosis-runtime: the ONNX Runtime library {} (from {origin}) cannot be used for \
             {target}: {problem}.\n{}",
            path.display(),
            remedy(target)
        )
    })?;
    Ok(Some(path))
}

/// Why `path` cannot serve `target`, if it cannot: another architecture, or glibc's C
/// library for a musl target.
fn check(path: &Path) -> Result<(), String> {
    use object::{Object, ObjectSection};

    let bytes = std::fs::read(path).map_err(|e| format!("cannot read it ({e})"))?;
    let file = object::File::parse(&*bytes).map_err(|e| format!("not a shared library ({e})"))?;
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let expected = match arch.as_str() {
        "x86_64" => Some(object::Architecture::X86_64),
        "aarch64" => Some(object::Architecture::Aarch64),
        "arm" => Some(object::Architecture::Arm),
        "x86" => Some(object::Architecture::I386),
        "riscv64" => Some(object::Architecture::Riscv64),
        _ => None,
    };
    if expected.is_some_and(|a| a != file.architecture()) {
        return Err(format!(
            "it is built for {:?}, the target is {arch}",
            file.architecture()
        ));
    }
    let glibc = file
        .section_by_name(".dynstr")
        .and_then(|s| s.data().ok())
        .is_some_and(|strings| strings.split(|&b| b == 0).any(|s| s == b"libc.so.6"));
    if env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|e| e == "musl") && glibc {
        return Err("it links glibc (libc.so.6), the target uses musl".to_owned());
    }
    Ok(())
}

/// What to provide for `target`.
fn remedy(target: &str) -> String {
    let published = ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"];
    let source = if published.contains(&target) {
        format!(
            "PyPI's onnxruntime wheels carry ONNX Runtime for {target}: `cargo xtask setup-ort \
             --target {target}` in the Kenosis repository fetches it and prints these tables \
             filled in"
        )
    } else {
        format!(
            "No ONNX Runtime build for {target} is published on PyPI (wheels exist for \
             x86_64-unknown-linux-gnu and aarch64-unknown-linux-gnu only): build ONNX Runtime \
             for {target} from source"
        )
    };
    format!(
        "{source}. Give cargo the target's library in .cargo/config.toml:\n\n\
         [target.{target}.onnxruntime]\n\
         rustc-link-search = [\"native=/path/to/{target}/lib\"]\n\
         rustc-link-lib = [\"onnxruntime\"]\n\
         dylib = \"/path/to/{target}/lib/libonnxruntime.so\"\n\n\
         (ORT_LIB_PATH stays on the build machine's library, which kenosis-build runs.)"
    )
}
