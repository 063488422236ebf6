//! Giving back the memory of bytes the program has read once: the embedded model after its
//! session is created, the stored ONNX Runtime after it is copied (`bundled-ort`).
//!
//! Both are statics of the executable (`include_bytes!`), so their pages are clean pages of a
//! private, read-only mapping of the executable file: `madvise(MADV_DONTNEED)` drops them from
//! this process, and a later read, if any, maps the file's same bytes again. They stay in the
//! kernel's page cache, so the next start of the program finds them there. Dropping them
//! lowers the process's resident memory by their size for the rest of its life, which is what
//! a device with little RAM pays for.
//!
//! On memory that is anonymous or writable, the same call would zero or revert it, so the
//! range is released only when `/proc/self/maps` shows one read-only mapping of a file that
//! holds it all; otherwise nothing happens. Linux and Android only.

/// Drops from this process the whole pages that lie inside `bytes`, when they belong to a
/// read-only mapping of a file (see the module docs); does nothing otherwise, or when the
/// kernel refuses (a hint: the contents never change either way).
pub(crate) fn release(bytes: &'static [u8]) {
    let page = page_size();
    let start = bytes.as_ptr() as usize;
    let first = start.next_multiple_of(page);
    let end = (start + bytes.len()) / page * page;
    if end <= first || !read_only_file_mapping(first, end) {
        return;
    }
    // SAFETY: the pages from `first` to `end` lie inside `bytes` and inside one read-only,
    // private mapping of a file (checked above): nothing can have written them, so
    // MADV_DONTNEED only drops them from this process, and a later read maps the same bytes.
    let _ = unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED) };
}

/// The page size (`sysconf(_SC_PAGESIZE)`; 4096 should it fail).
fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system; it has no memory effects.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096)
}

/// Whether the address range `first..end` lies inside one mapping of `/proc/self/maps` that is
/// readable, not writable, private and backed by a file (a nonzero inode). `false` when the
/// file cannot be read.
fn read_only_file_mapping(first: usize, end: usize) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    maps.lines().any(|line| {
        // `start-end perms offset dev inode [path]`
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(_offset), Some(_dev), Some(inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            return false;
        };
        let Some((from, to)) = range.split_once('-') else {
            return false;
        };
        let (Ok(from), Ok(to)) = (
            usize::from_str_radix(from, 16),
            usize::from_str_radix(to, 16),
        ) else {
            return false;
        };
        let perms = perms.as_bytes();
        from <= first
            && end <= to
            && perms.first() == Some(&b'r')
            && perms.get(1) == Some(&b'-')
            && perms.get(3) == Some(&b'p')
            && inode != "0"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Large enough to hold whole pages wherever the linker puts it.
    static IN_THE_EXECUTABLE: [u8; 64 * 1024] = {
        let mut bytes = [0u8; 64 * 1024];
        let mut i = 0;
        while i < bytes.len() {
            bytes[i] = (i % 251) as u8;
            i += 1;
        }
        bytes
    };

    #[test]
    fn released_read_only_file_pages_read_back_the_same_bytes() {
        let page = page_size();
        let start = IN_THE_EXECUTABLE.as_ptr() as usize;
        let (first, end) = (
            start.next_multiple_of(page),
            (start + IN_THE_EXECUTABLE.len()) / page * page,
        );
        assert!(
            read_only_file_mapping(first, end),
            "a static of the test binary lies in a read-only mapping of its file"
        );
        let bytes: &'static [u8] = &IN_THE_EXECUTABLE;
        release(bytes);
        assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }

    #[test]
    fn heap_memory_is_left_alone() {
        let leaked: &'static [u8] = Box::leak(vec![7u8; 64 * 1024].into_boxed_slice());
        let page = page_size();
        let start = leaked.as_ptr() as usize;
        assert!(!read_only_file_mapping(
            start.next_multiple_of(page),
            (start + leaked.len()) / page * page
        ));
        release(leaked);
        assert!(
            leaked.iter().all(|&b| b == 7),
            "MADV_DONTNEED on anonymous memory would have zeroed it"
        );
    }
}
