//! The WASI preview 1 calls a `wasip1` filter imports (Go's runtime needs
//! clocks, random bytes, stdout/stderr and a scheduler's poll). Filters get
//! no files, no arguments and no environment: stdout and stderr go to the
//! log, every other descriptor is `EBADF`, and `proc_exit` (a Go panic ends
//! there) is a trap, which fails the request that ran into it.

use wasmtime::{Caller, Linker, Result};

use super::memory::{read, write, write_u32, write_u64};
use crate::instance::HostState;

type Host<'a> = Caller<'a, HostState>;

const MODULE: &str = "wasi_snapshot_preview1";
const SUCCESS: i32 = 0;
const EBADF: i32 = 8;
const EINVAL: i32 = 28;

pub(super) fn define(linker: &mut Linker<HostState>) -> Result<()> {
    for name in ["args_sizes_get", "environ_sizes_get"] {
        linker.func_wrap(MODULE, name, |mut caller: Host<'_>, count: i32, size: i32| {
            write_u32(&mut caller, count, 0)?;
            write_u32(&mut caller, size, 0)?;
            Ok(SUCCESS)
        })?;
    }
    for name in ["args_get", "environ_get"] {
        linker.func_wrap(MODULE, name, |_: Host<'_>, _list: i32, _buffer: i32| SUCCESS)?;
    }
    linker.func_wrap(MODULE, "clock_time_get", clock_time_get)?;
    linker.func_wrap(MODULE, "clock_res_get", |mut caller: Host<'_>, _id: i32, out: i32| {
        write_u64(&mut caller, out, 1_000).map(|()| SUCCESS)
    })?;
    linker.func_wrap(MODULE, "random_get", random_get)?;
    linker.func_wrap(MODULE, "fd_write", fd_write)?;
    linker.func_wrap(MODULE, "fd_fdstat_get", fd_fdstat_get)?;
    linker.func_wrap(
        MODULE,
        "fd_fdstat_set_flags",
        |_: Host<'_>, fd: i32, _flags: i32| match fd {
            0..=2 => SUCCESS,
            _ => EBADF,
        },
    )?;
    linker.func_wrap(MODULE, "fd_close", |_: Host<'_>, _fd: i32| EBADF)?;
    linker.func_wrap(MODULE, "fd_prestat_get", |_: Host<'_>, _fd: i32, _out: i32| EBADF)?;
    linker.func_wrap(
        MODULE,
        "fd_prestat_dir_name",
        |_: Host<'_>, _fd: i32, _p: i32, _l: i32| EBADF,
    )?;
    linker.func_wrap(MODULE, "sched_yield", |_: Host<'_>| SUCCESS)?;
    linker.func_wrap(MODULE, "poll_oneoff", poll_oneoff)?;
    linker.func_wrap(MODULE, "proc_exit", |caller: Host<'_>, code: i32| -> Result<()> {
        Err(wasmtime::Error::msg(format!(
            "filter {} exited (proc_exit({code})): a panic or an abort",
            caller.data().filter
        )))
    })?;
    Ok(())
}

fn clock_time_get(mut caller: Host<'_>, id: i32, _precision: i64, out: i32) -> Result<i32> {
    let nanos = match id {
        // realtime
        0 => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        // monotonic, process and thread clocks: time since the host started
        1..=3 => crate::runtime::started().elapsed().as_nanos() as u64,
        _ => return Ok(EINVAL),
    };
    write_u64(&mut caller, out, nanos).map(|()| SUCCESS)
}

fn random_get(mut caller: Host<'_>, ptr: i32, len: i32) -> Result<i32> {
    // Filters' runtimes seed hash maps with these bytes; nothing secret is
    // drawn from them (the per-thread generator request ids come from).
    let mut bytes = vec![0u8; len as u32 as usize];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&strait_runtime::random::next_u64().to_le_bytes()[..chunk.len()]);
    }
    write(&mut caller, ptr, &bytes).map(|()| SUCCESS)
}

/// stdout and stderr into the log, a line per write.
fn fd_write(mut caller: Host<'_>, fd: i32, iovs: i32, iovs_len: i32, written: i32) -> Result<i32> {
    if !(1..=2).contains(&fd) {
        return Ok(EBADF);
    }
    let vectors = read(&mut caller, iovs, iovs_len.saturating_mul(8))?;
    let mut text = Vec::new();
    for pair in vectors.chunks_exact(8) {
        let ptr = i32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]);
        let len = i32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]);
        text.extend(read(&mut caller, ptr, len)?);
    }
    let line = String::from_utf8_lossy(&text);
    let filter = &*caller.data().filter;
    match fd {
        1 => tracing::info!(filter, stream = "stdout", "{}", line.trim_end()),
        _ => tracing::warn!(filter, stream = "stderr", "{}", line.trim_end()),
    }
    write_u32(&mut caller, written, text.len() as u32).map(|()| SUCCESS)
}

/// The standard streams are character devices; nothing else is open.
fn fd_fdstat_get(mut caller: Host<'_>, fd: i32, out: i32) -> Result<i32> {
    if !(0..=2).contains(&fd) {
        return Ok(EBADF);
    }
    let mut stat = [0u8; 24];
    stat[0] = 2; // character device
    stat[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    write(&mut caller, out, &stat).map(|()| SUCCESS)
}

/// A filter's callback must not wait: every subscription is answered as
/// ready at once (clock subscriptions as expired), so a runtime that polls
/// to sleep goes on immediately.
fn poll_oneoff(mut caller: Host<'_>, subscriptions: i32, events: i32, count: i32, out_count: i32) -> Result<i32> {
    let count = count.clamp(0, 64);
    let raw = read(&mut caller, subscriptions, count * 48)?;
    let mut out = vec![0u8; count as usize * 32];
    for (index, subscription) in raw.chunks_exact(48).enumerate() {
        let event = &mut out[index * 32..index * 32 + 32];
        event[0..8].copy_from_slice(&subscription[0..8]); // userdata
        event[10] = subscription[8]; // the subscription's type
    }
    write(&mut caller, events, &out)?;
    write_u32(&mut caller, out_count, count as u32).map(|()| SUCCESS)
}
