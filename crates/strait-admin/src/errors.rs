//! Kong's Admin API error bodies (`{code, name, message, fields}`) and the
//! one place a store error becomes a response.
//!
//! Codes, names and message formats are those of Kong's `kong/db/errors.lua`;
//! values inside messages are printed the way Kong's `pl.pretty` prints Lua
//! tables (`{name="x"}`), because clients match on these strings.

use http::StatusCode;
use serde_json::{json, Map, Value};
use strait_core::error::kong_path;
use strait_core::{ConfigError, EntityKind, FieldError};
use strait_store::StoreError;
use uuid::Uuid;

use crate::response::{internal_error, json_response, AdminResponse};

pub const SCHEMA_VIOLATION: u16 = 2;
pub const PRIMARY_KEY_VIOLATION: u16 = 3;
pub const FOREIGN_KEY_VIOLATION: u16 = 4;
pub const UNIQUE_VIOLATION: u16 = 5;
pub const INVALID_OFFSET: u16 = 7;
pub const INVALID_SIZE: u16 = 9;
pub const INVALID_OPTIONS: u16 = 11;
pub const FOREIGN_KEYS_UNRESOLVED: u16 = 13;

fn code_name(code: u16) -> &'static str {
    match code {
        SCHEMA_VIOLATION => "schema violation",
        PRIMARY_KEY_VIOLATION => "primary key violation",
        FOREIGN_KEY_VIOLATION => "foreign key violation",
        UNIQUE_VIOLATION => "unique constraint violation",
        INVALID_OFFSET => "invalid offset",
        INVALID_SIZE => "invalid size",
        INVALID_OPTIONS => "invalid options",
        FOREIGN_KEYS_UNRESOLVED => "foreign keys unresolved",
        _ => "error",
    }
}

/// A Kong error body with the given code, message and fields.
pub fn kong_error(status: StatusCode, code: u16, message: &str, fields: Value) -> AdminResponse {
    let mut body = json!({ "code": code, "name": code_name(code), "message": message });
    if !fields.is_null() {
        body["fields"] = fields;
    }
    json_response(status, &body)
}

