//! Long background jobs on the workers' cores give the core back often.
//!
//! Background threads (the Admin API, the snapshot compiler) run under
//! `SCHED_IDLE`. While a worker is runnable the scheduler still gives such
//! a thread a small share now and then, and once picked it keeps the core
//! until the next scheduler tick (4 ms): a `/metrics` render of 10,000
//! routes on a saturated worker's core raised that worker's p99 by a
//! quarter. A [`Pacer`] yields every [`SLICE`] of work, so a worker waits
//! at most about that long. With nothing else runnable a yield returns at
//! once and costs one system call.

use std::time::{Duration, Instant};

/// The longest a paced job runs between yields.
pub const SLICE: Duration = Duration::from_micros(20);

/// Yields the core every [`SLICE`]; call [`Pacer::tick`] between small
/// pieces of work (each well under a slice).
pub struct Pacer {
    since: Instant,
}

impl Pacer {
    pub fn new() -> Pacer {
        Pacer { since: Instant::now() }
    }

    /// Yield when a slice has passed since the last yield.
    #[inline]
    pub fn tick(&mut self) {
        if self.since.elapsed() >= SLICE {
            std::thread::yield_now();
            self.since = Instant::now();
        }
    }
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer::new()
    }
}
