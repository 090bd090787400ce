//! [`PgStore`]: the [`Store`] trait over PostgreSQL.
//!
//! The trait is synchronous (the compiler thread and the Admin API call it
//! as they call LMDB); queries run on a runtime of the store's own, over a
//! small connection pool, and each call waits for its answer at most
//! `pg_timeout` per statement.
//!
//! Writes serialise on the `config_meta` row (`SELECT ... FOR UPDATE` first
//! in every write transaction), so versions are handed out in commit order
//! across every node sharing the database. Integrity is checked as the
//! LMDB dialect checks it (same errors, same order: unique keys as each
//! change applies, foreign keys once all have), with the schema's deferred
//! constraints as a second line.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strait_core::{Config, ConfigChange, ConfigVersion, Entity, EntityKind};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, GenericClient, Transaction};
use uuid::Uuid;

use super::schema::{ident, table, unique_column, Table};
use super::PgConfig;
use crate::codec::{decode_entity, encode_entity, push_entity};
use crate::keys::{children_of, config_entities, foreign_keys, unique_keys};
use crate::{ChangeLogEntry, ChangeOp, Store, StoreError};

/// The channel every write notifies (its payload: the new version).
pub const CHANNEL: &str = "strait_config";

pub(super) struct Pool {
    config: PgConfig,
    idle: Mutex<Vec<Client>>,
    permits: Arc<tokio::sync::Semaphore>,
}

pub(super) struct Pooled {
    client: Option<Client>,
    pool: Arc<Pool>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let mut idle = self.pool.idle.lock().unwrap_or_else(|p| p.into_inner());
            if !client.is_closed() && idle.len() < self.pool.config.pool_size {
                idle.push(client);
            }
        }
    }
}

impl Pooled {
    pub(super) fn client(&mut self) -> &mut Client {
        self.client.as_mut().expect("a pooled connection until dropped")
    }
}

impl Pool {
    /// Connections open as statements need them, at most
    /// `pg_max_concurrent_queries` at once (0: no limit); up to
    /// `pg_pool_size` idle ones are kept.
    pub(super) fn new(config: PgConfig) -> Pool {
        let permits = match config.max_concurrent_queries {
            0 => tokio::sync::Semaphore::MAX_PERMITS,
            limit => limit.min(tokio::sync::Semaphore::MAX_PERMITS),
        };
        Pool {
            config,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(tokio::sync::Semaphore::new(permits)),
        }
    }

    pub(super) fn label(&self) -> String {
        self.config.label()
    }

    pub(super) async fn get(self: &Arc<Pool>) -> Result<Pooled, StoreError> {
        let waited = self.config.semaphore_timeout;
        let permit = tokio::time::timeout(waited, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!(
                    "no free PostgreSQL connection within {waited:?} (pg_max_concurrent_queries = {})",
                    self.config.max_concurrent_queries
                ))
            })?
            .map_err(|_| StoreError::Postgres("the connection pool is closed".into()))?;
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let client = match idle {
            Some(client) if !client.is_closed() => client,
            _ => super::connect(&self.config).await?,
        };
        Ok(Pooled {
            client: Some(client),
            pool: self.clone(),
            _permit: permit,
        })
    }
}

pub(super) fn pg_error(error: tokio_postgres::Error) -> StoreError {
    match error.as_db_error() {
        // Class 08 (connection exception) and 57P (the server shutting
        // down, crashed, starting): the database is away, not the request
        // at fault.
        Some(db) if db.code().code().starts_with("08") || db.code().code().starts_with("57P") => {
            StoreError::Unavailable(format!("{} ({})", db.message(), db.code().code()))
        }
        Some(db) => StoreError::Postgres(format!("{} ({})", db.message(), db.code().code())),
        // No answer from the server: the connection closed or broke.
        None => StoreError::Unavailable(error.to_string()),
    }
}

fn op_name(op: ChangeOp) -> &'static str {
    match op {
        ChangeOp::Upsert => "upsert",
        ChangeOp::Delete => "delete",
        ChangeOp::Replace => "replace",
    }
}

