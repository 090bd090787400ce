//! Nested endpoints, with Kong's rules: `/{parent}/{id}/{children}`
//! (`/services/{s}/routes`, `/consumers/{c}/key-auth`),
//! `/{parent}/{id}/{children}/{id}` (the child must belong to the parent,
//! else 404; ACLs are also named by group there) and `/{entity}/{id}/{parent field}` (`/routes/{r}/service`).

use http::{Method, StatusCode};
use serde_json::{json, Map, Value};
use strait_core::{validate_entity, ConfigChange, Entity, EntityKind};
use strait_store::keys::acl_cache_key;
use uuid::Uuid;

use super::delete::delete_entity;
use super::handlers::{body_of, upsert_mode};
use super::read::{list_children, ok};
use super::write::{commit, create, entity_object, prepare, respond, save, Mode};
use super::{find, foreign_id, path_id, unix_now};
use crate::errors::schema_violation;
use crate::request::AdminRequest;
use crate::response::{failure, message, not_found, AdminResponse};
use crate::AdminState;

/// Where a nested request points.
pub struct Nested<'a> {
    pub parent_kind: EntityKind,
    pub parent_key: &'a str,
    pub child: EntityKind,
    pub field: &'static str,
}

fn parent_of(state: &AdminState, nested: &Nested<'_>) -> Result<Entity, AdminResponse> {
    find(state, nested.parent_kind, nested.parent_key)?.ok_or_else(not_found)
}

/// `/{parent}/{id}/{children}`: list or create children.
pub async fn children(state: &AdminState, nested: Nested<'_>, request: &AdminRequest) -> AdminResponse {
    let parent = match parent_of(state, &nested) {
        Ok(parent) => parent,
        Err(response) => return response,
    };
    if request.method != Method::POST {
        return list_children(
            state,
            &parent,
            nested.parent_key,
            nested.child,
            nested.field,
            &request.query,
        );
    }
    match body_of(request) {
        Ok((mut input, encoding)) => {
            input.insert(nested.field.into(), json!({ "id": parent.id() }));
            create(state, nested.child, input, encoding).await
        }
        Err(response) => response,
    }
}

