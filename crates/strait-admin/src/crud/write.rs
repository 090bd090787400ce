//! The write path: input object -> foreign keys resolved by name ->
//! `validate_entity` -> one store transaction -> one published delta.
//!
//! The snapshot compiler derives the new snapshot before the store commits,
//! so a change the proxy cannot serve (a plugin or certificate that does not
//! build) is refused whole and nothing is written.

use http::StatusCode;
use serde_json::{json, Map, Value};
use strait_core::schema::{endpoint_key, foreign_fields, transform_on_write, unique_fields};
use strait_core::{validate_entity, ConfigChange, Entity, EntityKind, FieldError};
use strait_snapshot::compiler::{CommitError, CommitFn};
use strait_snapshot::PublishError;
use strait_store::StoreError;
use uuid::Uuid;

use super::body::{infer_entity, Encoding};
use super::{attempts, certificates, render, unix_now};
use crate::errors::{
    foreign_key_violation, foreign_keys_unresolved, primary_key_violation, schema_violation, store_error, Unresolved,
};
use crate::response::{failure, internal_error, json_response, AdminResponse};
use crate::AdminState;

/// How the written entity relates to what is stored.
pub enum Mode {
    /// `POST`: a new entity; an existing id is a conflict.
    Insert,
    /// `POST /schemas/{entity}/validate`: as `Insert`, but a foreign key
    /// given by id need not name a stored entity. Kong's validate reads no
    /// database, and `deck gateway validate` checks files whose entities do
    /// not exist yet; a reference by name still has to resolve to an id.
    Validate,
    /// `PUT`: replace (or create) the entity with this id; `key` is the
    /// endpoint key value from the path when it named the entity.
    Upsert { id: Uuid, key: Option<String> },
    /// `PATCH`: merge the input into this entity.
    Update(Box<Entity>),
}

/// The entity's fields as a JSON object (without rendered extras).
pub fn entity_object(entity: &Entity) -> Map<String, Value> {
    match serde_json::to_value(entity) {
        Ok(Value::Object(mut tagged)) => match tagged.remove("entity") {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        },
        _ => Map::new(),
    }
}

