//! The time budget of a phase call (`lua_max_run_time`), kept by a
//! watchdog thread rather than by the code itself.
//!
//! A count hook that looks at the clock every thousand instructions
//! costs every call: with any hook set, LuaJIT's interpreter dispatches
//! each bytecode through its hook path, which was about 165 instructions
//! on a pre-function that reads one header and sets one, and doubles the
//! time of Lua code that computes. Here the hot path pays two stores:
//!
//! - each worker thread has a [`Slot`]: a call counter, odd while a phase
//!   call runs, and its Lua state's address;
//! - the watchdog wakes every eighth of the budget (1 to 25 ms). A slot
//!   showing the same odd count for at least the budget has run over it:
//!   the watchdog notes that count as expired and sets a count hook on the
//!   state (`lua_sethook`, the call LuaJIT allows from a signal handler or
//!   another thread: it only stores the hook and switches the interpreter's
//!   dispatch table);
//! - the hook, on the worker's thread, raises
//!   `strait: Lua code exceeded lua_max_run_time (N ms)` while the call is
//!   the expired one (every thousand instructions, so code catching it with
//!   `pcall` is interrupted again; sandbox.lua also raises it again as
//!   `pcall` returns), and clears itself when it finds a later call (the
//!   watchdog set it just as the call ended);
//! - a call that ran over clears the hook as it ends.
//!
//! The watchdog runs at normal priority: it is what ends a loop that keeps
//! a worker's core busy, so it must not wait for an idle core. A call ends
//! between one budget and a budget plus two ticks after it began.
//!
//! This module's `unsafe` is the two Lua C API calls and the state
//! address: the address is taken once from the state's own API, stored
//! only while the worker owns that state (cleared under the slot's lock
//! before the state is dropped), and `lua_sethook` is called only under
//! the slot's lock, so the watchdog and the worker never set the hook at
//! once.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use mlua::{ffi, Lua};

/// How many instructions the hook lets pass between two errors once set.
const HOOK_COUNT: i32 = 1000;

/// One worker thread's budget state.
pub(crate) struct Slot {
    /// Odd while a phase call runs; written only by the worker.
    call: AtomicU64,
    /// The `call` value the watchdog found over the budget.
    expired: AtomicU64,
    /// Whether the hook may be set (cleared by the call that sees it).
    armed: AtomicBool,
    /// The running call's budget, in milliseconds.
    limit_ms: AtomicU64,
    /// The running call's Lua state. A worker clears it under `lock`
    /// before it drops its state; the watchdog sets the hook under `lock`.
    state: AtomicPtr<ffi::lua_State>,
    lock: Mutex<()>,
}

thread_local! {
    static SLOT: Arc<Slot> = {
        let slot = Arc::new(Slot {
            call: AtomicU64::new(0),
            expired: AtomicU64::new(u64::MAX),
            armed: AtomicBool::new(false),
            limit_ms: AtomicU64::new(0),
            state: AtomicPtr::new(std::ptr::null_mut()),
            lock: Mutex::new(()),
        });
        watchdog().lock().unwrap_or_else(PoisonError::into_inner).push(Watched {
            slot: Arc::downgrade(&slot),
            seen: 0,
            since: Instant::now(),
        });
        slot
    };
}

/// A Lua state's budget: what each of its calls is held to.
pub(crate) struct Budget {
    state: *mut ffi::lua_State,
    limit_ms: u64,
}

impl Budget {
    /// The budget of `lua`'s calls; `None` for a zero limit.
    pub fn new(lua: &Lua, limit: Duration) -> mlua::Result<Option<Budget>> {
        if limit.is_zero() {
            return Ok(None);
        }
        let mut state: *mut ffi::lua_State = std::ptr::null_mut();
        // SAFETY: the closure only copies the state's address.
        unsafe { lua.exec_raw::<()>((), |raw| state = raw)? };
        Ok(Some(Budget {
            state,
            limit_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX).max(1),
        }))
    }

    /// Runs one phase call inside the budget.
    pub fn call<R>(&self, run: impl FnOnce() -> R) -> R {
        SLOT.with(|slot| {
            slot.limit_ms.store(self.limit_ms, Ordering::Relaxed);
            slot.state.store(self.state, Ordering::Relaxed);
            let count = slot.call.load(Ordering::Relaxed) | 1;
            slot.call.store(count, Ordering::Release);
            let result = run();
            slot.call.store(count + 1, Ordering::Release);
            if slot.armed.load(Ordering::Acquire) {
                disarm(slot, self.state);
            }
            result
        })
    }
}

