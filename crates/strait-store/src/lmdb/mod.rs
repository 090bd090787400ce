//! The embedded dialect: one LMDB environment in the node's data directory.
//! Readers never block the writer or each other; one writer at a time.
//! See [`tables`] for the on-disk layout.

mod env;
mod read;
mod tables;
mod write;

pub use env::{c_heap_arena_per_thread, tune_c_heap};

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use heed::{Env, RwTxn, WithoutTls};
use strait_core::{Config, ConfigChange, ConfigVersion, Entity, EntityKind};
use uuid::Uuid;

use self::tables::{read_meta, write_meta, Tables, CONFIG_HASH, CONFIG_VERSION};
use crate::{ChangeLogEntry, ChangeOp, Store, StoreError};

/// Default LMDB map size: the most the data file may grow to (address space
/// is reserved, not memory or disk).
pub const DEFAULT_MAP_SIZE: usize = 4 << 30;
/// Default number of change log entries kept.
pub const DEFAULT_CHANGE_LOG_LIMIT: usize = 10_000;

/// A write of at least this many entities closes and reopens the
/// environment when it ends (committed or not).
///
/// LMDB keeps every single page a write transaction dirtied on a private
/// free list for later transactions and frees that list only when the
/// environment closes: without a reopen, the largest write ever made stays
/// resident for the node's life. Loading the 10k/10k set left 38 MB of them
/// (a quarter of the node's memory), and a config with 4,000 routes that was
/// replaced by 10 left 8 MB (docs/benchmarks.md#lmdb-dirty-pages). A small
/// write dirties a few pages per entity, so what it leaves is bounded; a
/// reopen costs a fraction of a millisecond and drops the map's resident
/// pages, which later reads fault back in from the page cache.
pub const REOPEN_AFTER_ENTITIES: usize = 256;

/// The LMDB configuration store.
pub struct LmdbStore {
    dir: PathBuf,
    map_size: usize,
    /// `None` only when a reopen failed: the next operation tries again.
    open: RwLock<Option<Open>>,
    change_log_limit: usize,
}

/// An open environment and its database handles (valid only with it).
struct Open {
    env: Env<WithoutTls>,
    tables: Tables,
}

impl Open {
    fn new(dir: &Path, map_size: usize) -> Result<Open, StoreError> {
        let env = env::open_env(dir, map_size)?;
        // Reader slots of killed processes would otherwise pin old pages.
        let stale = env.clear_stale_readers()?;
        if stale > 0 {
            tracing::info!(stale, dir = %dir.display(), "cleared stale LMDB readers");
        }
        let tables = Tables::create(&env)?;
        Ok(Open { env, tables })
    }
}

impl LmdbStore {
    /// Open (creating `dir` and the databases if needed) with the default
    /// map size.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with_map_size(dir, DEFAULT_MAP_SIZE)
    }

    /// Open with an explicit map size in bytes (rounded up to 64 KiB).
    pub fn open_with_map_size(dir: &Path, map_size: usize) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)?;
        let open = Open::new(dir, map_size)?;
        Ok(LmdbStore {
            dir: dir.to_path_buf(),
            map_size,
            open: RwLock::new(Some(open)),
            change_log_limit: DEFAULT_CHANGE_LOG_LIMIT,
        })
    }

    /// Keep at most `limit` change log entries (at least one).
    pub fn with_change_log_limit(mut self, limit: usize) -> Self {
        self.change_log_limit = limit.max(1);
        self
    }

    /// Run `f` with the open environment (reopening it first if the last
    /// reopen failed).
    fn with<R>(&self, f: impl FnOnce(&Open) -> Result<R, StoreError>) -> Result<R, StoreError> {
        loop {
            {
                let open = self.open.read().unwrap_or_else(|poisoned| poisoned.into_inner());
                if let Some(open) = open.as_ref() {
                    return f(open);
                }
            }
            let mut open = self.open.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            if open.is_none() {
                *open = Some(Open::new(&self.dir, self.map_size)?);
            }
        }
    }

    /// A write touching `entities` entities; see [`REOPEN_AFTER_ENTITIES`].
    fn write<R>(&self, entities: usize, f: impl FnOnce(&Open) -> Result<R, StoreError>) -> Result<R, StoreError> {
        let result = self.with(f);
        if entities >= REOPEN_AFTER_ENTITIES {
            self.reopen();
        }
        result
    }

    /// Close the environment (freeing LMDB's kept dirty pages) and open it
    /// again. Waits for reads in flight; a failure is logged and the next
    /// operation opens it.
    fn reopen(&self) {
        let started = std::time::Instant::now();
        let mut open = self.open.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        // The old environment must be closed before the path is opened again
        // (heed refuses a second open, and LMDB's locks would break). Nothing
        // else holds it: transactions live only inside this store's calls.
        *open = None;
        env::return_c_heap_memory();
        match Open::new(&self.dir, self.map_size) {
            Ok(reopened) => *open = Some(reopened),
            Err(error) => tracing::error!(%error, dir = %self.dir.display(), "could not reopen the LMDB environment"),
        }
        tracing::debug!(
            elapsed_us = started.elapsed().as_micros() as u64,
            "LMDB environment reopened"
        );
    }

    /// Bump the version, log `entries` (built for the new version) and commit.
    fn commit_version(
        &self,
        tables: &Tables,
        mut txn: RwTxn,
        log: impl FnOnce(ConfigVersion) -> Vec<ChangeLogEntry>,
    ) -> Result<ConfigVersion, StoreError> {
        let version = read_meta(tables, &txn, CONFIG_VERSION)? + 1;
        write_meta(tables, &mut txn, CONFIG_VERSION, version)?;
        let entries = log(version);
        write::append_change_log(tables, &mut txn, &entries, self.change_log_limit)?;
        txn.commit()?;
        Ok(version)
    }
}