/// Prints a JSON value the way Kong's `pl.pretty.write(value, "")` prints
/// the equivalent Lua value: `{id="x",name=null}` with sorted keys.
pub fn lua_pretty(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::String(s) => format!("\"{s}\""),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(lua_pretty).collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys.iter().map(|k| format!("{k}={}", lua_pretty(&map[*k]))).collect();
            format!("{{{}}}", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// 400 schema violation with every error (Kong's message and `fields` tree).
pub fn schema_violation(errors: Vec<FieldError>) -> AdminResponse {
    let mut lines: Vec<String> = errors
        .iter()
        .filter(|e| e.path.is_empty())
        .map(|e| e.message.clone())
        .collect();
    let mut field_lines: Vec<(String, String)> = errors
        .iter()
        .filter(|e| !e.path.is_empty())
        .map(|e| (kong_path(&e.path), e.message.clone()))
        .collect();
    field_lines.sort();
    lines.extend(
        field_lines
            .into_iter()
            .map(|(path, message)| format!("{path}: {message}")),
    );
    let message = match lines.len() {
        1 => format!("schema violation ({})", lines[0]),
        n => format!("{n} schema violations ({})", lines.join("; ")),
    };
    let (entity_level, field_level): (Vec<FieldError>, Vec<FieldError>) =
        errors.into_iter().partition(|e| e.path.is_empty());
    let mut fields = ConfigError::new(field_level).fields_tree();
    if !entity_level.is_empty() {
        let messages: Vec<Value> = entity_level.into_iter().map(|e| Value::String(e.message)).collect();
        fields["@entity"] = Value::Array(messages);
    }
    kong_error(StatusCode::BAD_REQUEST, SCHEMA_VIOLATION, &message, fields)
}

/// 400 schema violation for a single field.
pub fn field_violation(path: &str, message: &str) -> AdminResponse {
    schema_violation(vec![FieldError::new(path, message)])
}

/// 409 `UNIQUE violation detected on '{name="x"}'`.
pub fn unique_violation(fields: Map<String, Value>) -> AdminResponse {
    let fields = Value::Object(fields);
    let message = format!("UNIQUE violation detected on '{}'", lua_pretty(&fields));
    kong_error(StatusCode::CONFLICT, UNIQUE_VIOLATION, &message, fields)
}

/// 409 `primary key violation on key '{id="..."}'`.
pub fn primary_key_violation(id: Uuid) -> AdminResponse {
    let fields = json!({ "id": id.to_string() });
    let message = format!("primary key violation on key '{}'", lua_pretty(&fields));
    kong_error(StatusCode::CONFLICT, PRIMARY_KEY_VIOLATION, &message, fields)
}

/// 400: `field` names a parent by id that does not exist.
pub fn foreign_key_violation(field: &str, parent_kind: EntityKind, parent: Uuid) -> AdminResponse {
    let key = json!({ "id": parent.to_string() });
    let message = format!(
        "the foreign key '{}' does not reference an existing '{}' entity.",
        lua_pretty(&key),
        parent_kind.table()
    );
    let fields = json!({ field: key });
    kong_error(StatusCode::BAD_REQUEST, FOREIGN_KEY_VIOLATION, &message, fields)
}

/// 400: a delete would leave `child` entities pointing at `parent`.
pub fn still_referenced(parent: EntityKind, child: EntityKind) -> AdminResponse {
    let message = format!(
        "an existing '{}' entity references this '{}' entity",
        child.table(),
        parent.table()
    );
    let fields = json!({ "@referenced_by": child.table() });
    kong_error(StatusCode::BAD_REQUEST, FOREIGN_KEY_VIOLATION, &message, fields)
}

/// One foreign key given by a unique field that matched nothing.
pub struct Unresolved {
    pub field: String,
    pub by: String,
    pub value: Value,
    pub parent: EntityKind,
}

/// 400 `foreign key unresolved (service.name: ...)`.
pub fn foreign_keys_unresolved(unresolved: Vec<Unresolved>) -> AdminResponse {
    let mut fields = Map::new();
    let mut lines = Vec::new();
    for item in unresolved {
        let key = lua_pretty(&json!({ item.by.clone(): item.value }));
        let text = format!(
            "the foreign key cannot be resolved with '{key}' for an existing '{}' entity",
            item.parent.table()
        );
        lines.push(format!("{}.{}: {text}", item.field, item.by));
        let slot = fields.entry(item.field).or_insert_with(|| json!({}));
        slot[item.by.as_str()] = Value::String(text);
    }
    lines.sort();
    let message = match lines.len() {
        1 => format!("foreign key unresolved ({})", lines[0]),
        n => format!("{n} foreign keys unresolved ({})", lines.join("; ")),
    };
    kong_error(
        StatusCode::BAD_REQUEST,
        FOREIGN_KEYS_UNRESOLVED,
        &message,
        Value::Object(fields),
    )
}

/// Maps a failed store write to Kong's response. `unique_fields` renders a
/// unique violation on a derived key (`cache_key`) as the fields it is made of.
pub fn store_error(
    error: StoreError,
    unique_fields: impl FnOnce(EntityKind, &str, &str) -> Map<String, Value>,
) -> AdminResponse {
    match error {
        StoreError::UniqueViolation { kind, field, value } => unique_violation(unique_fields(kind, &field, &value)),
        StoreError::ForeignKey {
            field,
            parent_kind,
            parent,
            ..
        } => foreign_key_violation(&field, parent_kind, parent),
        StoreError::StillReferenced { kind, child_kind, .. } => still_referenced(kind, child_kind),
        // The shared database is away: the client may retry; nothing was written.
        unavailable @ StoreError::Unavailable(_) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "message": unavailable.to_string() }),
        ),
        other => internal_error(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lua_pretty_matches_kong() {
        assert_eq!(lua_pretty(&json!({"name": "x"})), r#"{name="x"}"#);
        assert_eq!(
            lua_pretty(&json!({"service": {"id": "a"}, "name": "p", "route": null})),
            r#"{name="p",route=null,service={id="a"}}"#
        );
    }
}
