//! Where the `kenosis` quantizer comes from, and how a build script runs it on a cache miss.
//!
//! The build script links only this crate's front end (discovery, options, the cache key, the
//! cache and the manifest). Quantizing is the `kenosis` binary's job (crate `kenosis-cli`),
//! which is compiled once per machine and version, always optimized, and only when a model
//! must be quantized. Where it comes from, first match wins:
//!
//! 1. `KENOSIS_QUANTIZER=/path/to/kenosis`, as `PROTOC` works for prost-build: it must be
//!    this version ([`IDENTITY`]), or the build fails saying which it is;
//! 2. a `kenosis` on `PATH` of this version (`cargo install kenosis-cli`); one of another
//!    version is passed over, with a warning;
//! 3. otherwise a nested `cargo install` builds it from source into the per-user folder
//!    [`install_root`], once (under a file lock, so that parallel builds wait for one), and
//!    the build says so. The source is the `kenosis-cli` folder beside this crate's when there
//!    is one (a checkout of the repository, or a `cargo vendor` folder that holds it), else
//!    the published crate of this version.
//!
//! No prebuilt binary is ever downloaded. With the `quantizer` feature the quantizer is linked
//! into the build script instead, and none of this runs (see `Config::compile`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::cargo;
use crate::error::{Error, Result};
use crate::request::Request;

pub use kenosis_request::IDENTITY;

/// The variable naming the quantizer binary to run.
pub const QUANTIZER_ENV: &str = "KENOSIS_QUANTIZER";

/// Quantizes `request`'s model: in this process when the quantizer is linked in (feature
/// `quantizer`), else in the `kenosis` binary [`locate`] finds. Returns the summary line.
///
/// # Errors
/// The quantizer's [`Error`] (in process), or [`Error::Quantizer`] with the binary's message;
/// [`Error::QuantizerUnavailable`] when no binary of this version can be had.
pub fn quantize(request: &Request) -> Result<String> {
    #[cfg(feature = "quantizer")]
    {
        kenosis_quantize::serve(request)
    }
    #[cfg(not(feature = "quantizer"))]
    {
        run(&locate()?, request)
    }
}

/// The `kenosis` binary of this version: from [`QUANTIZER_ENV`], `PATH`, or built from source
/// (see the module documentation). Found once per build script run.
///
/// # Errors
/// [`Error::QuantizerUnavailable`] when `KENOSIS_QUANTIZER` names a binary of another version
/// or none, or when the nested build fails (naming its log).
pub fn locate() -> Result<PathBuf> {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(found) = FOUND.get() {
        return Ok(found.clone());
    }
    let found = find_or_build()?;
    Ok(FOUND.get_or_init(|| found).clone())
}

fn find_or_build() -> Result<PathBuf> {
    if let Some(path) = cargo::env(QUANTIZER_ENV) {
        let path = PathBuf::from(path);
        return match identity_of(&path) {
            Some(id) if id == IDENTITY => Ok(path),
            found => Err(unavailable(format!(
                "{QUANTIZER_ENV}={} is {}; install this version (`cargo install kenosis-cli \
                 --version ={}`), point {QUANTIZER_ENV} at it, or unset {QUANTIZER_ENV} to have \
                 the build make one",
                path.display(),
                found.map_or_else(
                    || "not a kenosis binary that runs".into(),
                    |v| format!("kenosis {v}")
                ),
                env!("CARGO_PKG_VERSION"),
            ))),
        };
    }
    if let Some(path) = on_path(&exe_name()) {
        match identity_of(&path) {
            Some(id) if id == IDENTITY => return Ok(path),
            found => cargo::warning(&format!(
                "kenosis: {} is kenosis {}, not this build's {IDENTITY}: passed over",
                path.display(),
                found.as_deref().unwrap_or("(unknown version)")
            )),
        }
    }
    build_from_source()
}

