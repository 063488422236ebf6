//! The `bundled-ort` feature: ONNX Runtime's shared library is compiled into the binary and
//! loaded from memory, so the binary is one self-contained file.
//!
//! The library bytes (the target's `libonnxruntime.so`, found by `build.rs`) are copied into an
//! anonymous in-memory file (`memfd_create(2)`), which the dynamic loader opens through its
//! `/proc/self/fd/N` path (`ort`'s `load-dynamic`, [`ort::init_from`]). Nothing is written to
//! disk; the copy lives in the page cache of that anonymous file for the life of the process.

use std::io::Write;
use std::os::fd::AsRawFd;

use crate::Error;

/// The target's ONNX Runtime shared library.
static LIBRARY: &[u8] = include_bytes!(env!("KENOSIS_BUNDLED_ORT"));

/// Loads the embedded ONNX Runtime; `ort` uses it from then on.
///
/// # Errors
/// [`Error::Environment`] when the in-memory file cannot be created or written (no
/// `memfd_create`, e.g. a kernel before Linux 3.17 or a seccomp policy that forbids it, or no
/// memory), or when the dynamic loader or `ort` refuses the library.
pub(crate) fn load() -> Result<(), Error> {
    let environment = |message: String| Error::Environment { message };
    let fd = rustix::fs::memfd_create("libonnxruntime.so", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| environment(format!("memfd_create for the bundled ONNX Runtime: {e}")))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(LIBRARY)
        .map_err(|e| environment(format!("writing the bundled ONNX Runtime to memory: {e}")))?;
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    ort::init_from(&path)
        .map_err(|e| environment(format!("loading the bundled ONNX Runtime: {e}")))?;
    // The loader maps the file and holds its own reference to it: the descriptor can go.
    drop(file);
    Ok(())
}
