//! Have the CPU fetch memory a request will read, while it does other work.
//!
//! With many routes, the route index's slot for a request's path is a cache
//! miss (often a TLB miss as well) on every request. An HTTP/1.1 request's
//! path is in the buffer as soon as its request line arrived; the head is
//! parsed and the request built before the route lookup. Fetching the slot
//! when the bytes arrive overlaps the miss with that work instead of
//! stalling the lookup on it (docs/benchmarks.md#many-routes-and-the-allocator).
//!
//! The crate's second module with `unsafe`: one prefetch instruction, which
//! reads nothing the program sees and never faults.
#![allow(unsafe_code)]

use strait_snapshot::snapshot::Snapshot;

/// Bytes in a cache line.
const LINE: usize = 64;

/// Ask the CPU to bring the cache lines of `len` bytes at `start` into its
/// caches. A hint: on other architectures it does nothing.
pub(crate) fn lines(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let end = (start as usize).saturating_add(len);
        for line in (start as usize & !(LINE - 1)..end).step_by(LINE) {
            // SAFETY: a prefetch is a hint; it neither faults nor changes
            // memory, whatever the address (SSE is part of x86_64's baseline).
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line as *const i8) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

/// The path of the request line at the start of `head`, once its target
/// arrived (`GET /path?query HTTP/1.1`): the bytes after the first space,
/// up to `?` or the next space. Unchecked; only for hints.
pub(crate) fn request_path(head: &[u8]) -> Option<&[u8]> {
    let line = &head[..head.len().min(MAX_SCAN)];
    let start = line.iter().position(|&b| b == b' ')? + 1;
    let target = &line[start..];
    let end = target.iter().position(|&b| b == b' ' || b == b'?')?;
    Some(&target[..end])
}

/// How far into a buffer [`request_path`] looks.
const MAX_SCAN: usize = 512;

/// Fetch the route index slots the lookup for the request whose head
/// starts `head` will read first.
pub(crate) fn route_for(snapshot: &Snapshot, head: &[u8]) {
    if let Some(path) = request_path(head) {
        snapshot.router().first_slots(path, lines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_of_a_request_line() {
        assert_eq!(
            request_path(b"GET /r000001 HTTP/1.1\r\nHost: a\r\n"),
            Some(&b"/r000001"[..])
        );
        assert_eq!(request_path(b"POST /a/b?x=1 HTTP/1.1\r\n"), Some(&b"/a/b"[..]));
        assert_eq!(request_path(b"GET /incomp"), None, "the target is not complete yet");
        assert_eq!(request_path(b"GET"), None);
        assert_eq!(request_path(b""), None);
        let long = [b'a'; 600];
        assert_eq!(request_path(&long), None, "no space in the first 512 bytes");
    }

    #[test]
    fn lines_accepts_any_address() {
        let data = [7u8; 200];
        lines(data.as_ptr(), data.len());
        lines(std::ptr::null(), 64);
        lines(usize::MAX as *const u8, 1000);
        assert_eq!(data[199], 7);
    }
}
