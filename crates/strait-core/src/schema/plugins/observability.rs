//! Config schemas of the logging plugins (Kong 3.10 field names, types and
//! defaults), and Kong 3.x's shared `queue` record.

use serde_json::{json, Map, Value};

use super::PluginDef;
use crate::schema::field::Field;
use crate::schema::formats;

/// Kong's `typedefs.lua_code`: accepted in the schema (so Kong documents
/// load), refused by [`no_lua`] unless empty.
fn lua_code() -> Field {
    Field::map(Field::string().len_min(1), Field::string().len_min(1))
}

/// Strait runs no Lua.
fn no_lua(config: &Map<String, Value>) -> Result<(), String> {
    match config.get("custom_fields_by_lua") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(fields)) if fields.is_empty() => Ok(()),
        Some(_) => Err("custom_fields_by_lua: Strait runs no Lua; custom fields are not supported".into()),
    }
}

/// Kong's `kong/tools/queue_schema.lua`.
fn queue_record() -> Field {
    queue_record_batching(1)
}

/// The queue record with another `max_batch_size` default.
fn queue_record_batching(batch: i64) -> Field {
    Field::record(vec![
        (
            "max_batch_size",
            Field::integer().default(json!(batch)).between(1, 1_000_000),
        ),
        ("max_coalescing_delay", Field::number().default(json!(1))),
        (
            "max_entries",
            Field::integer().default(json!(10000)).between(1, 1_000_000),
        ),
        ("max_bytes", Field::integer()),
        ("max_retry_time", Field::number().default(json!(60))),
        ("initial_retry_delay", Field::number().default(json!(0.01))),
        ("max_retry_delay", Field::number().default(json!(60))),
        (
            "concurrency_limit",
            Field::integer().default(json!(1)).one_of_integers(&[-1, 1]),
        ),
    ])
    .default_record()
}

/// The `between` bounds of the queue's fractional fields.
fn queue_check(config: &Map<String, Value>) -> Result<(), String> {
    let Some(Value::Object(queue)) = config.get("queue") else {
        return Ok(());
    };
    let number = |field: &str| queue.get(field).and_then(Value::as_f64);
    let ranges: [(&str, f64, f64); 3] = [
        ("max_coalescing_delay", 0.0, 3600.0),
        ("initial_retry_delay", 0.001, 1_000_000.0),
        ("max_retry_delay", 0.001, 1_000_000.0),
    ];
    for (field, low, high) in ranges {
        if let Some(value) = number(field).filter(|v| *v < low || *v > high) {
            return Err(format!(
                "queue.{field}: value should be between {low} and {high}, got {value}"
            ));
        }
    }
    Ok(())
}

fn timeout(default: i64) -> Field {
    Field::number().default(json!(default))
}

fn port() -> Field {
    Field::integer().required().between(0, 65535)
}

/// Kong's file-log path rule: no leading or trailing space, none of `*&%\``.
fn file_path(value: &str) -> Result<(), String> {
    let bad = |c: char| matches!(c, '*' | '&' | '%' | '`' | '\\');
    let first = value.chars().next();
    let last = value.chars().last();
    let valid = value.chars().count() >= 2
        && !value.chars().any(bad)
        && !first.is_some_and(char::is_whitespace)
        && !last.is_some_and(char::is_whitespace);
    if valid {
        Ok(())
    } else {
        Err("not a valid filename".into())
    }
}

pub(super) fn file_log() -> PluginDef {
    PluginDef::new(vec![
        ("path", Field::string().required().check(file_path)),
        ("reopen", Field::boolean().required().default(json!(false))),
        ("custom_fields_by_lua", lua_code()),
    ])
    .any_protocol()
    .check(no_lua)
}

fn http_url(value: &str) -> Result<(), String> {
    let lower = value.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .ok_or("missing scheme: expected http:// or https://")?;
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.is_empty() {
        return Err("missing host in url".into());
    }
    formats::host_with_optional_port(host_port)
}

