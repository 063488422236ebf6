//! How the `bundled-ort` feature stores ONNX Runtime's library in the binary, and how it is
//! written back out, decompressed, into the in-memory file the loader opens.

use std::fs::File;
use std::io::{self, Write};

/// How the library bytes are stored in the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    /// As they are.
    Plain,
    /// Zstd frames one after the other, each with its content size and a checksum (which the
    /// decoder verifies).
    Zstd,
}

/// Writes the library that `stored` holds (as `how` says) to `file`, which must be empty.
///
/// Zstd frames (one or more, one after the other, each with its content size) are
/// decompressed straight into `file`'s pages: `file` is sized to the sum of their content
/// sizes and mapped, and each frame's decoder writes into its part of the mapping, which is
/// its window too; the frames are decoded in parallel, one thread each, the calling thread
/// taking the last. No buffer is allocated besides each decoder's own state (about 100 KiB,
/// allocated on the calling thread before the others start, so that they allocate nothing
/// and glibc gives them no `malloc` arena of their own, whose pages would stay resident): a
/// window buffer of several MiB, freed after use, would raise glibc's `malloc` threshold for
/// the rest of the process, and with it the peak memory of the program. Each thread asks the
/// kernel for its part's pages in one call (`MADV_POPULATE_WRITE`, Linux 5.14; a hint: where
/// refused, the decoder's writes fault them in one by one). The mapping is gone when this
/// returns, so the file can be sealed against writes.
///
/// # Errors
/// The `io::Error` of sizing, mapping or writing `file`, or `InvalidData` for bytes that are
/// not whole zstd frames with their content sizes (a damaged, cut or extended frame, or a
/// checksum that does not match).
pub(crate) fn write_library(stored: &[u8], how: Stored, file: &mut File) -> io::Result<()> {
    match how {
        Stored::Plain => file.write_all(stored),
        Stored::Zstd => {
            let frames = frames(stored)?;
            let total: u64 = frames.iter().map(|(_, size)| *size as u64).sum();
            let len = usize::try_from(total).map_err(|_| invalid(format!("{total} bytes")))?;
            if len == 0 {
                return Ok(());
            }
            file.set_len(total)?;
            // SAFETY: a fresh shared mapping of `len` bytes of `file`, which is `len` bytes
            // long; nothing else maps or resizes the file while it exists.
            let map = unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    len,
                    rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                    rustix::mm::MapFlags::SHARED,
                    &*file,
                    0,
                )
            }?;
            // SAFETY: the mapping is `len` bytes, readable and writable, and only this slice
            // refers to it until it is unmapped below.
            let out = unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), len) };
            let decoded = decode_in_parallel(&frames, out);
            // SAFETY: `map` is the mapping made above; `out` is not used past this point.
            unsafe { rustix::mm::munmap(map, len) }?;
            decoded
        }
    }
}

/// `InvalidData` with `what` is wrong.
fn invalid(what: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the stored library: {what}"),
    )
}

/// The zstd frames `stored` holds, one after the other, each with its content size.
fn frames(stored: &[u8]) -> io::Result<Vec<(&[u8], usize)>> {
    let mut frames = Vec::new();
    let mut rest = stored;
    while !rest.is_empty() {
        let at = stored.len() - rest.len();
        let compressed = zstd::zstd_safe::find_frame_compressed_size(rest)
            .map_err(|_| invalid(format!("no whole zstd frame at byte {at}")))?;
        let size = match zstd::zstd_safe::get_frame_content_size(rest) {
            Ok(Some(size)) => usize::try_from(size)
                .map_err(|_| invalid(format!("a frame of {size} bytes at byte {at}")))?,
            _ => return Err(invalid(format!("a frame without its size at byte {at}"))),
        };
        let (frame, next) = rest.split_at(compressed);
        frames.push((frame, size));
        rest = next;
    }
    if frames.is_empty() {
        return Err(invalid("no zstd frame".into()));
    }
    Ok(frames)
}

/// Decodes each of `frames` into its part of `out` (the parts follow one another, each as
/// long as its frame's content size), one thread per frame, the calling thread decoding the
/// last one. The decoders' contexts are all made here first.
fn decode_in_parallel(frames: &[(&[u8], usize)], out: &mut [u8]) -> io::Result<()> {
    let mut jobs = Vec::with_capacity(frames.len());
    let mut rest = out;
    for &(frame, size) in frames {
        let decoder = zstd::zstd_safe::DCtx::try_create()
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let (part, next) = std::mem::take(&mut rest).split_at_mut(size);
        rest = next;
        jobs.push((decoder, frame, part));
    }
    let Some((mut decoder, frame, part)) = jobs.pop() else {
        return Ok(());
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = jobs
            .into_iter()
            .map(|(mut decoder, frame, part)| {
                scope.spawn(move || decode(&mut decoder, frame, part))
            })
            .collect();
        let last = decode(&mut decoder, frame, part);
        workers
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a decoding thread panicked")))
            })
            .chain([last])
            .collect::<io::Result<()>>()
    })
}

