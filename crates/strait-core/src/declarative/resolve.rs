//! Ids and references: gives every pending entity an id (given, or derived
//! deterministically), indexes them by id and endpoint key (reporting
//! duplicates), and rewrites every reference to `{"id": "<uuid>"}`.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use serde_json::{json, Value};
use uuid::Uuid;

use super::collect::{parent_link, Pending};
use super::Located;
use crate::entities::EntityKind;
use crate::schema::{endpoint_key, entity_id_for_key, foreign_fields};

/// Kong's duplicate message.
pub(super) fn uniqueness_message(table: &str, field: &str, value: &str) -> String {
    format!("uniqueness violation: '{table}' entity with {field} set to '{value}' already declared")
}

/// The id each pending entity will have, parents before children.
pub(super) fn assign_ids(pending: &[Pending]) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = Vec::with_capacity(pending.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for entity in pending {
        let given = entity.input.get("id").and_then(Value::as_str);
        let key = endpoint_key(entity.kind)
            .and_then(|field| entity.input.get(field))
            .and_then(Value::as_str)
            .filter(|key| !key.is_empty());
        let id = match (given.and_then(|id| Uuid::parse_str(id).ok()), key) {
            (Some(id), _) => id,
            (None, Some(key)) => entity_id_for_key(entity.kind, key),
            (None, None) => {
                // No name: derive the id from the parent and the content, so
                // the same file gives the same ids; repeats get a counter.
                let parent = entity.parent.map(|p| ids[p].to_string()).unwrap_or_default();
                let content = serde_json::to_string(&entity.input).unwrap_or_default();
                let seed = format!("{parent}:{content}");
                let count = seen.entry(seed.clone()).or_insert(0);
                *count += 1;
                entity_id_for_key(entity.kind, &format!("{seed}#{count}"))
            }
        };
        ids.push(id);
    }
    ids
}

/// Where to find entities by id and by endpoint key.
#[derive(Default)]
pub(super) struct Index {
    by_id: HashMap<(EntityKind, Uuid), usize>,
    by_key: HashMap<(EntityKind, String), usize>,
}

impl Index {
    /// Indexes every entity; a repeated endpoint key or id is an error at
    /// the repeat.
    pub fn build(pending: &[Pending], ids: &[Uuid], errors: &mut Vec<Located>) -> Index {
        let mut index = Index::default();
        for (at, entity) in pending.iter().enumerate() {
            let table = entity.kind.table();
            let key = endpoint_key(entity.kind).and_then(|field| Some((field, entity.input.get(field)?.as_str()?)));
            if let Some((field, key)) = key {
                match index.by_key.entry((entity.kind, key.to_string())) {
                    Entry::Occupied(_) => {
                        errors.push(Located::entity(at, uniqueness_message(table, field, key)));
                        continue;
                    }
                    Entry::Vacant(slot) => {
                        slot.insert(at);
                    }
                }
            }
            match index.by_id.entry((entity.kind, ids[at])) {
                Entry::Occupied(_) => {
                    let message = uniqueness_message(table, "primary key", &ids[at].to_string());
                    errors.push(Located::entity(at, message));
                }
                Entry::Vacant(slot) => {
                    slot.insert(at);
                }
            }
        }
        index
    }

    fn find_key(&self, kind: EntityKind, key: &str, ids: &[Uuid]) -> Option<Uuid> {
        self.by_key.get(&(kind, key.to_string())).map(|at| ids[*at])
    }

    fn find_id(&self, kind: EntityKind, id: &str) -> Option<Uuid> {
        let id = Uuid::parse_str(id).ok()?;
        self.by_id.contains_key(&(kind, id)).then_some(id)
    }

    /// A reference as written: a name or id string, `{"id": ..}`, or
    /// `{"<endpoint key>": ..}`. `Ok(None)`: nothing to resolve (absent, or
    /// a shape the validator will report).
    fn resolve(&self, target: EntityKind, value: &Value, ids: &[Uuid]) -> Result<Option<Uuid>, ()> {
        match value {
            Value::String(text) => self
                .find_key(target, text, ids)
                .or_else(|| self.find_id(target, text))
                .map(Some)
                .ok_or(()),
            Value::Object(map) => {
                if let Some(id) = map.get("id") {
                    return id.as_str().and_then(|id| self.find_id(target, id)).map(Some).ok_or(());
                }
                let key = endpoint_key(target).and_then(|field| map.get(field));
                match key {
                    Some(Value::String(key)) => self.find_key(target, key, ids).map(Some).ok_or(()),
                    _ => Ok(None),
                }
            }
            _ => Ok(None),
        }
    }
}

/// Rewrites nested-parent links and every reference to `{"id": ..}`.
pub(super) fn resolve_references(pending: &mut [Pending], ids: &[Uuid], index: &Index, errors: &mut Vec<Located>) {
    for at in 0..pending.len() {
        let kind = pending[at].kind;
        let link = pending[at]
            .parent
            .and_then(|p| parent_link(pending[p].kind, kind).map(|field| (field, ids[p])));
        for (field, target) in foreign_fields(kind) {
            let entity = &mut pending[at];
            if let Some((link_field, parent_id)) = link {
                if link_field == field {
                    entity.input.insert(field.into(), json!({ "id": parent_id }));
                    continue;
                }
            }
            let Some(value) = entity.input.get(field).filter(|v| !v.is_null()) else {
                continue;
            };
            match index.resolve(target, value, ids) {
                Ok(Some(id)) => {
                    entity.input.insert(field.into(), json!({ "id": id }));
                }
                Ok(None) => {}
                Err(()) => {
                    let shown = match value {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    let message = format!(
                        "invalid reference '{field}: {shown}' (no such entry in '{}')",
                        target.table()
                    );
                    errors.push(Located::field(at, field, message));
                    // Already reported: keep validation from reporting the
                    // reference's shape a second time.
                    entity.input.insert(field.into(), json!({ "id": Uuid::nil() }));
                }
            }
        }
    }
}