pub(super) fn http_log() -> PluginDef {
    let header_values = Field::string().referenceable();
    PluginDef::new(vec![
        (
            "http_endpoint",
            Field::string().required().check(http_url).referenceable(),
        ),
        (
            "method",
            Field::string().default(json!("POST")).one_of(&["POST", "PUT", "PATCH"]),
        ),
        (
            "content_type",
            Field::string()
                .default(json!("application/json"))
                .one_of(&["application/json", "application/json; charset=utf-8"]),
        ),
        ("timeout", timeout(10000)),
        ("keepalive", timeout(60000)),
        ("retry_count", Field::integer()),
        ("queue_size", Field::integer()),
        ("flush_timeout", Field::number()),
        (
            "headers",
            Field::map(Field::string().check(http_log_header), header_values),
        ),
        ("queue", queue_record()),
        ("custom_fields_by_lua", lua_code()),
    ])
    .any_protocol()
    .check(http_log_check)
}

fn http_log_header(name: &str) -> Result<(), String> {
    formats::header_name(name)?;
    match name.to_ascii_lowercase().as_str() {
        "host" => Err("cannot contain 'Host' header".into()),
        "content-length" => Err("cannot contain 'Content-Length' header".into()),
        "content-type" => Err("cannot contain 'Content-Type' header".into()),
        _ => Ok(()),
    }
}

fn http_log_check(config: &Map<String, Value>) -> Result<(), String> {
    no_lua(config)?;
    queue_check(config)?;
    let endpoint = config.get("http_endpoint").and_then(Value::as_str).unwrap_or("");
    let authority = endpoint.split_once("://").map_or("", |(_, rest)| rest);
    let authority = authority.split(['/', '?']).next().unwrap_or("");
    let has_userinfo = authority.contains('@');
    let has_authorization = config
        .get("headers")
        .and_then(Value::as_object)
        .is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case("authorization")));
    if has_userinfo && has_authorization {
        return Err("specifying both an 'Authorization' header and user info in 'http_endpoint' is not allowed".into());
    }
    Ok(())
}

pub(super) fn tcp_log() -> PluginDef {
    PluginDef::new(vec![
        ("host", Field::string().required().check(formats::host)),
        ("port", port()),
        ("timeout", timeout(10000)),
        ("keepalive", timeout(60000)),
        ("tls", Field::boolean().required().default(json!(false))),
        ("tls_sni", Field::string()),
        ("custom_fields_by_lua", lua_code()),
    ])
    .any_protocol()
    .check(no_lua)
}

pub(super) fn udp_log() -> PluginDef {
    PluginDef::new(vec![
        ("host", Field::string().required().check(formats::host)),
        ("port", port()),
        ("timeout", timeout(10000)),
        ("custom_fields_by_lua", lua_code()),
    ])
    .any_protocol()
    .check(no_lua)
}

pub(super) fn syslog() -> PluginDef {
    let severity = || {
        Field::string()
            .required()
            .default(json!("info"))
            .one_of(&["debug", "info", "notice", "warning", "err", "crit", "alert", "emerg"])
    };
    PluginDef::new(vec![
        ("log_level", severity()),
        ("successful_severity", severity()),
        ("client_errors_severity", severity()),
        ("server_errors_severity", severity()),
        ("custom_fields_by_lua", lua_code()),
        (
            "facility",
            Field::string().required().default(json!("user")).one_of(&[
                "auth", "authpriv", "cron", "daemon", "ftp", "kern", "lpr", "mail", "news", "syslog", "user", "uucp",
                "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
            ]),
        ),
    ])
    .any_protocol()
    .check(no_lua)
}

/// Trace header formats Kong knows; Strait reads and writes W3C only.
const TRACE_FORMATS: &[&str] = &[
    "preserve",
    "ignore",
    "b3",
    "b3-single",
    "w3c",
    "jaeger",
    "ot",
    "aws",
    "gcp",
    "datadog",
    "instana",
];

