//! The `cluster` policy: counters in the cluster's database, for nodes on
//! `database = cassandra` (`strait_runtime::cluster_counters`; the node
//! installs the backend, and the policy is refused on a node without one).
//!
//! Each node counts its own admissions per window and writes its count
//! whole; a window's usage is every node's count summed. Keys are Kong's
//! (`<route>:<service>:<identifier>:<period>` and the window's start).
//!
//! - `sync_rate = -1` (Kong's default): each request counts itself, writes
//!   its node's count and reads the window's sum before it is decided (a
//!   write and a read per configured period, in parallel). A request
//!   refused takes its count back. Nodes admitting at the same instant may
//!   together pass the limit by what they admit during one exchange, as
//!   Kong's cluster policy may.
//! - `sync_rate > 0`: requests are decided on the node from the other
//!   nodes' counts as last read plus its own; the first request after a
//!   flush schedules the next, `sync_rate` seconds later, which writes the
//!   node's count and reads the others'. The cluster may pass a limit by
//!   what the other nodes admit within one `sync_rate`; nothing waits on
//!   the database.

use std::sync::Arc;
use std::time::Duration;

use strait_runtime::cluster_counters::{stamp, ClusterCounters, CounterRow};
use strait_runtime::counters::ShardedMap;

use super::redis::identifier_text;
use super::windows::{Windows, PERIODS};
use super::{CounterKey, PluginScope, Usage};

#[derive(Debug)]
pub(super) struct ClusterPolicy {
    store: Arc<dyn ClusterCounters>,
    /// `None`: every request exchanges (`sync_rate = -1`).
    sync_rate: Option<Duration>,
    shape: Arc<Shape>,
    /// This node's counts (runtime data, shared by every instance: a rebuilt
    /// plugin keeps them).
    counts: Arc<ShardedMap<CounterKey, Counts>>,
}

/// What a row's key and the decision depend on, shared with flushes.
#[derive(Debug)]
struct Shape {
    /// `<route>:<service>:`, the plugin's part of every key.
    key_prefix: String,
    limits: [Option<f64>; 6],
}

/// One key's windows on this node.
#[derive(Debug, Default)]
struct Counts {
    starts: [i64; 6],
    /// This node's count in each window.
    own: [i64; 6],
    /// The other nodes' counts, as last read.
    others: [i64; 6],
    expires: i64,
    /// A flush is scheduled.
    flushing: bool,
}

impl Counts {
    /// Move each configured period to `windows` when its window ended.
    fn roll(&mut self, limits: &[Option<f64>; 6], windows: &Windows) {
        for (at, limit) in limits.iter().enumerate() {
            if limit.is_some() && self.starts[at] < windows.starts[at] {
                self.starts[at] = windows.starts[at];
                self.own[at] = 0;
                self.others[at] = 0;
            }
        }
        self.expires = self.expires.max(windows.ends.iter().copied().max().unwrap_or(0));
    }
}

impl Shape {
    /// The rows of this node's counts of `key` in `counts`' windows.
    fn rows(&self, key: &CounterKey, counts: &Counts, now: i64, ends: &[i64; 6]) -> Vec<CounterRow> {
        let identifier = identifier_text(&key.identifier);
        let stamp = stamp();
        self.limits
            .iter()
            .enumerate()
            .filter(|(_, limit)| limit.is_some())
            .map(|(at, _)| CounterRow {
                key: format!("{}{identifier}:{}", self.key_prefix, PERIODS[at].0),
                window: counts.starts[at],
                count: counts.own[at],
                ttl: (ends[at] - now + 60).clamp(61, i32::MAX as i64) as i32,
                stamp,
            })
            .collect()
    }
}

impl ClusterPolicy {
    pub fn new(
        store: Arc<dyn ClusterCounters>,
        sync_rate: Option<Duration>,
        scope: PluginScope,
        limits: &[Option<f64>; 6],
    ) -> ClusterPolicy {
        ClusterPolicy {
            store,
            sync_rate,
            shape: Arc::new(Shape {
                key_prefix: format!(
                    "{}:{}:",
                    scope.route.unwrap_or_default(),
                    scope.service.unwrap_or_default()
                ),
                limits: *limits,
            }),
            counts: strait_runtime::counters::shared("rate-limiting cluster counts"),
        }
    }

