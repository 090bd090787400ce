//! Config schemas of the security plugins (Kong 3.10 field names, types
//! and defaults).

use serde_json::{json, Map, Value};

use super::PluginDef;
use crate::schema::field::Field;
use crate::schema::formats;

const METHODS: &[&str] = &[
    "GET", "HEAD", "PUT", "PATCH", "POST", "DELETE", "OPTIONS", "TRACE", "CONNECT",
];

fn non_empty_list(config: &Map<String, Value>, field: &str) -> bool {
    config
        .get(field)
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

fn ip_restriction_check(config: &Map<String, Value>) -> Result<(), String> {
    if !non_empty_list(config, "allow") && !non_empty_list(config, "deny") {
        return Err("at least one of these fields must be non-empty: 'config.allow', 'config.deny'".into());
    }
    if let Some(status) = config.get("status").and_then(Value::as_f64) {
        if !(100.0..=599.0).contains(&status) {
            return Err("status: value should be between 100 and 599".into());
        }
    }
    Ok(())
}

pub(super) fn ip_restriction() -> PluginDef {
    let mut def = PluginDef::new(vec![
        ("allow", Field::array(Field::string().check(formats::ip_or_cidr))),
        ("deny", Field::array(Field::string().check(formats::ip_or_cidr))),
        ("status", Field::number()),
        ("message", Field::string()),
    ])
    .any_protocol()
    .check(ip_restriction_check);
    def.protocols_default = Some(&["http", "https", "tcp", "tls", "grpc", "grpcs"]);
    def
}

fn regex(value: &str) -> Result<(), String> {
    regex_syntax::Parser::new()
        .parse(value)
        .map(|_| ())
        .map_err(|_| format!("'{value}' is not a valid regex"))
}

fn asterisk_or_regex(value: &str) -> Result<(), String> {
    if value == "*" {
        return Ok(());
    }
    regex(value)
}

pub(super) fn cors() -> PluginDef {
    let bool_default = |v: bool| Field::boolean().required().default(json!(v));
    PluginDef::new(vec![
        ("origins", Field::array(Field::string().check(asterisk_or_regex))),
        ("headers", Field::array(Field::string())),
        ("exposed_headers", Field::array(Field::string())),
        (
            "methods",
            Field::array(Field::string().one_of(METHODS)).default(json!(METHODS)),
        ),
        ("max_age", Field::number()),
        ("credentials", bool_default(false)),
        ("private_network", bool_default(false)),
        ("preflight_continue", bool_default(false)),
        ("allow_origin_absent", bool_default(true)),
    ])
    .no_consumer()
}

pub(super) fn bot_detection() -> PluginDef {
    PluginDef::new(vec![
        ("allow", Field::array(Field::string().check(regex)).default(json!([]))),
        ("deny", Field::array(Field::string().check(regex)).default(json!([]))),
    ])
    .no_consumer()
}

pub(super) fn request_size_limiting() -> PluginDef {
    PluginDef::new(vec![
        ("allowed_payload_size", Field::integer().default(json!(128))),
        (
            "size_unit",
            Field::string()
                .required()
                .default(json!("megabytes"))
                .one_of(&["megabytes", "kilobytes", "bytes"]),
        ),
        (
            "require_content_length",
            Field::boolean().required().default(json!(false)),
        ),
    ])
}