fn op_of(name: &str) -> Option<ChangeOp> {
    match name {
        "upsert" => Some(ChangeOp::Upsert),
        "delete" => Some(ChangeOp::Delete),
        "replace" => Some(ChangeOp::Replace),
        _ => None,
    }
}

/// The PostgreSQL store.
pub struct PgStore {
    runtime: tokio::runtime::Runtime,
    pool: Arc<Pool>,
    change_log_limit: u64,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgStore({})", self.pool.config.label())
    }
}

impl PgStore {
    /// Connect (once, to fail early) and check that the schema is this
    /// build's; the store keeps `change_log_limit` versions of change log.
    pub fn open(config: PgConfig, change_log_limit: usize) -> Result<PgStore, StoreError> {
        let store = PgStore::new(config, change_log_limit)?;
        store.check_schema()?;
        Ok(store)
    }

    /// The store without touching the database yet (a node that starts
    /// while the database is away serves its cache and checks later).
    pub fn new(config: PgConfig, change_log_limit: usize) -> Result<PgStore, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("strait-pg")
            .enable_all()
            .build()?;
        let store = PgStore {
            runtime,
            pool: Arc::new(Pool::new(config)),
            change_log_limit: change_log_limit.max(1) as u64,
        };
        Ok(store)
    }

    /// Refuse a schema this build cannot serve (not bootstrapped, behind,
    /// ahead); [`StoreError::Unavailable`] when the database cannot be
    /// reached.
    pub fn check_schema(&self) -> Result<(), StoreError> {
        let state = self.run(|pool| async move {
            let mut conn = pool.get().await?;
            super::migrate::schema_state(conn.client()).await.map_err(|e| match e {
                super::migrate::MigrateError::Postgres(error) => pg_error(error),
                other => StoreError::Postgres(other.to_string()),
            })
        })?;
        match state.refusal() {
            Some(refusal) => Err(StoreError::Postgres(refusal)),
            None => Ok(()),
        }
    }

    /// Run `work` on the store's runtime and wait for it, at most
    /// `pg_timeout`: a request never hangs on a database that went away.
    fn run<T, F, Fut>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Pool>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.run_within(self.pool.config.timeout, work)
    }

    /// [`PgStore::run`] for the whole configuration (load, replace): four
    /// times `pg_timeout`.
    fn run_bulk<T, F, Fut>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Pool>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.run_within(self.pool.config.timeout * 4, work)
    }

    fn run_within<T, F, Fut>(&self, limit: Duration, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Pool>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let future = work(self.pool.clone());
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let result = match tokio::time::timeout(limit, future).await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Unavailable(format!("no answer within {limit:?}"))),
            };
            let _ = reply.send(result);
        });
        answer
            .recv()
            .map_err(|_| StoreError::Postgres("the store's runtime stopped".into()))?
    }
}

async fn current_version(client: &impl GenericClient) -> Result<ConfigVersion, StoreError> {
    let row = client
        .query_one("SELECT version FROM config_meta WHERE key = 'config'", &[])
        .await
        .map_err(pg_error)?;
    Ok(row.get::<_, i64>(0) as ConfigVersion)
}

async fn read_entity(client: &impl GenericClient, kind: EntityKind, id: Uuid) -> Result<Option<Entity>, StoreError> {
    let row = client
        .query_opt(&table(kind).select_by_id, &[&id])
        .await
        .map_err(pg_error)?;
    match row {
        Some(row) => {
            let text: String = row.get(0);
            decode_entity(kind, id.as_bytes(), text.as_bytes()).map(Some)
        }
        None => Ok(None),
    }
}

