//! Write-side operations inside one LMDB write transaction: entity puts and
//! deletes with their index maintenance, integrity checks, the version bump
//! and the change log. Callers commit or drop the transaction.

use std::collections::BTreeSet;

use heed::{PutFlags, RwTxn};
use strait_core::{Config, ConfigChange, ConfigVersion, Entity, EntityKind};
use uuid::Uuid;

use super::tables::*;
use crate::codec::*;
use crate::keys::{children_of, config_entities, config_entity, config_ids, foreign_keys, unique_keys};
use crate::{ChangeLogEntry, ChangeOp, StoreError};

/// Read one entity inside a write transaction.
pub(super) fn read_entity(
    tables: &Tables,
    txn: &RwTxn,
    kind: EntityKind,
    id: Uuid,
) -> Result<Option<Entity>, StoreError> {
    let key = id.as_bytes();
    match tables.entity(kind).get(txn, key)? {
        Some(bytes) => decode_entity(kind, key, bytes).map(Some),
        None => Ok(None),
    }
}

/// Insert or replace `entity`, moving its index entries from the old
/// version's keys to the new ones.
fn upsert(tables: &Tables, txn: &mut RwTxn, entity: &Entity) -> Result<(), StoreError> {
    let (kind, id) = (entity.kind(), entity.id());
    if let Some(old) = read_entity(tables, txn, kind, id)? {
        remove_index_entries(tables, txn, &old)?;
    }
    add_index_entries(tables, txn, entity)?;
    let bytes = encode_entity(entity)?;
    Ok(tables.entity(kind).put(txn, id.as_bytes(), &bytes)?)
}

fn delete(tables: &Tables, txn: &mut RwTxn, kind: EntityKind, id: Uuid) -> Result<(), StoreError> {
    let old = read_entity(tables, txn, kind, id)?.ok_or(StoreError::NotFound { kind, id })?;
    remove_index_entries(tables, txn, &old)?;
    tables.entity(kind).delete(txn, id.as_bytes())?;
    Ok(())
}

/// Claim `entity`'s unique keys (failing if another entity holds one) and
/// record its foreign keys.
fn add_index_entries(tables: &Tables, txn: &mut RwTxn, entity: &Entity) -> Result<(), StoreError> {
    let (kind, id) = (entity.kind(), entity.id());
    for (field, value) in unique_keys(entity) {
        let index = tables.unique(kind, field)?;
        let key = unique_index_key(&value);
        if let Some(holder) = index.get(txn, &key)? {
            if holder != id.as_bytes() {
                let field = field.to_string();
                return Err(StoreError::UniqueViolation { kind, field, value });
            }
        }
        index.put(txn, &key, id.as_bytes())?;
    }
    for (field, _, parent) in foreign_keys(entity) {
        let key = foreign_index_key(parent, id);
        tables.foreign(kind, field)?.put(txn, &key, &[])?;
    }
    Ok(())
}

fn remove_index_entries(tables: &Tables, txn: &mut RwTxn, old: &Entity) -> Result<(), StoreError> {
    let (kind, id) = (old.kind(), old.id());
    for (field, value) in unique_keys(old) {
        let index = tables.unique(kind, field)?;
        let key = unique_index_key(&value);
        // Only release a key this entity actually holds.
        if index.get(txn, &key)? == Some(id.as_bytes().as_slice()) {
            index.delete(txn, &key)?;
        }
    }
    for (field, _, parent) in foreign_keys(old) {
        let key = foreign_index_key(parent, id);
        tables.foreign(kind, field)?.delete(txn, &key)?;
    }
    Ok(())
}

/// Check that an existing entity's parents exist, or that a deleted one has
/// no children left.
fn check_integrity(tables: &Tables, txn: &RwTxn, kind: EntityKind, id: Uuid) -> Result<(), StoreError> {
    match read_entity(tables, txn, kind, id)? {
        Some(entity) => check_parents_exist(tables, txn, &entity),
        None => check_no_children(tables, txn, kind, id),
    }
}

