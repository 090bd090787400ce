//! Read endpoints: `GET /{entity}` (paginated, `tags`, `custom_id`),
//! `GET /{entity}/{id or key}` and `GET /{parent}/{id}/{children}`.

use http::StatusCode;
use serde_json::{json, Value};
use strait_core::{Entity, EntityKind};

use super::pagination::{encode_offset, page_ids, page_kind, parse_args, Page, PageArgs};
use super::{collection_name, find, nested_name, render};
use crate::request::Query;
use crate::response::{failure, json_response, message, not_found, AdminResponse};
use crate::AdminState;

/// `{"data": [...], "offset": ..., "next": ...}` for one page.
fn page_body(state: &AdminState, page: Page, args: &PageArgs, path: &str) -> AdminResponse {
    let mut data = Vec::with_capacity(page.entities.len());
    for entity in &page.entities {
        match render(state, entity) {
            Ok(value) => data.push(value),
            Err(response) => return response,
        }
    }
    let mut body = json!({ "data": data, "next": Value::Null });
    if let Some(after) = page.next_after {
        let offset = encode_offset(&after.to_string());
        body["next"] = Value::String(args.next_link(path, &offset));
        body["offset"] = Value::String(offset);
    }
    json_response(StatusCode::OK, &body)
}

/// `GET /{entity}`.
pub fn list(state: &AdminState, kind: EntityKind, query: &Query) -> AdminResponse {
    if kind == EntityKind::Consumers {
        if let Some(custom_id) = query.get("custom_id") {
            return by_custom_id(state, custom_id);
        }
    }
    let args = match parse_args(query) {
        Ok(args) => args,
        Err(response) => return response,
    };
    match page_kind(state, kind, &args) {
        Ok(page) => page_body(state, page, &args, &format!("/{}", collection_name(kind))),
        Err(response) => response,
    }
}

/// `GET /consumers?custom_id=...`: at most one consumer, no paging.
fn by_custom_id(state: &AdminState, custom_id: &str) -> AdminResponse {
    if custom_id.is_empty() {
        return message(StatusCode::BAD_REQUEST, "custom_id must be an unempty string");
    }
    let found = state.store.get_by_unique(EntityKind::Consumers, "custom_id", custom_id);
    let data = match found {
        Ok(Some(consumer)) => match render(state, &consumer) {
            Ok(value) => vec![value],
            Err(response) => return response,
        },
        Ok(None) => Vec::new(),
        Err(error) => return failure(&error),
    };
    json_response(StatusCode::OK, &json!({ "data": data, "next": Value::Null }))
}

/// `GET /{entity}/{id or key}`.
pub fn get_one(state: &AdminState, kind: EntityKind, key: &str) -> AdminResponse {
    match find(state, kind, key) {
        Ok(Some(entity)) => ok(state, &entity),
        Ok(None) => not_found(),
        Err(response) => response,
    }
}

pub fn ok(state: &AdminState, entity: &Entity) -> AdminResponse {
    match render(state, entity) {
        Ok(value) => json_response(StatusCode::OK, &value),
        Err(response) => response,
    }
}

/// `GET /{parent}/{id}/{children}`: the children pointing at `parent`.
pub fn list_children(
    state: &AdminState,
    parent: &Entity,
    parent_key: &str,
    child: EntityKind,
    field: &str,
    query: &Query,
) -> AdminResponse {
    let args = match parse_args(query) {
        Ok(args) => args,
        Err(response) => return response,
    };
    let ids = match state.store.ids_by_foreign(child, field, parent.id()) {
        Ok(ids) => ids,
        Err(error) => return failure(&error),
    };
    let path = format!(
        "/{}/{}/{}",
        collection_name(parent.kind()),
        crate::request::escape(parent_key),
        nested_name(child)
    );
    match page_ids(state, child, ids, &args) {
        Ok(page) => page_body(state, page, &args, &path),
        Err(response) => response,
    }
}
