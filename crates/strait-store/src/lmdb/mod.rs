//! The embedded dialect: one LMDB environment in the node's data directory.
//! Readers never block the writer or each other; one writer at a time.
//! See [`tables`] for the on-disk layout.

mod env;
mod read;
mod tables;
mod write;

use std::path::Path;

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

/// The LMDB configuration store.
pub struct LmdbStore {
    env: Env<WithoutTls>,
    tables: Tables,
    change_log_limit: usize,
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
        let env = env::open_env(dir, map_size)?;
        // Reader slots of killed processes would otherwise pin old pages.
        let stale = env.clear_stale_readers()?;
        if stale > 0 {
            tracing::info!(stale, dir = %dir.display(), "cleared stale LMDB readers");
        }
        let tables = Tables::create(&env)?;
        Ok(LmdbStore {
            env,
            tables,
            change_log_limit: DEFAULT_CHANGE_LOG_LIMIT,
        })
    }

    /// Keep at most `limit` change log entries (at least one).
    pub fn with_change_log_limit(mut self, limit: usize) -> Self {
        self.change_log_limit = limit.max(1);
        self
    }

    /// Bump the version, log `entries` (built for the new version) and commit.
    fn commit_version(
        &self,
        mut txn: RwTxn,
        log: impl FnOnce(ConfigVersion) -> Vec<ChangeLogEntry>,
    ) -> Result<ConfigVersion, StoreError> {
        let version = read_meta(&self.tables, &txn, CONFIG_VERSION)? + 1;
        write_meta(&self.tables, &mut txn, CONFIG_VERSION, version)?;
        let entries = log(version);
        write::append_change_log(&self.tables, &mut txn, &entries, self.change_log_limit)?;
        txn.commit()?;
        Ok(version)
    }
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

impl Store for LmdbStore {
    fn load(&self) -> Result<(ConfigVersion, Config), StoreError> {
        let txn = self.env.read_txn()?;
        let version = read_meta(&self.tables, &txn, CONFIG_VERSION)?;
        Ok((version, read::load_config(&self.tables, &txn)?))
    }

    fn version(&self) -> Result<ConfigVersion, StoreError> {
        let txn = self.env.read_txn()?;
        read_meta(&self.tables, &txn, CONFIG_VERSION)
    }

    fn config_hash(&self) -> Result<Option<String>, StoreError> {
        let txn = self.env.read_txn()?;
        match self.tables.meta.get(&txn, CONFIG_HASH)? {
            Some(bytes) => Ok(Some(String::from_utf8_lossy(bytes).into_owned())),
            None => Ok(None),
        }
    }

    fn replace(&self, config: &Config) -> Result<ConfigVersion, StoreError> {
        self.replace_hashed(config, None)
    }

    fn replace_hashed(&self, config: &Config, hash: Option<&str>) -> Result<ConfigVersion, StoreError> {
        let mut txn = self.env.write_txn()?;
        write::replace_all(&self.tables, &mut txn, config)?;
        write_hash(&self.tables, &mut txn, hash)?;
        let version = self.commit_version(txn, |version| {
            vec![ChangeLogEntry {
                version,
                kind: EntityKind::ALL[0],
                op: ChangeOp::Replace,
                id: None,
            }]
        })?;
        tracing::debug!(version, entities = config.entity_count(), "configuration replaced");
        Ok(version)
    }

    fn apply(&self, changes: &[ConfigChange]) -> Result<ConfigVersion, StoreError> {
        if changes.is_empty() {
            return self.version();
        }
        self.apply_hashed(changes, None)
    }

    fn apply_hashed(&self, changes: &[ConfigChange], hash: Option<&str>) -> Result<ConfigVersion, StoreError> {
        let mut txn = self.env.write_txn()?;
        if changes.is_empty() {
            write_hash(&self.tables, &mut txn, hash)?;
            let version = read_meta(&self.tables, &txn, CONFIG_VERSION)?;
            txn.commit()?;
            return Ok(version);
        }
        let next = read_meta(&self.tables, &txn, CONFIG_VERSION)? + 1;
        let entries = write::apply_changes(&self.tables, &mut txn, changes, next)?;
        write_hash(&self.tables, &mut txn, hash)?;
        let version = self.commit_version(txn, |_| entries)?;
        tracing::debug!(version, changes = changes.len(), "configuration changes applied");
        Ok(version)
    }

    fn get(&self, kind: EntityKind, id: Uuid) -> Result<Option<Entity>, StoreError> {
        let txn = self.env.read_txn()?;
        read::get(&self.tables, &txn, kind, id)
    }

    fn get_by_unique(&self, kind: EntityKind, field: &str, value: &str) -> Result<Option<Entity>, StoreError> {
        let txn = self.env.read_txn()?;
        read::get_by_unique(&self.tables, &txn, kind, field, value)
    }

    fn ids_by_foreign(&self, kind: EntityKind, field: &str, parent: Uuid) -> Result<Vec<Uuid>, StoreError> {
        let txn = self.env.read_txn()?;
        read::ids_by_foreign(&self.tables, &txn, kind, field, parent)
    }

    fn list(&self, kind: EntityKind, after: Option<Uuid>, size: usize) -> Result<Vec<Entity>, StoreError> {
        let txn = self.env.read_txn()?;
        read::list(&self.tables, &txn, kind, after, size)
    }

    fn changes_since(&self, version: ConfigVersion) -> Result<Vec<ChangeLogEntry>, StoreError> {
        let txn = self.env.read_txn()?;
        read::changes_since(&self.tables, &txn, version)
    }
}

#[cfg(test)]
mod tests;