pub(super) fn opentelemetry() -> PluginDef {
    let formats = || Field::array(Field::string().one_of(&TRACE_FORMATS[1..]));
    PluginDef::new(vec![
        ("traces_endpoint", Field::string().check(http_url).referenceable()),
        ("logs_endpoint", Field::string().check(http_url).referenceable()),
        (
            "headers",
            Field::map(
                Field::string().check(formats::header_name),
                Field::string().referenceable(),
            ),
        ),
        (
            "resource_attributes",
            Field::map(Field::string(), Field::string().len_min(1)),
        ),
        ("queue", queue_record_batching(200)),
        ("batch_span_count", Field::integer()),
        ("batch_flush_delay", Field::integer()),
        (
            "connect_timeout",
            Field::integer().between(0, 2_147_483_646).default(json!(1000)),
        ),
        (
            "send_timeout",
            Field::integer().between(0, 2_147_483_646).default(json!(5000)),
        ),
        (
            "read_timeout",
            Field::integer().between(0, 2_147_483_646).default(json!(5000)),
        ),
        ("http_response_header_for_traceid", Field::string()),
        (
            "header_type",
            Field::string().default(json!("preserve")).one_of(TRACE_FORMATS),
        ),
        ("sampling_rate", Field::number()),
        (
            "propagation",
            Field::record(vec![
                ("extract", formats()),
                ("clear", Field::array(Field::string())),
                ("inject", Field::array(Field::string().one_of(TRACE_FORMATS))),
                (
                    "default_format",
                    Field::string()
                        .required()
                        .default(json!("w3c"))
                        .one_of(&TRACE_FORMATS[1..]),
                ),
            ])
            .default_record(),
        ),
    ])
    .check(opentelemetry_check)
}

fn opentelemetry_check(config: &Map<String, Value>) -> Result<(), String> {
    queue_check(config)?;
    let present = |field: &str| config.get(field).is_some_and(|v| !v.is_null());
    if !present("traces_endpoint") && !present("logs_endpoint") {
        return Err("at least one of these fields must be non-empty: 'traces_endpoint', 'logs_endpoint'".into());
    }
    if present("logs_endpoint") {
        return Err("logs_endpoint: Strait exports traces only; OTLP logs are not supported".into());
    }
    if let Some(rate) = config.get("sampling_rate").and_then(Value::as_f64) {
        if !(0.0..=1.0).contains(&rate) {
            return Err(format!("sampling_rate: value should be between 0 and 1, got {rate}"));
        }
    }
    let header_type = config.get("header_type").and_then(Value::as_str).unwrap_or("preserve");
    if !matches!(header_type, "preserve" | "w3c" | "ignore") {
        return Err(format!(
            "header_type: Strait propagates W3C trace context only, not '{header_type}'"
        ));
    }
    if let Some(Value::Object(propagation)) = config.get("propagation") {
        let listed = ["extract", "inject"]
            .iter()
            .filter_map(|field| propagation.get(*field).and_then(Value::as_array))
            .flatten()
            .chain(propagation.get("default_format"))
            .filter_map(Value::as_str);
        for format in listed {
            if !matches!(format, "w3c" | "preserve") {
                return Err(format!(
                    "propagation: Strait propagates W3C trace context only, not '{format}'"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_paths_follow_kong_rule() {
        assert!(file_path("/var/log/strait.log").is_ok());
        assert!(file_path(" /tmp/x").is_err());
        assert!(file_path("/tmp/a*b").is_err());
        assert!(file_path("/tmp/x ").is_err());
    }

    #[test]
    fn http_endpoints_need_a_scheme_and_host() {
        assert!(http_url("http://127.0.0.1:9000/logs").is_ok());
        assert!(http_url("https://user:pw@logs.example").is_ok());
        assert!(http_url("logs.example").is_err());
        assert!(http_url("http:///x").is_err());
    }
}
