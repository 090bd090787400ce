//! The write path of [`super::CassandraStore`]: the rows each change
//! writes and deletes, the checks against the head generation's state, the
//! conditional batch, and the switch to a new generation (store.rs has the
//! reads and the model).

use std::collections::{BTreeSet, HashMap};

use scylla::client::caching_session::CachingSession;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::{SerialConsistency, Statement};
use scylla::value::CqlValue;
use strait_core::{Config, ConfigChange, ConfigVersion, Entity, EntityKind};
use uuid::Uuid;

use super::cql_error;
use super::store::{
    op_name, pad, section_entity, section_foreign, section_unique, Head, Inner, Row, Shared, BATCH_BYTES, TRIES,
};
use crate::codec::{encode_entity, push_entity};
use crate::keys::{children_of, config_entities, foreign_keys, unique_keys};
use crate::{ChangeLogEntry, ChangeOp, StoreError};

/// The rows an entity puts in a generation.
fn entity_rows(ks: &str, generation: Uuid, entity: &Entity) -> Result<Vec<Row>, StoreError> {
    let kind = entity.kind();
    let id = entity.id();
    let body = encode_entity(entity)?;
    let insert = format!("INSERT INTO {ks}.config (generation, section, key1, key2, body) VALUES (?, ?, ?, ?, ?)");
    let mut rows = vec![Row {
        cql: insert.clone(),
        bytes: body.len() + 64,
        values: vec![
            CqlValue::Uuid(generation),
            CqlValue::Text(section_entity(kind)),
            CqlValue::Text(id.to_string()),
            CqlValue::Text(String::new()),
            CqlValue::Blob(body),
        ],
    }];
    for (field, value) in unique_keys(entity) {
        rows.push(Row {
            cql: insert.clone(),
            bytes: value.len() + 96,
            values: vec![
                CqlValue::Uuid(generation),
                CqlValue::Text(section_unique(kind, field)),
                CqlValue::Text(value),
                CqlValue::Text(String::new()),
                CqlValue::Blob(id.as_bytes().to_vec()),
            ],
        });
    }
    for (field, _, parent) in foreign_keys(entity) {
        rows.push(Row {
            cql: insert.clone(),
            bytes: 128,
            values: vec![
                CqlValue::Uuid(generation),
                CqlValue::Text(section_foreign(kind, field)),
                CqlValue::Text(parent.to_string()),
                CqlValue::Text(id.to_string()),
                CqlValue::Empty,
            ],
        });
    }
    Ok(rows)
}

/// The clustering key of an entity, unique-key or foreign-key row (their
/// values are `generation, section, key1, key2, ...`); `None` for the log
/// and static rows, which each change writes once.
fn row_key(row: &Row) -> Option<(String, String, String)> {
    match row.values.get(1..4)? {
        [CqlValue::Text(section), CqlValue::Text(key1), CqlValue::Text(key2)] => {
            Some((section.clone(), key1.clone(), key2.clone()))
        }
        _ => None,
    }
}

/// The deletions of the rows `entity` put in a generation.
fn delete_rows(ks: &str, generation: Uuid, entity: &Entity) -> Vec<Row> {
    let kind = entity.kind();
    let id = entity.id();
    let delete = format!("DELETE FROM {ks}.config WHERE generation = ? AND section = ? AND key1 = ? AND key2 = ?");
    let row = |section: String, key1: String, key2: String| Row {
        cql: delete.clone(),
        bytes: key1.len() + 96,
        values: vec![
            CqlValue::Uuid(generation),
            CqlValue::Text(section),
            CqlValue::Text(key1),
            CqlValue::Text(key2),
        ],
    };
    let mut rows = vec![row(section_entity(kind), id.to_string(), String::new())];
    for (field, value) in unique_keys(entity) {
        rows.push(row(section_unique(kind, field), value, String::new()));
    }
    for (field, _, parent) in foreign_keys(entity) {
        rows.push(row(section_foreign(kind, field), parent.to_string(), id.to_string()));
    }
    rows
}

