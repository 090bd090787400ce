//! Background threads (the snapshot compiler, the Admin API) must never
//! take CPU from proxy workers, and memory they free must go back to the OS.
//!
//! - [`lower_priority`] puts the calling thread under `SCHED_IDLE` (and at
//!   nice 19, which `ps` shows). Linux keeps both per thread, and threads the
//!   caller starts later inherit them. Such a thread runs only on CPU time no
//!   worker wants, and a worker that wakes preempts it at once: while workers
//!   are saturated a configuration push waits for their idle moments and
//!   finishes later; once they idle, it gets the whole core. Measured with
//!   `SCHED_BATCH` and nice 19 instead (a weight of 15 against a worker's
//!   1024), pushes every 2 s still cost a saturated worker 5.6% of its
//!   requests (docs/benchmarks.md, config-push).
//! - [`release_memory`] asks the allocator to return free pages now. It
//!   runs after a large job (parsing or compiling a configuration): the
//!   allocator would otherwise only return them on its next call from that
//!   thread, which may never come while the node is idle. The binary, which
//!   chooses the allocator, registers how with [`set_memory_release`].
//! - [`disable_transparent_huge_pages`] keeps the kernel from backing the
//!   heap with 2 MiB pages. With them, a 2 MiB range counts whole as soon as
//!   any of it is touched, and the kernel's background collapsing fills
//!   partly used ranges later: the 10k/10k set idled at 144.8 MB and grew
//!   to 147.9 MB while idle after ten re-posts; without them it idles at
//!   129.5 MB and stays at 130.0 MB (docs/benchmarks.md#allocator). Proxy CPU per request did not change
//!   measurably (50,000 routes: 16.55–16.81 µs with, 16.82–17.32 without;
//!   one route 15.20 against 14.88).
//!
//! One of the crate's two modules with `unsafe` (with `logs::send_many`): libc calls on the calling
//! thread or process; the pointers passed are a local the kernel only reads
//! and one `malloc` returned.
#![allow(unsafe_code)]

use std::sync::OnceLock;

/// The nice value background threads run at (the lowest priority).
pub const BACKGROUND_NICE: i32 = 19;

/// Put the calling thread under `SCHED_IDLE` at nice [`BACKGROUND_NICE`].
/// A failure is logged and changes nothing else: the thread still runs.
pub fn lower_priority(thread: &str) {
    // SAFETY: `gettid` takes no arguments and cannot fail.
    let tid = unsafe { libc::gettid() };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid, initialized sched_param that lives across
    // the call; the kernel only reads it. Target 0 is the calling thread.
    let idle = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    // SAFETY: plain integer arguments; on Linux PRIO_PROCESS with a thread
    // id sets that thread's nice value only.
    let nice = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, BACKGROUND_NICE) };
    if idle != 0 || nice != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(thread, %error, "could not lower the thread's scheduling priority");
    }
}

/// Ask the kernel not to use transparent huge pages for this process (for
/// memory mapped from now on and for its background collapsing), so resident
/// memory is what the heap uses. Call first thing in `main`. A failure is
/// logged and changes nothing else.
pub fn disable_transparent_huge_pages() {
    // SAFETY: plain integer arguments; PR_SET_THP_DISABLE only sets a flag
    // on the calling process.
    let done = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if done != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(%error, "could not turn off transparent huge pages");
    }
}

/// Make the calling thread's first C allocation now, which attaches it to a
/// glibc arena: the main one while the binary holds glibc to one arena as
/// it starts (`strait_store::tune_c_heap`). The compiler thread calls it
/// first: every configuration write, and LMDB's page-by-page allocations
/// with it, happens there.
pub fn attach_c_heap() {
    // SAFETY: a plain allocation freed at once; a null pointer is a valid
    // argument to `free`.
    unsafe { libc::free(libc::malloc(1)) };
}

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// Register how to return free memory to the OS (once, at start).
pub fn set_memory_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// Return free memory to the OS now, if the binary registered how.
pub fn release_memory() {
    if let Some(release) = RELEASE.get() {
        release();
    }
}

static WORKER_ALLOCATOR: OnceLock<fn()> = OnceLock::new();

/// Register what a proxy worker thread calls first to set up its allocator
/// (once, at start; the binary, which chooses the allocator, gives a heap
/// of its own to each worker thread).
pub fn set_worker_allocator(setup: fn()) {
    let _ = WORKER_ALLOCATOR.set(setup);
}

/// Set up the calling proxy worker thread's allocator, if the binary
/// registered how.
pub fn worker_allocator() {
    if let Some(setup) = WORKER_ALLOCATOR.get() {
        setup();
    }
}