/// The change log's record of a whole replace (or one part of one).
fn replace_entry(version: ConfigVersion) -> Vec<ChangeLogEntry> {
    vec![ChangeLogEntry {
        version,
        kind: EntityKind::ALL[0],
        op: ChangeOp::Replace,
        id: None,
    }]
}

/// Record (or clear) the hash of the document the configuration came from.
fn write_hash(tables: &Tables, txn: &mut heed::RwTxn, hash: Option<&str>) -> Result<(), StoreError> {
    match hash {
        Some(hash) => tables.meta.put(txn, CONFIG_HASH, hash.as_bytes())?,
        None => {
            tables.meta.delete(txn, CONFIG_HASH)?;
        }
    }
    Ok(())
}

impl LmdbStore {
    /// Every stored entity, kind by kind, handed to `each` one at a time
    /// from one read transaction, and the version they make up: a caller
    /// that builds its own structure from them (a data plane compiling its
    /// cached configuration at start) never holds the configuration twice.
    pub fn for_each_entity(&self, each: impl FnMut(Entity)) -> Result<ConfigVersion, StoreError> {
        let (version, count) = self.with(|Open { env, tables }| {
            let txn = env.read_txn()?;
            let version = read_meta(tables, &txn, CONFIG_VERSION)?;
            Ok((version, read::for_each_entity(tables, &txn, each)?))
        })?;
        self.after_whole_read(count);
        Ok(version)
    }

    /// One part of a whole configuration, written into the store after an
    /// empty [`Store::replace`] began it: each entity as `replace` writes
    /// one, with one change-log entry for the part (a replace under way)
    /// instead of one per entity, and no read of what the emptied store
    /// cannot hold. A data plane's transfer of a million consumers spent
    /// most of its time in those reads, per-entity log entries and
    /// re-decoded integrity checks (docs/hybrid.md). Refused, with nothing
    /// written, when an id was already written or a parent is missing.
    pub fn add_part(&self, entities: &[Entity]) -> Result<ConfigVersion, StoreError> {
        self.write(entities.len(), |Open { env, tables }| {
            let mut txn = env.write_txn()?;
            write::add_part(tables, &mut txn, entities)?;
            self.commit_version(tables, txn, replace_entry)
        })
    }

    /// A read of the whole store faulted in nearly every page of its
    /// file, and they stay mapped (resident, counted in the node's RSS) for
    /// as long as the environment is open: with a million consumers, about
    /// as much again as the configuration built from them. A reopen unmaps
    /// them; later reads fault in only what they touch.
    fn after_whole_read(&self, entities: usize) {
        if entities >= REOPEN_AFTER_ENTITIES {
            self.reopen();
        }
    }
}

