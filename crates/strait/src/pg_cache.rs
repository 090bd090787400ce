//! The local copy of what the node serves, in an LMDB store of its own
//! under the prefix, for the nodes whose configuration lives elsewhere:
//! `database = postgres` (`<prefix>/pg_cache`), so a node that starts while
//! PostgreSQL is away serves its last configuration instead of nothing,
//! and data planes (`<prefix>/dp_cache`), which serve it from their first
//! second whether the control plane is there or not.
//!
//! Every publish that comes from PostgreSQL (an Admin API write of this
//! node, or the follower applying other nodes' writes) also writes the
//! cache, on the compiler thread, in publish order. The PostgreSQL version
//! the cache holds is in `pg_version` beside it; without that file the
//! cache is not used (a failed cache write removes it, and the next start
//! with the database up rewrites everything).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Result};
use strait_core::{Config, ConfigChange, ConfigVersion, Entity, EntityKind};
use strait_snapshot::{compile_snapshot_hashed, CompileError, Snapshot, SnapshotBuilder};
use strait_store::pg::PgStore;
use strait_store::{ChangeLogEntry, LmdbStore, Store, StoreError};
use uuid::Uuid;

pub struct LocalCache {
    store: Arc<LmdbStore>,
    version_file: PathBuf,
    /// A part of a transfer in parts failed: the cache stays unused.
    part_failed: std::sync::atomic::AtomicBool,
}

impl LocalCache {
    /// The PostgreSQL node's cache.
    pub fn open(prefix: &Path) -> Result<LocalCache> {
        LocalCache::open_in(&prefix.join("pg_cache"), "pg_version")
    }

    /// A data plane's cache.
    pub fn open_data_plane(prefix: &Path) -> Result<LocalCache> {
        LocalCache::open_in(&prefix.join("dp_cache"), "cp_version")
    }