    /// Decide one request. `Err` when the database gave no answer.
    pub async fn take(&self, key: CounterKey, now: i64) -> Result<Usage, String> {
        let windows = Windows::at(now);
        let limits = &self.shape.limits;
        let shard = |now| self.counts.shard(&key, now, |c: &Counts| c.expires <= now);
        if let Some(sync_rate) = self.sync_rate {
            let (usage, flush) = {
                let mut counts = shard(now);
                let entry = counts.entries.entry(key.clone()).or_default();
                entry.roll(limits, &windows);
                let seen: [f64; 6] = std::array::from_fn(|at| (entry.own[at] + entry.others[at]) as f64);
                let refused = limits
                    .iter()
                    .zip(&seen)
                    .any(|(limit, count)| limit.is_some_and(|limit| limit - count <= 0.0));
                if !refused {
                    for (at, limit) in limits.iter().enumerate() {
                        if limit.is_some() {
                            entry.own[at] += 1;
                        }
                    }
                }
                let flush = !refused && !entry.flushing;
                entry.flushing |= flush;
                (Usage::from_counts(limits, &windows, &seen, refused), flush)
            };
            if flush {
                self.schedule_flush(key, sync_rate);
            }
            return Ok(usage);
        }
        let rows = {
            let mut counts = shard(now);
            let entry = counts.entries.entry(key.clone()).or_default();
            entry.roll(limits, &windows);
            for (at, limit) in limits.iter().enumerate() {
                if limit.is_some() {
                    entry.own[at] += 1;
                }
            }
            self.shape.rows(&key, entry, now, &windows.ends)
        };
        let sums = self.store.exchange(rows).await?;
        let mut seen = [0.0; 6];
        let mut sums = sums.into_iter();
        let mut refused = false;
        for (at, limit) in limits.iter().enumerate() {
            let Some(limit) = limit else { continue };
            // The window's usage before this request.
            seen[at] = (sums.next().unwrap_or(0) - 1).max(0) as f64;
            refused |= limit - seen[at] <= 0.0;
        }
        if refused {
            // Not admitted: take the count back, and say so to the others.
            let rows = {
                let mut counts = shard(now);
                let entry = counts.entries.entry(key.clone()).or_default();
                for (at, limit) in limits.iter().enumerate() {
                    if limit.is_some() && entry.starts[at] == windows.starts[at] {
                        entry.own[at] = (entry.own[at] - 1).max(0);
                    }
                }
                self.shape.rows(&key, entry, now, &windows.ends)
            };
            let store = self.store.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = store.exchange(rows).await;
                });
            }
        }
        Ok(Usage::from_counts(limits, &windows, &seen, refused))
    }

    /// In `sync_rate`: write this node's counts of `key` and read the
    /// others'.
    fn schedule_flush(&self, key: CounterKey, sync_rate: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, counts, shape) = (self.store.clone(), self.counts.clone(), self.shape.clone());
        runtime.spawn(async move {
            tokio::time::sleep(sync_rate).await;
            let now = super::windows::unix_now();
            let windows = Windows::at(now);
            let (rows, starts, written) = {
                let mut shard = counts.shard(&key, now, |c: &Counts| c.expires <= now);
                let Some(entry) = shard.entries.get_mut(&key) else { return };
                entry.roll(&shape.limits, &windows);
                entry.flushing = false;
                (shape.rows(&key, entry, now, &windows.ends), entry.starts, entry.own)
            };
            match store.exchange(rows).await {
                Ok(sums) => {
                    let mut shard = counts.shard(&key, now, |c: &Counts| c.expires <= now);
                    let Some(entry) = shard.entries.get_mut(&key) else { return };
                    let mut sums = sums.into_iter();
                    for (at, limit) in shape.limits.iter().enumerate() {
                        if limit.is_none() {
                            continue;
                        }
                        let sum = sums.next().unwrap_or(0);
                        if entry.starts[at] == starts[at] {
                            entry.others[at] = (sum - written[at]).max(0);
                        }
                    }
                }
                Err(error) => {
                    strait_runtime::cluster_counters::log_failure(&error);
                }
            }
        });
    }
}
