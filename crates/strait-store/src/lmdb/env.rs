//! Opening the LMDB environment, and shaping the C heap its pages come
//! from: the one place this crate uses `unsafe`.
#![allow(unsafe_code)]

use std::path::Path;

use heed::{Env, EnvOpenOptions, WithoutTls};

/// Named databases: one per entity kind, its unique and foreign-key
/// indexes, meta and the change log (66 with filter chains), with room to
/// grow. LMDB keeps a small slot per possible database, nothing more.
pub(super) const MAX_DBS: u32 = 128;

/// LMDB wants the map size to be a multiple of the OS page size; 64 KiB is
/// a multiple of every page size Linux and macOS use.
const MAP_SIZE_ALIGN: usize = 64 * 1024;

/// Open (creating if needed) the environment in `dir` with default durable
/// flags: every commit is synced, so a process killed at any moment, or a
/// power loss, leaves the last committed transaction on disk.
///
/// Not `WRITE_MAP`: with it LMDB grows the data file to the whole map size
/// (sparse), and a write into a hole of a full disk is a SIGBUS that kills
/// the node instead of an error for one Admin API write.
pub(super) fn open_env(dir: &Path, map_size: usize) -> heed::Result<Env<WithoutTls>> {
    let map_size = map_size.div_ceil(MAP_SIZE_ALIGN).max(1) * MAP_SIZE_ALIGN;
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    options.map_size(map_size).max_dbs(MAX_DBS);
    // SAFETY: the memory map is only undefined behaviour if the data file is
    // modified behind LMDB's back. We open it with LMDB's own locking (no
    // NO_LOCK, no NO_SYNC flags), only this crate writes it, only through
    // LMDB transactions, and heed refuses to open one path twice in a
    // process. The directory belongs to Strait (`prefix`) and must not sit
    // on a network filesystem, as documented for the `prefix` setting.
    unsafe { options.open(dir) }
}

/// Give the C allocator's free memory back to the OS. LMDB allocates dirty
/// pages with the C `malloc` (not the Rust global allocator); glibc returns
/// memory freed in the middle of a heap only when asked.
pub(super) fn return_c_heap_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes a plain integer, may be called from any
        // thread at any time, and only releases free memory.
        unsafe { libc::malloc_trim(0) };
    }
}

/// Shape the C allocator for LMDB, its only user in Strait (Rust code
/// allocates with mimalloc). Call first thing in `main`, before any thread
/// starts; [`c_heap_arena_per_thread`] once the node has started.
///
/// A whole-configuration write mallocs LMDB's dirty pages one 4 KiB page at
/// a time. In a thread's own glibc arena each page grew the heap by one
/// `mprotect`, and each page freed when the environment is reopened shrank
/// it by one `madvise`: 8,000 of each for 50,000 routes. The threads that
/// first allocate while the node starts (the compiler thread, which makes
/// every configuration write, attaches at its start) share the main arena,
/// which grows `M_TOP_PAD` at a time; it is trimmed past 32 MiB free and by
/// the `malloc_trim` after every big write ([`return_c_heap_memory`]), not
/// on every `free`.
pub fn tune_c_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` takes plain integers and only changes glibc's
        // allocation parameters; a refused value changes nothing.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
            libc::mallopt(libc::M_TOP_PAD, 4 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
        }
    }
}

/// The node has started: threads that first allocate from now on get
/// arenas of their own again, as glibc gives by default (eight per CPU), so
/// proxy workers, whose C allocations are LMDB read transactions (an OAuth2
/// token lookup each), never wait on one another's arena lock.
pub fn c_heap_arena_per_thread() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `sysconf` and `mallopt` take plain integers.
        unsafe {
            let cpus = libc::sysconf(libc::_SC_NPROCESSORS_ONLN).clamp(1, 1024) as libc::c_int;
            libc::mallopt(libc::M_ARENA_MAX, 8 * cpus);
        }
    }
}
