//! Read endpoints for entities: `GET /{entity}` (paginated) and
//! `GET /{entity}/{id or endpoint key}`.

use http::StatusCode;
use serde_json::{json, Value};
use strait_core::{Entity, EntityKind};
use uuid::Uuid;

use crate::response::{internal_error, json_response, not_found, AdminResponse};
use crate::AdminState;

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// Endpoint name -> entity kind (`/key-auths` is Kong's name for key-auth credentials).
pub fn kind_for_endpoint(segment: &str) -> Option<EntityKind> {
    match segment {
        "key-auths" => Some(EntityKind::KeyauthCredentials),
        "keyauth_credentials" => None,
        other => EntityKind::from_table(other),
    }
}

/// The unique field an entity can be addressed by instead of its id.
fn endpoint_key(kind: EntityKind) -> Option<&'static str> {
    match kind {
        EntityKind::Services | EntityKind::Routes | EntityKind::Upstreams | EntityKind::Snis => Some("name"),
        EntityKind::Consumers => Some("username"),
        EntityKind::KeyauthCredentials => Some("key"),
        EntityKind::Plugins => Some("instance_name"),
        _ => None,
    }
}

pub fn entity_json(entity: &Entity) -> Value {
    let tagged = serde_json::to_value(entity).unwrap_or(Value::Null);
    tagged.get("entity").cloned().unwrap_or(Value::Null)
}

fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

fn kong_error(status: StatusCode, code: u16, name: &str, message: &str) -> AdminResponse {
    json_response(
        status,
        &json!({ "code": code, "name": name, "message": message, "fields": {} }),
    )
}

pub fn list(state: &AdminState, endpoint: &str, kind: EntityKind, query: Option<&str>) -> AdminResponse {
    let size = match query_param(query, "size") {
        None => DEFAULT_PAGE,
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
            _ => {
                return kong_error(
                    StatusCode::BAD_REQUEST,
                    9,
                    "invalid size",
                    "size must be an integer between 1 and 1000",
                )
            }
        },
    };
    let after = match query_param(query, "offset") {
        None => None,
        Some(raw) => match Uuid::try_parse(raw) {
            Ok(id) => Some(id),
            Err(_) => {
                return kong_error(
                    StatusCode::BAD_REQUEST,
                    7,
                    "invalid offset",
                    &format!("'{raw}' is not a valid offset: bad base64 encoding"),
                )
            }
        },
    };
    let page = match state.store.list(kind, after, size + 1) {
        Ok(page) => page,
        Err(error) => return internal_error(&error.to_string()),
    };
    let more = page.len() > size;
    let data: Vec<Value> = page.iter().take(size).map(entity_json).collect();
    let (next, offset) = match (more, page.get(size - 1)) {
        (true, Some(last)) => {
            let offset = last.id().to_string();
            (
                Value::String(format!("/{endpoint}?offset={offset}&size={size}")),
                Value::String(offset),
            )
        }
        _ => (Value::Null, Value::Null),
    };
    let mut body = json!({ "data": data, "next": next });
    if !offset.is_null() {
        body["offset"] = offset;
    }
    json_response(StatusCode::OK, &body)
}

pub fn get_one(state: &AdminState, kind: EntityKind, key: &str) -> AdminResponse {
    let found = match Uuid::try_parse(key) {
        Ok(id) => state.store.get(kind, id),
        Err(_) => match endpoint_key(kind) {
            Some(field) => state.store.get_by_unique(kind, field, key),
            None => Ok(None),
        },
    };
    match found {
        Ok(Some(entity)) => json_response(StatusCode::OK, &entity_json(&entity)),
        Ok(None) => not_found(),
        Err(error) => internal_error(&error.to_string()),
    }
}
