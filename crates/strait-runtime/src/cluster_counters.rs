//! Rate-limiting counters in the cluster's database (`policy = cluster`),
//! for nodes on `database = cassandra`: the node installs the backend at
//! start ([`install`]); the plugin finds it with [`installed`] and refuses
//! the policy when there is none.
//!
//! Each node keeps its own count of each window and writes it whole (a
//! grow-only counter per node, never a read-modify-write); a window's usage
//! is the sum of every node's count. Writes carry a timestamp that grows
//! with each snapshot of a node's count ([`stamp`]), so a late write of an
//! older count never replaces a newer one.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// One window of one counter, as this node writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterRow {
    /// Kong's key without the window: `<route>:<service>:<identifier>:<period>`.
    pub key: String,
    /// The window's start (Unix seconds).
    pub window: i64,
    /// This node's count in the window.
    pub count: i64,
    /// Seconds the row lives: the window's end, and a minute.
    pub ttl: i32,
    /// The write's timestamp ([`stamp`]).
    pub stamp: i64,
}

pub type CounterFuture = Pin<Box<dyn Future<Output = Result<Vec<i64>, String>> + Send>>;

pub trait ClusterCounters: Send + Sync + std::fmt::Debug {
    /// Which backend, for logs.
    fn backend(&self) -> &'static str;
    /// Write this node's count of each row, then read back each row's
    /// window summed over every node (this write included).
    fn exchange(&self, rows: Vec<CounterRow>) -> CounterFuture;
}

static STORE: OnceLock<Arc<dyn ClusterCounters>> = OnceLock::new();

/// Make `store` the node's cluster counters; false when one already is.
pub fn install(store: Arc<dyn ClusterCounters>) -> bool {
    STORE.set(store).is_ok()
}

/// The node's cluster counters, when its database keeps them.
pub fn installed() -> Option<&'static Arc<dyn ClusterCounters>> {
    STORE.get()
}

/// This process's name among the nodes writing counts: new at every start,
/// so a restarted node's fresh counts add to what it counted before instead
/// of replacing them.
pub fn instance() -> uuid::Uuid {
    static INSTANCE: OnceLock<uuid::Uuid> = OnceLock::new();
    *INSTANCE.get_or_init(uuid::Uuid::new_v4)
}

/// Log a failed exchange, at most a line a second for the process.
pub fn log_failure(error: &str) {
    static LAST: AtomicU64 = AtomicU64::new(u64::MAX);
    if crate::once_a_second(&LAST) {
        tracing::error!(%error, "rate-limiting: the cluster counters did not answer");
    }
}

/// A write timestamp (microseconds since the epoch) greater than every one
/// this process handed out before.
pub fn stamp() -> i64 {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn stamps_always_grow() {
        let mut last = 0;
        for _ in 0..10_000 {
            let next = super::stamp();
            assert!(next > last);
            last = next;
        }
    }
}
