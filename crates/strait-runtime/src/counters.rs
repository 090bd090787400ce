//! Counters that outlive plugin instances: rate-limiting's and
//! response-ratelimiting's fixed windows kept on this node, and the map
//! they (and the Redis policy's local leases) are kept in.
//!
//! They are runtime data, never part of a snapshot: a plugin instance takes
//! its store by name when it is built ([`shared`]), so a configuration
//! change, even to the plugin itself, keeps the counts. Counters shared by
//! every node go through Redis ([`crate::redis`]); a store behind
//! [`WindowCounters`] is what a PostgreSQL or Redis-backed `local`
//! replacement would implement.

use std::any::Any;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Process-wide runtime data of type `T` by name, made on first use.
/// Plugin instances take theirs when they are built and keep the `Arc`;
/// nothing here is read per request.
pub fn shared<T: Default + Send + Sync + 'static>(name: &str) -> Arc<T> {
    static SHARED: Mutex<Vec<(String, Arc<dyn Any + Send + Sync>)>> = Mutex::new(Vec::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    let found = shared
        .iter()
        .find(|(known, _)| known == name)
        .and_then(|(_, data)| data.clone().downcast::<T>().ok());
    if let Some(data) = found {
        return data;
    }
    let data = Arc::new(T::default());
    // A name taken by another type is replaced: one name, one type.
    shared.retain(|(known, _)| known != name);
    shared.push((name.to_string(), data.clone()));
    data
}

/// A map split in shards by key hash, each swept of ended entries once a
/// minute, so workers rarely share a lock and memory follows live keys.
/// Keys are hashed with foldhash, randomly seeded per process: an order of
/// magnitude cheaper than SipHash on a request's key, and still seeded
/// against keys chosen to collide (a `header` or `path` identifier is the
/// client's).
pub struct ShardedMap<K, V> {
    shards: Vec<Mutex<Shard<K, V>>>,
    hasher: foldhash::quality::RandomState,
}

/// One shard of a [`ShardedMap`], locked.
pub struct Shard<K, V> {
    pub entries: HashMap<K, V, foldhash::quality::RandomState>,
    swept: i64,
}

const SHARDS: usize = 64;

impl<K, V> std::fmt::Debug for ShardedMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShardedMap")
    }
}

impl<K: Hash + Eq, V> Default for ShardedMap<K, V> {
    fn default() -> ShardedMap<K, V> {
        ShardedMap {
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
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    /// The shard of `key`, locked, swept of entries `expired` says ended
    /// when a minute has passed since its last sweep (`now`, Unix seconds).
    pub fn shard(&self, key: &K, now: i64, expired: impl Fn(&V) -> bool) -> MutexGuard<'_, Shard<K, V>> {
        let shard = &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        if now - shard.swept >= 60 {
            shard.entries.retain(|_, value| !expired(value));
            shard.swept = now;
        }
        shard
    }
}

/// The windows one instant falls in, one per period (second to year):
/// each one's start and end, Unix seconds.
#[derive(Debug, Clone, Copy)]
pub struct WindowSpan<'a> {
    pub starts: &'a [i64; 6],
    pub ends: &'a [i64; 6],
}

/// Where fixed-window counters live. `take` decides and counts under one
/// lock, so a node never admits more than a limit.
pub trait WindowCounters<K>: Send + Sync + std::fmt::Debug {
    /// `key`'s count in each window of `span` (0 where its window ended).
    fn counts(&self, key: &K, span: WindowSpan<'_>, now: i64) -> [f64; 6];

    /// `key`'s counts in the windows `periods` selects (a window that
    /// ended starts again at 0); when `admit` accepts them, `by` is added
    /// to each. Returns the counts before and whether they were admitted.
    fn take(
        &self,
        key: K,
        span: WindowSpan<'_>,
        periods: [bool; 6],
        by: f64,
        admit: &dyn Fn(&[f64; 6]) -> bool,
        now: i64,
    ) -> ([f64; 6], bool);
}

/// One key's counts: each period's window start, count, and when every
/// window it holds has ended.
#[derive(Debug, Default)]
struct WindowCounts {
    windows: [i64; 6],
    counts: [f64; 6],
    expires: i64,
}

/// Per-node counters, exact: in this process, in a [`ShardedMap`].
pub struct LocalCounters<K> {
    map: ShardedMap<K, WindowCounts>,
}

impl<K> std::fmt::Debug for LocalCounters<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalCounters")
    }
}

