//! Schemas of load-balancing entities: upstreams (with Kong's full default
//! `healthchecks` record and hashing rules) and targets.

use serde_json::{json, Map, Value};

use super::field::Field;
use super::formats;
use super::{auto_fields, is_missing, tags_field, EntityDef};
use crate::error::FieldError;

const HASH_ON: &[&str] = &[
    "none",
    "consumer",
    "ip",
    "header",
    "cookie",
    "path",
    "query_arg",
    "uri_capture",
];

fn seconds(default: i64) -> Field {
    Field::number().between(0, 65535).default(json!(default))
}

fn counter() -> Field {
    Field::integer().between(0, 255).default(json!(0))
}

fn statuses(default: Value) -> Field {
    Field::array(Field::integer().between(100, 999)).default(default)
}

fn check_type() -> Field {
    Field::string()
        .one_of(&["tcp", "http", "https", "grpc", "grpcs"])
        .default(json!("http"))
}

fn active_healthchecks() -> Field {
    let healthy = Field::record(vec![
        ("interval", seconds(0)),
        ("http_statuses", statuses(json!([200, 302]))),
        ("successes", counter()),
    ]);
    let unhealthy = Field::record(vec![
        ("interval", seconds(0)),
        (
            "http_statuses",
            statuses(json!([429, 404, 500, 501, 502, 503, 504, 505])),
        ),
        ("tcp_failures", counter()),
        ("timeouts", counter()),
        ("http_failures", counter()),
    ]);
    Field::record(vec![
        ("type", check_type()),
        ("timeout", seconds(1)),
        (
            "concurrency",
            Field::integer().between(1, 2_147_483_648).default(json!(10)),
        ),
        (
            "http_path",
            Field::string().check(formats::service_path).default(json!("/")),
        ),
        ("https_sni", Field::string().check(formats::sni)),
        (
            "https_verify_certificate",
            Field::boolean().required().default(json!(true)),
        ),
        (
            "headers",
            Field::map(
                Field::string().check(formats::header_name),
                Field::array(Field::string()),
            ),
        ),
        ("healthy", healthy.default_record()),
        ("unhealthy", unhealthy.default_record()),
    ])
    .default_record()
}

fn passive_healthchecks() -> Field {
    let healthy_statuses =
        json!([200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 301, 302, 303, 304, 305, 306, 307, 308]);
    let healthy = Field::record(vec![
        ("http_statuses", statuses(healthy_statuses)),
        ("successes", counter()),
    ]);
    let unhealthy = Field::record(vec![
        ("http_statuses", statuses(json!([429, 500, 503]))),
        ("tcp_failures", counter()),
        ("timeouts", counter()),
        ("http_failures", counter()),
    ]);
    Field::record(vec![
        ("type", check_type()),
        ("healthy", healthy.default_record()),
        ("unhealthy", unhealthy.default_record()),
    ])
    .default_record()
}

/// The upstream `healthchecks` record; its expanded default is Kong's.
pub(crate) fn healthchecks() -> Field {
    Field::record(vec![
        ("active", active_healthchecks()),
        ("passive", passive_healthchecks()),
        ("threshold", Field::number().between(0, 100).default(json!(0))),
    ])
    .default_record()
}

/// Kong's default `healthchecks` object, as an upstream gets it when none is given.
pub fn default_healthchecks() -> Value {
    healthchecks().expanded_default().unwrap_or(Value::Null)
}