fn check_parents_exist(tables: &Tables, txn: &RwTxn, entity: &Entity) -> Result<(), StoreError> {
    for (field, parent_kind, parent) in foreign_keys(entity) {
        if tables.entity(parent_kind).get(txn, parent.as_bytes())?.is_none() {
            return Err(StoreError::ForeignKey {
                kind: entity.kind(),
                id: entity.id(),
                field: field.to_string(),
                parent_kind,
                parent,
            });
        }
    }
    Ok(())
}

fn check_no_children(tables: &Tables, txn: &RwTxn, kind: EntityKind, id: Uuid) -> Result<(), StoreError> {
    for (child_kind, field) in children_of(kind) {
        let index = tables.foreign(child_kind, field)?;
        if let Some(entry) = index.prefix_iter(txn, id.as_bytes())?.next() {
            let (key, _) = entry?;
            let child = decode_uuid(child_kind.table(), key.get(16..).unwrap_or_default())?;
            return Err(StoreError::StillReferenced {
                kind,
                parent: id,
                child_kind,
                child,
            });
        }
    }
    Ok(())
}

/// Apply `changes` in order, then check integrity of everything they touched.
/// Returns the change log entries to append.
pub(super) fn apply_changes(
    tables: &Tables,
    txn: &mut RwTxn,
    changes: &[ConfigChange],
    version: ConfigVersion,
) -> Result<Vec<ChangeLogEntry>, StoreError> {
    let mut touched = BTreeSet::new();
    let mut log = Vec::with_capacity(changes.len());
    for change in changes {
        let (kind, id, op) = match change {
            ConfigChange::Upsert { entity } => {
                upsert(tables, txn, entity)?;
                (entity.kind(), entity.id(), ChangeOp::Upsert)
            }
            ConfigChange::Delete { kind, id } => {
                delete(tables, txn, *kind, *id)?;
                (*kind, *id, ChangeOp::Delete)
            }
        };
        touched.insert((kind, id));
        let id = Some(id);
        log.push(ChangeLogEntry { version, kind, op, id });
    }
    for (kind, id) in touched {
        check_integrity(tables, txn, kind, id)?;
    }
    Ok(log)
}

/// Clear every entity and index table, then write `config` and check it.
///
/// Every table is written in key order with `APPEND`: LMDB then fills each
/// page before it opens the next, where inserts in file order split pages
/// at random and leave them two-thirds full on average. For 50,000 routes
/// the data file is about two-thirds the size (33.6 MB, not 49.0), and a
/// start from a declarative file dirties and writes that much less
/// (docs/benchmarks.md). The
/// entities are copied one at a time, in id order; the index keys are
/// gathered first (a few MB for 50,000 entities) and sorted per index.
pub(super) fn replace_all(tables: &Tables, txn: &mut RwTxn, config: &Config) -> Result<(), StoreError> {
    for db in tables.config_tables() {
        db.clear(txn)?;
    }
    let mut unique: Gathered<(String, Uuid)> = Vec::new();
    let mut foreign: Gathered<[u8; 32]> = Vec::new();
    for kind in EntityKind::ALL {
        let ids = config_ids(config, kind);
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_unstable_by_key(|&index| ids[index]);
        let table = tables.entity(kind);
        let mut previous = None;
        for index in order {
            let Some(entity) = config_entity(config, kind, index) else {
                continue;
            };
            let id = ids[index];
            if previous == Some(id) {
                let (field, value) = ("id".to_string(), id.to_string());
                return Err(StoreError::UniqueViolation { kind, field, value });
            }
            previous = Some(id);
            for (field, value) in unique_keys(&entity) {
                entries_of(&mut unique, (kind, field)).push((value, id));
            }
            for (field, _, parent) in foreign_keys(&entity) {
                entries_of(&mut foreign, (kind, field)).push(foreign_index_key(parent, id));
            }
            let bytes = encode_entity(&entity)?;
            table.put_with_flags(txn, PutFlags::APPEND, id.as_bytes(), &bytes)?;
        }
    }
    for ((kind, field), mut entries) in unique {
        entries.sort_unstable_by(|(a, _), (b, _)| unique_index_key(a).cmp(&unique_index_key(b)));
        if let Some(pair) = entries
            .windows(2)
            .find(|pair| unique_index_key(&pair[0].0) == unique_index_key(&pair[1].0))
        {
            let (field, value) = (field.to_string(), pair[1].0.clone());
            return Err(StoreError::UniqueViolation { kind, field, value });
        }
        let index = tables.unique(kind, field)?;
        for (value, id) in &entries {
            index.put_with_flags(txn, PutFlags::APPEND, &unique_index_key(value), id.as_bytes())?;
        }
    }
    for ((kind, field), mut keys) in foreign {
        // One key per child id and field: no two are equal.
        keys.sort_unstable();
        let index = tables.foreign(kind, field)?;
        for key in &keys {
            index.put_with_flags(txn, PutFlags::APPEND, key, &[])?;
        }
    }
    for entity in config_entities(config) {
        check_parents_exist(tables, txn, &entity)?;
    }
    Ok(())
}

