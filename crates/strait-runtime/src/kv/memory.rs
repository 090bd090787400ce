//! A node-local runtime store in memory (Kong's `shm` storage for acme):
//! what it holds is lost when the node stops, and other nodes do not see
//! it. Expired entries read as absent and are dropped as writes pass by.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{expiry, now, KvError, KvFuture, KvPage, KvStore, Table};

/// (table, key) -> (value, expiry).
type Entries = BTreeMap<(&'static str, String), (Vec<u8>, Option<i64>)>;

/// The in-memory store.
#[derive(Debug, Default)]
pub struct MemoryKv {
    entries: Mutex<Entries>,
}

fn live(at: &Option<i64>, now: i64) -> bool {
    at.is_none_or(|at| at > now)
}

impl MemoryKv {
    fn with<T>(&self, f: impl FnOnce(&mut Entries) -> T) -> T {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut entries)
    }
}

impl KvStore for MemoryKv {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn get(&self, table: Table, key: &str) -> KvFuture<'_, Option<Vec<u8>>> {
        let now = now();
        let found = self.with(|entries| {
            entries
                .get(&(table.name(), key.to_string()))
                .filter(|(_, at)| live(at, now))
                .map(|(value, _)| value.clone())
        });
        Box::pin(std::future::ready(Ok(found)))
    }

    fn put(&self, table: Table, key: &str, value: Vec<u8>, ttl: Option<i64>) -> KvFuture<'_, ()> {
        let now = now();
        let at = expiry(ttl);
        self.with(|entries| {
            entries.retain(|_, (_, at)| live(at, now));
            entries.insert((table.name(), key.to_string()), (value, at));
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn delete(&self, table: Table, key: &str) -> KvFuture<'_, bool> {
        let now = now();
        let removed = self.with(|entries| entries.remove(&(table.name(), key.to_string())));
        Box::pin(std::future::ready(Ok(removed.is_some_and(|(_, at)| live(&at, now)))))
    }

    fn list(&self, table: Table, prefix: &str, cursor: Option<&str>, size: usize) -> KvFuture<'_, KvPage> {
        if cursor.is_some_and(|c| !c.starts_with(prefix)) {
            return Box::pin(std::future::ready(Err(KvError::BadCursor)));
        }
        let now = now();
        let size = size.max(1);
        let page = self.with(|entries| {
            let start = (table.name(), cursor.unwrap_or(prefix).to_string());
            let mut page = KvPage::default();
            for ((t, key), (value, at)) in entries.range(start..) {
                if *t != table.name() || !key.starts_with(prefix) {
                    break;
                }
                if cursor == Some(key.as_str()) || !live(at, now) {
                    continue;
                }
                if page.entries.len() == size {
                    page.next = page.entries.last().map(|(k, _)| k.clone());
                    break;
                }
                page.entries.push((key.clone(), value.clone()));
            }
            page
        });
        Box::pin(std::future::ready(Ok(page)))
    }
}
