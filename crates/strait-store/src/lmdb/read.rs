//! Read-side operations inside one LMDB read transaction.

use std::ops::Bound;

use heed::RoTxn;
use strait_core::{Config, ConfigVersion, Entity, EntityKind};
use uuid::Uuid;

use super::tables::*;
use crate::codec::*;
use crate::keys::unique_keys;
use crate::{ChangeLogEntry, StoreError};

pub(super) fn get(tables: &Tables, txn: &RoTxn, kind: EntityKind, id: Uuid) -> Result<Option<Entity>, StoreError> {
    let key = id.as_bytes();
    match tables.entity(kind).get(txn, key)? {
        Some(bytes) => decode_entity(kind, key, bytes).map(Some),
        None => Ok(None),
    }
}

/// The whole configuration, kind by kind, each in id order.
pub(super) fn load_config(tables: &Tables, txn: &RoTxn) -> Result<Config, StoreError> {
    let mut config = Config::default();
    for_each_entity(tables, txn, |entity| push_entity(&mut config, entity))?;
    Ok(config)
}

/// Every entity, in [`load_config`]'s order, handed over one at a time;
/// returns how many.
pub(super) fn for_each_entity(tables: &Tables, txn: &RoTxn, mut each: impl FnMut(Entity)) -> Result<usize, StoreError> {
    let mut count = 0;
    for kind in EntityKind::ALL {
        for entry in tables.entity(kind).iter(txn)? {
            let (key, bytes) = entry?;
            each(decode_entity(kind, key, bytes)?);
            count += 1;
        }
    }
    Ok(count)
}

pub(super) fn get_by_unique(
    tables: &Tables,
    txn: &RoTxn,
    kind: EntityKind,
    field: &str,
    value: &str,
) -> Result<Option<Entity>, StoreError> {
    let index = tables.unique(kind, field)?;
    let Some(id_bytes) = index.get(txn, &unique_index_key(value))? else {
        return Ok(None);
    };
    let index_name = format!("{}:{field}", kind.table());
    let id = decode_uuid(&index_name, id_bytes)?;
    let entity = get(tables, txn, kind, id)?
        .ok_or_else(|| corrupt(&index_name, value.as_bytes(), "points at a missing entity"))?;
    // Long values are indexed by digest: confirm the entity really holds it.
    let holds = unique_keys(&entity).iter().any(|(f, v)| *f == field && v == value);
    Ok(holds.then_some(entity))
}

pub(super) fn ids_by_foreign(
    tables: &Tables,
    txn: &RoTxn,
    kind: EntityKind,
    field: &str,
    parent: Uuid,
) -> Result<Vec<Uuid>, StoreError> {
    let index = tables.foreign(kind, field)?;
    let index_name = format!("{}:by:{field}", kind.table());
    let mut ids = Vec::new();
    for entry in index.prefix_iter(txn, parent.as_bytes())? {
        let (key, _) = entry?;
        let child = key
            .get(16..)
            .filter(|child| child.len() == 16)
            .ok_or_else(|| corrupt(&index_name, key, "expected parent ++ child ids"))?;
        ids.push(decode_uuid(&index_name, child)?);
    }
    Ok(ids)
}

pub(super) fn list(
    tables: &Tables,
    txn: &RoTxn,
    kind: EntityKind,
    after: Option<Uuid>,
    size: usize,
) -> Result<Vec<Entity>, StoreError> {
    let start = after.as_ref().map(|id| id.as_bytes().as_slice());
    let range: (Bound<&[u8]>, Bound<&[u8]>) = match start {
        Some(start) => (Bound::Excluded(start), Bound::Unbounded),
        None => (Bound::Unbounded, Bound::Unbounded),
    };
    let mut page = Vec::with_capacity(size.min(1024));
    for entry in tables.entity(kind).range(txn, &range)?.take(size) {
        let (key, bytes) = entry?;
        page.push(decode_entity(kind, key, bytes)?);
    }
    Ok(page)
}

pub(super) fn changes_since(
    tables: &Tables,
    txn: &RoTxn,
    version: ConfigVersion,
) -> Result<Vec<ChangeLogEntry>, StoreError> {
    let floor = read_meta(tables, txn, CHANGELOG_FLOOR)?;
    if version < floor {
        return Err(StoreError::ChangeLogTrimmed {
            requested: version,
            oldest_complete: floor,
        });
    }
    let Some(next) = version.checked_add(1) else {
        return Ok(Vec::new());
    };
    let start = changelog_key(next, 0);
    let range: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Included(&start), Bound::Unbounded);
    let mut entries = Vec::new();
    for entry in tables.changelog.range(txn, &range)? {
        let (key, bytes) = entry?;
        let version = decode_u64(CHANGELOG_TABLE, key, key.get(..8).unwrap_or_default())?;
        let record: LogRecord = serde_json::from_slice(bytes).map_err(|error| corrupt(CHANGELOG_TABLE, key, error))?;
        entries.push(ChangeLogEntry {
            version,
            kind: record.kind,
            op: record.op,
            id: record.id,
        });
    }
    Ok(entries)
}
