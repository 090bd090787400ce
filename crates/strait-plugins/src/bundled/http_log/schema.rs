//! `http-log`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;
use strait_core::schema::formats;

use crate::config_fields::{http_url, lua_code, no_lua, queue_check, queue_record_batching, timeout};

/// Kong's `kong/tools/queue_schema.lua`.
fn queue_record() -> Field {
    queue_record_batching(1)
}

pub(super) fn schema() -> PluginSchema {
    let header_values = Field::string().referenceable();
    PluginSchema::new(vec![
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
