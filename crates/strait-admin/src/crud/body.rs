//! Request bodies of entity writes: JSON, `application/x-www-form-urlencoded`
//! and `multipart/form-data`, all turned into one JSON object.
//!
//! Form keys follow Kong's conventions (`paths[1]=/x`, `paths[]=/x`,
//! repeated `paths=/x`, `service.id=...`, `config.status_code=403`); their
//! string values are typed from the entity schema the way Kong's
//! `arguments.infer_value` does (`""` is null, numbers, booleans, one value
//! for an array field is a one-element array).

use http::StatusCode;
use serde_json::{Map, Value};
use strait_core::{entity_schema_json, EntityKind};

use crate::request::{form_pairs, AdminRequest};
use crate::response::{message, AdminResponse};

/// How the body was encoded; form bodies need their values typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Form,
}

/// The body as a JSON object.
pub fn parse_body(request: &AdminRequest) -> Result<(Map<String, Value>, Encoding), AdminResponse> {
    let body = &request.body;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((Map::new(), Encoding::Json));
    }
    match request.media_type.as_str() {
        "application/json" => parse_json(body).map(|m| (m, Encoding::Json)),
        "" if body.trim_ascii_start().starts_with(b"{") => parse_json(body).map(|m| (m, Encoding::Json)),
        "" | "application/x-www-form-urlencoded" => Ok((form_object(form_pairs(body)), Encoding::Form)),
        "multipart/form-data" => {
            let pairs = multipart_pairs(&request.content_type, body);
            Ok((form_object(pairs), Encoding::Form))
        }
        _ => Err(unsupported_media_type()),
    }
}

pub fn unsupported_media_type() -> AdminResponse {
    message(StatusCode::UNSUPPORTED_MEDIA_TYPE, "Unsupported Content-Type")
}

fn parse_json(body: &[u8]) -> Result<Map<String, Value>, AdminResponse> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(message(StatusCode::BAD_REQUEST, "Cannot parse JSON body")),
    }
}

/// One step of a form key: `a`, `[2]` (1-based, as Kong) or `[]` (append).
enum Step {
    Key(String),
    Index(Option<usize>),
}

fn key_path(key: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    for part in key.split('.') {
        let (name, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if !name.is_empty() {
            steps.push(Step::Key(name.to_string()));
        }
        while let (Some(open), Some(close)) = (rest.find('['), rest.find(']')) {
            if close < open {
                break;
            }
            steps.push(Step::Index(rest[open + 1..close].parse().ok()));
            rest = &rest[close + 1..];
        }
    }
    steps
}

/// Marks an indexed slot until arrays are assembled.
const INDEX_MARK: char = '\u{1}';

fn insert(node: &mut Value, steps: &[Step], value: Value) {
    let Some((first, rest)) = steps.split_first() else {
        match node {
            Value::Null => *node = value,
            Value::Array(items) => items.push(value),
            other => *other = Value::Array(vec![other.take(), value]),
        }
        return;
    };
    let slot = match first {
        Step::Key(key) => object_entry(node, key.clone()),
        Step::Index(Some(index)) => object_entry(node, format!("{INDEX_MARK}{index:010}")),
        Step::Index(None) => {
            if !node.is_array() {
                *node = Value::Array(Vec::new());
            }
            let Value::Array(items) = node else { return };
            items.push(Value::Null);
            let Some(last) = items.last_mut() else { return };
            last
        }
    };
    insert(slot, rest, value);
}

fn object_entry(node: &mut Value, key: String) -> &mut Value {
    if !node.is_object() {
        *node = Value::Object(Map::new());
    }
    match node {
        Value::Object(map) => map.entry(key).or_insert(Value::Null),
        _ => unreachable!("made an object above"),
    }
}

/// Turns objects whose keys are all index marks into arrays, in index order.
fn assemble_arrays(value: Value) -> Value {
    match value {
        Value::Object(map) if !map.is_empty() && map.keys().all(|k| k.starts_with(INDEX_MARK)) => {
            let mut items: Vec<(String, Value)> = map.into_iter().collect();
            items.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Array(items.into_iter().map(|(_, v)| assemble_arrays(v)).collect())
        }
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, assemble_arrays(v))).collect()),
        Value::Array(items) => Value::Array(items.into_iter().map(assemble_arrays).collect()),
        other => other,
    }
}

