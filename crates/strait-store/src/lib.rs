//! strait-store: where configuration is persisted. Owns the backend-neutral
//! [`Store`] trait, the change log model, the embedded LMDB dialect
//! ([`LmdbStore`]) and the index keys every dialect maintains ([`keys`]).
//!
//! It must not know about snapshots, routers or HTTP: it takes typed entities
//! from `strait-core` and gives them back. Every write is one transaction that
//! bumps `config_version` by exactly one and appends to the change log, so a
//! reader either sees a whole committed version or the one before it.
//!
//! Lookups are by primary key or through index tables (unique keys, foreign
//! keys), never by scanning a table: that is the rule the Kong-on-Cassandra
//! field report taught us.
#![deny(unsafe_code)]

pub mod cassandra;
mod codec;
pub mod keys;
mod lmdb;
pub mod pg;

use serde::{Deserialize, Serialize};
use strait_core::{Config, ConfigChange, ConfigVersion, Entity, EntityKind};
use uuid::Uuid;

pub use lmdb::{
    c_heap_arena_per_thread, tune_c_heap, LmdbStore, DEFAULT_CHANGE_LOG_LIMIT, DEFAULT_MAP_SIZE, REOPEN_AFTER_ENTITIES,
};

/// TLS to a shared database (`pg_ssl`, `cassandra_ssl`): the rustls client
/// configuration (which roots it trusts, or none checked with
/// `*_ssl_verify = off`), built by the node.
#[derive(Clone)]
pub struct ClientTls(pub std::sync::Arc<rustls::ClientConfig>);

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

impl PartialEq for ClientTls {
    fn eq(&self, other: &ClientTls) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ClientTls {}

/// Everything a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("LMDB error: {0}")]
    Lmdb(#[from] heed::Error),
    /// The PostgreSQL store's server refused or failed a statement.
    #[error("PostgreSQL error: {0}")]
    Postgres(String),
    /// The Cassandra store's cluster refused or failed a statement.
    #[error("Cassandra error: {0}")]
    Cassandra(String),
    /// The shared database cannot be reached (connection refused or lost,
    /// no answer within `pg_timeout`); nothing was written.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// An entity could not be serialised (not expected for typed entities).
    #[error("cannot encode entity: {0}")]
    Encode(serde_json::Error),
    /// Bytes read back from disk do not decode; the store is damaged or was
    /// written by an incompatible version.
    #[error("corrupt record in table '{table}' (key {id}): {reason}")]
    Corrupt { table: String, id: String, reason: String },
    /// A change deletes an entity that does not exist.
    #[error("no {} with id {id}", kind.singular())]
    NotFound { kind: EntityKind, id: Uuid },
    /// A write would give two entities of `kind` the same value of a unique
    /// field; nothing was written.
    #[error("UNIQUE violation detected on '{field}' of {}: '{value}'", kind.singular())]
    UniqueViolation {
        kind: EntityKind,
        field: String,
        value: String,
    },
    /// A write would leave an entity pointing at a parent that does not
    /// exist (`kind`.`field` -> `parent`); nothing was written.
    #[error("{} {id} references missing {} via '{field}': {parent}", kind.singular(), parent_kind.singular())]
    ForeignKey {
        kind: EntityKind,
        id: Uuid,
        field: String,
        parent_kind: EntityKind,
        parent: Uuid,
    },
    /// A delete would leave children pointing at the deleted entity; list the
    /// cascade explicitly in the same transaction.
    #[error("an existing '{}' entity references this '{}' entity ({parent})", child_kind.singular(), kind.singular())]
    StillReferenced {
        kind: EntityKind,
        parent: Uuid,
        child_kind: EntityKind,
        child: Uuid,
    },
    /// Another node committed since the version the caller derived its
    /// changes from; nothing was written. Catch up, derive again, retry.
    #[error("the configuration moved on: expected version {expected}, found {found}")]
    Stale {
        expected: ConfigVersion,
        found: ConfigVersion,
    },
    /// `(kind, field)` is not a unique or foreign key this store indexes.
    #[error("'{field}' is not an indexed field of {}", kind.table())]
    UnknownIndex { kind: EntityKind, field: String },
    /// The change log no longer holds every entry after the requested
    /// version; the caller must `load` the whole configuration instead.
    #[error("change log trimmed: entries after version {requested} are incomplete (kept from {oldest_complete})")]
    ChangeLogTrimmed {
        requested: ConfigVersion,
        oldest_complete: ConfigVersion,
    },
}

/// What one change log entry did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeOp {
    Upsert,
    Delete,
    /// The whole configuration was replaced; `kind` is meaningless and the
    /// reader must reload everything.
    Replace,
}

/// One line of the change log: which entity a committed version touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeLogEntry {
    pub version: ConfigVersion,
    pub kind: EntityKind,
    pub op: ChangeOp,
    /// `None` only for [`ChangeOp::Replace`].
    pub id: Option<Uuid>,
}

