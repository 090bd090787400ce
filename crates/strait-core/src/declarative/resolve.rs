//! Ids and references: gives every pending entity an id (given, or derived
//! deterministically), indexes them by id and endpoint key (reporting
//! duplicates), and rewrites every reference to `{"id": "<uuid>"}`.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::collect::{parent_link, Pending};
use super::Located;
use crate::entities::EntityKind;
use crate::schema::{endpoint_key, entity_id_for_key, foreign_fields};

/// Kong's duplicate message.
pub(super) fn uniqueness_message(table: &str, field: &str, value: &str) -> String {
    format!("uniqueness violation: '{table}' entity with {field} set to '{value}' already declared")
}

/// Where an entity's id comes from.
pub(super) enum IdFrom {
    /// The document gives it.
    Given(Uuid),
    /// Derived from its endpoint key.
    Key(Uuid),
    /// Neither: derived from this seed (the parent's id and the content)
    /// and how many entities before it had the same seed.
    Content(String),
}

/// How the id of an entity written as `input` (nested children removed,
/// references as written) under the parent with id `parent` is chosen.
pub(super) fn id_from(kind: EntityKind, input: &Map<String, Value>, parent: Option<Uuid>) -> IdFrom {
    if let Some(id) = input
        .get("id")
        .and_then(Value::as_str)
        .and_then(|id| Uuid::parse_str(id).ok())
    {
        return IdFrom::Given(id);
    }
    let key = endpoint_key(kind)
        .and_then(|field| input.get(field))
        .and_then(Value::as_str)
        .filter(|key| !key.is_empty());
    match key {
        Some(key) => IdFrom::Key(entity_id_for_key(kind, key)),
        // No name: derive the id from the parent and the content, so the
        // same file gives the same ids; repeats get a counter.
        None => {
            let parent = parent.map(|p| p.to_string()).unwrap_or_default();
            let content = serde_json::to_string(input).unwrap_or_default();
            IdFrom::Content(format!("{parent}:{content}"))
        }
    }
}

/// The id of the `count`th entity (from 1) of `kind` with content seed `seed`.
pub(super) fn content_id(kind: EntityKind, seed: &str, count: u32) -> Uuid {
    entity_id_for_key(kind, &format!("{seed}#{count}"))
}

/// An entity whose id came from its content: where it is, its seed, and
/// its count among entities with that seed.
pub(super) struct Seeded {
    pub at: usize,
    pub seed: String,
    pub count: u32,
}

/// The id each pending entity will have, parents before children, and the
/// entities whose ids came from their content.
pub(super) fn assign_ids(pending: &[Pending]) -> (Vec<Uuid>, Vec<Seeded>) {
    let mut ids: Vec<Uuid> = Vec::with_capacity(pending.len());
    let mut seeded = Vec::new();
    let mut seen: HashMap<String, u32> = HashMap::new();
    for (at, entity) in pending.iter().enumerate() {
        let parent = entity.parent.map(|p| ids[p]);
        let id = match id_from(entity.kind, &entity.input, parent) {
            IdFrom::Given(id) | IdFrom::Key(id) => id,
            IdFrom::Content(seed) => {
                let count = seen.entry(seed.clone()).or_insert(0);
                *count += 1;
                let count = *count;
                let id = content_id(entity.kind, &seed, count);
                seeded.push(Seeded { at, seed, count });
                id
            }
        };
        ids.push(id);
    }
    (ids, seeded)
}

/// Finds entities of the document by endpoint key and by id.
pub(super) trait Lookup {
    fn find_key(&self, kind: EntityKind, key: &str) -> Option<Uuid>;
    fn has_id(&self, kind: EntityKind, id: Uuid) -> bool;
}

/// A reference as written: a name or id string, `{"id": ..}`, or
/// `{"<endpoint key>": ..}`. `Ok(None)`: nothing to resolve (absent, or a
/// shape the validator will report); `Err`: it names nothing.
pub(super) fn resolve_reference(lookup: &impl Lookup, target: EntityKind, value: &Value) -> Result<Option<Uuid>, ()> {
    let find_id = |id: &str| {
        let id = Uuid::parse_str(id).ok()?;
        lookup.has_id(target, id).then_some(id)
    };
    match value {
        Value::String(text) => lookup
            .find_key(target, text)
            .or_else(|| find_id(text))
            .map(Some)
            .ok_or(()),
        Value::Object(map) => {
            if let Some(id) = map.get("id") {
                return id.as_str().and_then(find_id).map(Some).ok_or(());
            }
            let key = endpoint_key(target).and_then(|field| map.get(field));
            match key {
                Some(Value::String(key)) => lookup.find_key(target, key).map(Some).ok_or(()),
                _ => Ok(None),
            }
        }
        _ => Ok(None),
    }
}

/// Where to find entities by id and by endpoint key.
#[derive(Default)]
pub(super) struct Index {
    by_id: HashSet<(EntityKind, Uuid)>,
    by_key: HashMap<(EntityKind, String), Uuid>,
}

impl Index {
    /// Indexes every entity; a repeated endpoint key or id is an error at
    /// the repeat.
    pub fn build(pending: &[Pending], ids: &[Uuid], errors: &mut Vec<Located>) -> Index {
        let mut index = Index::default();
        for (at, entity) in pending.iter().enumerate() {
            let table = entity.kind.table();
            if let Some((field, key)) = given_key(entity.kind, &entity.input) {
                match index.by_key.entry((entity.kind, key.to_string())) {
                    Entry::Occupied(_) => {
                        errors.push(Located::entity(at, uniqueness_message(table, field, key)));
                        continue;
                    }
                    Entry::Vacant(slot) => {
                        slot.insert(ids[at]);
                    }
                }
            }
            if !index.by_id.insert((entity.kind, ids[at])) {
                let message = uniqueness_message(table, "primary key", &ids[at].to_string());
                errors.push(Located::entity(at, message));
            }
        }
        index
    }
}

impl Lookup for Index {
    fn find_key(&self, kind: EntityKind, key: &str) -> Option<Uuid> {
        self.by_key.get(&(kind, key.to_string())).copied()
    }

    fn has_id(&self, kind: EntityKind, id: Uuid) -> bool {
        self.by_id.contains(&(kind, id))
    }
}

/// The endpoint key an entity's input names (a string), with its field.
pub(super) fn given_key(kind: EntityKind, input: &Map<String, Value>) -> Option<(&'static str, &str)> {
    endpoint_key(kind).and_then(|field| Some((field, input.get(field)?.as_str()?)))
}

/// The foreign-key field linking an entity of `kind` nested under a
/// `parent` to it, with the parent's id.
pub(super) fn nested_link(kind: EntityKind, parent: Option<(EntityKind, Uuid)>) -> Option<(&'static str, Uuid)> {
    let (parent_kind, parent_id) = parent?;
    parent_link(parent_kind, kind).map(|field| (field, parent_id))
}

/// Rewrites nested-parent links and every reference to `{"id": ..}`.
pub(super) fn resolve_references(pending: &mut [Pending], ids: &[Uuid], index: &Index, errors: &mut Vec<Located>) {
    for at in 0..pending.len() {
        let kind = pending[at].kind;
        let link = nested_link(kind, pending[at].parent.map(|p| (pending[p].kind, ids[p])));
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
            match resolve_reference(index, target, value) {
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
