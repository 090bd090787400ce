//! Deadlines for long timeouts without a precise clock read.
//!
//! A proxied HTTP/1.1 request used to read the precise monotonic clock five
//! times (`perf probe` on libc's `clock_gettime`, docs/benchmarks.md); nginx
//! reads it about once per 12 requests, at the top of its event loop. Two of
//! the five only armed timeouts measured in seconds: the header timeout of
//! the next request on a kept connection and the upstream read timeout.
//! Those now come from `CLOCK_MONOTONIC_COARSE`, the time of the kernel's
//! last timer tick, which the vDSO serves from its data page without
//! reading the TSC (3 ns against 21 ns here; in a virtual machine the
//! precise clock may be paravirtual or fall back to a syscall, the coarse
//! one never does). The three readings that time latencies stay precise.
//!
//! A coarse reading lags by up to one tick (1–10 ms by the kernel's `HZ`).
//! [`deadline_after`] maps it onto [`Instant`] through an anchor (one coarse
//! and one precise reading per thread) and adds one tick, so a deadline is
//! never early and at most two ticks late. Limits under [`COARSE_FROM`],
//! where two ticks would matter, and kernels whose coarse clock is missing
//! or ticks slower than [`MAX_TICK`], take the precise clock as before.
//!
//! The module's `unsafe` is two libc calls, each handed a pointer to a
//! local `timespec` that the kernel only writes.
#![allow(unsafe_code)]

use std::time::{Duration, Instant};

/// The shortest limit whose deadline comes from the coarse clock: two ticks
/// late is at most 2% of it.
pub const COARSE_FROM: Duration = Duration::from_secs(1);

/// A coarse clock that ticks slower than this is not used.
pub const MAX_TICK: Duration = Duration::from_millis(10);

/// The furthest a deadline is put: a limit beyond what an `Instant` can
/// hold (an operator's `client_header_timeout` of 2^64 seconds) means
/// "never" in practice, not a panic.
const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `now + limit`, never earlier and, for a limit of [`COARSE_FROM`] or more,
/// at most two coarse ticks (≤ 2 × [`MAX_TICK`]) later; at most [`NEVER`]
/// from now.
pub fn deadline_after(limit: Duration) -> Instant {
    let limit = limit.min(NEVER);
    if limit >= COARSE_FROM {
        if let Some(now) = ANCHOR.with(|anchor| anchor.as_ref().and_then(Anchor::now_or_later)) {
            return now + limit;
        }
    }
    Instant::now() + limit
}

/// The coarse clock's tick, when it has a usable one.
pub fn coarse_tick() -> Option<Duration> {
    let mut res = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `res` is a valid, writable timespec for the whole call.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut res) };
    let tick = (rc == 0).then(|| to_duration(res)).flatten()?;
    (tick > Duration::ZERO && tick <= MAX_TICK).then_some(tick)
}

fn coarse_now() -> Option<Duration> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable timespec for the whole call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    (rc == 0).then(|| to_duration(now)).flatten()
}

fn to_duration(ts: libc::timespec) -> Option<Duration> {
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

thread_local! {
    static ANCHOR: Option<Anchor> = Anchor::take();
}

/// One coarse reading and the precise instant just after it.
struct Anchor {
    coarse: Duration,
    instant: Instant,
    tick: Duration,
}

impl Anchor {
    fn take() -> Option<Anchor> {
        let tick = coarse_tick()?;
        let coarse = coarse_now()?;
        let instant = Instant::now();
        Some(Anchor { coarse, instant, tick })
    }

    /// An instant no earlier than now and at most two ticks later.
    ///
    /// With `t` the true time, a coarse reading `c(t)` lies in
    /// `[t - tick, t]`; the anchor's `coarse` in `[t0 - tick, t0]` and its
    /// `instant` at `t0` or just after. So `instant + c(t) - coarse` lies in
    /// `[t - tick, t + tick]`, and one tick more is never before `t`.
    fn now_or_later(&self) -> Option<Instant> {
        let elapsed = coarse_now()?.checked_sub(self.coarse)?;
        Some(self.instant + elapsed + self.tick)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_deadline_is_never_early_and_at_most_two_ticks_late() {
        let tick = coarse_tick().expect("Linux has a coarse monotonic clock");
        let limit = Duration::from_secs(60);
        for _ in 0..20_000 {
            let before = Instant::now();
            let deadline = deadline_after(limit);
            let after = Instant::now();
            assert!(deadline >= before + limit, "early by {:?}", (before + limit) - deadline);
            let late = deadline.saturating_duration_since(after + limit);
            assert!(late <= 2 * tick, "late by {late:?} (tick {tick:?})");
        }
    }

    #[test]
    fn a_deadline_moves_on_with_the_coarse_clock() {
        let tick = coarse_tick().expect("Linux has a coarse monotonic clock");
        let first = deadline_after(COARSE_FROM);
        std::thread::sleep(3 * tick);
        let second = deadline_after(COARSE_FROM);
        assert!(second >= first + tick, "{:?} after {:?}", second - first, tick);
    }

    #[test]
    fn a_limit_beyond_an_instant_is_a_far_deadline_not_a_panic() {
        let deadline = deadline_after(Duration::MAX);
        assert!(deadline >= Instant::now() + NEVER - Duration::from_secs(1));
    }

    #[test]
    fn a_short_limit_reads_the_precise_clock() {
        let limit = Duration::from_millis(5);
        let before = Instant::now();
        let deadline = deadline_after(limit);
        let after = Instant::now();
        assert!(deadline >= before + limit && deadline <= after + limit);
    }
}