fn log_row(ks: &str, generation: Uuid, entry: &ChangeLogEntry, seq: usize) -> Row {
    let body = serde_json::json!({
        "kind": entry.kind.table(),
        "op": op_name(entry.op),
        "id": entry.id,
    })
    .to_string()
    .into_bytes();
    Row {
        cql: format!("INSERT INTO {ks}.config (generation, section, key1, key2, body) VALUES (?, 'log', ?, ?, ?)"),
        bytes: body.len() + 64,
        values: vec![
            CqlValue::Uuid(generation),
            CqlValue::Text(pad(entry.version)),
            CqlValue::Text(format!("{seq:010}")),
            CqlValue::Blob(body),
        ],
    }
}

/// Sends `rows` in unconditional batches of at most [`BATCH_BYTES`] (rows
/// of a generation nobody reads yet).
async fn write_unconditionally(session: &CachingSession, rows: Vec<Row>) -> Result<(), StoreError> {
    let mut chunk: Vec<Row> = Vec::new();
    let mut bytes = 0;
    let mut batches = Vec::new();
    for row in rows {
        if bytes + row.bytes > BATCH_BYTES && !chunk.is_empty() {
            batches.push(std::mem::take(&mut chunk));
            bytes = 0;
        }
        bytes += row.bytes;
        chunk.push(row);
    }
    if !chunk.is_empty() {
        batches.push(chunk);
    }
    for rows in batches {
        let mut batch = Batch::new(BatchType::Unlogged);
        let mut values = Vec::with_capacity(rows.len());
        for row in rows {
            batch.append_statement(Statement::new(row.cql));
            values.push(row.values);
        }
        session.batch(&batch, values).await.map_err(cql_error)?;
    }
    Ok(())
}

/// Whether a conditional statement's answer says it applied.
pub(super) fn applied(result: scylla::response::query_result::QueryResult) -> Result<bool, StoreError> {
    let rows = result.into_rows_result().map_err(cql_error)?;
    let (index, _) = rows
        .column_specs()
        .iter()
        .enumerate()
        .find(|(_, spec)| spec.name() == "[applied]")
        .ok_or_else(|| StoreError::Cassandra("a conditional write answered without [applied]".into()))?;
    let first = rows.maybe_first_row::<scylla::value::Row>().map_err(cql_error)?;
    Ok(matches!(
        first.and_then(|row| row.columns.into_iter().nth(index).flatten()),
        Some(CqlValue::Boolean(true))
    ))
}

/// Writes `entities` as a new generation after `head`, with `log` as its
/// first change log rows, and makes it the head; false when another node
/// committed first (the new generation is deleted).
pub(super) async fn switch_generation(
    inner: &Shared,
    head: &Head,
    entities: &[Entity],
    log: &[ChangeLogEntry],
    hash: Option<&str>,
) -> Result<bool, StoreError> {
    let ks = inner.ks();
    let session = inner.session().await?;
    let generation = Uuid::new_v4();
    let version = head.version + 1;
    let mut rows = Vec::new();
    for entity in entities {
        rows.extend(entity_rows(&ks, generation, entity)?);
    }
    for (seq, entry) in log.iter().enumerate() {
        rows.push(log_row(&ks, generation, entry, seq));
    }
    rows.push(Row {
        cql: format!(
            "INSERT INTO {ks}.config (generation, version, base, predecessor, hash, log_floor) VALUES (?, ?, ?, ?, ?, ?)"
        ),
        bytes: 128,
        values: vec![
            CqlValue::Uuid(generation),
            CqlValue::BigInt(version as i64),
            CqlValue::BigInt(version as i64),
            CqlValue::Uuid(head.generation),
            hash.map_or(CqlValue::Empty, |h| CqlValue::Text(h.to_string())),
            CqlValue::BigInt(version as i64 - 1),
        ],
    });
    write_unconditionally(session, rows).await?;
    let mut seal = Statement::new(format!(
        "UPDATE {ks}.config SET successor = ? WHERE generation = ? IF version = ? AND successor = null"
    ));
    seal.set_serial_consistency(Some(SerialConsistency::Serial));
    let result = session
        .execute_unpaged(seal, (generation, head.generation, head.version as i64))
        .await
        .map_err(cql_error)?;
    if !applied(result)? {
        let drop = Statement::new(format!("DELETE FROM {ks}.config WHERE generation = ?"));
        let _ = session.execute_unpaged(drop, (generation,)).await;
        return Ok(false);
    }
    *inner.known.lock().unwrap_or_else(|p| p.into_inner()) = Some(generation);
    let hint = Statement::new(format!(
        "INSERT INTO {ks}.config_head (name, generation) VALUES ('config', ?)"
    ));
    session.execute_unpaged(hint, (generation,)).await.map_err(cql_error)?;
    // The generation before the old head: nobody starts there any more.
    if let Some(old) = head.predecessor {
        let drop = Statement::new(format!("DELETE FROM {ks}.config WHERE generation = ?"));
        if let Err(error) = session.execute_unpaged(drop, (old,)).await {
            tracing::warn!(%error, generation = %old, "could not delete an old configuration generation");
        }
    }
    Ok(true)
}

