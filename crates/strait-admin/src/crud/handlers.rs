//! Top-level entity endpoints: `GET|POST /{entity}` and
//! `GET|PUT|PATCH|DELETE /{entity}/{id or key}`.

use http::{Method, StatusCode};
use serde_json::{json, Map, Value};
use strait_core::schema::endpoint_key;
use strait_core::{Entity, EntityKind};
use uuid::Uuid;

use super::body::{parse_body, Encoding};
use super::delete::delete_entity;
use super::read::{get_one, list};
use super::write::{create, save, Mode};
use super::{find, path_id};
use crate::request::AdminRequest;
use crate::response::{empty_response, not_found, AdminResponse};
use crate::AdminState;

/// `/{entity}`.
pub async fn collection(state: &AdminState, kind: EntityKind, request: &AdminRequest) -> AdminResponse {
    match request.method {
        Method::POST => match parse_body(request) {
            Ok((input, encoding)) => create(state, kind, input, encoding).await,
            Err(response) => response,
        },
        _ => list(state, kind, &request.query),
    }
}

/// `/{entity}/{id or key}`.
pub async fn entity(state: &AdminState, kind: EntityKind, key: &str, request: &AdminRequest) -> AdminResponse {
    if request.method == Method::GET || request.method == Method::HEAD {
        return get_one(state, kind, key);
    }
    let existing = match find(state, kind, key) {
        Ok(existing) => existing,
        Err(response) => return response,
    };
    if request.method == Method::DELETE {
        return match existing {
            Some(entity) => delete_entity(state, &entity).await,
            None => empty_response(StatusCode::NO_CONTENT),
        };
    }
    let (mut input, encoding) = match parse_body(request) {
        Ok(parsed) => parsed,
        Err(response) => return response,
    };
    match (request.method.clone(), existing) {
        (Method::PATCH, Some(entity)) => save(state, kind, input, Mode::Update(Box::new(entity)), encoding).await,
        (Method::PATCH, None) => not_found(),
        (_, existing) => {
            let Some(mode) = upsert_mode(kind, key, existing.as_ref(), &mut input) else {
                return not_found();
            };
            save(state, kind, input, mode, encoding).await
        }
    }
}

/// `PUT /{entity}/{key}`: the id to write and the endpoint key to set.
/// `None` when the key can name nothing of this kind.
pub fn upsert_mode(
    kind: EntityKind,
    key: &str,
    existing: Option<&Entity>,
    input: &mut Map<String, Value>,
) -> Option<Mode> {
    let by_id = path_id(key);
    if kind == EntityKind::Certificates && by_id.is_none() {
        add_sni_name(input, key);
        let id = existing.map_or_else(Uuid::new_v4, Entity::id);
        return Some(Mode::Upsert { id, key: None });
    }
    let id = match (existing, by_id) {
        (Some(entity), _) => entity.id(),
        (None, Some(id)) => id,
        // A new entity named by its key gets a random id, as Kong's do:
        // an id derived from the name would be the same on every node, and
        // two nodes creating one name must collide on the name, not agree.
        (None, None) => {
            endpoint_key(kind)?;
            Uuid::new_v4()
        }
    };
    let key = by_id.is_none().then(|| key.to_string());
    Some(Mode::Upsert { id, key })
}

/// `PUT /certificates/{sni name}` keeps that name among the certificate's SNIs.
fn add_sni_name(input: &mut Map<String, Value>, name: &str) {
    let names = input.entry("snis").or_insert_with(|| json!([]));
    match names {
        Value::Array(items) if !items.iter().any(|n| n.as_str() == Some(name)) => items.push(json!(name)),
        Value::String(single) if single != name => *names = json!([single.clone(), name]),
        Value::Null => *names = json!([name]),
        _ => {}
    }
}

/// Parses the body of a write, or answers with the parse error.
pub fn body_of(request: &AdminRequest) -> Result<(Map<String, Value>, Encoding), AdminResponse> {
    parse_body(request)
}
