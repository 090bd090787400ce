//! Cached responses (proxy-cache's memory strategy): one bounded,
//! least-recently-used map per `memory.dictionary_name`, shared by every
//! proxy-cache instance naming it (Kong's shared dictionaries), living
//! across snapshot swaps and reachable from the Admin API's purge
//! endpoints. A plugin reads and writes through [`ResponseCache`]. Each store holds at most `mem_cache_size` bytes (Kong's name;
//! default 128 MiB); storing past that evicts the least recently used
//! entries, and an entry larger than the whole store is not kept.
//!
//! This is runtime data, never part of a snapshot: a config change never
//! empties a cache.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{json, Map, Value};

/// Kong's `mem_cache_size` default.
pub const DEFAULT_CAPACITY: usize = 128 * 1024 * 1024;

/// Bytes counted for an entry beyond its key, headers and body.
const ENTRY_OVERHEAD: usize = 128;

static CAPACITY: AtomicUsize = AtomicUsize::new(DEFAULT_CAPACITY);
static DICTIONARIES: OnceLock<Mutex<HashMap<String, Arc<MemoryStore>>>> = OnceLock::new();

/// Where cached responses live: [`MemoryStore`] in this process today (a
/// Redis-backed store would implement the same).
pub trait ResponseCache: Send + Sync + std::fmt::Debug {
    /// A fresh copy of the response stored under `key`.
    fn fetch(&self, key: &str) -> Option<Arc<CachedResponse>>;
    /// Stores `response` under `key` for `ttl_secs`; false when it was not
    /// kept (larger than the store).
    fn store(&self, key: &str, response: CachedResponse, ttl_secs: u64) -> bool;
    /// The largest body the store keeps.
    fn max_body(&self) -> usize;
}

impl ResponseCache for MemoryStore {
    fn fetch(&self, key: &str) -> Option<Arc<CachedResponse>> {
        MemoryStore::fetch(self, key)
    }
    fn store(&self, key: &str, response: CachedResponse, ttl_secs: u64) -> bool {
        MemoryStore::store(self, key, response, ttl_secs)
    }
    fn max_body(&self) -> usize {
        MemoryStore::max_body(self)
    }
}

/// Sets the capacity of stores created from now on (the node calls this
/// once at start, before any plugin is built).
pub fn set_capacity(bytes: usize) {
    CAPACITY.store(bytes, Ordering::Relaxed);
}

fn dictionaries() -> MutexGuard<'static, HashMap<String, Arc<MemoryStore>>> {
    DICTIONARIES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The store named `name`, created on first use.
pub fn dictionary(name: &str) -> Arc<MemoryStore> {
    dictionaries()
        .entry(name.to_string())
        .or_insert_with(|| Arc::new(MemoryStore::new(CAPACITY.load(Ordering::Relaxed))))
        .clone()
}

/// The store named `name`, if a plugin ever created it.
pub fn existing(name: &str) -> Option<Arc<MemoryStore>> {
    dictionaries().get(name).cloned()
}

/// Every store created so far, by name.
pub fn all() -> Vec<(String, Arc<MemoryStore>)> {
    let mut stores: Vec<_> = dictionaries().iter().map(|(n, s)| (n.clone(), s.clone())).collect();
    stores.sort_by(|a, b| a.0.cmp(&b.0));
    stores
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A response as the cache keeps it.
#[derive(Debug)]
pub struct CachedResponse {
    pub status: u16,
    /// The response's headers when it was stored, names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// When it was stored (Unix seconds).
    pub timestamp: u64,
    /// The resource's own time to live (seconds), used for freshness.
    pub ttl: u64,
    /// The request body that produced it, when there was one.
    pub request_body: Option<Bytes>,
}

impl CachedResponse {
    fn size(&self, key: &str) -> usize {
        let headers: usize = self.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        key.len() + headers + self.body.len() + self.request_body.as_ref().map_or(0, Bytes::len) + ENTRY_OVERHEAD
    }

    /// Kong's Admin API view of a cached object (`GET /proxy-cache/{key}`).
    pub fn to_json(&self) -> Value {
        let mut headers = Map::new();
        for (name, value) in &self.headers {
            match headers.get_mut(name) {
                Some(Value::Array(values)) => values.push(json!(value)),
                Some(first) => *first = json!([first.take(), value]),
                None => {
                    headers.insert(name.clone(), json!(value));
                }
            }
        }
        json!({
            "status": self.status,
            "headers": headers,
            "body": String::from_utf8_lossy(&self.body),
            "body_len": self.body.len(),
            "timestamp": self.timestamp,
            "ttl": self.ttl,
            "version": 1,
            "req_body": self.request_body.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()),
        })
    }
}

struct Slot {
    response: Arc<CachedResponse>,
    /// None: kept until evicted or purged.
    expires: Option<Instant>,
    size: usize,
    /// Position in the recency order.
    used: u64,
}