/// Insert or replace `entity` with its unique and foreign key columns; a
/// unique key another entity holds is [`StoreError::UniqueViolation`].
async fn upsert(txn: &Transaction<'_>, entity: &Entity) -> Result<(), StoreError> {
    let kind = entity.kind();
    let t = table(kind);
    let uniques = unique_keys(entity);
    let foreigns = foreign_keys(entity);
    let json = String::from_utf8(encode_entity(entity)?).map_err(|e| StoreError::Postgres(e.to_string()))?;
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = vec![Box::new(entity.id())];
    for (field, _) in &t.unique {
        let value = uniques.iter().find(|(f, _)| f == field).map(|(_, v)| v.clone());
        params.push(Box::new(value));
    }
    for (field, _) in &t.foreign {
        let value = foreigns.iter().find(|(f, _, _)| f == field).map(|(_, _, id)| *id);
        params.push(Box::new(value));
    }
    params.push(Box::new(json));
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
    match txn.execute(&t.upsert, &refs).await {
        Ok(_) => Ok(()),
        Err(error) if error.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            // `<table>_<column>_key`: which unique key another entity holds.
            let constraint = error.as_db_error().and_then(|db| db.constraint()).unwrap_or_default();
            let field = uniques
                .iter()
                .find(|(f, _)| constraint == format!("{}_{}_key", kind.table(), unique_column(f)))
                .or(uniques.first())
                .cloned();
            match field {
                Some((field, value)) => Err(StoreError::UniqueViolation {
                    kind,
                    field: field.to_string(),
                    value,
                }),
                None => Err(pg_error(error)),
            }
        }
        Err(error) => Err(pg_error(error)),
    }
}

async fn delete(txn: &Transaction<'_>, kind: EntityKind, id: Uuid) -> Result<(), StoreError> {
    match txn.execute(&table(kind).delete, &[&id]).await.map_err(pg_error)? {
        0 => Err(StoreError::NotFound { kind, id }),
        _ => Ok(()),
    }
}

async fn first_child(
    client: &impl GenericClient,
    child_kind: EntityKind,
    field: &str,
    parent: Uuid,
) -> Result<Option<Uuid>, StoreError> {
    let Some(sql) = Table::for_field(&table(child_kind).first_child_by, field) else {
        let field = field.to_string();
        return Err(StoreError::UnknownIndex {
            kind: child_kind,
            field,
        });
    };
    let row = client.query_opt(sql, &[&parent]).await.map_err(pg_error)?;
    Ok(row.map(|r| r.get(0)))
}

async fn exists(client: &impl GenericClient, kind: EntityKind, id: Uuid) -> Result<bool, StoreError> {
    Ok(client
        .query_opt(&table(kind).exists, &[&id])
        .await
        .map_err(pg_error)?
        .is_some())
}

