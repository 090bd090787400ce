//! The runtime key-value store: plugin data that lives beside the
//! configuration but is never part of it (the `session` plugin's
//! server-side sessions, `acme`'s certificates and challenges). A write
//! bumps no config version and rebuilds nothing.
//!
//! Entries live in named tables ([`Table`]); each has a value and an
//! optional expiry (seconds since the epoch). Every lookup is by key; an
//! expired entry reads as absent at once and leaves through the backend's
//! TTL (an expiry index purged in batches, or Redis's own `EXPIREAT`),
//! never a scan. Backends, chosen with the OAuth2 token store's setting
//! (`oauth2_token_store`) so that a cluster shares both:
//! - [`lmdb::LmdbKv`]: an LMDB environment of its own under the prefix;
//! - [`redis::RedisKv`]: a Redis server several nodes share;
//! - `strait_store::pg::PgKv`: the PostgreSQL database's `runtime_kv`.
//!
//! The node opens one store at start and [`install`]s it; plugins and the
//! Admin API find it with [`installed`].

pub mod lmdb;
pub mod memory;
pub mod redis;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

/// The tables this build writes. The name is part of every key the
/// backends store, so it never changes once released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// `session` with `storage = kong` (Kong's `sessions`).
    Sessions,
    /// `acme` with `storage = kong` (Kong's `acme_storage`).
    Acme,
}

impl Table {
    pub fn name(self) -> &'static str {
        match self {
            Table::Sessions => "sessions",
            Table::Acme => "acme",
        }
    }

    pub const ALL: [Table; 2] = [Table::Sessions, Table::Acme];
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("invalid offset")]
    BadCursor,
    #[error("runtime store unavailable: {0}")]
    Unavailable(String),
    #[error("runtime store error: {0}")]
    Failed(String),
}

pub type KvFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, KvError>> + Send + 'a>>;

/// One page of [`KvStore::list`]: keys (in the backend's order) with
/// their values.
#[derive(Debug, Clone, Default)]
pub struct KvPage {
    pub entries: Vec<(String, Vec<u8>)>,
    /// Opaque; hand it back for the next page. None: the last page.
    pub next: Option<String>,
}

/// What every backend offers. Writes resolve once durable.
pub trait KvStore: Send + Sync + std::fmt::Debug {
    /// Which backend, for logs (`embedded`, `redis`, `postgres`).
    fn backend(&self) -> &'static str;
    /// The value under `key`, unless absent or expired.
    fn get(&self, table: Table, key: &str) -> KvFuture<'_, Option<Vec<u8>>>;
    /// Store `value` under `key`, replacing what was there; it expires
    /// `ttl` seconds from now (None: never; zero or less: at once).
    fn put(&self, table: Table, key: &str, value: Vec<u8>, ttl: Option<i64>) -> KvFuture<'_, ()>;
    /// Remove `key`; true when a live entry was there.
    fn delete(&self, table: Table, key: &str) -> KvFuture<'_, bool>;
    /// About `size` live entries whose key starts with `prefix`, from
    /// `cursor` (None: the start). Admin API pages and background work,
    /// never a proxy path.
    fn list(&self, table: Table, prefix: &str, cursor: Option<&str>, size: usize) -> KvFuture<'_, KvPage>;
}

static STORE: OnceLock<Arc<dyn KvStore>> = OnceLock::new();

/// Make `store` the node's runtime store; false when one already is.
pub fn install(store: Arc<dyn KvStore>) -> bool {
    STORE.set(store).is_ok()
}

/// The node's runtime store, when it has one.
pub fn installed() -> Option<&'static Arc<dyn KvStore>> {
    STORE.get()
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    crate::oauth2::now()
}

/// When an entry written now with `ttl` expires (None: never).
pub fn expiry(ttl: Option<i64>) -> Option<i64> {
    ttl.map(|ttl| now().saturating_add(ttl.max(0)))
}

/// Run a write after the response (a phase that cannot wait, such as a
/// header filter) on the calling thread's runtime; a failure is logged.
/// False when there is no runtime to run it on.
pub fn spawn_write(what: &'static str, write: impl Future<Output = Result<(), KvError>> + Send + 'static) -> bool {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::error!(what, "runtime store: no runtime to write on");
        return false;
    };
    runtime.spawn(async move {
        if let Err(error) = write.await {
            tracing::warn!(what, %error, "runtime store: a write failed");
        }
    });
    true
}

#[cfg(test)]
mod tests;
