//! The `local` policy: per-node counters, exact. Kong's `local` policy reads
//! the counters, decides, and increments them later in a timer, so
//! concurrent requests can all pass the last free slot; here the check and
//! the increment of every period happen under one shard lock, so a node
//! never admits more than the limit.
//!
//! Counters are runtime data, outside any snapshot
//! (`strait_runtime::counters`): they are keyed like Kong's (the plugin's
//! route and service scope, the identifier, the period's window), so a
//! configuration change, even to the plugin itself, keeps them.

use strait_runtime::counters::{WindowCounters, WindowSpan};

use super::windows::Windows;
use super::{CounterKey, Usage};

/// Checks every configured period and, when all have room, counts the
/// request in each, under one lock of `counters`.
pub(super) fn take(
    counters: &dyn WindowCounters<CounterKey>,
    limits: &[Option<f64>; 6],
    key: CounterKey,
    now: i64,
) -> Usage {
    let windows = Windows::at(now);
    let span = WindowSpan {
        starts: &windows.starts,
        ends: &windows.ends,
    };
    let periods = limits.map(|limit| limit.is_some());
    let room = |counts: &[f64; 6]| {
        !limits
            .iter()
            .zip(counts)
            .any(|(limit, count)| limit.is_some_and(|limit| limit - count <= 0.0))
    };
    let (counts, admitted) = counters.take(key, span, periods, 1.0, &room, now);
    Usage::from_counts(limits, &windows, &counts, !admitted)
}
