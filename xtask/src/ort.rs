//! ONNX Runtime set-up shared by every command.
//!
//! `ort`'s default build downloads ONNX Runtime from its own CDN, which CI and the development
//! machines cannot reach. On Linux we instead take the shared library out of the official
//! `onnxruntime` wheel on PyPI (fetched with `pip download`), unpack it into
//! `<target folder>/ort/<version>/<target triple>/` and link `ort-sys` against it
//! dynamically. PyPI has wheels for the [`PLATFORMS`] only.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The ONNX Runtime release `ort` 2.0.0-rc.15 is built against.
pub const ORT_VERSION: &str = "1.31.1";
/// The versioned file name inside the wheel and in the install directory.
pub const LIB_FILE: &str = "libonnxruntime.so.1.31.1";
/// Where the library sits inside the wheel.
const WHEEL_MEMBER: &str = "onnxruntime/capi/libonnxruntime.so.1.31.1";
/// Names the linker (`-lonnxruntime`) and the dynamic loader (SONAME) look for.
const SYMLINKS: [&str; 2] = ["libonnxruntime.so", "libonnxruntime.so.1"];
/// Variables with which a user points `ort-sys` at their own ONNX Runtime.
const USER_VARS: [&str; 2] = ["ORT_LIB_PATH", "ORT_DYLIB_PATH"];

/// A target for which PyPI's `onnxruntime` wheels carry the shared library.
#[derive(Debug, PartialEq, Eq)]
pub struct Platform {
    /// Rust target triple.
    pub triple: &'static str,
    /// The wheel's platform tag (`pip download --platform`).
    wheel_platform: &'static str,
    /// The Debian package of the C cross compiler that links for this target on another host.
    pub cross_gcc_package: &'static str,
    /// That compiler's command: the linker for cargo.
    pub cross_gcc: &'static str,
    /// The `qemu-user` emulator that runs this target's binaries on another host.
    pub qemu: &'static str,
}

/// Every target PyPI's `onnxruntime` 1.31.1 wheels carry a library for.
pub const PLATFORMS: [Platform; 2] = [
    Platform {
        triple: "x86_64-unknown-linux-gnu",
        wheel_platform: "manylinux_2_28_x86_64",
        cross_gcc_package: "gcc-x86-64-linux-gnu",
        cross_gcc: "x86_64-linux-gnu-gcc",
        qemu: "qemu-x86_64",
    },
    Platform {
        triple: "aarch64-unknown-linux-gnu",
        wheel_platform: "manylinux_2_28_aarch64",
        cross_gcc_package: "gcc-aarch64-linux-gnu",
        cross_gcc: "aarch64-linux-gnu-gcc",
        qemu: "qemu-aarch64",
    },
];

impl Platform {
    /// The platform of `triple`.
    ///
    /// # Errors
    /// When PyPI has no ONNX Runtime for `triple` (armv7, musl, other systems): the message
    /// says what to provide instead.
    pub fn of(triple: &str) -> Result<&'static Platform> {
        if let Some(p) = PLATFORMS.iter().find(|p| p.triple == triple) {
            return Ok(p);
        }
        let known: Vec<&str> = PLATFORMS.iter().map(|p| p.triple).collect();
        bail!(
            "PyPI's onnxruntime {ORT_VERSION} wheels carry ONNX Runtime for {} only, not for \
             {triple}. Build ONNX Runtime {ORT_VERSION} for {triple} from source and add to \
             .cargo/config.toml:\n\n[target.{triple}.onnxruntime]\n\
             rustc-link-search = [\"native=/path/to/lib\"]\n\
             rustc-link-lib = [\"onnxruntime\"]\n\
             dylib = \"/path/to/lib/libonnxruntime.so\"",
            known.join(" and ")
        )
    }

    /// The platform this program runs on, if PyPI has ONNX Runtime for it.
    pub fn host() -> Option<&'static Platform> {
        let triple = if cfg!(all(
            target_os = "linux",
            target_env = "gnu",
            target_arch = "x86_64"
        )) {
            "x86_64-unknown-linux-gnu"
        } else if cfg!(all(
            target_os = "linux",
            target_env = "gnu",
            target_arch = "aarch64"
        )) {
            "aarch64-unknown-linux-gnu"
        } else {
            return None;
        };
        PLATFORMS.iter().find(|p| p.triple == triple)
    }

    /// Where this platform's library is installed under `root` (see [`default_lib_dir`]).
    pub fn lib_dir(&self, root: &Path) -> PathBuf {
        root.join(self.triple)
    }
}