/// Decodes one zstd `frame` into `out`, which its content fills exactly, with `decoder`.
fn decode(decoder: &mut zstd::zstd_safe::DCtx<'_>, frame: &[u8], out: &mut [u8]) -> io::Result<()> {
    populate(out);
    let written = decoder.decompress(out, frame).map_err(|code| {
        invalid(format!(
            "a damaged zstd frame: {}",
            zstd::zstd_safe::get_error_name(code)
        ))
    })?;
    if written != out.len() {
        return Err(invalid(format!(
            "a zstd frame of {written} bytes, not {}",
            out.len()
        )));
    }
    Ok(())
}

/// Asks the kernel to allocate the pages of `part` (a part of the in-memory file's shared
/// mapping) in one call instead of one page fault per page. A hint: where it is refused (a
/// kernel before 5.14), the decoder's writes fault the pages in.
fn populate(part: &mut [u8]) {
    let page = rustix::param::page_size();
    let start = part.as_mut_ptr() as usize;
    let first = start.next_multiple_of(page);
    let end = (start + part.len()).next_multiple_of(page);
    if end > first {
        // SAFETY: the pages from `first` to `end` belong to the file's mapping (the last page of
        // a part is the next part's first, or the mapping's last); MADV_POPULATE_WRITE only
        // allocates pages, never changes their contents.
        let _ = unsafe {
            rustix::mm::madvise(
                first as *mut _,
                end - first,
                rustix::mm::Advice::LinuxPopulateWrite,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek, SeekFrom};

    use super::*;

    /// Bytes that compress, like a shared library's (repeats) but not trivially.
    fn library() -> Vec<u8> {
        (0..800_000usize)
            .map(|i| ((i * 7919) % 251) as u8 ^ (i / 4096) as u8)
            .collect()
    }

    /// One zstd frame of `bytes`, as `build.rs` writes it (with its content size when
    /// `sized`).
    fn compressed_as(bytes: &[u8], sized: bool) -> Vec<u8> {
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), 19).expect("encoder");
        encoder.include_checksum(true).expect("checksum");
        if sized {
            encoder
                .set_pledged_src_size(Some(bytes.len() as u64))
                .expect("pledged size");
        }
        encoder.write_all(bytes).expect("compress");
        encoder.finish().expect("finish")
    }

    fn compressed(bytes: &[u8]) -> Vec<u8> {
        compressed_as(bytes, true)
    }

    /// `write_library` into a fresh sealed in-memory file (sealing fails while a writable
    /// mapping remains), read back.
    fn written(stored: &[u8], how: Stored) -> io::Result<Vec<u8>> {
        let mut file = crate::memfd::sealed("kenosis-stored-test", |file| {
            write_library(stored, how, file)
        })?;
        let mut back = Vec::new();
        file.seek(SeekFrom::Start(0)).expect("rewind");
        file.read_to_end(&mut back).expect("read back");
        Ok(back)
    }

    #[test]
    fn a_library_in_several_frames_is_written_out_whole_in_order() {
        let library = library();
        let (a, b) = library.split_at(300_001);
        let (b, c) = b.split_at(250_000);
        let stored: Vec<u8> = [a, b, c].iter().flat_map(|part| compressed(part)).collect();
        assert_eq!(
            written(&stored, Stored::Zstd).expect("decompresses"),
            library
        );
    }

    #[test]
    fn a_compressed_library_is_written_out_whole() {
        let library = library();
        let stored = compressed(&library);
        assert!(stored.len() < library.len() / 2, "the stand-in compresses");
        assert_eq!(
            written(&stored, Stored::Zstd).expect("decompresses"),
            library
        );
        assert_eq!(written(&library, Stored::Plain).expect("copies"), library);
    }

    #[test]
    fn a_damaged_or_cut_or_extended_frame_is_an_error() {
        let stored = compressed(&library());
        let mut damaged = stored.clone();
        let middle = damaged.len() / 2;
        damaged[middle] ^= 0x55;
        let cut = &stored[..stored.len() - 100];
        let mut extended = stored.clone();
        extended.extend_from_slice(b"more");
        let no_size = compressed_as(&library(), false);
        for (what, bytes) in [
            ("damaged", &damaged[..]),
            ("cut", cut),
            ("extended", &extended[..]),
            ("without its size", &no_size[..]),
            ("not zstd", &b"\x7fELF"[..]),
        ] {
            let err = written(bytes, Stored::Zstd).expect_err(what);
            eprintln!("{what}: {err}");
        }
    }
}
