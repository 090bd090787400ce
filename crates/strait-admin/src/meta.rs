//! Endpoints about the API itself: `/schemas/...` (descriptions and
//! validation), `/plugins/enabled`, `/tags`, `/tags/{tag}`, `/endpoints`
//! and `/openapi.json`.

use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};
use strait_core::schema::{plugin_schema_json, BUNDLED_PLUGINS};
use strait_core::{entity_schema_json, EntityKind};

use crate::crud::body::parse_body;
use crate::crud::certificates;
use crate::crud::pagination::{encode_offset, entity_tags, parse_args, MAX_PAGE};
use crate::crud::write::{prepare, Mode};
use crate::request::{escape, AdminRequest, Query};
use crate::response::{failure, json_response, message, AdminResponse};
use crate::AdminState;

/// The Admin API's OpenAPI document, kept in the repository.
pub const OPENAPI_DOCUMENT: &str = include_str!("../../../docs/openapi.json");

/// `GET /schemas/{entity}`.
pub fn entity_schema(name: &str) -> AdminResponse {
    match EntityKind::from_table(name) {
        Some(kind) => json_response(StatusCode::OK, &entity_schema_json(kind)),
        None => message(StatusCode::NOT_FOUND, &format!("No entity named '{name}'")),
    }
}

/// `GET /schemas/plugins/{name}`.
pub fn plugin_schema(name: &str) -> AdminResponse {
    match plugin_schema_json(name) {
        Some(schema) => json_response(StatusCode::OK, &schema),
        None => message(StatusCode::NOT_FOUND, &format!("No plugin named '{name}'")),
    }
}

/// `POST /schemas/{entity}/validate` and `POST /schemas/plugins/validate`:
/// the write path of `POST /{entity}` up to its commit (foreign keys by
/// name, schema, router flavor, plugin build, certificate SNIs), so a
/// refusal names the same fields as the write's. Only what depends on
/// stored state is left out, as in Kong: a foreign key id need not exist,
/// and uniqueness (names, SNIs) is the write's to check.
pub fn validate(state: &AdminState, name: &str, request: &AdminRequest) -> AdminResponse {
    let Some(kind) = EntityKind::from_table(name) else {
        return message(StatusCode::NOT_FOUND, &format!("No entity named '{name}'"));
    };
    let checked = parse_body(request).and_then(|(mut input, encoding)| {
        let snis = certificates::take_snis(kind, &mut input, false)?;
        let entity = prepare(state, kind, input, &Mode::Validate, encoding)?;
        certificates::check_sni_names(&entity, snis)
    });
    match checked {
        Ok(()) => message(StatusCode::OK, "schema validation successful"),
        Err(response) => response,
    }
}

/// `GET /plugins/enabled`: the plugins this build runs.
pub fn plugins_enabled() -> AdminResponse {
    let enabled: Vec<&str> = strait_plugins::AVAILABLE
        .iter()
        .copied()
        .filter(|name| BUNDLED_PLUGINS.contains(name))
        .collect();
    json_response(StatusCode::OK, &json!({ "enabled_plugins": enabled }))
}

/// `GET /endpoints`.
pub fn endpoints() -> AdminResponse {
    let data: Vec<String> = crate::endpoints::templates()
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    json_response(StatusCode::OK, &json!({ "data": data }))
}

/// `GET /openapi.json`.
pub fn openapi() -> AdminResponse {
    let mut response = crate::response::json_response(StatusCode::OK, &Value::Null);
    *response.body_mut() = crate::response::AdminBody::whole(bytes::Bytes::from_static(OPENAPI_DOCUMENT.as_bytes()));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// `GET /tags` and `GET /tags/{tag}`: `{entity_name, entity_id, tag}` rows
/// in (kind, id, tag) order, paginated like entity lists.
pub fn tags(state: &AdminState, only: Option<&str>, query: &Query) -> AdminResponse {
    let args = match parse_args(query) {
        Ok(args) => args,
        Err(response) => return response,
    };
    let after = args.after.clone().unwrap_or_default();
    let rows = match tag_rows(state, only, &after, args.size + 1) {
        Ok(rows) => rows,
        Err(response) => return response,
    };
    let mut rows = rows;
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let more = rows.len() > args.size;
    rows.truncate(args.size);
    let mut body = json!({ "data": rows.iter().map(|(_, row)| row.clone()).collect::<Vec<_>>(), "next": null });
    if let (true, Some((position, _))) = (more, rows.last()) {
        let offset = encode_offset(position);
        let path = only.map_or("/tags".to_string(), |t| format!("/tags/{}", escape(t)));
        body["next"] = json!(args.next_link(&path, &offset));
        body["offset"] = json!(offset);
    }
    json_response(StatusCode::OK, &body)
}

type TagRow = (String, Value);

/// Rows after `after` in order, stopping once `wanted` rows are found
/// (an entity's tags are taken together).
fn tag_rows(state: &AdminState, only: Option<&str>, after: &str, wanted: usize) -> Result<Vec<TagRow>, AdminResponse> {
    let mut rows = Vec::new();
    for (order, kind) in EntityKind::ALL.into_iter().enumerate() {
        let mut cursor = None;
        loop {
            let batch = state.store.list(kind, cursor, MAX_PAGE).map_err(|e| failure(&e))?;
            let exhausted = batch.len() < MAX_PAGE;
            for entity in &batch {
                cursor = Some(entity.id());
                for tag in entity_tags(entity).into_iter().flatten() {
                    let position = format!("{order:02}/{}/{tag}", entity.id());
                    if only.is_none_or(|t| t == tag) && position.as_str() > after {
                        let row = json!({ "entity_name": kind.table(), "entity_id": entity.id(), "tag": tag });
                        rows.push((position, row));
                    }
                }
                if rows.len() >= wanted {
                    return Ok(rows);
                }
            }
            if exhausted {
                break;
            }
        }
    }
    Ok(rows)
}
