//! A plugin schema written in Kong's schema DSL, as JSON: what a custom
//! Lua plugin's `schema.lua` (converted to JSON by strait-lua) and a plugin
//! server's `Schema` (its `-dump` output) give. Translated once at start-up
//! into a [`PluginSchema`], so a plugin that came with its own schema is
//! validated on every write path as a bundled one is.
//!
//! The translated subset: field types `string integer number boolean array
//! set map record`, and `required default one_of between gt len_min
//! elements keys values fields uuid referenceable`; `description` and
//! `encrypted` are accepted and not enforced. Anything else is refused by
//! name (`config.x: 'custom_validator' is not supported by Strait yet`),
//! never silently dropped.

use serde_json::{Map, Value};

use super::field::Field;
use super::formats;
use super::PluginSchema;

/// The attributes of a field definition this version translates.
const KNOWN: [&str; 17] = [
    "type",
    "required",
    "default",
    "one_of",
    "between",
    "gt",
    "len_min",
    "elements",
    "keys",
    "values",
    "fields",
    "description",
    "referenceable",
    "encrypted",
    "uuid",
    // Strait's own markers, set by its Lua shims for Kong's typedefs.
    "strait_check",
    "strait_protocols_http",
];

/// Kong's plugin schema (`{name, fields: [{consumer}, {protocols}, {config}]}`)
/// as Strait's: `consumer`, `protocols` and the `config` record.
pub fn plugin_schema(schema: &Value) -> Result<PluginSchema, String> {
    let mut plugin = PluginSchema::new(Vec::new());
    plugin.http_only = false;
    let fields = schema
        .get("fields")
        .and_then(Value::as_array)
        .ok_or_else(|| "the schema has no fields".to_string())?;
    for entry in fields {
        let (name, def) = single_pair(entry)?;
        match name {
            "consumer" => plugin.no_consumer = def.get("eq").and_then(Value::as_str) == Some("null"),
            "protocols" => {
                plugin.http_only = def
                    .get("strait_protocols_http")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            }
            "route" | "service" | "consumer_group" => {}
            "config" => {
                if def.get("type").and_then(Value::as_str) != Some("record") {
                    return Err("config must be a record".into());
                }
                plugin.config = record_fields(def, "config")?;
            }
            other => return Err(format!("unknown top-level schema field '{other}'")),
        }
    }
    Ok(plugin)
}

/// A `{ name = def }` entry of a `fields` array.
fn single_pair(entry: &Value) -> Result<(&str, &Map<String, Value>), String> {
    let pair = entry.as_object().filter(|o| o.len() == 1);
    match pair.and_then(|o| o.iter().next()) {
        Some((name, Value::Object(def))) => Ok((name.as_str(), def)),
        _ => Err("each entry of a fields array must be a table with one field".into()),
    }
}

/// A record's `fields` as named Strait fields (names kept for the process's
/// life: a bounded set made at start-up).
fn record_fields(def: &Map<String, Value>, path: &str) -> Result<Vec<(&'static str, Field)>, String> {
    let fields = match def.get("fields") {
        Some(Value::Array(fields)) => fields.as_slice(),
        // An empty Lua table converts as an empty object.
        Some(Value::Object(empty)) if empty.is_empty() => &[],
        _ => return Err(format!("{path}: a record needs fields")),
    };
    let mut out = Vec::new();
    for entry in fields {
        let (name, def) = single_pair(entry)?;
        let path = format!("{path}.{name}");
        let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
        out.push((leaked, field(def, &path)?));
    }
    Ok(out)
}

/// One field definition of Kong's DSL as a Strait field.
fn field(def: &Map<String, Value>, path: &str) -> Result<Field, String> {
    if let Some(key) = def.keys().find(|key| !KNOWN.contains(&key.as_str())) {
        return Err(format!("{path}: '{key}' is not supported by Strait yet"));
    }
    let kind = def
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{path}: a field needs a type"))?;
    let sub = |key: &str| -> Result<Field, String> {
        match def.get(key) {
            Some(Value::Object(inner)) => field(inner, &format!("{path}.{key}")),
            _ => Err(format!("{path}: {kind} needs {key}")),
        }
    };
    let mut out = match kind {
        "string" => Field::string(),
        "integer" => Field::integer(),
        "number" => Field::number(),
        "boolean" => Field::boolean(),
        "array" => Field::array(sub("elements")?),
        "set" => Field::set(sub("elements")?),
        "map" => Field::map(sub("keys")?, sub("values")?),
        "record" => Field::record(record_fields(def, path)?),
        other => return Err(format!("{path}: type '{other}' is not supported by Strait yet")),
    };
    if def.get("required").and_then(Value::as_bool).unwrap_or(false) {
        out = out.required();
    }
    if let Some(Value::Array(options)) = def.get("one_of") {
        let texts: Vec<&str> = options.iter().filter_map(Value::as_str).collect();
        let numbers: Vec<i64> = options.iter().filter_map(Value::as_i64).collect();
        if texts.len() == options.len() && !texts.is_empty() {
            out = out.one_of(&texts);
        } else if numbers.len() == options.len() && !numbers.is_empty() {
            out = out.one_of_integers(&numbers);
        } else if !options.is_empty() {
            return Err(format!("{path}: one_of holds a value Strait cannot check"));
        }
    }
    if let Some(range) = def.get("between") {
        let bound = |at: usize| range.get(at).and_then(Value::as_i64);
        match (bound(0), bound(1)) {
            (Some(low), Some(high)) => out = out.between(low, high),
            _ => return Err(format!("{path}: between needs two integers")),
        }
    }
    if let Some(bound) = def.get("gt").and_then(Value::as_i64) {
        out = out.gt(bound);
    }
    if let Some(min) = def.get("len_min").and_then(Value::as_i64) {
        out = out.len_min(min.max(0) as usize);
    }
    if def.get("uuid").and_then(Value::as_bool).unwrap_or(false) {
        out = out.uuid();
    }
    if def.get("strait_check").and_then(Value::as_str) == Some("header_name") {
        out = out.check(formats::header_name);
    }
    if def.get("referenceable").and_then(Value::as_bool).unwrap_or(false) {
        out = out.referenceable();
    }
    match def.get("default") {
        None | Some(Value::Null) => {}
        // An empty Lua table converts as an empty object: for a list it is `[]`.
        Some(Value::Object(empty)) if empty.is_empty() && matches!(kind, "array" | "set") => {
            out = out.default(Value::Array(Vec::new()));
        }
        Some(value) => out = out.default(value.clone()),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_plugin_servers_schema_translates_and_validates() {
        // go-pdk's dump of `type Config struct { Message string; Count uint }`.
        let schema = plugin_schema(
            &json!({"name": "go-hello", "fields": [{"config": {"type": "record", "fields": [
                {"message": {"type": "string"}},
                {"count": {"type": "integer", "between": [0, 2147483648_i64]}},
                {"tags": {"type": "array", "elements": {"type": "string"}, "default": {}}}
            ]}}]}),
        )
        .unwrap();
        assert_eq!(schema.config.len(), 3);
        assert!(!schema.no_consumer);
        let error = match plugin_schema(&json!({"fields": [{"config": {"type": "record", "fields": [
            {"x": {"type": "string", "custom_validator": null}}
        ]}}]})) {
            Err(error) => error,
            Ok(_) => panic!("custom_validator taken"),
        };
        assert_eq!(error, "config.x: 'custom_validator' is not supported by Strait yet");
        assert!(plugin_schema(&json!({"fields": [{"config": {"type": "map"}}]})).is_err());
        assert!(plugin_schema(&json!({"name": "x"})).is_err());
    }
}
