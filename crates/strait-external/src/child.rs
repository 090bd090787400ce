//! A plugin server ends when Strait does: its process gets `SIGTERM` from
//! the kernel when the thread that started it (the server's supervising
//! thread, alive for the process's life) ends, as Kong's worker 0 sends it
//! on exit.
//!
//! This module is the crate's one use of `unsafe`: `pre_exec` runs in the
//! child between `fork` and `exec`, where only async-signal-safe calls are
//! allowed; `prctl` is one, and nothing is allocated there.
#![allow(unsafe_code)]

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Has `command`'s process end when its parent does.
pub fn end_with_parent(command: &mut Command) {
    // SAFETY: the closure only calls `prctl`, async-signal-safe, with
    // integer arguments; it allocates nothing and touches no lock.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
