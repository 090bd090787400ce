//! Kong's log entry (`kong.log.serialize()`), as the logging plugins send
//! it: request, upstream_uri, upstream_status, response, latencies, tries,
//! authenticated_entity, route, service, consumer, client_ip, started_at,
//! source, workspace. `authorization` and `proxy-authorization` request
//! headers are `REDACTED`, as in Kong.

use http::HeaderMap;
use serde_json::{json, Map, Value};

use crate::context::{LogRecord, SharedStore};

/// The id Strait reports for Kong's `default` workspace (Strait has no
/// other workspace).
pub const DEFAULT_WORKSPACE_ID: &str = "00000000-0000-0000-0000-000000000000";

/// Values plugins set for the log entry (Kong's
/// `kong.log.set_serialize_value`), kept in the request's [`SharedStore`]
/// and applied to the entry in the order they were set. A key is a dotted
/// path (`request.tenant`); a null value removes the key (mode `Set`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SerializeValues(pub Vec<(String, Value, SerializeMode)>);

/// `set_serialize_value`'s `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SerializeMode {
    /// Set, adding or replacing.
    Set,
    /// Only when the key is not there yet.
    Add,
    /// Only when the key is there.
    Replace,
}

impl SerializeValues {
    /// Applies the values to `entry`, in order.
    pub fn apply(&self, entry: &mut Value) {
        for (key, value, mode) in &self.0 {
            let mut parts: Vec<&str> = key.split('.').collect();
            let Some(last) = parts.pop() else { continue };
            let Some(object) = parent(entry, &parts, *mode != SerializeMode::Replace) else {
                continue;
            };
            let present = object.contains_key(last);
            match (mode, value) {
                (SerializeMode::Add, _) if present => {}
                (SerializeMode::Replace, _) if !present => {}
                (_, Value::Null) => {
                    object.remove(last);
                }
                (_, value) => {
                    object.insert(last.to_string(), value.clone());
                }
            }
        }
    }
}

/// The object at `path` in `entry`, its missing objects made on the way
/// when `create`.
fn parent<'a>(entry: &'a mut Value, path: &[&str], create: bool) -> Option<&'a mut Map<String, Value>> {
    let mut at = entry;
    for part in path {
        let object = at.as_object_mut()?;
        if !object.contains_key(*part) {
            if !create {
                return None;
            }
            object.insert(part.to_string(), Value::Object(Map::new()));
        }
        at = object.get_mut(*part)?;
    }
    at.as_object_mut()
}

/// Kong's entry for `record`, or `None` when the proxy kept no details
/// (a chain with no serializing plugin), with the values plugins set for
/// it ([`SerializeValues`]) applied.
pub fn kong_entry(record: &LogRecord, shared: &SharedStore) -> Option<Value> {
    let mut entry = base_entry(record)?;
    crate::ai::add_log_fields(&mut entry, shared);
    if let Some(values) = shared.get::<SerializeValues>() {
        values.apply(&mut entry);
    }
    Some(entry)
}

fn base_entry(record: &LogRecord) -> Option<Value> {
    let details = record.details.as_deref()?;
    let request = &record.request;
    let mut entry = Map::new();
    let port = details.port;
    let url = format!("{}://{}:{port}{}", details.scheme, details.host, details.request_uri);
    let query = details.request_uri.split_once('?').map_or("", |(_, q)| q);
    let mut request_json = json!({
        "id": details.request_id,
        "uri": details.request_uri,
        "url": url,
        "querystring": querystring(query),
        "method": request.method.as_str(),
        "headers": headers(&details.request_headers, true),
        "size": record.request_bytes,
    });
    if let Some(version) = details.tls_version {
        request_json["tls"] = json!({ "version": version });
    }
    entry.insert("request".into(), request_json);
    entry.insert(
        "upstream_uri".into(),
        json!(details.upstream_uri.as_deref().unwrap_or("")),
    );
    entry.insert(
        "upstream_status".into(),
        json!(details.upstream_status.map(|s| s.to_string()).unwrap_or_default()),
    );
    entry.insert(
        "response".into(),
        json!({
            "status": record.status,
            "headers": headers(&details.response_headers, false),
            "size": record.response_bytes,
        }),
    );
    let kong = details.kong_ms.unwrap_or(record.total_ms);
    let proxy = record.upstream_ms.map_or(-1, |ms| ms as i64);
    let receive = record
        .total_ms
        .saturating_sub(kong)
        .saturating_sub(record.upstream_ms.unwrap_or(0));
    entry.insert(
        "latencies".into(),
        json!({ "kong": kong, "proxy": proxy, "request": record.total_ms, "receive": receive }),
    );
    if !details.tries.is_empty() {
        let tries: Vec<Value> = details
            .tries
            .iter()
            .map(|t| {
                let mut one = json!({
                    "ip": t.ip,
                    "port": t.port,
                    "balancer_start": t.balancer_start,
                    "balancer_latency": t.balancer_latency,
                });
                if let Some(failure) = &t.failure {
                    one["state"] = json!("failed");
                    one["failure"] = json!(failure);
                }
                one
            })
            .collect();
        entry.insert("tries".into(), Value::Array(tries));
    }
    if let Some(credential) = &request.credential {
        entry.insert(
            "authenticated_entity".into(),
            json!({ "id": credential.id, "consumer_id": request.consumer_id }),
        );
    }
    let entities = &details.entities;
    if let Some(route) = request.route_id.and_then(|id| entities.route(id)) {
        entry.insert("route".into(), serde_json::to_value(route).unwrap_or(Value::Null));
    }
    if let Some(service) = request.service_id.and_then(|id| entities.service(id)) {
        entry.insert("service".into(), serde_json::to_value(service).unwrap_or(Value::Null));
    }
    if let Some(consumer) = request.consumer_id.and_then(|id| entities.consumer(id)) {
        entry.insert("consumer".into(), serde_json::to_value(consumer).unwrap_or(Value::Null));
    }
    entry.insert("client_ip".into(), json!(request.client_ip.to_string()));
    entry.insert("started_at".into(), json!(details.started_at));
    entry.insert("source".into(), json!(record.source.name()));
    if let Some(trace_id) = &details.trace_id {
        entry.insert("trace_id".into(), json!(trace_id));
    }
    entry.insert("workspace".into(), json!(DEFAULT_WORKSPACE_ID));
    entry.insert("workspace_name".into(), json!("default"));
    Some(Value::Object(entry))
}