/// Form pairs as a nested object of strings.
pub fn form_object(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Map<String, Value> {
    let mut root = Value::Object(Map::new());
    for (key, value) in pairs {
        let key = String::from_utf8_lossy(&key).into_owned();
        let value = Value::String(String::from_utf8_lossy(&value).into_owned());
        insert(&mut root, &key_path(&key), value);
    }
    match assemble_arrays(root) {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// `(name, content)` of every part of a multipart body.
pub fn multipart_pairs(content_type: &str, body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let Some(boundary) = content_type
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("boundary="))
        .map(|b| b.trim_matches('"'))
    else {
        return Vec::new();
    };
    let delimiter = format!("--{boundary}");
    split_bytes(body, delimiter.as_bytes())
        .filter_map(|part| {
            let header_end = part.windows(4).position(|w| w == b"\r\n\r\n")?;
            let headers = std::str::from_utf8(&part[..header_end]).ok()?;
            let name = headers
                .split(';')
                .map(str::trim)
                .find_map(|p| p.strip_prefix("name="))?
                .split(['\r', '\n'])
                .next()?
                .trim_matches('"');
            let content = &part[header_end + 4..];
            let content = content.strip_suffix(b"\r\n").unwrap_or(content);
            Some((name.as_bytes().to_vec(), content.to_vec()))
        })
        .collect()
}

fn split_bytes<'a>(haystack: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
    let mut rest = haystack;
    std::iter::from_fn(move || {
        if rest.is_empty() || needle.is_empty() {
            return None;
        }
        let at = rest
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap_or(rest.len());
        let part = &rest[..at];
        rest = rest.get(at + needle.len()..).unwrap_or_default();
        Some(part)
    })
}

/// Types the string values of a form body from the schema of `kind`
/// (and, for plugins, of the plugin's `config`).
pub fn infer_entity(kind: EntityKind, input: &mut Map<String, Value>, plugin_name: Option<&str>) {
    let schema = entity_schema_json(kind);
    let mut fields = schema["fields"].clone();
    if let Some(config) = plugin_name.and_then(strait_core::schema::plugin_schema_json) {
        if let Some(list) = fields.as_array_mut() {
            list.retain(|f| f.get("config").is_none());
            list.extend(config["fields"].as_array().into_iter().flatten().cloned());
        }
    }
    infer_record(input, &fields);
}

fn infer_record(input: &mut Map<String, Value>, fields: &Value) {
    for field in fields.as_array().into_iter().flatten() {
        let Some((name, def)) = field.as_object().and_then(|f| f.iter().next()) else {
            continue;
        };
        if let Some(value) = input.get_mut(name) {
            *value = infer_value(value.take(), def);
        }
    }
}

fn infer_value(value: Value, def: &Value) -> Value {
    if value.as_str() == Some("") {
        return Value::Null;
    }
    match (def["type"].as_str().unwrap_or(""), value) {
        ("integer" | "number", Value::String(s)) => match s.parse::<i64>() {
            Ok(n) => Value::from(n),
            Err(_) => s.parse::<f64>().ok().map_or(Value::String(s), Value::from),
        },
        ("boolean", Value::String(s)) if s == "true" || s == "false" => Value::Bool(s == "true"),
        ("array" | "set", Value::String(s)) => Value::Array(vec![infer_value(Value::String(s), &def["elements"])]),
        ("array" | "set", Value::Array(items)) => {
            Value::Array(items.into_iter().map(|v| infer_value(v, &def["elements"])).collect())
        }
        ("map", Value::Object(map)) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, infer_value(v, &def["values"])))
                .collect(),
        ),
        ("record", Value::Object(mut map)) => {
            infer_record(&mut map, &def["fields"]);
            Value::Object(map)
        }
        (_, other) => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form(text: &str) -> Map<String, Value> {
        form_object(form_pairs(text.as_bytes()))
    }

    #[test]
    fn kong_form_keys_build_nested_values() {
        let object = form("paths[1]=/a&paths[2]=/b&service.id=x&hosts=h1&hosts=h2&methods[]=GET");
        assert_eq!(
            Value::Object(object),
            json!({"paths": ["/a", "/b"], "service": {"id": "x"}, "hosts": ["h1", "h2"], "methods": ["GET"]})
        );
    }

    #[test]
    fn values_are_typed_from_the_schema() {
        strait_plugins::install();
        let mut service = form("name=s&port=8080&host=h&retries=&enabled=false&tags=a");
        infer_entity(EntityKind::Services, &mut service, None);
        assert_eq!(
            Value::Object(service),
            json!({"name": "s", "port": 8080, "host": "h", "retries": null, "enabled": false, "tags": ["a"]})
        );
        let mut plugin = form("name=request-termination&config.status_code=403&config.echo=true");
        infer_entity(EntityKind::Plugins, &mut plugin, Some("request-termination"));
        assert_eq!(plugin["config"], json!({"status_code": 403, "echo": true}));
    }

    #[test]
    fn multipart_parts() {
        let body = b"--XYZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nsvc\r\n--XYZ\r\nContent-Disposition: form-data; name=\"port\"\r\n\r\n81\r\n--XYZ--\r\n";
        let pairs = multipart_pairs("multipart/form-data; boundary=XYZ", body);
        assert_eq!(Value::Object(form_object(pairs)), json!({"name": "svc", "port": "81"}));
    }
}