/// Runs `request` in the quantizer at `binary`; returns the summary line it printed.
///
/// # Errors
/// [`Error::Quantizer`] with the quantizer's own message when it fails on the model;
/// [`Error::Io`] when it cannot be started.
pub fn run(binary: &Path, request: &Request) -> Result<String> {
    let json = serde_json::to_vec(request)
        .map_err(|e| Error::Config(format!("the quantizer's request does not serialize: {e}")))?;
    let mut child = Command::new(binary)
        .arg("build-request")
        .env(LIBRARY_PATH_ENV, library_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io(binary, e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&json).map_err(|e| Error::io(binary, e))?;
    }
    let output = child.wait_with_output().map_err(|e| Error::io(binary, e))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let message = stderr.trim().trim_start_matches("kenosis: error: ").trim();
        return Err(Error::Quantizer {
            path: request.model.clone(),
            message: if message.is_empty() {
                format!("{} exited with {}", binary.display(), output.status)
            } else {
                message.to_owned()
            },
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The dynamic loader's search path variable.
const LIBRARY_PATH_ENV: &str = if cfg!(target_os = "macos") {
    "DYLD_LIBRARY_PATH"
} else {
    "LD_LIBRARY_PATH"
};

/// The loader path for the quantizer: `ORT_LIB_PATH` first (an ONNX Runtime linked
/// dynamically, as `setup-ort` sets it up, is found there), then the inherited path.
fn library_path() -> std::ffi::OsString {
    let inherited = std::env::var_os(LIBRARY_PATH_ENV).unwrap_or_default();
    match std::env::var_os("ORT_LIB_PATH") {
        Some(ort) => {
            let parts = [PathBuf::from(ort)]
                .into_iter()
                .chain(std::env::split_paths(&inherited));
            std::env::join_paths(parts).unwrap_or(inherited)
        }
        None => inherited,
    }
}

/// The `kenosis` executable's file name on this platform.
fn exe_name() -> String {
    format!("kenosis{}", std::env::consts::EXE_SUFFIX)
}

/// The first `name` in a `PATH` folder.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// What `binary --version` says after `kenosis `; `None` when it does not run or says
/// something else.
fn identity_of(binary: &Path) -> Option<String> {
    let output = Command::new(binary)
        .arg("--version")
        .env(LIBRARY_PATH_ENV, library_path())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success())
        .then(|| text.trim().strip_prefix("kenosis ").map(str::to_owned))
        .flatten()
}

/// The per-user folder the quantizer of this version, built the way this build would build
/// it, is installed into: `<cache dir>/kenosis/quantizer/<version>-<hash>` (`~/.cache` on
/// Linux), where the hash covers [`IDENTITY`] and what the nested build reads (the ONNX
/// Runtime to link, the `download-ort` feature, the source).
///
/// # Errors
/// [`Error::QuantizerUnavailable`] when the platform has no per-user cache folder.
pub fn install_root() -> Result<PathBuf> {
    let base = dirs::cache_dir().ok_or_else(|| {
        unavailable(format!(
            "no per-user cache folder to build it into (no $HOME?); set {QUANTIZER_ENV}"
        ))
    })?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(IDENTITY.as_bytes());
    for name in ["ORT_LIB_PATH", "ORT_PREFER_DYNAMIC_LINK", "ORT_STRATEGY"] {
        let value = cargo::env(name).unwrap_or_default();
        hasher.update(format!("\n{name}={value}").as_bytes());
    }
    hasher.update(format!("\ndownload-ort={}", cfg!(feature = "download-ort")).as_bytes());
    hasher.update(format!("\nsource={:?}", source_checkout()).as_bytes());
    let hash = hasher.finalize().to_hex();
    Ok(base.join("kenosis").join("quantizer").join(format!(
        "{}-{}",
        env!("CARGO_PKG_VERSION"),
        &hash[..16]
    )))
}

/// The `kenosis-cli` package folder beside this crate's, when it holds this version.
fn source_checkout() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()?
        .join("kenosis-cli");
    let toml = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
    let version = format!("version = \"{}\"", env!("CARGO_PKG_VERSION"));
    (toml.contains("name = \"kenosis-cli\"")
        && (toml.contains(&version) || toml.contains("version.workspace = true")))
    .then_some(dir)
}

/// Builds `kenosis` into [`install_root`] with a nested `cargo install`, unless a build of
/// this version is already there; parallel builds wait for the first on a lock file.
fn build_from_source() -> Result<PathBuf> {
    let root = install_root()?;
    let binary = root.join("bin").join(exe_name());
    if identity_of(&binary).as_deref() == Some(IDENTITY) {
        return Ok(binary);
    }
    std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
    let lock_path = root.join("build.lock");
    let lock = std::fs::File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
    lock.lock().map_err(|e| Error::io(&lock_path, e))?;
    if identity_of(&binary).as_deref() == Some(IDENTITY) {
        return Ok(binary);
    }
    let log_path = root.join("build.log");
    let source = source_checkout();
    cargo::warning(&format!(
        "kenosis: building the quantizer (kenosis {}) from {} into {}, once per machine and \
         version; log: {}. To skip this, `cargo install kenosis-cli --version ={}` or set {QUANTIZER_ENV}",
        env!("CARGO_PKG_VERSION"),
        source.as_ref().map_or_else(|| "crates.io".into(), |d| d.display().to_string()),
        root.display(),
        log_path.display(),
        env!("CARGO_PKG_VERSION"),
    ));
    let log = std::fs::File::create(&log_path).map_err(|e| Error::io(&log_path, e))?;
    let log_err = log.try_clone().map_err(|e| Error::io(&log_path, e))?;
    let mut command = nested_install(&root, source.as_deref());
    let status = command
        .stdout(log)
        .stderr(log_err)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| unavailable(format!("cargo could not be started: {e}")))?;
    let built = identity_of(&binary);
    match (status.success(), built) {
        (true, Some(id)) if id == IDENTITY => {
            // The build folder is several hundred megabytes the installed binary no longer
            // needs; a failure to remove it costs only disk space.
            let _ = std::fs::remove_dir_all(root.join("target"));
            Ok(binary)
        }
        (true, found) => Err(unavailable(format!(
            "the nested build made kenosis {}; see {}",
            found.as_deref().unwrap_or("(a binary that does not run)"),
            log_path.display()
        ))),
        (false, _) => Err(unavailable(format!(
            "the nested `cargo install` failed ({status}); its log: {}",
            log_path.display()
        ))),
    }
}