/// A configuration store dialect. Implementations are transactional: every
/// method that writes commits everything or nothing.
pub trait Store: Send + Sync {
    /// Current committed version and the full configuration, read in one
    /// transaction. Entities of each kind come back in id order.
    fn load(&self) -> Result<(ConfigVersion, Config), StoreError>;

    /// Current committed version (0 for a store never written).
    fn version(&self) -> Result<ConfigVersion, StoreError>;

    /// Replace everything in one write transaction: bumps the version by one
    /// and logs a single [`ChangeOp::Replace`]. Unique keys and foreign keys
    /// of the new configuration are checked. Returns the new version.
    fn replace(&self, config: &Config) -> Result<ConfigVersion, StoreError>;
    /// `replace`, also recording the hash of the document the configuration
    /// came from (Kong's `configuration_hash`) in the same transaction.
    fn replace_hashed(&self, config: &Config, hash: Option<&str>) -> Result<ConfigVersion, StoreError>;
    /// The hash recorded by the last `replace_hashed`; cleared by `apply`.
    fn config_hash(&self) -> Result<Option<String>, StoreError>;

    /// Apply entity changes in one write transaction, in order, all or
    /// nothing: bumps the version by one and logs each change. Unique keys
    /// are checked as each change applies; foreign keys once all have
    /// applied, so cascades may be listed in any order. An empty slice
    /// writes nothing and returns the current version.
    fn apply(&self, changes: &[ConfigChange]) -> Result<ConfigVersion, StoreError>;
    /// `apply`, recording `hash` as the configuration's hash in the same
    /// transaction instead of clearing it: what a `/config` post that
    /// differs from the running configuration in a few entities commits.
    /// With no changes only the hash is written and the version stays.
    fn apply_hashed(&self, changes: &[ConfigChange], hash: Option<&str>) -> Result<ConfigVersion, StoreError>;

    /// `apply`, only while the committed version is still `base`, the
    /// version the caller derived its snapshot from; else
    /// [`StoreError::Stale`] and nothing is written. A dialect with one
    /// writer (LMDB: one node owns its file) has nothing to race and
    /// applies; a shared database checks in the write transaction.
    fn apply_at(&self, base: ConfigVersion, changes: &[ConfigChange]) -> Result<ConfigVersion, StoreError> {
        let _ = base;
        self.apply(changes)
    }

    /// `apply_hashed` at `base`, as [`Store::apply_at`] is `apply` at it:
    /// what a `/config` post committed as its changes from the running
    /// snapshot writes. With no changes, the hash only, still at `base`.
    fn apply_hashed_at(
        &self,
        base: ConfigVersion,
        changes: &[ConfigChange],
        hash: Option<&str>,
    ) -> Result<ConfigVersion, StoreError> {
        let _ = base;
        self.apply_hashed(changes, hash)
    }

    /// One entity by primary key.
    fn get(&self, kind: EntityKind, id: Uuid) -> Result<Option<Entity>, StoreError>;

    /// One entity by a unique key listed in [`keys::UNIQUE_FIELDS`].
    fn get_by_unique(&self, kind: EntityKind, field: &str, value: &str) -> Result<Option<Entity>, StoreError>;

    /// Ids (in id order) of entities of `kind` whose foreign key `field`
    /// (listed in [`keys::FOREIGN_FIELDS`]) points at `parent`.
    fn ids_by_foreign(&self, kind: EntityKind, field: &str, parent: Uuid) -> Result<Vec<Uuid>, StoreError>;

    /// A page of `kind` in id order: entities after `after` (exclusive), at
    /// most `size` of them.
    fn list(&self, kind: EntityKind, after: Option<Uuid>, size: usize) -> Result<Vec<Entity>, StoreError>;

    /// Log entries of versions after `version`, oldest first. Fails with
    /// [`StoreError::ChangeLogTrimmed`] when some of them were trimmed.
    fn changes_since(&self, version: ConfigVersion) -> Result<Vec<ChangeLogEntry>, StoreError>;
}

/// What a runtime store's call answers with, awaited from any runtime.
pub(crate) type Answer<T, E> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send + 'static>>;

/// Runs `work` on a store's own `runtime`, given up after `limit`
/// (`timed_out`); the answer is awaited from any runtime (`stopped`: the
/// store's runtime went away). The runtime stores' (`PgTokens`, `PgKv`, their Cassandra twins)
/// way of keeping a slow database off the proxy workers' threads.
pub(crate) fn run_within<T, E>(
    runtime: &tokio::runtime::Runtime,
    limit: std::time::Duration,
    work: impl std::future::Future<Output = Result<T, E>> + Send + 'static,
    timed_out: fn(String) -> E,
    stopped: fn(String) -> E,
) -> Answer<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    let handle = runtime.spawn(async move {
        tokio::time::timeout(limit, work)
            .await
            .unwrap_or_else(|_| Err(timed_out(format!("no answer within {limit:?}"))))
    });
    Box::pin(async move {
        handle
            .await
            .map_err(|e| stopped(format!("the store's runtime stopped: {e}")))?
    })
}