/// How child cargo processes find ONNX Runtime.
#[derive(Debug)]
pub enum OrtEnv {
    /// The user set `ORT_LIB_PATH` / `ORT_DYLIB_PATH`: their environment is passed on untouched.
    User,
    /// Not Linux x86-64 or aarch64: nothing is set, `ort` downloads its own binaries (needs
    /// internet).
    Unmanaged,
    /// Our copy in `lib_dir`.
    Managed { lib_dir: PathBuf },
}

impl OrtEnv {
    /// Environment variables to set on child processes.
    pub fn vars(&self) -> Vec<(&'static str, OsString)> {
        let OrtEnv::Managed { lib_dir } = self else {
            return Vec::new();
        };
        let mut ld_paths = vec![lib_dir.clone()];
        if let Some(old) = env::var_os("LD_LIBRARY_PATH") {
            ld_paths.extend(env::split_paths(&old).filter(|p| !p.as_os_str().is_empty()));
        }
        let ld_library_path =
            env::join_paths(ld_paths).unwrap_or_else(|_| lib_dir.clone().into_os_string());
        vec![
            ("ORT_LIB_PATH", lib_dir.clone().into_os_string()),
            ("ORT_PREFER_DYNAMIC_LINK", "1".into()),
            ("LD_LIBRARY_PATH", ld_library_path),
        ]
    }
}

/// Default install root: `<target folder>/ort/<version>` (the target folder as cargo resolves
/// it, see [`crate::cargo::target_dir`]), one folder per target triple.
///
/// # Errors
/// When cargo cannot tell the target folder.
pub fn default_lib_dir() -> Result<PathBuf> {
    Ok(crate::cargo::target_dir()?.join("ort").join(ORT_VERSION))
}

/// Decides how ONNX Runtime is provided for the host, installing it under `root` if that is
/// our job.
pub fn ensure(root: &Path) -> Result<OrtEnv> {
    for var in USER_VARS {
        if env::var_os(var).is_some_and(|v| !v.is_empty()) {
            return Ok(OrtEnv::User);
        }
    }
    let Some(host) = Platform::host() else {
        eprintln!(
            "xtask: note: automatic ONNX Runtime set-up is only done on Linux x86-64 and \
             aarch64. With internet access, ort's default download works: run cargo directly \
             (or set ORT_LIB_PATH to a directory with ONNX Runtime {ORT_VERSION})."
        );
        return Ok(OrtEnv::Unmanaged);
    };
    let lib_dir = install(host, root)?;
    Ok(OrtEnv::Managed { lib_dir })
}

/// Makes sure `platform`'s library is installed under `root`, returning its folder.
pub fn install(platform: &Platform, root: &Path) -> Result<PathBuf> {
    let lib_dir = platform.lib_dir(root);
    install_into(&lib_dir, platform.wheel_platform)?;
    Ok(lib_dir)
}

/// Makes sure `lib_dir/libonnxruntime.so.<version>` (from the wheel for `wheel_platform`) and
/// its symlinks exist.
fn install_into(lib_dir: &Path, wheel_platform: &str) -> Result<()> {
    if lib_dir.join(LIB_FILE).is_file() {
        // Complete apart from, possibly, symlinks someone deleted: restore those in place.
        return write_symlinks(lib_dir);
    }
    let parent = lib_dir
        .parent()
        .with_context(|| format!("{} has no parent directory", lib_dir.display()))?;
    fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;

    eprintln!(
        "xtask: fetching ONNX Runtime {ORT_VERSION} for {wheel_platform} from PyPI (onnxruntime \
         wheel) ..."
    );
    let download = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(parent)
        .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
    let wheel = pip_download(download.path(), wheel_platform)?;

    // Assemble the complete directory next to its final place, then rename it into place, so
    // that an interrupted run never leaves a half-written library behind.
    let staging = tempfile::Builder::new()
        .prefix(".staging-")
        .tempdir_in(parent)
        .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
    extract_library(&wheel, &staging.path().join(LIB_FILE))?;
    write_symlinks(staging.path())?;

    if lib_dir.exists() {
        // Left over without the library (e.g. an interrupted manual install).
        fs::remove_dir_all(lib_dir)
            .with_context(|| format!("removing incomplete {}", lib_dir.display()))?;
    }
    match fs::rename(staging.path(), lib_dir) {
        Ok(()) => {}
        // Another process finished first; its copy is as good as ours (`staging` is removed on drop).
        Err(_) if lib_dir.join(LIB_FILE).is_file() => {}
        Err(err) => {
            return Err(err).with_context(|| {
                format!(
                    "moving {} to {}",
                    staging.path().display(),
                    lib_dir.display()
                )
            })
        }
    }
    eprintln!(
        "xtask: ONNX Runtime {ORT_VERSION} installed in {}",
        lib_dir.display()
    );
    Ok(())
}

