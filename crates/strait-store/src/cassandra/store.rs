//! [`CassandraStore`]: the [`Store`] trait over Cassandra (schema.rs has the
//! tables).
//!
//! Reads name the generation's partition and a clustering prefix. Writes:
//! - `apply`: the changes' rows, their change log rows and the new
//!   `version` go in one conditional batch on the head generation's
//!   partition, `IF version = N AND successor = null`. Integrity is checked
//!   first against what a `SERIAL` read (Paxos: the latest committed state)
//!   returns, as the LMDB dialect checks it; if another node committed in
//!   between, the condition fails, nothing is written, and the write is
//!   checked again on the new state (a unique name created on two nodes at
//!   once: one commits, the other finds it taken). A change set too large
//!   for one batch is written as a new generation instead.
//! - `replace`: the new configuration goes into a new generation's
//!   partition (not yet visible), then one lightweight transaction names it
//!   the old generation's successor, `IF version = N AND successor = null`.
//!   The generation before the old one is then deleted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use scylla::client::caching_session::CachingSession;
use scylla::client::session::Session;
use scylla::statement::{Consistency, SerialConsistency, Statement};
use scylla::value::CqlValue;
use strait_core::{Config, ConfigChange, ConfigVersion, Entity, EntityKind};
use uuid::Uuid;

use super::schema::ident;
use super::write::{switch_generation, write};
use super::{cql_error, CassandraConfig};
use crate::codec::{decode_entity, push_entity};
use crate::keys::check_whole;
use crate::keys::config_entities;
use crate::{ChangeLogEntry, ChangeOp, Store, StoreError};

/// Bytes of rows one conditional batch carries at most (Cassandra refuses
/// batches over `batch_size_fail_threshold`, 50 KiB by default).
pub(super) const BATCH_BYTES: usize = 40 * 1024;
/// Tries of a write whose condition another node's commit made fail.
pub(super) const TRIES: usize = 50;

pub(super) type Inner = Arc<Shared>;

pub(super) struct Shared {
    pub(super) config: CassandraConfig,
    pub(super) session: super::LazySession,
    /// The newest generation this store saw (where it starts looking).
    pub(super) known: Mutex<Option<Uuid>>,
    pub(super) change_log_limit: u64,
}

/// The Cassandra store.
pub struct CassandraStore {
    runtime: tokio::runtime::Runtime,
    inner: Inner,
}

impl std::fmt::Debug for CassandraStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CassandraStore({})", self.inner.config.label())
    }
}

pub(super) fn pad(version: ConfigVersion) -> String {
    format!("{version:020}")
}

pub(super) fn section_entity(kind: EntityKind) -> String {
    format!("e/{}", kind.table())
}

pub(super) fn section_unique(kind: EntityKind, field: &str) -> String {
    format!("u/{}/{field}", kind.table())
}

pub(super) fn section_foreign(kind: EntityKind, field: &str) -> String {
    format!("f/{}/{field}", kind.table())
}

pub(super) fn op_name(op: ChangeOp) -> &'static str {
    match op {
        ChangeOp::Upsert => "upsert",
        ChangeOp::Delete => "delete",
        ChangeOp::Replace => "replace",
    }
}

/// The head of the configuration: its generation and what its statics say.
#[derive(Debug, Clone)]
pub(super) struct Head {
    pub(super) generation: Uuid,
    pub(super) version: ConfigVersion,
    pub(super) base: ConfigVersion,
    pub(super) predecessor: Option<Uuid>,
    pub(super) hash: Option<String>,
    pub(super) log_floor: ConfigVersion,
}

/// One statement of a batch.
pub(super) struct Row {
    pub(super) cql: String,
    pub(super) values: Vec<CqlValue>,
    pub(super) bytes: usize,
}

impl CassandraStore {
    /// Connect (once, to fail early) and check the keyspace is bootstrapped
    /// with this build's migrations.
    pub fn open(config: CassandraConfig, change_log_limit: usize) -> Result<CassandraStore, StoreError> {
        let store = CassandraStore::new(config, change_log_limit)?;
        store.check_schema()?;
        Ok(store)
    }