/// What a change set does to a generation, checked against its state.
struct Plan {
    rows: Vec<Row>,
    log: Vec<ChangeLogEntry>,
    /// Entities as the changes leave them (`None`: deleted).
    overlay: HashMap<(EntityKind, Uuid), Option<Entity>>,
}

/// A change set at most this large is checked row by row against the
/// cluster (`SERIAL` reads); a larger one against the whole generation,
/// read once.
const ROW_BY_ROW: usize = 32;

/// A generation read whole, indexed as the checks look it up.
pub(super) struct Loaded {
    version: ConfigVersion,
    entities: HashMap<(EntityKind, Uuid), Entity>,
    uniques: HashMap<(EntityKind, &'static str, String), Uuid>,
    children: HashMap<(EntityKind, &'static str, Uuid), Vec<Uuid>>,
}

impl Loaded {
    fn new(version: ConfigVersion, config: &Config) -> Loaded {
        let mut loaded = Loaded {
            version,
            entities: HashMap::new(),
            uniques: HashMap::new(),
            children: HashMap::new(),
        };
        for entity in config_entities(config) {
            let (kind, id) = (entity.kind(), entity.id());
            for (field, value) in unique_keys(&entity) {
                loaded.uniques.insert((kind, field, value), id);
            }
            for (field, _, parent) in foreign_keys(&entity) {
                loaded.children.entry((kind, field, parent)).or_default().push(id);
            }
            loaded.entities.insert((kind, id), entity);
        }
        loaded
    }
}

/// Where the checks read the state the changes apply to.
enum Source<'a> {
    Cluster(&'a Shared),
    Memory(&'a Loaded),
}

impl Source<'_> {
    async fn entity(&self, generation: Uuid, kind: EntityKind, id: Uuid) -> Result<Option<Entity>, StoreError> {
        match self {
            Source::Cluster(inner) => inner.entity(generation, kind, id, true).await,
            Source::Memory(loaded) => Ok(loaded.entities.get(&(kind, id)).cloned()),
        }
    }

    async fn unique_owner(
        &self,
        generation: Uuid,
        kind: EntityKind,
        field: &'static str,
        value: &str,
    ) -> Result<Option<Uuid>, StoreError> {
        match self {
            Source::Cluster(inner) => inner.unique_owner(generation, kind, field, value, true).await,
            Source::Memory(loaded) => Ok(loaded.uniques.get(&(kind, field, value.to_string())).copied()),
        }
    }

    async fn children(
        &self,
        generation: Uuid,
        kind: EntityKind,
        field: &'static str,
        parent: Uuid,
    ) -> Result<Vec<Uuid>, StoreError> {
        match self {
            Source::Cluster(inner) => inner.children(generation, kind, field, parent, true).await,
            Source::Memory(loaded) => Ok(loaded.children.get(&(kind, field, parent)).cloned().unwrap_or_default()),
        }
    }
}

async fn plan(inner: &Shared, source: &Source<'_>, head: &Head, changes: &[ConfigChange]) -> Result<Plan, StoreError> {
    let ks = inner.ks();
    let generation = head.generation;
    let version = head.version + 1;
    let mut overlay: HashMap<(EntityKind, Uuid), Option<Entity>> = HashMap::new();
    let mut uniques: HashMap<(EntityKind, &'static str, String), Option<Uuid>> = HashMap::new();
    let mut rows: Vec<Option<Row>> = Vec::new();
    let mut log = Vec::with_capacity(changes.len());
    let mut touched = BTreeSet::new();
    for change in changes {
        let (kind, id) = match change {
            ConfigChange::Upsert { entity } => (entity.kind(), entity.id()),
            ConfigChange::Delete { kind, id } => (*kind, *id),
        };
        let before = match overlay.get(&(kind, id)) {
            Some(entity) => entity.clone(),
            None => source.entity(generation, kind, id).await?,
        };
        if let Some(before) = &before {
            for (field, value) in unique_keys(before) {
                uniques.insert((kind, field, value), None);
            }
            rows.extend(delete_rows(&ks, generation, before).into_iter().map(Some));
        }
        match change {
            ConfigChange::Upsert { entity } => {
                for (field, value) in unique_keys(entity) {
                    let owner = match uniques.get(&(kind, field, value.clone())) {
                        Some(owner) => *owner,
                        None => source.unique_owner(generation, kind, field, &value).await?,
                    };
                    if owner.is_some_and(|owner| owner != id) {
                        let field = field.to_string();
                        return Err(StoreError::UniqueViolation { kind, field, value });
                    }
                    uniques.insert((kind, field, value), Some(id));
                }
                rows.extend(entity_rows(&ks, generation, entity)?.into_iter().map(Some));
                overlay.insert((kind, id), Some(entity.clone()));
                log.push(ChangeLogEntry {
                    version,
                    kind,
                    op: ChangeOp::Upsert,
                    id: Some(id),
                });
            }
            ConfigChange::Delete { .. } => {
                if before.is_none() {
                    return Err(StoreError::NotFound { kind, id });
                }
                overlay.insert((kind, id), None);
                log.push(ChangeLogEntry {
                    version,
                    kind,
                    op: ChangeOp::Delete,
                    id: Some(id),
                });
            }
        }
        touched.insert((kind, id));
    }
    // Foreign keys once everything applied, as the LMDB dialect checks.
    for (kind, id) in touched {
        match overlay.get(&(kind, id)).cloned().flatten() {
            Some(entity) => {
                for (field, parent_kind, parent) in foreign_keys(&entity) {
                    let exists = match overlay.get(&(parent_kind, parent)) {
                        Some(state) => state.is_some(),
                        None => source.entity(generation, parent_kind, parent).await?.is_some(),
                    };
                    if !exists {
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
                    for child in source.children(generation, child_kind, field, id).await? {
                        // A child the changes deleted or moved elsewhere
                        // no longer points here.
                        let still = match overlay.get(&(child_kind, child)) {
                            Some(None) => false,
                            Some(Some(entity)) => foreign_keys(entity)
                                .iter()
                                .any(|(f, _, parent)| *f == field && *parent == id),
                            None => true,
                        };
                        if still {
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
        }
    }
    // One batch is one mutation at one timestamp, where a deletion beats a
    // write of the same row: of the operations on one row (an entity's
    // unchanged unique value deleted then written again, a row deleted
    // then re-created by a later change) only the last is sent.
    let mut last: HashMap<(String, String, String), usize> = HashMap::new();
    for (index, row) in rows.iter().enumerate() {
        if let Some(key) = row.as_ref().and_then(row_key) {
            last.insert(key, index);
        }
    }
    let mut rows: Vec<Row> = rows
        .into_iter()
        .enumerate()
        .filter_map(|(index, row)| {
            let row = row?;
            match row_key(&row) {
                Some(key) if last.get(&key) != Some(&index) => None,
                _ => Some(row),
            }
        })
        .collect();
    for (seq, entry) in log.iter().enumerate() {
        rows.push(log_row(&ks, generation, entry, seq));
    }
    Ok(Plan { rows, log, overlay })
}

/// One write: `changes` (maybe none: the hash only) at `base` when given.
pub(super) async fn write(
    inner: Inner,
    base: Option<ConfigVersion>,
    changes: Vec<ConfigChange>,
    hash: Option<String>,
) -> Result<ConfigVersion, StoreError> {
    let ks = inner.ks();
    for _ in 0..TRIES {
        let head = inner.head(true).await?;
        if let Some(expected) = base.filter(|expected| *expected != head.version) {
            return Err(StoreError::Stale {
                expected,
                found: head.version,
            });
        }
        let session = inner.session().await?;
        if changes.is_empty() {
            let mut only_hash = Statement::new(format!(
                "UPDATE {ks}.config SET hash = ? WHERE generation = ? IF version = ? AND successor = null"
            ));
            only_hash.set_serial_consistency(Some(SerialConsistency::Serial));
            let result = session
                .execute_unpaged(only_hash, (hash.clone(), head.generation, head.version as i64))
                .await
                .map_err(cql_error)?;
            if applied(result)? {
                return Ok(head.version);
            }
            continue;
        }
        // A large change set: the generation read once, checked in memory.
        let loaded = match changes.len() > ROW_BY_ROW {
            true => match inner.read_generation(head.generation).await? {
                Some((seen, config)) if seen == head.version => Some(Loaded::new(seen, &config)),
                _ => continue,
            },
            false => None,
        };
        let source = match &loaded {
            Some(loaded) => Source::Memory(loaded),
            None => Source::Cluster(&inner),
        };
        let Plan { mut rows, log, overlay } = plan(&inner, &source, &head, &changes).await?;
        let version = head.version + 1;
        let bytes: usize = rows.iter().map(|r| r.bytes).sum();
        if bytes > BATCH_BYTES {
            // Too large for one batch: the whole configuration with the
            // changes applied, as a new generation.
            let mut entities = match loaded {
                Some(loaded) if loaded.version == head.version => loaded.entities,
                _ => match inner.read_generation(head.generation).await? {
                    Some((seen, config)) if seen == head.version => {
                        config_entities(&config).map(|e| ((e.kind(), e.id()), e)).collect()
                    }
                    _ => continue,
                },
            };
            for (key, state) in overlay {
                match state {
                    Some(entity) => entities.insert(key, entity),
                    None => entities.remove(&key),
                };
            }
            let mut config = Config::default();
            let mut all: Vec<Entity> = entities.into_values().collect();
            all.sort_by_key(|e| (e.kind().table(), e.id()));
            for entity in all {
                push_entity(&mut config, entity);
            }
            let entities: Vec<Entity> = config_entities(&config).collect();
            let log: Vec<ChangeLogEntry> = log.into_iter().map(|e| ChangeLogEntry { version, ..e }).collect();
            if switch_generation(&inner, &head, &entities, &log, hash.as_deref()).await? {
                return Ok(version);
            }
            continue;
        }
        // The log keeps the newest `change_log_limit` versions.
        let floor = version.saturating_sub(inner.change_log_limit);
        if floor > head.log_floor {
            rows.push(Row {
                cql: format!("DELETE FROM {ks}.config WHERE generation = ? AND section = 'log' AND key1 <= ?"),
                bytes: 64,
                values: vec![CqlValue::Uuid(head.generation), CqlValue::Text(pad(floor))],
            });
        }
        rows.push(Row {
            cql: format!(
                "UPDATE {ks}.config SET version = ?, hash = ?, log_floor = ? WHERE generation = ? \
                 IF version = ? AND successor = null"
            ),
            bytes: 64,
            values: vec![
                CqlValue::BigInt(version as i64),
                hash.clone().map_or(CqlValue::Empty, CqlValue::Text),
                CqlValue::BigInt(floor.max(head.log_floor) as i64),
                CqlValue::Uuid(head.generation),
                CqlValue::BigInt(head.version as i64),
            ],
        });
        let mut batch = Batch::new(BatchType::Logged);
        batch.set_serial_consistency(Some(SerialConsistency::Serial));
        let mut values = Vec::with_capacity(rows.len());
        for row in rows {
            batch.append_statement(Statement::new(row.cql));
            values.push(row.values);
        }
        let result = session.batch(&batch, values).await.map_err(cql_error)?;
        if applied(result)? {
            return Ok(version);
        }
    }
    Err(StoreError::Unavailable(format!(
        "Cassandra: the write lost to other nodes' writes {TRIES} times in a row"
    )))
}