impl Drop for Budget {
    /// The state is about to be dropped: the watchdog can no longer reach it.
    fn drop(&mut self) {
        // At thread exit the slot may be gone first: no call runs then.
        let _ = SLOT.try_with(|slot| {
            let _held = slot.lock.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = slot
                .state
                .compare_exchange(self.state, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Relaxed);
        });
    }
}

/// Whether the running call is past its budget (sandbox.lua's `expired`).
pub(crate) fn expired() -> bool {
    SLOT.with(|slot| slot.over())
}

impl Slot {
    fn over(&self) -> bool {
        let call = self.call.load(Ordering::Relaxed);
        call & 1 == 1 && self.expired.load(Ordering::Acquire) == call
    }
}

/// Clears the hook on `state` (this thread's, alive).
fn disarm(slot: &Slot, state: *mut ffi::lua_State) {
    let _held = slot.lock.lock().unwrap_or_else(PoisonError::into_inner);
    // SAFETY: the state is this thread's own and alive; the slot's lock
    // keeps the watchdog from setting the hook at the same time.
    unsafe { ffi::lua_sethook(state, None, 0, 0) };
    slot.armed.store(false, Ordering::Release);
}

/// The count hook the watchdog sets: on the worker's thread, between two
/// bytecodes of the running code.
unsafe extern "C-unwind" fn on_count(state: *mut ffi::lua_State, _: *mut ffi::lua_Debug) {
    let over = SLOT.with(|slot| {
        if slot.over() {
            return Some(slot.limit_ms.load(Ordering::Relaxed));
        }
        // Set as an earlier call ended, or outside a call.
        disarm(slot, state);
        None
    });
    let Some(limit_ms) = over else {
        return;
    };
    let message = format!("strait: Lua code exceeded lua_max_run_time ({limit_ms} ms)");
    // SAFETY: `state` is the running state the hook was called with;
    // nothing owned is left on this frame when `lua_error` unwinds it.
    unsafe {
        ffi::lua_pushlstring_(state, message.as_ptr().cast(), message.len());
        drop(message);
        ffi::lua_error(state);
    }
}

struct Watched {
    slot: Weak<Slot>,
    /// The call count last seen, and since when.
    seen: u64,
    since: Instant,
}

fn watchdog() -> &'static Mutex<Vec<Watched>> {
    static WATCHED: std::sync::OnceLock<&'static Mutex<Vec<Watched>>> = std::sync::OnceLock::new();
    WATCHED.get_or_init(|| {
        let watched: &'static Mutex<Vec<Watched>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        let spawned = std::thread::Builder::new()
            .name("strait-lua-budget".into())
            .spawn(move || watch_forever(watched));
        if let Err(error) = spawned {
            tracing::error!(target: "strait::lua", "the Lua time budget's watchdog could not start: {error}");
        }
        watched
    })
}

fn watch_forever(watched: &'static Mutex<Vec<Watched>>) {
    loop {
        let tick = {
            let mut watched = watched.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            watched.retain_mut(|entry| match entry.slot.upgrade() {
                Some(slot) => {
                    look(entry, &slot, now);
                    true
                }
                None => false,
            });
            watched
                .iter()
                .filter_map(|entry| entry.slot.upgrade())
                .map(|slot| slot.limit_ms.load(Ordering::Relaxed))
                .filter(|limit| *limit > 0)
                .min()
                .map_or(Duration::from_millis(25), |limit| Duration::from_millis(limit) / 8)
                .clamp(Duration::from_millis(1), Duration::from_millis(25))
        };
        std::thread::sleep(tick);
    }
}

/// One tick's look at one worker.
fn look(entry: &mut Watched, slot: &Slot, now: Instant) {
    let call = slot.call.load(Ordering::Acquire);
    if call != entry.seen {
        entry.seen = call;
        entry.since = now;
        return;
    }
    let limit = Duration::from_millis(slot.limit_ms.load(Ordering::Relaxed));
    if call & 1 == 0 || now.duration_since(entry.since) < limit || slot.expired.load(Ordering::Relaxed) == call {
        return;
    }
    slot.expired.store(call, Ordering::Release);
    let _held = slot.lock.lock().unwrap_or_else(PoisonError::into_inner);
    let state = slot.state.load(Ordering::Acquire);
    // Still the same call: its state is alive until it ends, and a worker
    // dropping a state waits for this lock.
    if state.is_null() || slot.call.load(Ordering::Acquire) != call {
        return;
    }
    slot.armed.store(true, Ordering::Release);
    // SAFETY: the state is alive (above); LuaJIT allows setting a hook
    // from another thread while the state runs.
    unsafe { ffi::lua_sethook(state, Some(on_count), ffi::LUA_MASKCOUNT, HOOK_COUNT) };
}
