//! Sealed anonymous in-memory files (`memfd_create(2)` with `MFD_ALLOW_SEALING`), for the
//! `bundled-ort` feature's ONNX Runtime library.
//!
//! Once sealed, nobody can change the file: not this process, and not another one that opens
//! it by its `/proc/<pid>/fd/N` path, whatever its permissions. The dynamic loader maps what
//! was written, and nothing else.

use std::fs::File;
use std::io;

use rustix::fs::{MemfdFlags, SealFlags};

/// The seals [`sealed`] sets: no write (`write(2)` or a shared writable mapping), no growing,
/// no shrinking, and no change to the seals themselves.
pub(crate) const SEALS: SealFlags = SealFlags::WRITE
    .union(SealFlags::GROW)
    .union(SealFlags::SHRINK)
    .union(SealFlags::SEAL);

/// Creates an in-memory file called `name` (close-on-exec), lets `fill` write its whole
/// contents, then seals it with [`SEALS`] and returns it, positioned at its end.
///
/// # Errors
/// The `io::Error` of `memfd_create` (a kernel before Linux 3.17, a seccomp policy that
/// forbids it, no memory), of `fill`, or of `fcntl(F_ADD_SEALS)` (a kernel before 3.17 or a
/// writable shared mapping of the file still open).
pub(crate) fn sealed(
    name: &str,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<File> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    let mut file = File::from(fd);
    fill(&mut file)?;
    rustix::fs::fcntl_add_seals(&file, SEALS)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsRawFd;

    use super::*;

    const CONTENTS: &[u8] = b"\x7fELF stand-in for a shared library";

    fn by_path(file: &File) -> String {
        format!("/proc/self/fd/{}", file.as_raw_fd())
    }

    #[test]
    fn a_sealed_file_refuses_writes_through_a_descriptor_opened_by_path() {
        let file = sealed("kenosis-test", |f| f.write_all(CONTENTS)).expect("sealed memfd");
        assert_eq!(
            rustix::fs::fcntl_get_seals(&file).expect("F_GET_SEALS"),
            SEALS
        );

        // Opening for writing works (permissions allow it); every change is refused.
        let mut other = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(by_path(&file))
            .expect("open by path for writing");
        let write = other.write(b"X").expect_err("a write to the sealed file");
        assert_eq!(
            write.raw_os_error(),
            Some(rustix::io::Errno::PERM.raw_os_error())
        );
        let grow = other
            .set_len(CONTENTS.len() as u64 + 4096)
            .expect_err("growing the sealed file");
        assert_eq!(
            grow.raw_os_error(),
            Some(rustix::io::Errno::PERM.raw_os_error())
        );
        let shrink = other.set_len(0).expect_err("shrinking the sealed file");
        assert_eq!(
            shrink.raw_os_error(),
            Some(rustix::io::Errno::PERM.raw_os_error())
        );
        let unseal = rustix::fs::fcntl_add_seals(&other, SealFlags::FUTURE_WRITE);
        assert_eq!(unseal, Err(rustix::io::Errno::PERM), "the seals are sealed");

        let mut read = Vec::new();
        let mut again = std::fs::File::open(by_path(&file)).expect("open by path");
        again.rewind().expect("rewind");
        again.read_to_end(&mut read).expect("read");
        assert_eq!(read, CONTENTS, "the contents are what was written");
    }

    #[test]
    fn a_failed_fill_is_passed_on_and_nothing_is_returned() {
        let err = sealed("kenosis-test", |_| Err(io::Error::other("no library")))
            .expect_err("fill failed");
        assert_eq!(err.to_string(), "no library");
    }
}