    /// The store without touching the cluster yet.
    pub fn new(config: CassandraConfig, change_log_limit: usize) -> Result<CassandraStore, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("strait-cassandra")
            .enable_all()
            .build()?;
        Ok(CassandraStore {
            runtime,
            inner: Arc::new(Shared {
                config,
                session: super::LazySession::default(),
                known: Mutex::new(None),
                change_log_limit: change_log_limit.max(1) as u64,
            }),
        })
    }

    /// Refuse a keyspace this build cannot serve.
    pub fn check_schema(&self) -> Result<(), StoreError> {
        self.run(|inner| async move {
            let session = inner.session().await?;
            super::schema::refusal(session.get_session(), &inner.config).await
        })
    }

    fn run<T, F, Fut>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Inner) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.run_within(self.inner.config.timeout * 4, work)
    }

    fn run_within<T, F, Fut>(&self, limit: Duration, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Inner) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let future = work(self.inner.clone());
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let result = match tokio::time::timeout(limit, future).await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Unavailable(format!(
                    "Cassandra: no answer within {limit:?}"
                ))),
            };
            let _ = reply.send(result);
        });
        answer
            .recv()
            .map_err(|_| StoreError::Cassandra("the store's runtime stopped".into()))?
    }

    /// The bulk limit: loads and replacements of large configurations.
    fn run_bulk<T, F, Fut>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Inner) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.run_within(self.inner.config.timeout * 40, work)
    }
}

/// Writes generation 0 (version 0, empty) and points the head at it.
pub(super) async fn first_generation(session: &Session, config: &CassandraConfig) -> Result<(), StoreError> {
    let ks = ident(&config.keyspace);
    let head: Option<(Option<Uuid>,)> = session
        .query_unpaged(
            Statement::new(format!("SELECT generation FROM {ks}.config_head WHERE name = 'config'")),
            (),
        )
        .await
        .map_err(cql_error)?
        .into_rows_result()
        .map_err(cql_error)?
        .maybe_first_row()
        .map_err(cql_error)?;
    if head.is_some_and(|(g,)| g.is_some()) {
        return Ok(());
    }
    let generation = Uuid::new_v4();
    let mut statics = Statement::new(format!(
        "INSERT INTO {ks}.config (generation, version, base, log_floor) VALUES (?, 0, 0, 0)"
    ));
    statics.set_consistency(Consistency::Quorum);
    session.query_unpaged(statics, (generation,)).await.map_err(cql_error)?;
    let mut hint = Statement::new(format!(
        "INSERT INTO {ks}.config_head (name, generation) VALUES ('config', ?) IF NOT EXISTS"
    ));
    hint.set_serial_consistency(Some(SerialConsistency::Serial));
    session.query_unpaged(hint, (generation,)).await.map_err(cql_error)?;
    Ok(())
}

impl Shared {
    pub(super) async fn session(&self) -> Result<&CachingSession, StoreError> {
        self.session.get(&self.config).await
    }

    pub(super) fn ks(&self) -> String {
        ident(&self.config.keyspace)
    }

    pub(super) fn statement(&self, cql: String, serial: bool) -> Statement {
        let mut statement = Statement::new(cql);
        if serial {
            statement.set_consistency(Consistency::Serial);
        }
        statement
    }

    pub(super) async fn rows<R>(&self, cql: String, values: Vec<CqlValue>, serial: bool) -> Result<Vec<R>, StoreError>
    where
        R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
    {
        super::rows_of(self.session().await?, self.statement(cql, serial), values).await
    }

    /// The head generation: from the newest one known (or the hint), each
    /// generation's successor followed to the one that has none.
    pub(super) async fn head(&self, serial: bool) -> Result<Head, StoreError> {
        let ks = self.ks();
        let known = *self.known.lock().unwrap_or_else(|p| p.into_inner());
        let mut generation = match known {
            Some(generation) => generation,
            None => self.hint().await?,
        };
        let mut restarted = known.is_none();
        for _ in 0..10_000 {
            type Statics = (
                Option<i64>,
                Option<i64>,
                Option<Uuid>,
                Option<Uuid>,
                Option<String>,
                Option<i64>,
            );
            let rows: Vec<Statics> = self
                .rows(
                    format!(
                        "SELECT version, base, successor, predecessor, hash, log_floor FROM {ks}.config \
                         WHERE generation = ? LIMIT 1"
                    ),
                    vec![CqlValue::Uuid(generation)],
                    serial,
                )
                .await?;
            match rows.into_iter().next() {
                Some((Some(version), base, successor, predecessor, hash, log_floor)) => match successor {
                    Some(next) => generation = next,
                    None => {
                        *self.known.lock().unwrap_or_else(|p| p.into_inner()) = Some(generation);
                        return Ok(Head {
                            generation,
                            version: version.max(0) as ConfigVersion,
                            base: base.unwrap_or(0).max(0) as ConfigVersion,
                            predecessor,
                            hash,
                            log_floor: log_floor.unwrap_or(0).max(0) as ConfigVersion,
                        });
                    }
                },
                // A generation deleted since (or never finished): start
                // again from the hint, once.
                _ if !restarted => {
                    restarted = true;
                    generation = self.hint().await?;
                }
                _ => {
                    return Err(StoreError::Corrupt {
                        table: "config".into(),
                        id: generation.to_string(),
                        reason: "the head generation has no version".into(),
                    })
                }
            }
        }
        Err(StoreError::Cassandra("the chain of generations does not end".into()))
    }