pub(crate) fn upstream() -> EntityDef {
    let mut fields = auto_fields(false);
    let param = || Field::string().len_min(1);
    fields.extend([
        (
            "name",
            Field::string().required().unique().check(formats::upstream_name),
        ),
        (
            "algorithm",
            Field::string().default(json!("round-robin")).one_of(&[
                "consistent-hashing",
                "least-connections",
                "round-robin",
                "latency",
                "sticky-sessions",
            ]),
        ),
        ("hash_on", Field::string().default(json!("none")).one_of(HASH_ON)),
        ("hash_fallback", Field::string().default(json!("none")).one_of(HASH_ON)),
        ("hash_on_header", Field::string().check(formats::header_name)),
        ("hash_fallback_header", Field::string().check(formats::header_name)),
        ("hash_on_cookie", Field::string()),
        (
            "hash_on_cookie_path",
            Field::string().check(formats::service_path).default(json!("/")),
        ),
        ("hash_on_query_arg", param()),
        ("hash_fallback_query_arg", param()),
        ("hash_on_uri_capture", param()),
        ("hash_fallback_uri_capture", param()),
        ("slots", Field::integer().default(json!(10000)).between(10, 65536)),
        ("healthchecks", healthchecks()),
        ("tags", tags_field()),
        ("host_header", Field::string().check(formats::host_with_optional_port)),
        ("client_certificate", Field::foreign("certificates")),
        ("use_srv_name", Field::boolean().default(json!(false))),
        ("sticky_sessions_cookie", Field::string().check(formats::cookie_name)),
        // No default: Kong 3.9 has no such field, so an upstream that does
        // not set it answers without it (decK compares upstreams whole).
        // The balancer takes `/` for it.
        (
            "sticky_sessions_cookie_path",
            Field::string().check(formats::service_path),
        ),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("name"),
        shorthand: upstream_hash_shorthand,
        finish: upstream_checks,
        entity_checks: json!([]),
    }
}

/// Hashing on anything but `none` implies consistent hashing (Kong's shorthand).
fn upstream_hash_shorthand(input: &mut Map<String, Value>, _: &mut Vec<FieldError>) {
    let hashes = input
        .get("hash_on")
        .and_then(Value::as_str)
        .is_some_and(|h| h != "none");
    if hashes && is_missing(input.get("algorithm")) {
        input.insert("algorithm".into(), json!("consistent-hashing"));
    }
}

/// Kong's upstream conditionals: hashing inputs must be named, fallback rules.
fn upstream_checks(out: &mut Map<String, Value>, given: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    let text = |field: &str| out.get(field).and_then(Value::as_str).unwrap_or("");
    let hash_on = text("hash_on").to_string();
    let fallback = text("hash_fallback").to_string();
    let needs = [
        ("header", "hash_on_header", "hash_fallback_header"),
        ("cookie", "hash_on_cookie", "hash_on_cookie"),
        ("query_arg", "hash_on_query_arg", "hash_fallback_query_arg"),
        ("uri_capture", "hash_on_uri_capture", "hash_fallback_uri_capture"),
    ];
    for (value, on_field, fallback_field) in needs {
        for (given, field, source) in [
            (&hash_on, on_field, "hash_on"),
            (&fallback, fallback_field, "hash_fallback"),
        ] {
            if given == value && is_missing(out.get(field)) {
                errors.push(FieldError::new(field, "required field missing"));
                errors.push(conditional_failed(source));
            }
        }
    }
    if text("algorithm") == "sticky-sessions" {
        let mut failed = false;
        if is_missing(given.get("sticky_sessions_cookie")) {
            errors.push(FieldError::new("sticky_sessions_cookie", "required field missing"));
            failed = true;
        }
        if hash_on != "none" {
            errors.push(FieldError::new("hash_on", "expected one of: none"));
            failed = true;
        }
        if failed {
            errors.push(conditional_failed("algorithm"));
        }
    }
    let allowed: Vec<&str> = match hash_on.as_str() {
        "none" | "cookie" => vec!["none"],
        "consumer" | "ip" | "path" => HASH_ON.iter().copied().filter(|h| *h != hash_on).collect(),
        _ => HASH_ON.to_vec(),
    };
    if !fallback.is_empty() && !allowed.contains(&fallback.as_str()) {
        let message = format!("expected one of: {}", allowed.join(", "));
        errors.push(FieldError::new("hash_fallback", message));
        errors.push(conditional_failed("hash_on"));
    }
}

fn conditional_failed(field: &str) -> FieldError {
    FieldError::new(
        "",
        format!("failed conditional validation given value of field '{field}'"),
    )
}

pub(crate) fn target() -> EntityDef {
    let mut fields = auto_fields(true);
    fields.extend([
        ("upstream", Field::foreign("upstreams").required()),
        ("target", Field::string().required().check(formats::target)),
        ("weight", Field::integer().default(json!(100)).between(0, 65535)),
        ("tags", tags_field()),
    ]);
    EntityDef {
        fields,
        endpoint_key: None,
        shorthand: |_, _| {},
        finish: |out, _, _| {
            if let Some(Value::String(target)) = out.get("target") {
                let with_port = formats::target_with_port(target);
                out.insert("target".into(), json!(with_port));
            }
        },
        entity_checks: json!([]),
    }
}
