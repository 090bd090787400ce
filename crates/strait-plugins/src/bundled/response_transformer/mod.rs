//! `response-transformer` (Kong priority 800): remove, rename, replace, add
//! and append response headers, and JSON body fields when the response is
//! JSON (the body is then held until complete, up to the proxy's buffer
//! limit, and rewritten once).

mod schema;

/// `response-transformer` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "response-transformer",
    priority: 800,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(ResponseTransformer::from_config(config)?)),
};

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};

use crate::config::ConfigReader;
use crate::context::{BodyChunk, ResponseCtx, SharedStore};
use crate::phase::{BufferResponseBody, Plugin};
use crate::PluginError;

/// `name:value` pairs with the JSON type of each value.
#[derive(Debug, Default)]
struct Lists {
    headers: Vec<(String, String)>,
    json: Vec<(String, Value)>,
}

#[derive(Debug)]
pub struct ResponseTransformer {
    remove: Lists,
    rename: Lists,
    replace: Lists,
    add: Lists,
    append: Lists,
}

/// This response's JSON body is being rewritten.
struct TransformingJson;

fn pairs(c: &ConfigReader<'_>, field: &str) -> Result<Vec<(String, String)>, PluginError> {
    Ok(c.strings(field)?
        .into_iter()
        .map(|entry| match entry.split_once(':') {
            Some((name, value)) => (name.to_string(), value.trim_start_matches(':').to_string()),
            None => (entry, String::new()),
        })
        .collect())
}

fn typed(value: &str, json_type: Option<&str>) -> Value {
    match json_type {
        Some("number") => value
            .parse::<f64>()
            .ok()
            .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
            .map(|v| match v.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
                _ => v,
            })
            .unwrap_or(Value::Null),
        Some("boolean") => Value::Bool(value == "true"),
        _ => Value::String(value.to_string()),
    }
}

fn lists(config: &ConfigReader<'_>, operation: &str) -> Result<Lists, PluginError> {
    let c = config.record(operation)?;
    let types = c.strings("json_types")?;
    let json = pairs(&c, "json")?
        .into_iter()
        .enumerate()
        .map(|(i, (name, value))| {
            let value = typed(&value, types.get(i).map(String::as_str));
            (name, value)
        })
        .collect();
    Ok(Lists {
        headers: pairs(&c, "headers")?,
        json,
    })
}

fn is_json(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|ct| {
            let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
        })
}

impl ResponseTransformer {
    pub fn from_config(config: &Map<String, Value>) -> Result<ResponseTransformer, PluginError> {
        let c = ConfigReader::new(config);
        Ok(ResponseTransformer {
            remove: lists(&c, "remove")?,
            rename: lists(&c, "rename")?,
            replace: lists(&c, "replace")?,
            add: lists(&c, "add")?,
            append: lists(&c, "append")?,
        })
    }

    fn transforms_json(&self) -> bool {
        [&self.remove, &self.rename, &self.replace, &self.add, &self.append]
            .iter()
            .any(|l| !l.json.is_empty())
    }

    fn transform_json(&self, map: &mut Map<String, Value>) {
        for (name, _) in &self.remove.json {
            map.shift_remove(name);
        }
        for (old, new) in &self.rename.json {
            if let (Some(value), Value::String(new)) = (map.shift_remove(old), new) {
                map.insert(new.clone(), value);
            }
        }
        for (name, value) in &self.replace.json {
            if map.contains_key(name) {
                map.insert(name.clone(), value.clone());
            }
        }
        for (name, value) in &self.add.json {
            if !map.contains_key(name) {
                map.insert(name.clone(), value.clone());
            }
        }
        for (name, value) in &self.append.json {
            let slot = map.entry(name.clone()).or_insert(Value::Null);
            *slot = match slot.take() {
                Value::Null => Value::Array(vec![value.clone()]),
                Value::Array(mut items) => {
                    items.push(value.clone());
                    Value::Array(items)
                }
                other => Value::Array(vec![other, value.clone()]),
            };
        }
    }
}

fn header(name: &str) -> Option<HeaderName> {
    HeaderName::from_bytes(name.as_bytes()).ok()
}

impl Plugin for ResponseTransformer {
    fn name(&self) -> &'static str {
        "response-transformer"
    }

    fn priority(&self) -> i32 {
        800
    }

    fn filters_headers(&self) -> bool {
        true
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        let headers = &mut *ctx.headers;
        for (name, _) in &self.remove.headers {
            if let Some(name) = header(name) {
                headers.remove(name);
            }
        }
        for (old, new) in &self.rename.headers {
            if let (Some(old), Some(new)) = (header(old), header(new)) {
                if let Some(value) = headers.get(&old).cloned() {
                    headers.remove(&old);
                    headers.insert(new, value);
                }
            }
        }
        for (name, value) in &self.replace.headers {
            if let (Some(name), Ok(value)) = (header(name), HeaderValue::from_str(value)) {
                if headers.contains_key(&name) {
                    headers.insert(name, value);
                }
            }
        }
        for (name, value) in &self.add.headers {
            if let (Some(name), Ok(value)) = (header(name), HeaderValue::from_str(value)) {
                if !headers.contains_key(&name) {
                    headers.insert(name, value);
                }
            }
        }
        for (name, value) in &self.append.headers {
            if let (Some(name), Ok(value)) = (header(name), HeaderValue::from_str(value)) {
                headers.append(name, value);
            }
        }
        if self.transforms_json() && is_json(headers) {
            headers.remove(http::header::CONTENT_LENGTH);
            ctx.shared.insert(TransformingJson);
            ctx.shared.insert(BufferResponseBody);
        }
    }

    fn filters_body(&self) -> bool {
        self.transforms_json()
    }

    fn body_filter(&self, shared: &mut SharedStore, chunk: &mut BodyChunk) {
        if !chunk.end || shared.get::<TransformingJson>().is_none() {
            return;
        }
        // A body that is not a JSON object passes unchanged (as in Kong).
        if let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(&chunk.data) {
            self.transform_json(&mut map);
            if let Ok(bytes) = serde_json::to_vec(&map) {
                chunk.data = Bytes::from(bytes);
            }
        }
    }
}