/// Runs `python3 -m pip download` for the onnxruntime wheel and returns the wheel's path.
fn pip_download(dest: &Path, wheel_platform: &str) -> Result<PathBuf> {
    // Ask for one fixed wheel whatever the local Python is: only the native library inside it
    // is used, and it is the same in every CPython build of the wheel.
    crate::wheel::download(
        &format!("onnxruntime=={ORT_VERSION}"),
        &[
            "--platform",
            wheel_platform,
            "--implementation",
            "cp",
            "--python-version",
            "3.11",
            "--abi",
            "cp311",
        ],
        dest,
        &format!(
            "install Python 3 with pip (e.g. `apt-get install python3-pip`), or set \
             ORT_LIB_PATH to a directory containing libonnxruntime.so (ONNX Runtime {ORT_VERSION})"
        ),
    )
}

/// Copies the ONNX Runtime library out of the wheel (a zip archive) to `dest`, executable.
fn extract_library(wheel: &Path, dest: &Path) -> Result<()> {
    crate::wheel::extract(wheel, WHEEL_MEMBER, dest)?;
    set_executable(dest)
}

#[cfg(unix)]
fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("setting permissions of {}", path.display()))
}

#[cfg(not(unix))]
fn set_executable(_: &Path) -> Result<()> {
    Ok(())
}

/// Creates the `libonnxruntime.so` and `libonnxruntime.so.1` symlinks in `dir` if missing.
#[cfg(unix)]
fn write_symlinks(dir: &Path) -> Result<()> {
    for name in SYMLINKS {
        let link = dir.join(name);
        if link.symlink_metadata().is_ok() {
            continue;
        }
        std::os::unix::fs::symlink(LIB_FILE, &link)
            .with_context(|| format!("creating symlink {} -> {LIB_FILE}", link.display()))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn write_symlinks(_: &Path) -> Result<()> {
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use std::io::Write;

    use super::*;

    fn fake_wheel(dir: &Path, member: &str, contents: &[u8]) -> PathBuf {
        let path = dir.join("onnxruntime-fake.whl");
        let mut zip = zip::ZipWriter::new(fs::File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        zip.start_file("onnxruntime/__init__.py", options).unwrap();
        zip.start_file(member, options).unwrap();
        zip.write_all(contents).unwrap();
        zip.finish().unwrap();
        path
    }

    #[test]
    fn extracts_library_and_writes_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let wheel = fake_wheel(tmp.path(), WHEEL_MEMBER, b"\x7fELF not really");
        let lib_dir = tmp.path().join("ort");
        fs::create_dir(&lib_dir).unwrap();
        extract_library(&wheel, &lib_dir.join(LIB_FILE)).unwrap();
        write_symlinks(&lib_dir).unwrap();
        write_symlinks(&lib_dir).unwrap(); // idempotent
        for name in SYMLINKS {
            assert_eq!(
                fs::read_link(lib_dir.join(name)).unwrap(),
                Path::new(LIB_FILE)
            );
            assert_eq!(fs::read(lib_dir.join(name)).unwrap(), b"\x7fELF not really");
        }
    }

    #[test]
    fn missing_member_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        let wheel = fake_wheel(tmp.path(), "onnxruntime/capi/other.so", b"");
        let err = extract_library(&wheel, &tmp.path().join(LIB_FILE)).unwrap_err();
        assert!(format!("{err:#}").contains(WHEEL_MEMBER), "{err:#}");
    }

    #[test]
    fn managed_env_points_cargo_and_the_loader_at_lib_dir() {
        let ort = OrtEnv::Managed {
            lib_dir: PathBuf::from("/x/ort"),
        };
        let vars = ort.vars();
        assert_eq!(vars[0], ("ORT_LIB_PATH", OsString::from("/x/ort")));
        assert_eq!(vars[1], ("ORT_PREFER_DYNAMIC_LINK", OsString::from("1")));
        assert_eq!(vars[2].0, "LD_LIBRARY_PATH");
        assert!(vars[2].1.to_string_lossy().starts_with("/x/ort"));
        assert!(OrtEnv::Unmanaged.vars().is_empty());
    }
}