impl Store for LmdbStore {
    fn load(&self) -> Result<(ConfigVersion, Config), StoreError> {
        let (version, config) = self.with(|Open { env, tables }| {
            let txn = env.read_txn()?;
            let version = read_meta(tables, &txn, CONFIG_VERSION)?;
            Ok((version, read::load_config(tables, &txn)?))
        })?;
        self.after_whole_read(config.entity_count());
        Ok((version, config))
    }

    fn version(&self) -> Result<ConfigVersion, StoreError> {
        self.with(|Open { env, tables }| {
            let txn = env.read_txn()?;
            read_meta(tables, &txn, CONFIG_VERSION)
        })
    }

    fn config_hash(&self) -> Result<Option<String>, StoreError> {
        self.with(|Open { env, tables }| {
            let txn = env.read_txn()?;
            match tables.meta.get(&txn, CONFIG_HASH)? {
                Some(bytes) => Ok(Some(String::from_utf8_lossy(bytes).into_owned())),
                None => Ok(None),
            }
        })
    }

    fn replace(&self, config: &Config) -> Result<ConfigVersion, StoreError> {
        self.replace_hashed(config, None)
    }

    fn replace_hashed(&self, config: &Config, hash: Option<&str>) -> Result<ConfigVersion, StoreError> {
        // Clearing the old tables frees their pages without dirtying them.
        self.write(config.entity_count(), |Open { env, tables }| {
            let mut txn = env.write_txn()?;
            write::replace_all(tables, &mut txn, config)?;
            write_hash(tables, &mut txn, hash)?;
            let version = self.commit_version(tables, txn, replace_entry)?;
            tracing::debug!(version, entities = config.entity_count(), "configuration replaced");
            Ok(version)
        })
    }

    fn apply(&self, changes: &[ConfigChange]) -> Result<ConfigVersion, StoreError> {
        if changes.is_empty() {
            return self.version();
        }
        self.apply_hashed(changes, None)
    }

    fn apply_hashed(&self, changes: &[ConfigChange], hash: Option<&str>) -> Result<ConfigVersion, StoreError> {
        self.write(changes.len(), |Open { env, tables }| {
            let mut txn = env.write_txn()?;
            if changes.is_empty() {
                write_hash(tables, &mut txn, hash)?;
                let version = read_meta(tables, &txn, CONFIG_VERSION)?;
                txn.commit()?;
                return Ok(version);
            }
            let next = read_meta(tables, &txn, CONFIG_VERSION)? + 1;
            let entries = write::apply_changes(tables, &mut txn, changes, next)?;
            write_hash(tables, &mut txn, hash)?;
            let version = self.commit_version(tables, txn, |_| entries)?;
            tracing::debug!(version, changes = changes.len(), "configuration changes applied");
            Ok(version)
        })
    }

    fn get(&self, kind: EntityKind, id: Uuid) -> Result<Option<Entity>, StoreError> {
        self.with(|Open { env, tables }| {
            let txn = env.read_txn()?;
            read::get(tables, &txn, kind, id)
        })
    }

    fn get_by_unique(&self, kind: EntityKind, field: &str, value: &str) -> Result<Option<Entity>, StoreError> {
        self.with(|Open { env, tables }| {
            let txn = env.read_txn()?;
            read::get_by_unique(tables, &txn, kind, field, value)
        })
    }

    fn ids_by_foreign(&self, kind: EntityKind, field: &str, parent: Uuid) -> Result<Vec<Uuid>, StoreError> {
        self.with(|Open { env, tables }| {
            let txn = env.read_txn()?;
            read::ids_by_foreign(tables, &txn, kind, field, parent)
        })
    }

    fn list(&self, kind: EntityKind, after: Option<Uuid>, size: usize) -> Result<Vec<Entity>, StoreError> {
        self.with(|Open { env, tables }| {
            let txn = env.read_txn()?;
            read::list(tables, &txn, kind, after, size)
        })
    }

    fn changes_since(&self, version: ConfigVersion) -> Result<Vec<ChangeLogEntry>, StoreError> {
        self.with(|Open { env, tables }| {
            let txn = env.read_txn()?;
            read::changes_since(tables, &txn, version)
        })
    }
}

#[cfg(test)]
mod tests;