impl<K: Hash + Eq> Default for LocalCounters<K> {
    fn default() -> LocalCounters<K> {
        LocalCounters {
            map: ShardedMap::default(),
        }
    }
}

impl<K: Hash + Eq + Send> WindowCounters<K> for LocalCounters<K> {
    fn counts(&self, key: &K, span: WindowSpan<'_>, now: i64) -> [f64; 6] {
        let shard = self.map.shard(key, now, |c| c.expires <= now);
        let mut counts = [0.0; 6];
        if let Some(counter) = shard.entries.get(key) {
            for (at, count) in counts.iter_mut().enumerate() {
                if counter.windows[at] == span.starts[at] {
                    *count = counter.counts[at];
                }
            }
        }
        counts
    }

    fn take(
        &self,
        key: K,
        span: WindowSpan<'_>,
        periods: [bool; 6],
        by: f64,
        admit: &dyn Fn(&[f64; 6]) -> bool,
        now: i64,
    ) -> ([f64; 6], bool) {
        let mut shard = self.map.shard(&key, now, |c| c.expires <= now);
        let counter = shard.entries.entry(key).or_default();
        for (at, selected) in periods.iter().enumerate() {
            if *selected && counter.windows[at] != span.starts[at] {
                counter.windows[at] = span.starts[at];
                counter.counts[at] = 0.0;
            }
        }
        let before = counter.counts;
        let admitted = admit(&before);
        if admitted {
            for (at, selected) in periods.iter().enumerate() {
                if *selected {
                    counter.counts[at] += by;
                    counter.expires = counter.expires.max(span.ends[at]);
                }
            }
        }
        (before, admitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STARTS: [i64; 6] = [100, 60, 0, 0, 0, 0];
    const ENDS: [i64; 6] = [101, 120, 3600, 86_400, 2_592_000, 31_536_000];

    fn span() -> WindowSpan<'static> {
        WindowSpan {
            starts: &STARTS,
            ends: &ENDS,
        }
    }

    #[test]
    fn take_counts_only_what_it_admits_and_windows_restart() {
        let counters = LocalCounters::<u32>::default();
        let minute = [false, true, false, false, false, false];
        let under_two = |counts: &[f64; 6]| counts[1] < 2.0;
        assert_eq!(counters.take(7, span(), minute, 1.0, &under_two, 100), ([0.0; 6], true));
        assert!(counters.take(7, span(), minute, 1.0, &under_two, 100).1);
        let (before, admitted) = counters.take(7, span(), minute, 1.0, &under_two, 100);
        assert_eq!((before[1], admitted), (2.0, false), "refused, not counted");
        assert_eq!(counters.counts(&7, span(), 100)[1], 2.0);
        assert_eq!(counters.counts(&8, span(), 100), [0.0; 6], "another key");
        let next = [160, 120, 0, 0, 0, 0];
        let later = WindowSpan {
            starts: &next,
            ends: &ENDS,
        };
        assert_eq!(counters.counts(&7, later, 160)[1], 0.0, "the next minute starts at 0");
        assert!(counters.take(7, later, minute, 1.0, &under_two, 160).1);
    }

    #[test]
    fn shared_data_is_one_per_name_and_type() {
        let a: Arc<LocalCounters<u32>> = shared("counters-test-a");
        let again: Arc<LocalCounters<u32>> = shared("counters-test-a");
        assert!(Arc::ptr_eq(&a, &again));
        let b: Arc<LocalCounters<u32>> = shared("counters-test-b");
        assert!(!Arc::ptr_eq(&a, &b));
    }
}