/// Headers as Kong's `get_headers()`: lower-case names, a repeated header
/// as an array of its values.
fn headers(map: &HeaderMap, redact: bool) -> Value {
    let mut out = Map::new();
    for name in map.keys() {
        let values: Vec<Value> = map
            .get_all(name)
            .iter()
            .map(|v| Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let secret = redact && (name == http::header::AUTHORIZATION || name == http::header::PROXY_AUTHORIZATION);
        let value = match (secret, values.len()) {
            (true, _) => json!("REDACTED"),
            (false, 1) => values.into_iter().next().unwrap_or(Value::Null),
            (false, _) => Value::Array(values),
        };
        out.insert(name.as_str().to_string(), value);
    }
    Value::Object(out)
}

/// Query arguments as Kong's `get_query()`: decoded, an argument without
/// `=` is `true`, a repeated one an array.
fn querystring(query: &str) -> Value {
    let mut out = Map::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = match part.split_once('=') {
            Some((k, v)) => (
                crate::form::decode(k),
                Value::String(crate::form::decode(v).into_owned()),
            ),
            None => (crate::form::decode(part), Value::Bool(true)),
        };
        match out.get_mut(key.as_ref()) {
            Some(Value::Array(values)) => values.push(value),
            Some(existing) => {
                let first = existing.take();
                *existing = Value::Array(vec![first, value]);
            }
            None => {
                out.insert(key.into_owned(), value);
            }
        }
    }
    Value::Object(out)
}

/// `entry` as one JSON text.
pub fn to_bytes(entry: &Value) -> Vec<u8> {
    serde_json::to_vec(entry).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialize_values_set_add_replace_and_remove_by_path() {
        let mut entry = json!({ "request": { "id": "r1" }, "client_ip": "1.2.3.4" });
        SerializeValues(vec![
            ("tenant".into(), json!("acme"), SerializeMode::Set),
            ("request.team".into(), json!({ "name": "core" }), SerializeMode::Set),
            ("request.id".into(), json!("r2"), SerializeMode::Add),
            ("request.size".into(), json!(5), SerializeMode::Replace),
            ("request.id".into(), json!("r3"), SerializeMode::Replace),
            ("client_ip".into(), Value::Null, SerializeMode::Set),
            ("a.b.c".into(), json!(true), SerializeMode::Set),
            ("x.y".into(), json!(1), SerializeMode::Replace),
        ])
        .apply(&mut entry);
        assert_eq!(
            entry,
            json!({
                "request": { "id": "r3", "team": { "name": "core" } },
                "tenant": "acme",
                "a": { "b": { "c": true } }
            })
        );
    }

    #[test]
    fn query_arguments_decode_like_kong() {
        assert_eq!(
            querystring("a=1&flag&a=2&b=x%20y&c=a+b"),
            json!({"a": ["1", "2"], "flag": true, "b": "x y", "c": "a b"})
        );
        assert_eq!(querystring(""), json!({}));
    }

    #[test]
    fn authorization_is_redacted_and_repeats_are_arrays() {
        let mut map = HeaderMap::new();
        map.append("authorization", "Basic secret".parse().unwrap());
        map.append("x-a", "1".parse().unwrap());
        map.append("x-a", "2".parse().unwrap());
        assert_eq!(
            headers(&map, true),
            json!({"authorization": "REDACTED", "x-a": ["1", "2"]})
        );
        assert_eq!(headers(&map, false)["authorization"], json!("Basic secret"));
    }
}
