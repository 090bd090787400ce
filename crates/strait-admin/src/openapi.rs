//! The OpenAPI 3 document of the Admin API, generated from the route table
//! ([`crate::endpoints::templates`]) and the entity schemas. The committed
//! copy (`docs/openapi.json`, served at `GET /openapi.json`) is checked
//! against this generator by a test; regenerate it with
//! `STRAIT_WRITE_OPENAPI=1 cargo test -p strait-admin openapi`.

use serde_json::{json, Map, Value};
use strait_core::{entity_schema_json, EntityKind};

use crate::crud::{collection_name, kind_for_collection, nested_name};
use crate::endpoints::templates;

/// JSON Schema of one Kong field description.
fn field_schema(def: &Value) -> Value {
    let mut out = match def["type"].as_str().unwrap_or("") {
        "string" => json!({ "type": "string" }),
        "integer" => json!({ "type": "integer" }),
        "number" => json!({ "type": "number" }),
        "boolean" => json!({ "type": "boolean" }),
        "array" | "set" => json!({ "type": "array", "items": field_schema(&def["elements"]) }),
        "map" => json!({ "type": "object", "additionalProperties": field_schema(&def["values"]) }),
        "foreign" => json!({ "type": "object", "properties": { "id": { "type": "string", "format": "uuid" } } }),
        "record" => record_schema(&def["fields"]),
        _ => json!({}),
    };
    if let Some(options) = def.get("one_of") {
        out["enum"] = options.clone();
    }
    if let Some(default) = def.get("default") {
        out["default"] = default.clone();
    }
    out
}

/// An object schema of Kong `fields`. A field Kong does not mark `required`
/// may be `null` (unset), in bodies and in every response that shows it.
fn record_schema(fields: &Value) -> Value {
    let mut properties = Map::new();
    for field in fields.as_array().into_iter().flatten() {
        if let Some((name, def)) = field.as_object().and_then(|f| f.iter().next()) {
            let mut schema = field_schema(def);
            if def.get("required") != Some(&Value::Bool(true)) {
                schema["nullable"] = Value::Bool(true);
            }
            properties.insert(name.clone(), schema);
        }
    }
    json!({ "type": "object", "properties": properties })
}

/// The entity kind a path's last collection segment or parameter names.
fn subject_kind(path: &str) -> Option<EntityKind> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let last_name = segments.iter().rev().find(|s| !s.starts_with('{'))?;
    let parent = segments.first().and_then(|s| kind_for_collection(s));
    EntityKind::ALL
        .into_iter()
        .find(|k| nested_name(*k) == *last_name && segments.len() > 2)
        .or_else(|| kind_for_collection(last_name))
        .or_else(|| {
            parent.and_then(|p| {
                strait_store::keys::FOREIGN_FIELDS
                    .iter()
                    .find(|(child, field, _)| *child == p && field == last_name)
                    .map(|(_, _, parent)| *parent)
            })
        })
}

fn operation(method: &str, path: &str, kind: Option<EntityKind>) -> Value {
    let params: Vec<Value> = path
        .split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| {
            json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" },
            "description": "id, or the endpoint key (name, username, key, ...)" })
        })
        .collect();
    let entity_ref = kind.map(|k| json!({ "$ref": format!("#/components/schemas/{}", k.table()) }));
    let error = json!({ "description": "Kong error body", "content": { "application/json": {
        "schema": { "$ref": "#/components/schemas/error" } } } });
    let ok = |description: &str| match &entity_ref {
        Some(schema) => json!({ "description": description, "content": { "application/json": { "schema": schema } } }),
        None => json!({ "description": description }),
    };
    let mut responses = Map::new();
    match method {
        "get" => {
            responses.insert("200".into(), ok("OK"));
            responses.insert("404".into(), error.clone());
        }
        "post" => {
            responses.insert("201".into(), ok("Created"));
        }
        "put" | "patch" => {
            responses.insert("200".into(), ok("OK"));
            responses.insert("404".into(), error.clone());
        }
        _ if path.starts_with("/proxy-cache") => {
            responses.insert("204".into(), json!({ "description": "Purged" }));
            responses.insert("404".into(), error.clone());
        }
        _ => {
            responses.insert("204".into(), json!({ "description": "Deleted (also when absent)" }));
        }
    }
    // A node that is not a control plane answers the clustering views 400.
    if method != "get" || path.starts_with("/clustering/") {
        responses.insert("400".into(), error.clone());
        if method != "get" {
            responses.insert("409".into(), error);
        }
    }
    let mut op =
        json!({ "summary": format!("{} {path}", method.to_uppercase()), "parameters": params, "responses": responses });
    if matches!(method, "post" | "put" | "patch") {
        let schema = entity_ref.unwrap_or_else(|| json!({ "type": "object" }));
        op["requestBody"] = json!({ "content": {
            "application/json": { "schema": schema },
            "application/x-www-form-urlencoded": { "schema": { "type": "object" } },
            "multipart/form-data": { "schema": { "type": "object" } } } });
    }
    op
}

/// The whole document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for (path, allow) in templates() {
        let kind = subject_kind(&path).filter(|_| path != "/plugins/enabled" && !path.starts_with("/schemas"));
        let mut item = Map::new();
        for method in allow.split(", ").filter(|m| !matches!(*m, "HEAD" | "OPTIONS")) {
            let method = method.to_ascii_lowercase();
            item.insert(method.clone(), operation(&method, &path, kind));
        }
        paths.insert(path, Value::Object(item));
    }
    let mut schemas = Map::new();
    for kind in EntityKind::ALL {
        let mut schema = record_schema(&entity_schema_json(kind)["fields"]);
        schema["description"] = json!(format!("{} (served at /{})", kind.singular(), collection_name(kind)));
        schemas.insert(kind.table().to_string(), schema);
    }
    schemas.insert(
        "error".into(),
        json!({ "type": "object", "properties": {
            "code": { "type": "integer" }, "name": { "type": "string" },
            "message": { "type": "string" }, "fields": { "type": "object" } } }),
    );
    json!({
        "openapi": "3.0.3",
        "info": { "title": "Strait Admin API", "version": crate::KONG_COMPATIBLE_VERSION,
            "description": "Kong-compatible Admin API of Strait. See docs/admin-api.md for differences from Kong." },
        "paths": paths,
        "components": { "schemas": schemas },
    })
}

/// The document as committed: pretty JSON with a trailing newline.
pub fn document_text() -> String {
    let mut text = serde_json::to_string_pretty(&document()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_openapi_document_is_current() {
        let generated = document_text();
        if std::env::var_os("STRAIT_WRITE_OPENAPI").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
            std::fs::write(path, &generated).expect("write docs/openapi.json");
            return;
        }
        assert!(
            crate::meta::OPENAPI_DOCUMENT == generated,
            "docs/openapi.json is stale: run STRAIT_WRITE_OPENAPI=1 cargo test -p strait-admin openapi"
        );
    }

    #[test]
    fn document_describes_nested_endpoints() {
        let doc = document();
        let child = &doc["paths"]["/consumers/{consumers}/key-auth/{keyauth_credentials}"];
        assert!(child["put"].is_object() && child["delete"].is_object(), "{child}");
        assert_eq!(
            doc["paths"]["/routes/{routes}/service"]["get"]["responses"]["200"]["content"]["application/json"]
                ["schema"]["$ref"],
            "#/components/schemas/services"
        );
    }
}