    fn open_in(dir: &Path, version_file: &str) -> Result<LocalCache> {
        let store = LmdbStore::open(dir).map_err(|e| anyhow!("opening the local cache {}: {e}", dir.display()))?;
        Ok(LocalCache {
            store: Arc::new(store),
            version_file: dir.join(version_file),
            part_failed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The cache as a store to read (a data plane's Admin API reads it).
    pub fn store(&self) -> Arc<LmdbStore> {
        self.store.clone()
    }

    /// The cached configuration, its PostgreSQL version and hash, when the
    /// cache is complete.
    pub fn load(&self) -> Option<(ConfigVersion, Config, Option<String>)> {
        let version = self.complete_version()?;
        let (_, config) = self.store.load().ok()?;
        let hash = self.store.config_hash().ok().flatten();
        Some((version, config, hash))
    }

    /// The cached configuration compiled into the snapshot to serve, its
    /// entities going from the store straight into the snapshot's state (as
    /// a transfer from the control plane does), so a data plane restarting
    /// with a million consumers never holds them twice. `None` when the
    /// cache is incomplete (nothing to serve yet).
    pub fn load_snapshot(&self) -> Option<Result<Snapshot, CompileError>> {
        let version = self.complete_version()?;
        let Some(hash) = self.store.config_hash().ok().flatten() else {
            // A cache written without the control plane's hash: compile it
            // whole, hashing it as the control plane would.
            let (_, config) = self.store.load().ok()?;
            return Some(compile_snapshot_hashed(version, Arc::new(config), None));
        };
        let mut builder = SnapshotBuilder::default();
        self.store.for_each_entity(|entity| builder.add(entity)).ok()?;
        Some(builder.finish(version, hash))
    }

    /// The version the cache holds, when it is complete (its version file
    /// is written last).
    fn complete_version(&self) -> Option<ConfigVersion> {
        std::fs::read_to_string(&self.version_file).ok()?.trim().parse().ok()
    }

    fn record(&self, version: ConfigVersion) {
        let temporary = self.version_file.with_extension("tmp");
        let written = std::fs::write(&temporary, version.to_string())
            .and_then(|_| std::fs::rename(&temporary, &self.version_file));
        if let Err(error) = written {
            tracing::warn!(%error, "the local cache's version could not be written");
            self.invalidate();
        }
    }

    fn invalidate(&self) {
        let _ = std::fs::remove_file(&self.version_file);
    }

    /// The whole configuration at `version`.
    pub fn replace(&self, version: ConfigVersion, config: &Config, hash: Option<&str>) {
        match self.store.replace_hashed(config, hash) {
            Ok(_) => self.record(version),
            Err(error) => {
                tracing::warn!(%error, "the local cache could not be written; it is not used until rewritten");
                self.invalidate();
            }
        }
    }

    /// Changes that took PostgreSQL to `version`. A delete of what the cache
    /// never held (created and deleted between two catch-ups) is nothing.
    pub fn apply(&self, version: ConfigVersion, changes: &[ConfigChange]) {
        self.apply_hashed(version, changes, None);
    }

    /// [`LocalCache::apply`], the cache keeping `hash` as the configuration's.
    fn apply_hashed(&self, version: ConfigVersion, changes: &[ConfigChange], hash: Option<&str>) {
        let changes: Vec<ConfigChange> = changes
            .iter()
            .filter(|change| match change {
                ConfigChange::Delete { kind, id } => !matches!(self.store.get(*kind, *id), Ok(None)),
                ConfigChange::Upsert { .. } => true,
            })
            .cloned()
            .collect();
        let applied = match hash {
            Some(hash) => self.store.apply_hashed(&changes, Some(hash)),
            None => self.store.apply(&changes),
        };
        match applied {
            Ok(_) => self.record(version),
            Err(error) => {
                tracing::warn!(%error, "the local cache fell out of step; it is not used until rewritten");
                self.invalidate();
            }
        }
    }
}

impl strait_cluster::dp::ConfigCache for LocalCache {
    fn apply(&self, version: ConfigVersion, changes: &[ConfigChange], hash: Option<&str>) {
        self.apply_hashed(version, changes, hash)
    }

    fn begin_whole(&self) {
        self.invalidate();
        self.part_failed.store(false, std::sync::atomic::Ordering::Relaxed);
        if let Err(error) = self.store.replace(&Config::default()) {
            tracing::warn!(%error, "the local cache could not be emptied; it is not used until rewritten");
        }
    }

    fn add(&self, entities: &[Entity]) {
        // Each part in a transaction of its own: the write never holds the
        // whole configuration's pages. The cache stays unused (no version
        // file) until the last part.
        if let Err(error) = self.store.add_part(entities) {
            tracing::warn!(%error, "the local cache could not take a part of the configuration; it is not used");
            self.part_failed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn finish(&self, version: ConfigVersion, hash: &str) {
        if self.part_failed.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        match self.store.apply_hashed(&[], Some(hash)) {
            Ok(_) => self.record(version),
            Err(error) => tracing::warn!(%error, "the local cache could not be completed; it is not used"),
        }
    }
}

/// A shared store (PostgreSQL, Cassandra), with every committed write
/// copied to the node's local cache.
pub struct Cached<S> {
    pub primary: Arc<S>,
    pub cache: Arc<LocalCache>,
    /// `pg_ro_*`: the replica an Admin API GET request reads from.
    pub replica: Option<S>,
}

/// The PostgreSQL store with the cache (and its read replica).
pub type CachedPg = Cached<PgStore>;

impl<S: Store> Cached<S> {
    /// Where a read goes: the replica while an Admin API GET request is
    /// handled (when there is one), else the primary.
    fn reads(&self) -> &S {
        match &self.replica {
            Some(replica) if strait_admin::in_read_request() => replica,
            _ => &self.primary,
        }
    }
}

impl<S: Store> Store for Cached<S> {
    fn load(&self) -> Result<(ConfigVersion, Config), StoreError> {
        self.primary.load()
    }

    fn version(&self) -> Result<ConfigVersion, StoreError> {
        self.primary.version()
    }

    fn replace(&self, config: &Config) -> Result<ConfigVersion, StoreError> {
        self.replace_hashed(config, None)
    }

    fn replace_hashed(&self, config: &Config, hash: Option<&str>) -> Result<ConfigVersion, StoreError> {
        let version = self.primary.replace_hashed(config, hash)?;
        self.cache.replace(version, config, hash);
        Ok(version)
    }

    fn config_hash(&self) -> Result<Option<String>, StoreError> {
        self.primary.config_hash()
    }

    fn apply(&self, changes: &[ConfigChange]) -> Result<ConfigVersion, StoreError> {
        let version = self.primary.apply(changes)?;
        if !changes.is_empty() {
            self.cache.apply(version, changes);
        }
        Ok(version)
    }

    fn apply_hashed(&self, changes: &[ConfigChange], hash: Option<&str>) -> Result<ConfigVersion, StoreError> {
        let version = self.primary.apply_hashed(changes, hash)?;
        self.cache.apply(version, changes);
        Ok(version)
    }

    fn apply_at(&self, base: ConfigVersion, changes: &[ConfigChange]) -> Result<ConfigVersion, StoreError> {
        let version = self.primary.apply_at(base, changes)?;
        if !changes.is_empty() {
            self.cache.apply(version, changes);
        }
        Ok(version)
    }

    fn apply_hashed_at(
        &self,
        base: ConfigVersion,
        changes: &[ConfigChange],
        hash: Option<&str>,
    ) -> Result<ConfigVersion, StoreError> {
        let version = self.primary.apply_hashed_at(base, changes, hash)?;
        self.cache.apply(version, changes);
        Ok(version)
    }

    fn get(&self, kind: EntityKind, id: Uuid) -> Result<Option<Entity>, StoreError> {
        self.reads().get(kind, id)
    }

    fn get_by_unique(&self, kind: EntityKind, field: &str, value: &str) -> Result<Option<Entity>, StoreError> {
        self.reads().get_by_unique(kind, field, value)
    }

    fn ids_by_foreign(&self, kind: EntityKind, field: &str, parent: Uuid) -> Result<Vec<Uuid>, StoreError> {
        self.reads().ids_by_foreign(kind, field, parent)
    }

    fn list(&self, kind: EntityKind, after: Option<Uuid>, size: usize) -> Result<Vec<Entity>, StoreError> {
        self.reads().list(kind, after, size)
    }

    fn changes_since(&self, version: ConfigVersion) -> Result<Vec<ChangeLogEntry>, StoreError> {
        self.primary.changes_since(version)
    }
}