/// The LMDB dialect's checks: an entity still there has its parents, a
/// deleted one left no children.
async fn check_integrity(txn: &Transaction<'_>, kind: EntityKind, id: Uuid) -> Result<(), StoreError> {
    match read_entity(txn, kind, id).await? {
        Some(entity) => {
            for (field, parent_kind, parent) in foreign_keys(&entity) {
                if !exists(txn, parent_kind, parent).await? {
                    return Err(StoreError::ForeignKey {
                        kind,
                        id,
                        field: field.to_string(),
                        parent_kind,
                        parent,
                    });
                }
            }
        }
        None => {
            for (child_kind, field) in children_of(kind) {
                if let Some(child) = first_child(txn, child_kind, field, id).await? {
                    return Err(StoreError::StillReferenced {
                        kind,
                        parent: id,
                        child_kind,
                        child,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Take the write lock (the `config_meta` row) and return the version the
/// transaction will commit.
async fn next_version(txn: &Transaction<'_>) -> Result<ConfigVersion, StoreError> {
    let row = txn
        .query_one("SELECT version FROM config_meta WHERE key = 'config' FOR UPDATE", &[])
        .await
        .map_err(pg_error)?;
    Ok(row.get::<_, i64>(0) as ConfigVersion + 1)
}

/// Record `version` and `hash`, append `entries`, trim the log to the
/// newest `limit` versions, and notify every listening node at commit.
async fn finish_write(
    txn: &Transaction<'_>,
    version: ConfigVersion,
    hash: Option<&str>,
    entries: &[ChangeLogEntry],
    limit: u64,
) -> Result<(), StoreError> {
    let version_i64 = version as i64;
    txn.execute(
        "UPDATE config_meta SET version = $1, hash = $2 WHERE key = 'config'",
        &[&version_i64, &hash],
    )
    .await
    .map_err(pg_error)?;
    let seqs: Vec<i32> = (0..entries.len() as i32).collect();
    let kinds: Vec<&str> = entries
        .iter()
        .map(|e| if e.op == ChangeOp::Replace { "" } else { e.kind.table() })
        .collect();
    let ops: Vec<&str> = entries.iter().map(|e| op_name(e.op)).collect();
    let ids: Vec<Option<Uuid>> = entries.iter().map(|e| e.id).collect();
    txn.execute(
        "INSERT INTO change_log (version, seq, kind, op, id) \
         SELECT $1, s, k, o, i FROM unnest($2::int[], $3::text[], $4::text[], $5::uuid[]) AS t(s, k, o, i)",
        &[&version_i64, &seqs, &kinds, &ops, &ids],
    )
    .await
    .map_err(pg_error)?;
    let floor = version_i64 - limit as i64;
    if floor > 0 {
        txn.execute("DELETE FROM change_log WHERE version <= $1", &[&floor])
            .await
            .map_err(pg_error)?;
        txn.execute(
            "INSERT INTO config_meta (key, version) VALUES ('changelog_floor', $1) \
             ON CONFLICT (key) DO UPDATE SET version = GREATEST(config_meta.version, EXCLUDED.version)",
            &[&floor],
        )
        .await
        .map_err(pg_error)?;
    }
    txn.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &version.to_string()])
        .await
        .map_err(pg_error)?;
    Ok(())
}

/// A read-only transaction that sees one committed state throughout.
async fn snapshot_read(client: &mut Client) -> Result<Transaction<'_>, StoreError> {
    client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(pg_error)
}

/// Every entity, kind by kind in id order.
async fn read_config(txn: &Transaction<'_>) -> Result<Config, StoreError> {
    let mut config = Config::default();
    for kind in EntityKind::ALL {
        for row in txn.query(&table(kind).select_all, &[]).await.map_err(pg_error)? {
            let id: Uuid = row.get(0);
            let text: String = row.get(1);
            push_entity(&mut config, decode_entity(kind, id.as_bytes(), text.as_bytes())?);
        }
    }
    Ok(config)
}

impl Store for PgStore {
    fn load(&self) -> Result<(ConfigVersion, Config), StoreError> {
        self.run_bulk(|pool| async move {
            let mut conn = pool.get().await?;
            let txn = snapshot_read(conn.client()).await?;
            let version = current_version(&txn).await?;
            let config = read_config(&txn).await?;
            txn.commit().await.map_err(pg_error)?;
            Ok((version, config))
        })
    }

    fn version(&self) -> Result<ConfigVersion, StoreError> {
        self.run(|pool| async move { current_version(pool.get().await?.client()).await })
    }

    fn replace(&self, config: &Config) -> Result<ConfigVersion, StoreError> {
        self.replace_hashed(config, None)
    }

    fn replace_hashed(&self, config: &Config, hash: Option<&str>) -> Result<ConfigVersion, StoreError> {
        // Checks first, in memory.
        crate::keys::check_whole(config)?;
        let entities: Vec<Entity> = config_entities(config).collect();
        let hash = hash.map(str::to_string);
        let limit = self.change_log_limit;
        self.run_bulk(move |pool| async move {
            let mut conn = pool.get().await?;
            let txn = conn.client().transaction().await.map_err(pg_error)?;
            let version = next_version(&txn).await?;
            let tables: Vec<String> = EntityKind::ALL.iter().map(|k| ident(k.table())).collect();
            txn.batch_execute(&format!("TRUNCATE {}", tables.join(", ")))
                .await
                .map_err(pg_error)?;
            for entity in &entities {
                upsert(&txn, entity).await?;
            }
            let entry = ChangeLogEntry {
                version,
                kind: EntityKind::Services,
                op: ChangeOp::Replace,
                id: None,
            };
            finish_write(&txn, version, hash.as_deref(), &[entry], limit).await?;
            txn.commit().await.map_err(pg_error)?;
            Ok(version)
        })
    }

    fn config_hash(&self) -> Result<Option<String>, StoreError> {
        self.run(|pool| async move {
            let mut conn = pool.get().await?;
            let row = conn
                .client()
                .query_one("SELECT hash FROM config_meta WHERE key = 'config'", &[])
                .await
                .map_err(pg_error)?;
            Ok(row.get(0))
        })
    }

    fn apply(&self, changes: &[ConfigChange]) -> Result<ConfigVersion, StoreError> {
        if changes.is_empty() {
            return self.version();
        }
        self.apply_hashed(changes, None)
    }

    fn apply_hashed(&self, changes: &[ConfigChange], hash: Option<&str>) -> Result<ConfigVersion, StoreError> {
        self.apply_inner(None, changes, hash)
    }

    fn apply_at(&self, base: ConfigVersion, changes: &[ConfigChange]) -> Result<ConfigVersion, StoreError> {
        if changes.is_empty() {
            return self.version();
        }
        self.apply_inner(Some(base), changes, None)
    }

    fn apply_hashed_at(
        &self,
        base: ConfigVersion,
        changes: &[ConfigChange],
        hash: Option<&str>,
    ) -> Result<ConfigVersion, StoreError> {
        self.apply_inner(Some(base), changes, hash)
    }

    fn get(&self, kind: EntityKind, id: Uuid) -> Result<Option<Entity>, StoreError> {
        self.run(move |pool| async move { read_entity(pool.get().await?.client(), kind, id).await })
    }

    fn get_by_unique(&self, kind: EntityKind, field: &str, value: &str) -> Result<Option<Entity>, StoreError> {
        let Some(sql) = Table::for_field(&table(kind).by_unique, field) else {
            let field = field.to_string();
            return Err(StoreError::UnknownIndex { kind, field });
        };
        let value = value.to_string();
        self.run(move |pool| async move {
            let mut conn = pool.get().await?;
            let row = conn.client().query_opt(sql, &[&value]).await.map_err(pg_error)?;
            match row {
                Some(row) => {
                    let id: Uuid = row.get(0);
                    let text: String = row.get(1);
                    decode_entity(kind, id.as_bytes(), text.as_bytes()).map(Some)
                }
                None => Ok(None),
            }
        })
    }

    fn ids_by_foreign(&self, kind: EntityKind, field: &str, parent: Uuid) -> Result<Vec<Uuid>, StoreError> {
        let Some(sql) = Table::for_field(&table(kind).ids_by, field) else {
            let field = field.to_string();
            return Err(StoreError::UnknownIndex { kind, field });
        };
        self.run(move |pool| async move {
            let mut conn = pool.get().await?;
            let rows = conn.client().query(sql, &[&parent]).await.map_err(pg_error)?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn list(&self, kind: EntityKind, after: Option<Uuid>, size: usize) -> Result<Vec<Entity>, StoreError> {
        let t = table(kind);
        let size = size.min(i64::MAX as usize) as i64;
        self.run(move |pool| async move {
            let mut conn = pool.get().await?;
            let rows = match after {
                Some(after) => conn.client().query(&t.page_after, &[&after, &size]).await,
                None => conn.client().query(&t.page_first, &[&size]).await,
            }
            .map_err(pg_error)?;
            rows.iter()
                .map(|row| {
                    let id: Uuid = row.get(0);
                    let text: String = row.get(1);
                    decode_entity(kind, id.as_bytes(), text.as_bytes())
                })
                .collect()
        })
    }

    fn changes_since(&self, version: ConfigVersion) -> Result<Vec<ChangeLogEntry>, StoreError> {
        self.run(move |pool| async move {
            let mut conn = pool.get().await?;
            let client = conn.client();
            let floor: i64 = client
                .query_opt("SELECT version FROM config_meta WHERE key = 'changelog_floor'", &[])
                .await
                .map_err(pg_error)?
                .map(|r| r.get(0))
                .unwrap_or(0);
            if (version as i64) < floor {
                return Err(StoreError::ChangeLogTrimmed {
                    requested: version,
                    oldest_complete: floor as ConfigVersion,
                });
            }
            let rows = client
                .query(
                    "SELECT version, kind, op, id FROM change_log WHERE version > $1 ORDER BY version, seq",
                    &[&(version as i64)],
                )
                .await
                .map_err(pg_error)?;
            rows.iter()
                .map(|row| {
                    let kind_name: String = row.get(1);
                    let op_text: String = row.get(2);
                    let op = op_of(&op_text).ok_or_else(|| StoreError::Corrupt {
                        table: "change_log".into(),
                        id: row.get::<_, i64>(0).to_string(),
                        reason: format!("unknown op {op_text:?}"),
                    })?;
                    let kind = match op {
                        ChangeOp::Replace => EntityKind::Services,
                        _ => EntityKind::from_table(&kind_name).ok_or_else(|| StoreError::Corrupt {
                            table: "change_log".into(),
                            id: row.get::<_, i64>(0).to_string(),
                            reason: format!("unknown kind {kind_name:?}"),
                        })?,
                    };
                    Ok(ChangeLogEntry {
                        version: row.get::<_, i64>(0) as ConfigVersion,
                        kind,
                        op,
                        id: row.get(3),
                    })
                })
                .collect()
        })
    }
}

impl PgStore {
    /// The write behind `apply_hashed`, `apply_at` and `apply_hashed_at`.
    fn apply_inner(
        &self,
        base: Option<ConfigVersion>,
        changes: &[ConfigChange],
        hash: Option<&str>,
    ) -> Result<ConfigVersion, StoreError> {
        let changes = changes.to_vec();

        let hash = hash.map(str::to_string);
        let limit = self.change_log_limit;
        // A big batch (an import) gets a pg_timeout per thousand changes; a
        // database that went away still fails at its first statement.
        let within = self.pool.config.timeout * (1 + changes.len() / 1000).min(1000) as u32;
        self.run_within(within, move |pool| async move {
            let mut conn = pool.get().await?;
            let txn = conn.client().transaction().await.map_err(pg_error)?;
            if changes.is_empty() {
                // Only the hash: the version stays. Locked as a write is, so
                // the check against `base` holds until the commit.
                let version = next_version(&txn).await? - 1;
                if let Some(expected) = base.filter(|expected| *expected != version) {
                    return Err(StoreError::Stale {
                        expected,
                        found: version,
                    });
                }
                txn.execute("UPDATE config_meta SET hash = $1 WHERE key = 'config'", &[&hash])
                    .await
                    .map_err(pg_error)?;
                txn.commit().await.map_err(pg_error)?;
                return Ok(version);
            }
            let version = next_version(&txn).await?;
            if let Some(expected) = base {
                if version - 1 != expected {
                    return Err(StoreError::Stale {
                        expected,
                        found: version - 1,
                    });
                }
            }
            let mut touched = BTreeSet::new();
            let mut log = Vec::with_capacity(changes.len());
            for change in &changes {
                let (kind, id, op) = match change {
                    ConfigChange::Upsert { entity } => {
                        upsert(&txn, entity).await?;
                        (entity.kind(), entity.id(), ChangeOp::Upsert)
                    }
                    ConfigChange::Delete { kind, id } => {
                        delete(&txn, *kind, *id).await?;
                        (*kind, *id, ChangeOp::Delete)
                    }
                };
                touched.insert((kind, id));
                log.push(ChangeLogEntry {
                    version,
                    kind,
                    op,
                    id: Some(id),
                });
            }
            for (kind, id) in touched {
                check_integrity(&txn, kind, id).await?;
            }
            finish_write(&txn, version, hash.as_deref(), &log, limit).await?;
            txn.commit().await.map_err(pg_error)?;
            Ok(version)
        })
    }
}

/// What a node whose snapshot is at some version needs to catch up with
/// the database.
#[derive(Debug)]
pub enum CatchUp {
    UpToDate,
    /// The entities the versions after the node's touched, as they are at
    /// `version`: upserts of those that exist, deletes of those that don't.
    Changes {
        version: ConfigVersion,
        changes: Vec<ConfigChange>,
    },
    /// Too far behind (the log was trimmed) or a whole replacement in
    /// between: the whole configuration at `version`.
    Whole {
        version: ConfigVersion,
        config: Box<Config>,
        hash: Option<String>,
    },
}

impl PgStore {
    /// Everything after `base`, read in one repeatable-read transaction so
    /// the version, the log and the rows agree.
    pub fn catch_up(&self, base: ConfigVersion) -> Result<CatchUp, StoreError> {
        self.run_bulk(move |pool| async move {
            let mut conn = pool.get().await?;
            let txn = snapshot_read(conn.client()).await?;
            let version = current_version(&txn).await?;
            if version == base {
                return Ok(CatchUp::UpToDate);
            }
            let floor: i64 = txn
                .query_opt("SELECT version FROM config_meta WHERE key = 'changelog_floor'", &[])
                .await
                .map_err(pg_error)?
                .map(|r| r.get(0))
                .unwrap_or(0);
            let rows = if version < base || (base as i64) < floor {
                None
            } else {
                Some(
                    txn.query(
                        "SELECT kind, op, id FROM change_log WHERE version > $1 AND version <= $2 ORDER BY version, seq",
                        &[&(base as i64), &(version as i64)],
                    )
                    .await
                    .map_err(pg_error)?,
                )
            };
            let rows = rows.filter(|rows| rows.iter().all(|r| r.get::<_, String>(1) != "replace"));
            let Some(rows) = rows else {
                let config = read_config(&txn).await?;
                let hash: Option<String> = txn
                    .query_one("SELECT hash FROM config_meta WHERE key = 'config'", &[])
                    .await
                    .map_err(pg_error)?
                    .get(0);
                return Ok(CatchUp::Whole {
                    version,
                    config: Box::new(config),
                    hash,
                });
            };
            let mut seen = HashSet::new();
            let mut changes = Vec::new();
            for row in rows {
                let name: String = row.get(0);
                let Some(kind) = EntityKind::from_table(&name) else {
                    continue;
                };
                let Some(id) = row.get::<_, Option<Uuid>>(2) else {
                    continue;
                };
                if !seen.insert((kind, id)) {
                    continue;
                }
                changes.push(match read_entity(&txn, kind, id).await? {
                    Some(entity) => ConfigChange::Upsert { entity },
                    None => ConfigChange::Delete { kind, id },
                });
            }
            Ok(CatchUp::Changes { version, changes })
        })
    }
}

/// A connection that `LISTEN`s on [`CHANNEL`]; dropping it ends it.
pub struct Listener(Client);

impl Listener {
    /// The connection ended: listen again.
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// Open a [`Listener`]: every notification (and the connection's end)
/// wakes `wake`.
pub async fn listen(config: &PgConfig, wake: Arc<tokio::sync::Notify>) -> Result<Listener, StoreError> {
    let client_config = config.client_config();
    let tls = super::tls::MakeRustls(config.tls.clone());
    let (client, mut connection) = tokio::time::timeout(config.timeout, client_config.connect(tls))
        .await
        .map_err(|_| StoreError::Postgres(format!("connecting to {} timed out", config.label())))?
        .map_err(|e| super::connect_error(config, &e))?;
    let woken = wake.clone();
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(_))) => woken.notify_one(),
                Some(Ok(_)) => {}
                Some(Err(error)) => {
                    tracing::warn!(%error, "the PostgreSQL LISTEN connection failed");
                    break;
                }
                None => break,
            }
        }
        woken.notify_one();
    });
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .await
        .map_err(pg_error)?;
    Ok(Listener(client))
}