    pub(super) async fn hint(&self) -> Result<Uuid, StoreError> {
        let ks = self.ks();
        let rows: Vec<(Option<Uuid>,)> = self
            .rows(
                format!("SELECT generation FROM {ks}.config_head WHERE name = 'config'"),
                vec![],
                false,
            )
            .await?;
        rows.into_iter().next().and_then(|(g,)| g).ok_or_else(|| {
            StoreError::Cassandra(format!(
                "keyspace {} is not bootstrapped: run `strait migrations bootstrap`",
                self.config.keyspace
            ))
        })
    }

    pub(super) async fn entity(
        &self,
        generation: Uuid,
        kind: EntityKind,
        id: Uuid,
        serial: bool,
    ) -> Result<Option<Entity>, StoreError> {
        let ks = self.ks();
        let rows: Vec<(Option<Vec<u8>>,)> = self
            .rows(
                format!("SELECT body FROM {ks}.config WHERE generation = ? AND section = ? AND key1 = ? AND key2 = ''"),
                vec![
                    CqlValue::Uuid(generation),
                    CqlValue::Text(section_entity(kind)),
                    CqlValue::Text(id.to_string()),
                ],
                serial,
            )
            .await?;
        match rows.into_iter().next().and_then(|(body,)| body) {
            Some(body) => decode_entity(kind, id.as_bytes(), &body).map(Some),
            None => Ok(None),
        }
    }

    pub(super) async fn unique_owner(
        &self,
        generation: Uuid,
        kind: EntityKind,
        field: &str,
        value: &str,
        serial: bool,
    ) -> Result<Option<Uuid>, StoreError> {
        let ks = self.ks();
        let rows: Vec<(Option<Vec<u8>>,)> = self
            .rows(
                format!("SELECT body FROM {ks}.config WHERE generation = ? AND section = ? AND key1 = ? AND key2 = ''"),
                vec![
                    CqlValue::Uuid(generation),
                    CqlValue::Text(section_unique(kind, field)),
                    CqlValue::Text(value.to_string()),
                ],
                serial,
            )
            .await?;
        Ok(rows
            .into_iter()
            .next()
            .and_then(|(body,)| body)
            .and_then(|b| Uuid::from_slice(&b).ok()))
    }

    pub(super) async fn children(
        &self,
        generation: Uuid,
        kind: EntityKind,
        field: &str,
        parent: Uuid,
        serial: bool,
    ) -> Result<Vec<Uuid>, StoreError> {
        let ks = self.ks();
        let rows: Vec<(String,)> = self
            .rows(
                format!("SELECT key2 FROM {ks}.config WHERE generation = ? AND section = ? AND key1 = ?"),
                vec![
                    CqlValue::Uuid(generation),
                    CqlValue::Text(section_foreign(kind, field)),
                    CqlValue::Text(parent.to_string()),
                ],
                serial,
            )
            .await?;
        Ok(rows.into_iter().filter_map(|(id,)| Uuid::parse_str(&id).ok()).collect())
    }