#[derive(Default)]
struct Entries {
    slots: HashMap<String, Slot>,
    /// Recency order: least recently used first.
    recency: BTreeMap<u64, String>,
    clock: u64,
    bytes: usize,
}

impl Entries {
    fn remove(&mut self, key: &str) -> Option<Slot> {
        let slot = self.slots.remove(key)?;
        self.recency.remove(&slot.used);
        self.bytes -= slot.size;
        Some(slot)
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

/// One dictionary of cached responses.
pub struct MemoryStore {
    capacity: usize,
    entries: Mutex<Entries>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").field("capacity", &self.capacity).finish()
    }
}

impl MemoryStore {
    pub fn new(capacity: usize) -> MemoryStore {
        MemoryStore {
            capacity,
            entries: Mutex::new(Entries::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The most body bytes one entry may hold.
    pub fn max_body(&self) -> usize {
        self.capacity.saturating_sub(ENTRY_OVERHEAD)
    }

    /// The live entry under `key`, marking it recently used.
    pub fn fetch(&self, key: &str) -> Option<Arc<CachedResponse>> {
        let mut entries = self.lock();
        let expired = entries.slots.get(key)?.expires.is_some_and(|at| at <= Instant::now());
        if expired {
            entries.remove(key);
            return None;
        }
        let used = entries.tick();
        let slot = entries.slots.get_mut(key)?;
        let previous = std::mem::replace(&mut slot.used, used);
        let response = slot.response.clone();
        entries.recency.remove(&previous);
        entries.recency.insert(used, key.to_string());
        Some(response)
    }

    /// Keeps `response` under `key` for `ttl_secs` (0: until evicted).
    /// Returns false when the entry is larger than the whole store.
    pub fn store(&self, key: &str, response: CachedResponse, ttl_secs: u64) -> bool {
        let size = response.size(key);
        if size > self.capacity {
            return false;
        }
        let expires = (ttl_secs > 0).then(|| Instant::now() + Duration::from_secs(ttl_secs));
        let mut entries = self.lock();
        entries.remove(key);
        while entries.bytes + size > self.capacity {
            let Some((_, oldest)) = entries.recency.pop_first() else {
                break;
            };
            if let Some(slot) = entries.slots.remove(&oldest) {
                entries.bytes -= slot.size;
            }
        }
        let used = entries.tick();
        entries.recency.insert(used, key.to_string());
        entries.bytes += size;
        entries.slots.insert(
            key.to_string(),
            Slot {
                response: Arc::new(response),
                expires,
                size,
                used,
            },
        );
        true
    }

    /// Removes `key`; false when nothing live was there.
    pub fn purge(&self, key: &str) -> bool {
        let mut entries = self.lock();
        match entries.remove(key) {
            Some(slot) => slot.expires.is_none_or(|at| at > Instant::now()),
            None => false,
        }
    }

    /// Removes every entry.
    pub fn flush(&self) {
        *self.lock() = Entries::default();
    }

    /// Bytes held (keys, headers and bodies, with a per-entry overhead).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(body: &str) -> CachedResponse {
        CachedResponse {
            status: 200,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: Bytes::from(body.to_string()),
            timestamp: now_secs(),
            ttl: 60,
            request_body: None,
        }
    }

    #[test]
    fn least_recently_used_entries_go_first_when_full() {
        let body = "x".repeat(400);
        let one = response(&body).size("a");
        let store = MemoryStore::new(one * 3);
        assert!(store.store("a", response(&body), 0));
        assert!(store.store("b", response(&body), 0));
        assert!(store.store("c", response(&body), 0));
        assert!(store.fetch("a").is_some(), "a is now the most recent");
        assert!(store.store("d", response(&body), 0));
        assert!(store.fetch("b").is_none(), "b was the least recently used");
        assert!(store.fetch("a").is_some() && store.fetch("c").is_some() && store.fetch("d").is_some());
        assert!(store.bytes() <= store.capacity());
    }

    #[test]
    fn an_entry_larger_than_the_store_is_not_kept() {
        let store = MemoryStore::new(1000);
        assert!(store.store("small", response("ok"), 0));
        assert!(!store.store("big", response(&"x".repeat(2000)), 0));
        assert!(store.fetch("small").is_some(), "a refused entry evicts nothing");
    }

    #[test]
    fn purge_and_flush_remove_entries_and_their_bytes() {
        let store = MemoryStore::new(10_000);
        store.store("a", response("1"), 0);
        store.store("b", response("2"), 0);
        assert!(store.purge("a"));
        assert!(!store.purge("a"));
        assert_eq!(store.len(), 1);
        store.flush();
        assert!(store.is_empty());
        assert_eq!(store.bytes(), 0);
    }

    #[test]
    fn replacing_a_key_counts_its_bytes_once() {
        let store = MemoryStore::new(10_000);
        store.store("a", response("1"), 0);
        let once = store.bytes();
        store.store("a", response("1"), 0);
        assert_eq!(store.bytes(), once);
    }
}
