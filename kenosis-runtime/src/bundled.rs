//! The `bundled-ort` feature: ONNX Runtime's shared library is compiled into the binary and
//! loaded from memory, so the binary is one self-contained file.
//!
//! The binary stores the target's `libonnxruntime.so` (found by `build.rs`) as a few zstd
//! frames, or as it is with `bundled-ort-uncompressed`. On first use it is decompressed, the
//! frames in parallel, straight into the pages of an anonymous in-memory file
//! (`memfd_create(2)`, see [`crate::stored`]), sealed against any change
//! (see [`crate::memfd`]), which the dynamic loader opens through its `/proc/self/fd/N` path
//! (`ort`'s `load-dynamic`, [`ort::init_from`]). Nothing is written to disk; the library lives
//! in the page cache of that anonymous file for the life of the process.

use std::os::fd::AsRawFd;

use crate::stored::{write_library, Stored};
use crate::Error;

/// The target's ONNX Runtime shared library, as the binary stores it (see [`STORED`]).
static LIBRARY: &[u8] = include_bytes!(env!("KENOSIS_BUNDLED_ORT"));

/// How [`LIBRARY`] is stored.
const STORED: Stored = if cfg!(feature = "bundled-ort-uncompressed") {
    Stored::Plain
} else {
    Stored::Zstd
};

/// Loads the embedded ONNX Runtime; `ort` uses it from then on.
///
/// # Errors
/// [`Error::Environment`] when the in-memory file cannot be created, filled or sealed (no
/// `memfd_create`, e.g. a kernel before Linux 3.17 or a seccomp policy that forbids it, or no
/// memory), when the stored library does not decompress, or when the dynamic loader or `ort`
/// refuses the library.
pub(crate) fn load() -> Result<(), Error> {
    let environment = |message: String| Error::Environment { message };
    let file = crate::memfd::sealed("libonnxruntime.so", |file| {
        write_library(LIBRARY, STORED, file)
    })
    .map_err(|e| {
        environment(format!(
            "writing the bundled ONNX Runtime to a sealed in-memory file: {e}"
        ))
    })?;
    // The copy was the stored bytes' only reader.
    crate::pages::release(LIBRARY);
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    ort::init_from(&path)
        .map_err(|e| environment(format!("loading the bundled ONNX Runtime: {e}")))?;
    // The loader maps the file and holds its own reference to it: the descriptor can go.
    drop(file);
    Ok(())
}
