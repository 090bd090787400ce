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
//! A coarse reading lags the precise clock (both count from the same
//! origin) by up to about one tick (1–10 ms by the kernel's `HZ`), more only
//! when the tick itself comes late (a virtual CPU the host did not run).
//! [`deadline_after`] maps it onto [`Instant`] through an anchor (one
//! precise `CLOCK_MONOTONIC` reading and the `Instant` just after it, per
//! thread) and adds two ticks, so a deadline is at most two ticks late and
//! early only while the kernel's clock update is over two ticks overdue.
//! Limits under [`COARSE_FROM`], where two ticks would matter, and kernels
//! whose coarse clock is missing or ticks slower than [`MAX_TICK`], take the
//! precise clock as before.
//!
//! The module's `unsafe` is libc's clock calls, each handed a pointer to a
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

/// `now + limit`; for a limit of [`COARSE_FROM`] or more, at most two coarse
/// ticks (≤ 2 × [`MAX_TICK`]) later and never earlier unless the kernel's
/// coarse clock is over two ticks behind; at most [`NEVER`] from now.
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
    read_clock(libc::CLOCK_MONOTONIC_COARSE)
}

/// The clock `Instant` reads on Linux, as a time since its origin.
fn precise_now() -> Option<Duration> {
    read_clock(libc::CLOCK_MONOTONIC)
}

fn read_clock(clock: libc::clockid_t) -> Option<Duration> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable timespec for the whole call.
    let rc = unsafe { libc::clock_gettime(clock, &mut now) };
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

/// One precise reading of the monotonic clock and the `Instant` just after
/// it: a time on the coarse clock (same origin) maps to an `Instant` by the
/// difference, never earlier than the true one.
struct Anchor {
    precise: Duration,
    instant: Instant,
    tick: Duration,
}

impl Anchor {
    fn take() -> Option<Anchor> {
        let tick = coarse_tick()?;
        let precise = precise_now()?;
        let instant = Instant::now();
        Some(Anchor { precise, instant, tick })
    }

    /// The coarse clock's reading plus two ticks, on the monotonic clock's
    /// scale. With `t` the true time and `lag` how far the coarse clock is
    /// behind (`0 ≤ lag`, about a tick at most while ticks come on time),
    /// this is `t + 2 × tick - lag`: never after `t + 2 × tick`, and before
    /// `t` only when `lag` is over two ticks.
    fn coarse_estimate(&self) -> Option<Duration> {
        Some(coarse_now()? + 2 * self.tick)
    }

    fn now_or_later(&self) -> Option<Instant> {
        let since = self.coarse_estimate()?.checked_sub(self.precise)?;
        Some(self.instant + since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_deadline_is_never_early_and_at_most_two_ticks_late() {
        let tick = coarse_tick().expect("Linux has a coarse monotonic clock");
        let anchor = Anchor::take().expect("Linux has a coarse monotonic clock");
        let limit = Duration::from_secs(60);
        let (mut checked, mut overdue) = (0u32, 0u32);
        // 200,000 rounds span several ticks, so coarse readings just before a clock update
        // (the largest lag) are among them.
        for _ in 0..200_000 {
            let before = precise_now().unwrap();
            let coarse_before = coarse_now().unwrap();
            let estimate = anchor.coarse_estimate().unwrap();
            let after = precise_now().unwrap();
            let late = estimate.saturating_sub(after);
            assert!(late <= 2 * tick, "late by {late:?} (tick {tick:?})");
            // The estimate reads the coarse clock after `coarse_before`, so it is early only
            // when the kernel's update was already over two ticks overdue at `before` (the host
            // did not run the virtual CPU that keeps time): those rounds are counted, not failed.
            if coarse_before + 2 * tick < before {
                overdue += 1;
                continue;
            }
            checked += 1;
            assert!(estimate >= before, "early by {:?}", before - estimate);
        }
        assert!(
            checked > 100_000,
            "{overdue} of 200,000 rounds saw an overdue clock update"
        );
        // The `Instant` a deadline is: no earlier than the precise anchor's mapping allows.
        let before = Instant::now();
        let deadline = deadline_after(limit);
        assert!(deadline + 2 * tick >= before + limit);
        assert!(deadline <= Instant::now() + limit + 2 * tick);
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