/// Entries gathered per index table (`(kind, field)`), in first-use order.
type Gathered<T> = Vec<((EntityKind, &'static str), Vec<T>)>;

/// The list gathered for `table`, started empty on its first use.
fn entries_of<'a, T>(lists: &'a mut Gathered<T>, table: (EntityKind, &'static str)) -> &'a mut Vec<T> {
    let at = match lists.iter().position(|(key, _)| *key == table) {
        Some(at) => at,
        None => {
            lists.push((table, Vec::new()));
            lists.len() - 1
        }
    };
    &mut lists[at].1
}

/// Write `entities` into a store emptied for a whole configuration that
/// arrives in parts, as [`replace_all`] writes each (its index entries,
/// then the entity; no read of a previous version, which the emptied store
/// cannot hold), then check their parents: those came in this part or an
/// earlier one. An id already written is refused, as in `replace_all`.
pub(super) fn add_part(tables: &Tables, txn: &mut RwTxn, entities: &[Entity]) -> Result<(), StoreError> {
    for entity in entities {
        insert_new(tables, txn, entity)?;
    }
    for entity in entities {
        check_parents_exist(tables, txn, entity)?;
    }
    Ok(())
}

/// Write an entity whose id the store must not hold yet, with its index
/// entries; its parents are the caller's to check once all are written.
fn insert_new(tables: &Tables, txn: &mut RwTxn, entity: &Entity) -> Result<(), StoreError> {
    let (kind, id) = (entity.kind(), entity.id());
    if tables.entity(kind).get(txn, id.as_bytes())?.is_some() {
        let value = id.to_string();
        let field = "id".to_string();
        return Err(StoreError::UniqueViolation { kind, field, value });
    }
    add_index_entries(tables, txn, entity)?;
    let bytes = encode_entity(entity)?;
    Ok(tables.entity(kind).put(txn, id.as_bytes(), &bytes)?)
}

/// Append `entries` to the change log and trim it to its newest `limit`
/// entries, remembering the highest trimmed version.
pub(super) fn append_change_log(
    tables: &Tables,
    txn: &mut RwTxn,
    entries: &[ChangeLogEntry],
    limit: usize,
) -> Result<(), StoreError> {
    for (seq, entry) in entries.iter().enumerate() {
        let seq = u32::try_from(seq).unwrap_or(u32::MAX);
        let record = LogRecord {
            kind: entry.kind,
            op: entry.op,
            id: entry.id,
        };
        let bytes = serde_json::to_vec(&record).map_err(StoreError::Encode)?;
        tables.changelog.put(txn, &changelog_key(entry.version, seq), &bytes)?;
    }
    trim_change_log(tables, txn, limit)
}

fn trim_change_log(tables: &Tables, txn: &mut RwTxn, limit: usize) -> Result<(), StoreError> {
    let len = usize::try_from(tables.changelog.len(txn)?).unwrap_or(usize::MAX);
    let excess = len.saturating_sub(limit);
    if excess == 0 {
        return Ok(());
    }
    let mut doomed = Vec::with_capacity(excess);
    for entry in tables.changelog.iter(txn)?.take(excess) {
        doomed.push(entry?.0.to_vec());
    }
    let mut floor = read_meta(tables, txn, CHANGELOG_FLOOR)?;
    for key in &doomed {
        let version = decode_u64(CHANGELOG_TABLE, key, key.get(..8).unwrap_or_default())?;
        floor = floor.max(version);
        tables.changelog.delete(txn, key)?;
    }
    write_meta(tables, txn, CHANGELOG_FLOOR, floor)
}