/// Kong's PATCH merge: records merge field by field, anything else
/// (arrays, maps such as route `headers`, foreign keys) is replaced.
fn merge(base: &mut Map<String, Value>, patch: Map<String, Value>, top: bool) {
    for (key, value) in patch {
        let is_map =
            top && (key == "headers" || matches!(base.get(&key), Some(Value::Object(o)) if o.contains_key("id")));
        match (base.get_mut(&key), value) {
            (Some(Value::Object(old)), Value::Object(new)) if !is_map => merge(old, new, false),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Builds the validated entity a write stores.
pub fn prepare(
    state: &AdminState,
    kind: EntityKind,
    mut input: Map<String, Value>,
    mode: &Mode,
    encoding: Encoding,
) -> Result<Entity, AdminResponse> {
    let now = unix_now();
    if encoding == Encoding::Form {
        let existing_name = match mode {
            Mode::Update(existing) => match existing.as_ref() {
                Entity::Plugin(plugin) => Some(plugin.name.clone()),
                _ => None,
            },
            _ => None,
        };
        let name = input
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or(existing_name);
        infer_entity(kind, &mut input, name.as_deref());
    }
    // Kong's write transformations look at what this write gave, not at the
    // merged entity: a PATCH without a password keeps the stored hash.
    let given = input.clone();
    let input = match mode {
        Mode::Insert | Mode::Validate => input,
        Mode::Upsert { id, key } => upsert_input(state, kind, input, *id, key.as_deref())?,
        Mode::Update(existing) => {
            let mut merged = entity_object(existing);
            merge(&mut merged, input, true);
            // The primary key comes from the path, never from the body.
            merged.insert("id".into(), json!(existing.id()));
            if merged.contains_key("updated_at") {
                let stamp = if kind == EntityKind::Targets {
                    json!(now as f64)
                } else {
                    json!(now)
                };
                merged.insert("updated_at".into(), stamp);
            }
            merged
        }
    };
    let input = resolve_foreign(state, kind, input)?;
    let flavor_errors = state.router_flavor.violations(kind, &input);
    let mut entity = match validate_entity(kind, &Value::Object(input), now) {
        Ok(entity) if flavor_errors.is_empty() => entity,
        Ok(_) => return Err(schema_violation(flavor_errors)),
        Err(mut errors) => {
            errors.extend(flavor_errors);
            return Err(schema_violation(errors));
        }
    };
    if !matches!(mode, Mode::Validate) {
        transform_on_write(&mut entity, &given);
        check_parents(state, &entity)?;
    }
    check_plugin_builds(&entity)?;
    Ok(entity)
}

fn upsert_input(
    state: &AdminState,
    kind: EntityKind,
    mut input: Map<String, Value>,
    id: Uuid,
    key: Option<&str>,
) -> Result<Map<String, Value>, AdminResponse> {
    input.insert("id".into(), json!(id));
    if let (Some(key), Some(field)) = (key, endpoint_key(kind)) {
        input.insert(field.into(), json!(key));
    }
    let existing = state.store.get(kind, id).map_err(|e| failure(&e))?;
    if let Some(existing) = existing {
        if let Some(created) = entity_object(&existing).remove("created_at") {
            input.entry("created_at").or_insert(created);
        }
    }
    Ok(input)
}

/// Replaces foreign keys given by a unique field (`{"name": "s"}`) with
/// `{"id": ...}`; Kong's "foreign keys unresolved" when none matches.
fn resolve_foreign(
    state: &AdminState,
    kind: EntityKind,
    mut input: Map<String, Value>,
) -> Result<Map<String, Value>, AdminResponse> {
    let mut unresolved = Vec::new();
    for (field, parent) in foreign_fields(kind) {
        let Some(Value::Object(reference)) = input.get(field) else {
            continue;
        };
        if reference.get("id").is_some_and(|id| !id.is_null()) {
            continue;
        }
        let candidates: Vec<&str> = unique_fields(parent).collect();
        let given = candidates.iter().find_map(|name| {
            reference
                .get(*name)
                .and_then(Value::as_str)
                .map(|v| (*name, v.to_string()))
        });
        let Some((by, value)) = given else { continue };
        let found = state.store.get_by_unique(parent, by, &value).map_err(|e| failure(&e))?;
        match found {
            Some(entity) => {
                input.insert(field.into(), json!({ "id": entity.id() }));
            }
            None => unresolved.push(Unresolved {
                field: field.to_string(),
                by: by.to_string(),
                value: Value::String(value),
                parent,
            }),
        }
    }
    match unresolved.is_empty() {
        true => Ok(input),
        false => Err(foreign_keys_unresolved(unresolved)),
    }
}

/// Every foreign key must name an existing entity (Kong's code 4).
fn check_parents(state: &AdminState, entity: &Entity) -> Result<(), AdminResponse> {
    let object = entity_object(entity);
    for (field, parent_kind) in foreign_fields(entity.kind()) {
        let Some(id) = object.get(field).and_then(|fk| fk.get("id")).and_then(Value::as_str) else {
            continue;
        };
        let Ok(id) = Uuid::try_parse(id) else { continue };
        let exists = state.store.get(parent_kind, id).map_err(|e| failure(&e))?.is_some();
        if !exists {
            return Err(foreign_key_violation(field, parent_kind, id));
        }
    }
    Ok(())
}

/// An enabled plugin must be one this build can run with this config.
pub fn check_plugin_builds(entity: &Entity) -> Result<(), AdminResponse> {
    let Entity::Plugin(plugin) = entity else { return Ok(()) };
    if !plugin.enabled {
        return Ok(());
    }
    match strait_plugins::build_plugin(&plugin.name, &plugin.config) {
        Ok(_) => Ok(()),
        Err(strait_plugins::PluginError::InvalidConfig { field, message }) => {
            Err(schema_violation(vec![FieldError::new(
                format!("config.{field}"),
                message,
            )]))
        }
        Err(error) => Err(schema_violation(vec![FieldError::new("name", error.to_string())])),
    }
}

/// `POST`: refuses an id that exists (Kong's primary key violation). A
/// name another entity holds is refused by the store's unique index.
pub fn check_new(state: &AdminState, entity: &Entity) -> Result<(), AdminResponse> {
    match state.store.get(entity.kind(), entity.id()).map_err(|e| failure(&e))? {
        Some(_) => Err(primary_key_violation(entity.id())),
        None => Ok(()),
    }
}

/// Kong's fields for a unique violation on `field` of `subject`'s kind:
/// derived keys (`cache_key`) are shown as the fields they are made of.
fn violated_fields(subject: Option<&Entity>, kind: EntityKind, field: &str, value: &str) -> Map<String, Value> {
    let mut fields = Map::new();
    // A filter chain's route or service is unique: Kong shows the key.
    if kind == EntityKind::FilterChains && matches!(field, "route" | "service") {
        fields.insert(field.to_string(), json!({ "id": value }));
        return fields;
    }
    match subject.filter(|s| s.kind() == kind && field == "cache_key") {
        Some(entity) => {
            let object = entity_object(entity);
            let parts: &[&str] = match kind {
                EntityKind::Targets => &["target", "upstream"],
                EntityKind::Acls => &["consumer", "group"],
                EntityKind::Keys => &["kid", "set"],
                _ => &["name", "route", "service", "consumer"],
            };
            for part in parts {
                fields.insert(part.to_string(), object.get(*part).cloned().unwrap_or(Value::Null));
            }
        }
        None => {
            fields.insert(field.to_string(), Value::String(value.to_string()));
        }
    }
    fields
}

/// Commits `changes` in one store transaction and publishes them; returns
/// once the proxy serves them. The compiler derives the new snapshot first,
/// so a change that cannot compile is never committed. `subject` explains
/// unique violations.
///
/// Inside [`attempts::run`] the store commits only while the database is at
/// the version the attempt read from; another node's commit in between
/// answers [`attempts::superseded`] and the request runs again.
pub async fn commit(
    state: &AdminState,
    changes: Vec<ConfigChange>,
    subject: Option<&Entity>,
) -> Result<(), AdminResponse> {
    let store = state.store.clone();
    let current = state.publisher.current();
    let read_at = attempts::base();
    let to_commit = changes.clone();
    let commit_fn: CommitFn = Box::new(move || {
        // Runs on the compiler thread right after deriving; without an
        // attempt's base, the snapshot derived from is the base.
        let base = read_at.unwrap_or_else(|| current.load().version);
        store.apply_at(base, &to_commit).map_err(|e| Box::new(e) as CommitError)
    });
    let result = state.publisher.apply_changes(changes, commit_fn).await;
    match result {
        Ok(version) => {
            attempts::committed(version);
            Ok(())
        }
        Err(PublishError::Commit(error)) => match error.downcast::<StoreError>() {
            Ok(store_failure) => match *store_failure {
                StoreError::Stale { found, .. } => Err(attempts::superseded(found)),
                other => Err(store_error(other, |kind, field, value| {
                    violated_fields(subject, kind, field, value)
                })),
            },
            Err(other) => Err(internal_error(&other.to_string())),
        },
        // Derived from a snapshot that moved past what the attempt read: the
        // problem may be the race's, not the request's.
        Err(PublishError::Compile(_))
            if read_at.is_some_and(|base| state.publisher.current().load().version > base) =>
        {
            Err(attempts::superseded(state.publisher.current().load().version))
        }
        Err(PublishError::Compile(error)) => {
            let problems = error
                .problems
                .iter()
                .map(|p| FieldError::new("", format!("{}: {}", p.entity, p.message)))
                .collect();
            Err(schema_violation(problems))
        }
        Err(error) => Err(failure(&error)),
    }
}

/// Renders the written entity with `status`.
pub fn respond(state: &AdminState, status: StatusCode, entity: &Entity) -> AdminResponse {
    match render(state, entity) {
        Ok(body) => json_response(status, &body),
        Err(response) => response,
    }
}

/// `POST /{entity}` (and nested collections, with the parent key set).
pub async fn create(
    state: &AdminState,
    kind: EntityKind,
    mut input: Map<String, Value>,
    encoding: Encoding,
) -> AdminResponse {
    let explicit_id = input.get("id").is_some_and(|v| !v.is_null());
    if !explicit_id {
        // Kong's Admin API gives a new entity a random id (never one derived
        // from its name, which every node would derive alike).
        input.insert("id".into(), json!(Uuid::new_v4()));
    }
    let snis = match certificates::take_snis(kind, &mut input, false) {
        Ok(snis) => snis,
        Err(response) => return response,
    };
    let result = async {
        let entity = prepare(state, kind, input, &Mode::Insert, encoding)?;
        check_new(state, &entity)?;
        let mut changes = certificates::sni_changes(state, &entity, snis)?;
        changes.insert(0, ConfigChange::Upsert { entity: entity.clone() });
        commit(state, changes, Some(&entity)).await?;
        Ok::<_, AdminResponse>(entity)
    };
    match result.await {
        Ok(entity) => respond(state, StatusCode::CREATED, &entity),
        Err(response) => response,
    }
}

/// `PUT` and `PATCH`: store `input` as `mode` says; 200 with the result.
pub async fn save(
    state: &AdminState,
    kind: EntityKind,
    mut input: Map<String, Value>,
    mode: Mode,
    encoding: Encoding,
) -> AdminResponse {
    let replace = matches!(mode, Mode::Upsert { .. });
    let snis = match certificates::take_snis(kind, &mut input, replace) {
        Ok(snis) => snis,
        Err(response) => return response,
    };
    let result = async {
        let entity = prepare(state, kind, input, &mode, encoding)?;
        let mut changes = certificates::sni_changes(state, &entity, snis)?;
        changes.insert(0, ConfigChange::Upsert { entity: entity.clone() });
        commit(state, changes, Some(&entity)).await?;
        Ok::<_, AdminResponse>(entity)
    };
    match result.await {
        Ok(entity) => respond(state, StatusCode::OK, &entity),
        Err(response) => response,
    }
}
