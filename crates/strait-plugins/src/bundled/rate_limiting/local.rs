//! The `local` policy: per-node counters, exact. Kong's `local` policy reads
//! the counters, decides, and increments them later in a timer, so
//! concurrent requests can all pass the last free slot; here the check and
//! the increment of every period happen under one shard lock, so a node
//! never admits more than the limit.
//!
//! Counters are runtime data, outside any snapshot: they are keyed like
//! Kong's (the plugin's route and service scope, the identifier, the
//! period's window), so a configuration change, even to the plugin itself,
//! keeps them.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::{LazyLock, Mutex};

use super::windows::Windows;
use super::{CounterKey, Usage};

#[derive(Default)]
struct Counter {
    windows: [i64; 6],
    counts: [f64; 6],
    /// When every window this counter holds has ended (Unix seconds).
    expires: i64,
}

/// A map split in shards by key hash, each swept of ended entries once a
/// minute, so workers rarely share a lock and memory follows live keys.
/// Keys are hashed with foldhash, randomly seeded per process: an order of
/// magnitude cheaper than SipHash on a request's key, and still seeded
/// against keys chosen to collide (a `header` or `path` identifier is the
/// client's).
pub(crate) struct Sharded<V, K = CounterKey> {
    shards: Vec<Mutex<Shard<V, K>>>,
    hasher: foldhash::quality::RandomState,
}

pub(crate) struct Shard<V, K = CounterKey> {
    pub entries: HashMap<K, V, foldhash::quality::RandomState>,
    swept: i64,
}

const SHARDS: usize = 64;

impl<V, K: Hash + Eq> Sharded<V, K> {
    pub fn new() -> Sharded<V, K> {
        Sharded {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: HashMap::default(),
                        swept: 0,
                    })
                })
                .collect(),
            hasher: foldhash::quality::RandomState::default(),
        }
    }

    /// The shard of `key`, locked, swept of entries `expired` says ended
    /// when a minute has passed since its last sweep.
    pub fn shard(&self, key: &K, now: i64, expired: impl Fn(&V) -> bool) -> std::sync::MutexGuard<'_, Shard<V, K>> {
        let shard = &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if now - shard.swept >= 60 {
            shard.entries.retain(|_, value| !expired(value));
            shard.swept = now;
        }
        shard
    }
}

static COUNTERS: LazyLock<Sharded<Counter>> = LazyLock::new(Sharded::new);

/// Checks every configured period and, when all have room, counts the
/// request in each, under one lock.
pub(super) fn take(limits: &[Option<f64>; 6], key: CounterKey, now: i64) -> Usage {
    let windows = Windows::at(now);
    let mut shard = COUNTERS.shard(&key, now, |counter| counter.expires <= now);
    let counter = shard.entries.entry(key).or_default();
    for (at, limit) in limits.iter().enumerate() {
        if limit.is_some() && counter.windows[at] != windows.starts[at] {
            counter.windows[at] = windows.starts[at];
            counter.counts[at] = 0.0;
        }
    }
    let refused = limits
        .iter()
        .zip(&counter.counts)
        .any(|(limit, count)| limit.is_some_and(|limit| limit - count <= 0.0));
    let usage = Usage::from_counts(limits, &windows, &counter.counts, refused);
    if !refused {
        for (at, limit) in limits.iter().enumerate() {
            if limit.is_some() {
                counter.counts[at] += 1.0;
                counter.expires = counter.expires.max(windows.ends[at]);
            }
        }
    }
    usage
}