/// The packages the nested build optimizes, with their opt-level (see [`nested_install`]): the
/// ones the quantizer's per-value loops run in. `kenosis-numerics` holds those of
/// `kenosis-build` (statistics, scale arithmetic, GPTQ), so `kenosis-build` itself, the
/// longest unit, compiles at opt-level 0 with all the other packages (docs/design.md, "The
/// build script and the quantizer"). The `rand` family draws the synthetic calibration
/// inputs in the loop.
const OPTIMIZED_PACKAGES: &[(&str, u8)] = &[
    ("kenosis-numerics", 3),
    ("ndarray", 3),
    ("matrixmultiply", 3),
    ("half", 3),
    ("prost", 3),
    ("bytes", 3),
    ("rand", 3),
    ("rand_core", 3),
    ("rand_chacha", 3),
    ("rand_distr", 3),
    ("ppv-lite86", 3),
];

/// The `cargo install` command that builds `kenosis` into `root`, from `source` (a
/// `kenosis-cli` package folder) or the registry.
///
/// The environment cargo gives a build script is for the outer build and its target:
/// `CARGO_ENCODED_RUSTFLAGS`, `CARGO_BUILD_TARGET`, a clippy wrapper and the like would
/// cross-compile, re-flag or lint the quantizer, which always runs on the host. Those are
/// removed; the jobserver (`CARGO_MAKEFLAGS`), `CARGO_HOME`, the network and registry
/// settings, `RUSTC` and `RUSTC_WRAPPER` are kept. `--offline` is passed when
/// `CARGO_NET_OFFLINE` is set; the user's `.cargo/config.toml` (vendored sources, mirrors)
/// applies, the nested cargo running in the build's package folder.
fn nested_install(root: &Path, source: Option<&Path>) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    // `--locked`: the quantizer's dependencies at the versions its release was tested with
    // (the lock file `cargo package` ships with a binary crate, or the checkout's).
    command
        .arg("install")
        .arg("--locked")
        .arg("--root")
        .arg(root);
    command.arg("--target-dir").arg(root.join("target"));
    match source {
        Some(dir) => command.arg("--path").arg(dir),
        None => command
            .arg("kenosis-cli")
            .arg("--version")
            .arg(format!("={}", env!("CARGO_PKG_VERSION"))),
    };
    // The quantizer's hot loops are `kenosis-numerics`'s and the array, float, protobuf and
    // random number crates': those are optimized, the rest (this crate, ONNX Runtime's
    // bindings, the command line, serde, ...) is compiled at opt-level 0, which makes this
    // build a fraction of a fully optimized one's and quantizes as fast (docs/benchmarks.md,
    // "Build cost").
    for (package, level) in OPTIMIZED_PACKAGES {
        command.arg("--config").arg(format!(
            "profile.release.package.{package}.opt-level={level}"
        ));
    }
    command.arg("--config").arg("profile.release.opt-level=0");
    // `text`: a call site's `calibration_text` is tokenized by the quantizer.
    command
        .arg("--no-default-features")
        .arg("--features")
        .arg("text");
    if cfg!(feature = "download-ort") && std::env::var_os("ORT_LIB_PATH").is_none() {
        command.arg("--features").arg("download-ort");
    }
    if std::env::var("CARGO_NET_OFFLINE").is_ok_and(|v| v == "true" || v == "1") {
        command.arg("--offline");
    }
    if let Ok(dir) = std::env::var("CARGO_MANIFEST_DIR") {
        command.current_dir(dir);
    }
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_outer_build_var) {
            command.env_remove(name);
        }
    }
    command
}