    /// Every row of `generation`'s partition, as a configuration, with the
    /// version every page saw (pages that disagree: read again).
    pub(super) async fn read_generation(
        &self,
        generation: Uuid,
    ) -> Result<Option<(ConfigVersion, Config)>, StoreError> {
        let ks = self.ks();
        let session = self.session().await?;
        let mut statement = Statement::new(format!(
            "SELECT section, key1, body, version FROM {ks}.config WHERE generation = ?"
        ));
        statement.set_page_size(1000);
        let pager = session
            .execute_iter(statement, (generation,))
            .await
            .map_err(cql_error)?;
        let mut stream = pager
            .rows_stream::<(Option<String>, Option<String>, Option<Vec<u8>>, Option<i64>)>()
            .map_err(cql_error)?;
        let mut config = Config::default();
        let mut version: Option<i64> = None;
        while let Some(row) =
            std::future::poll_fn(|cx| futures_core::Stream::poll_next(std::pin::Pin::new(&mut stream), cx)).await
        {
            let (section, key1, body, seen) = row.map_err(cql_error)?;
            match (version, seen) {
                (None, Some(seen)) => version = Some(seen),
                (Some(v), Some(seen)) if v != seen => return Ok(None),
                _ => {}
            }
            let (Some(section), Some(key1), Some(body)) = (section, key1, body) else {
                continue;
            };
            let Some(table) = section.strip_prefix("e/") else {
                continue;
            };
            let Some(kind) = EntityKind::from_table(table) else {
                continue;
            };
            let id = Uuid::parse_str(&key1).map_err(|e| StoreError::Corrupt {
                table: "config".into(),
                id: key1.clone(),
                reason: e.to_string(),
            })?;
            push_entity(&mut config, decode_entity(kind, id.as_bytes(), &body)?);
        }
        Ok(Some((version.unwrap_or(0).max(0) as ConfigVersion, config)))
    }
}

impl Store for CassandraStore {
    fn load(&self) -> Result<(ConfigVersion, Config), StoreError> {
        self.run_bulk(|inner| async move {
            for _ in 0..TRIES {
                let head = inner.head(false).await?;
                if let Some(read) = inner.read_generation(head.generation).await? {
                    return Ok(read);
                }
            }
            Err(StoreError::Unavailable(
                "Cassandra: the configuration kept changing while it was read".into(),
            ))
        })
    }

    fn version(&self) -> Result<ConfigVersion, StoreError> {
        self.run(|inner| async move { Ok(inner.head(false).await?.version) })
    }

    fn replace(&self, config: &Config) -> Result<ConfigVersion, StoreError> {
        self.replace_hashed(config, None)
    }

    fn replace_hashed(&self, config: &Config, hash: Option<&str>) -> Result<ConfigVersion, StoreError> {
        check_whole(config)?;
        let entities: Vec<Entity> = config_entities(config).collect();
        let hash = hash.map(str::to_string);
        self.run_bulk(move |inner| async move {
            for _ in 0..TRIES {
                let head = inner.head(true).await?;
                let version = head.version + 1;
                let entry = ChangeLogEntry {
                    version,
                    kind: EntityKind::Services,
                    op: ChangeOp::Replace,
                    id: None,
                };
                if switch_generation(&inner, &head, &entities, &[entry], hash.as_deref()).await? {
                    return Ok(version);
                }
            }
            Err(StoreError::Unavailable(format!(
                "Cassandra: the replacement lost to other nodes' writes {TRIES} times in a row"
            )))
        })
    }

    fn config_hash(&self) -> Result<Option<String>, StoreError> {
        self.run(|inner| async move { Ok(inner.head(false).await?.hash.filter(|h| !h.is_empty())) })
    }

    fn apply(&self, changes: &[ConfigChange]) -> Result<ConfigVersion, StoreError> {
        if changes.is_empty() {
            return self.version();
        }
        self.apply_hashed(changes, None)
    }

    fn apply_hashed(&self, changes: &[ConfigChange], hash: Option<&str>) -> Result<ConfigVersion, StoreError> {
        let (changes, hash) = (changes.to_vec(), hash.map(str::to_string));
        self.run_bulk(move |inner| write(inner, None, changes, hash))
    }

    fn apply_at(&self, base: ConfigVersion, changes: &[ConfigChange]) -> Result<ConfigVersion, StoreError> {
        if changes.is_empty() {
            return self.version();
        }
        let changes = changes.to_vec();
        self.run_bulk(move |inner| write(inner, Some(base), changes, None))
    }

    fn apply_hashed_at(
        &self,
        base: ConfigVersion,
        changes: &[ConfigChange],
        hash: Option<&str>,
    ) -> Result<ConfigVersion, StoreError> {
        let (changes, hash) = (changes.to_vec(), hash.map(str::to_string));
        self.run_bulk(move |inner| write(inner, Some(base), changes, hash))
    }

    fn get(&self, kind: EntityKind, id: Uuid) -> Result<Option<Entity>, StoreError> {
        self.run(move |inner| async move {
            let head = inner.head(false).await?;
            inner.entity(head.generation, kind, id, false).await
        })
    }