/// A child by id or endpoint key; targets also by `host:port` within
/// their upstream, ACLs by group within their consumer.
pub(crate) fn find_child(
    state: &AdminState,
    kind: EntityKind,
    key: &str,
    parent: Uuid,
) -> Result<Option<Entity>, AdminResponse> {
    if path_id(key).is_some() {
        return find(state, kind, key);
    }
    let candidates = match kind {
        EntityKind::Targets => {
            let mut candidates = vec![format!("{parent}:{key}")];
            if !key.contains(':') || key.ends_with(']') {
                candidates.push(format!("{parent}:{key}:8000"));
            }
            candidates
        }
        EntityKind::Acls => vec![acl_cache_key(parent, key)],
        _ => return find(state, kind, key),
    };
    for candidate in candidates {
        let found = state
            .store
            .get_by_unique(kind, "cache_key", &candidate)
            .map_err(|e| failure(&e))?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// `/{parent}/{id}/{children}/{id}`.
pub async fn child(state: &AdminState, nested: Nested<'_>, key: &str, request: &AdminRequest) -> AdminResponse {
    let parent = match parent_of(state, &nested) {
        Ok(parent) => parent,
        Err(response) => return response,
    };
    let found = match find_child(state, nested.child, key, parent.id()) {
        Ok(found) => found,
        Err(response) => return response,
    };
    let owned = found.filter(|c| foreign_id(c, nested.field) == Some(parent.id()));
    let is_target = nested.child == EntityKind::Targets;
    match (request.method.clone(), owned) {
        (Method::PUT, _) if !is_target => put_child(state, &nested, &parent, key, request).await,
        (_, None) => not_found(),
        (Method::DELETE, Some(child)) => delete_entity(state, &child).await,
        (Method::PATCH | Method::PUT, Some(child)) => match body_of(request) {
            Ok((mut input, encoding)) => {
                input
                    .entry(nested.field)
                    .or_insert_with(|| json!({ "id": parent.id() }));
                save(state, nested.child, input, Mode::Update(Box::new(child)), encoding).await
            }
            Err(response) => response,
        },
        (_, Some(child)) => ok(state, &child),
    }
}

/// Kong's nested PUT: upsert the child by key, attached to the parent.
async fn put_child(
    state: &AdminState,
    nested: &Nested<'_>,
    parent: &Entity,
    key: &str,
    request: &AdminRequest,
) -> AdminResponse {
    let (mut input, encoding) = match body_of(request) {
        Ok(parsed) => parsed,
        Err(response) => return response,
    };
    input.insert(nested.field.into(), json!({ "id": parent.id() }));
    let existing = match find_child(state, nested.child, key, parent.id()) {
        Ok(existing) => existing,
        Err(response) => return response,
    };
    if nested.child == EntityKind::Acls && path_id(key).is_none() {
        // Kong's `PUT /consumers/{c}/acls/{group}`: the group from the path
        // unless the body names one.
        input.entry("group").or_insert_with(|| json!(key));
        let id = existing.as_ref().map_or_else(Uuid::new_v4, Entity::id);
        return save(state, nested.child, input, Mode::Upsert { id, key: None }, encoding).await;
    }
    match upsert_mode(nested.child, key, existing.as_ref(), &mut input) {
        Some(mode) => save(state, nested.child, input, mode, encoding).await,
        None => not_found(),
    }
}

/// `/{entity}/{id}/{field}`: the parent an entity points at.
pub async fn parent(
    state: &AdminState,
    kind: EntityKind,
    key: &str,
    field: &'static str,
    parent_kind: EntityKind,
    request: &AdminRequest,
) -> AdminResponse {
    let entity = match find(state, kind, key) {
        Ok(Some(entity)) => entity,
        Ok(None) => return not_found(),
        Err(response) => return response,
    };
    let parent = match foreign_id(&entity, field) {
        Some(id) => match state.store.get(parent_kind, id) {
            Ok(found) => found,
            Err(error) => return failure(&error),
        },
        None => None,
    };
    match (request.method.clone(), parent) {
        (Method::PUT, parent) => put_parent(state, &entity, field, parent_kind, parent, request).await,
        (_, None) => not_found(),
        (Method::DELETE, Some(_)) => message(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed"),
        (Method::PATCH, Some(parent)) => match body_of(request) {
            Ok((input, encoding)) => save(state, parent_kind, input, Mode::Update(Box::new(parent)), encoding).await,
            Err(response) => response,
        },
        (_, Some(parent)) => ok(state, &parent),
    }
}

/// `PUT /routes/{r}/service`: replace the route's service, or create one
/// and attach the route to it, in one transaction.
async fn put_parent(
    state: &AdminState,
    entity: &Entity,
    field: &'static str,
    parent_kind: EntityKind,
    parent: Option<Entity>,
    request: &AdminRequest,
) -> AdminResponse {
    let (input, encoding) = match body_of(request) {
        Ok(parsed) => parsed,
        Err(response) => return response,
    };
    let id = parent.as_ref().map_or_else(Uuid::new_v4, Entity::id);
    let mode = Mode::Upsert { id, key: None };
    if parent.is_some() {
        return save(state, parent_kind, input, mode, encoding).await;
    }
    let result = async {
        let created = prepare(state, parent_kind, input, &mode, encoding)?;
        let mut object: Map<String, Value> = entity_object(entity);
        object.insert(field.into(), json!({ "id": created.id() }));
        let relinked = validate_entity(entity.kind(), &Value::Object(object), unix_now()).map_err(schema_violation)?;
        let changes = vec![
            ConfigChange::Upsert {
                entity: created.clone(),
            },
            ConfigChange::Upsert { entity: relinked },
        ];
        commit(state, changes, Some(&created)).await?;
        Ok::<_, AdminResponse>(created)
    };
    match result.await {
        Ok(created) => respond(state, StatusCode::OK, &created),
        Err(response) => response,
    }
}