/// Whether `name` is a variable cargo sets for the outer build's script or its target, which
/// the nested build must not see (see [`nested_install`]).
fn is_outer_build_var(name: &str) -> bool {
    const REMOVED: &[&str] = &[
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_ENCODED_RUSTDOCFLAGS",
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_CRATE_NAME",
        "OUT_DIR",
        "TARGET",
        "HOST",
        "PROFILE",
        "OPT_LEVEL",
        "DEBUG",
        "NUM_JOBS",
        "RUSTC_LINKER",
    ];
    const PREFIXES: &[&str] = &[
        "CARGO_CFG_",
        "CARGO_FEATURE_",
        "CARGO_PKG_",
        "CARGO_PROFILE_",
        "CARGO_TARGET_",
        "CARGO_BUILD_",
        "DEP_",
    ];
    REMOVED.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

fn unavailable(reason: String) -> Error {
    Error::QuantizerUnavailable {
        identity: IDENTITY.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nested_build_installs_from_the_source_and_drops_the_outer_target() {
        let command = nested_install(Path::new("/tmp/root"), Some(Path::new("/src/kenosis-cli")));
        let args: Vec<_> = (command.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(&args[..4], ["install", "--locked", "--root", "/tmp/root"]);
        assert!(
            args.windows(2).any(|w| w == ["--path", "/src/kenosis-cli"]),
            "{args:?}"
        );
        let registry = nested_install(Path::new("/tmp/root"), None);
        let args: Vec<_> = (registry.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let version = format!("={}", env!("CARGO_PKG_VERSION"));
        assert!(
            args.windows(3)
                .any(|w| w == ["kenosis-cli", "--version", &version]),
            "{args:?}"
        );
        for outer in [
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_BUILD_TARGET",
            "CARGO_TARGET_DIR",
            "CARGO_CFG_TARGET_ARCH",
            "RUSTC_WORKSPACE_WRAPPER",
            "TARGET",
        ] {
            assert!(is_outer_build_var(outer), "{outer}");
        }
        for kept in [
            "CARGO_HOME",
            "CARGO_MAKEFLAGS",
            "CARGO_NET_OFFLINE",
            "RUSTC",
            "PATH",
        ] {
            assert!(!is_outer_build_var(kept), "{kept}");
        }
    }

    #[test]
    fn the_identity_names_version_and_source() {
        assert!(IDENTITY.starts_with(env!("CARGO_PKG_VERSION")));
    }
}