    fn get_by_unique(&self, kind: EntityKind, field: &str, value: &str) -> Result<Option<Entity>, StoreError> {
        let Some(field) = crate::keys::UNIQUE_FIELDS
            .iter()
            .find(|(k, f)| *k == kind && *f == field)
            .map(|(_, f)| *f)
        else {
            let field = field.to_string();
            return Err(StoreError::UnknownIndex { kind, field });
        };
        let value = value.to_string();
        self.run(move |inner| async move {
            let head = inner.head(false).await?;
            match inner.unique_owner(head.generation, kind, field, &value, false).await? {
                Some(id) => inner.entity(head.generation, kind, id, false).await,
                None => Ok(None),
            }
        })
    }

    fn ids_by_foreign(&self, kind: EntityKind, field: &str, parent: Uuid) -> Result<Vec<Uuid>, StoreError> {
        let Some(field) = crate::keys::FOREIGN_FIELDS
            .iter()
            .find(|(k, f, _)| *k == kind && *f == field)
            .map(|(_, f, _)| *f)
        else {
            let field = field.to_string();
            return Err(StoreError::UnknownIndex { kind, field });
        };
        self.run(move |inner| async move {
            let head = inner.head(false).await?;
            inner.children(head.generation, kind, field, parent, false).await
        })
    }

    fn list(&self, kind: EntityKind, after: Option<Uuid>, size: usize) -> Result<Vec<Entity>, StoreError> {
        let size = size.clamp(1, i32::MAX as usize) as i32;
        self.run(move |inner| async move {
            let head = inner.head(false).await?;
            let ks = inner.ks();
            let rows: Vec<(String, Option<Vec<u8>>)> = inner
                .rows(
                    format!(
                        "SELECT key1, body FROM {ks}.config WHERE generation = ? AND section = ? AND key1 > ? LIMIT ?"
                    ),
                    vec![
                        CqlValue::Uuid(head.generation),
                        CqlValue::Text(section_entity(kind)),
                        CqlValue::Text(after.map(|a| a.to_string()).unwrap_or_default()),
                        CqlValue::Int(size),
                    ],
                    false,
                )
                .await?;
            rows.into_iter()
                .filter_map(|(id, body)| Some((id, body?)))
                .map(|(id, body)| {
                    let id = Uuid::parse_str(&id).map_err(|e| StoreError::Corrupt {
                        table: "config".into(),
                        id: id.clone(),
                        reason: e.to_string(),
                    })?;
                    decode_entity(kind, id.as_bytes(), &body)
                })
                .collect()
        })
    }

    fn changes_since(&self, version: ConfigVersion) -> Result<Vec<ChangeLogEntry>, StoreError> {
        self.run(move |inner| async move {
            let head = inner.head(false).await?;
            if version >= head.version {
                return Ok(Vec::new());
            }
            // The generation starts with its replacement at `base`; the log
            // before `log_floor` was trimmed.
            let oldest = head.base.max(head.log_floor + 1);
            if version + 1 < oldest {
                return Err(StoreError::ChangeLogTrimmed {
                    requested: version,
                    oldest_complete: oldest.saturating_sub(1),
                });
            }
            let ks = inner.ks();
            let rows: Vec<(String, Option<Vec<u8>>)> = inner
                .rows(
                    format!("SELECT key1, body FROM {ks}.config WHERE generation = ? AND section = 'log' AND key1 > ?"),
                    vec![CqlValue::Uuid(head.generation), CqlValue::Text(pad(version))],
                    false,
                )
                .await?;
            rows.into_iter()
                .filter_map(|(v, body)| Some((v, body?)))
                .map(|(v, body)| {
                    let corrupt = |reason: String| StoreError::Corrupt {
                        table: "config".into(),
                        id: format!("log {v}"),
                        reason,
                    };
                    let at: ConfigVersion = v.parse().map_err(|_| corrupt("version".into()))?;
                    let value: serde_json::Value = serde_json::from_slice(&body).map_err(|e| corrupt(e.to_string()))?;
                    let op = match value["op"].as_str() {
                        Some("upsert") => ChangeOp::Upsert,
                        Some("delete") => ChangeOp::Delete,
                        Some("replace") => ChangeOp::Replace,
                        other => return Err(corrupt(format!("unknown op {other:?}"))),
                    };
                    let kind = match op {
                        ChangeOp::Replace => EntityKind::Services,
                        _ => value["kind"]
                            .as_str()
                            .and_then(EntityKind::from_table)
                            .ok_or_else(|| corrupt("unknown kind".into()))?,
                    };
                    let id = value["id"].as_str().and_then(|s| Uuid::parse_str(s).ok());
                    Ok(ChangeLogEntry {
                        version: at,
                        kind,
                        op,
                        id,
                    })
                })
                .collect()
        })
    }
}
