//! Config schemas of the traffic plugins (Kong 3.10 field names, types and
//! defaults).

use serde_json::{json, Map, Value};

use super::{ConfigShorthand, PluginDef};
use crate::schema::field::Field;
use crate::schema::formats;

/// Kong's rate-limiting periods, shortest first.
pub const RATE_LIMIT_PERIODS: &[&str] = &["second", "minute", "hour", "day", "month", "year"];

/// Kong's shared `redis` record (`kong/tools/redis/schema.lua`).
fn redis_record() -> Field {
    Field::record(vec![
        ("host", Field::string().check(formats::host)),
        ("port", Field::integer().between(0, 65535).default(json!(6379))),
        (
            "timeout",
            Field::integer().between(0, 2_147_483_646).default(json!(2000)),
        ),
        ("username", Field::string().referenceable()),
        ("password", Field::string().len_min(0).referenceable()),
        ("database", Field::integer().default(json!(0))),
        ("ssl", Field::boolean().default(json!(false))),
        ("ssl_verify", Field::boolean().default(json!(false))),
        ("server_name", Field::string().check(formats::sni)),
    ])
    .default_record()
}

/// Kong 3.9's deprecated `redis_*` fields of rate-limiting and
/// response-ratelimiting, each standing for a field of `config.redis`.
const REDIS_SHORTHANDS: &[ConfigShorthand] = &[
    redis_shorthand("redis_host", "host"),
    redis_shorthand("redis_port", "port"),
    redis_shorthand("redis_password", "password"),
    redis_shorthand("redis_username", "username"),
    redis_shorthand("redis_ssl", "ssl"),
    redis_shorthand("redis_ssl_verify", "ssl_verify"),
    redis_shorthand("redis_server_name", "server_name"),
    redis_shorthand("redis_timeout", "timeout"),
    redis_shorthand("redis_database", "database"),
];

/// `name`, standing for `config.redis.<field>`.
const fn redis_shorthand(name: &'static str, field: &'static str) -> ConfigShorthand {
    ConfigShorthand {
        name,
        path: ["redis", field],
    }
}

/// Kong's `rate-limiting` schema.
pub(super) fn rate_limiting() -> PluginDef {
    let mut config: Vec<(&'static str, Field)> = RATE_LIMIT_PERIODS
        .iter()
        .map(|period| (*period, Field::number().gt(0)))
        .collect();
    config.extend([
        (
            "limit_by",
            Field::string().default(json!("consumer")).one_of(&[
                "consumer",
                "credential",
                "ip",
                "service",
                "header",
                "path",
            ]),
        ),
        ("header_name", Field::string().check(formats::header_name)),
        ("path", Field::string().check(formats::service_path)),
        (
            "policy",
            Field::string()
                .default(json!("local"))
                .len_min(0)
                .one_of(&["local", "cluster", "redis"]),
        ),
        ("fault_tolerant", Field::boolean().required().default(json!(true))),
        ("redis", redis_record()),
        ("hide_client_headers", Field::boolean().required().default(json!(false))),
        ("error_code", Field::number().gt(0).default(json!(429))),
        (
            "error_message",
            Field::string().default(json!("API rate limit exceeded")),
        ),
        ("sync_rate", Field::number().required().default(json!(-1))),
    ]);
    PluginDef::new(config)
        .check(rate_limiting_check)
        .shorthands(REDIS_SHORTHANDS)
}

/// Kong's `validate_periods_order`: a longer period's limit is not lower
/// than a shorter one's (`lead` starts the message: Kong's two plugins
/// capitalize it differently).
fn periods_in_order(limit: &dyn Fn(&str) -> Option<f64>, lead: &str) -> Result<(), String> {
    for (at, lower) in RATE_LIMIT_PERIODS.iter().enumerate() {
        let Some(v1) = limit(lower) else { continue };
        for upper in &RATE_LIMIT_PERIODS[at + 1..] {
            if let Some(v2) = limit(upper).filter(|v2| *v2 < v1) {
                return Err(format!(
                    "{lead} for {upper}({v2:.1}) cannot be lower than the limit for {lower}({v1:.1})"
                ));
            }
        }
    }
    Ok(())
}

/// Kong's entity checks and `custom_validator` of rate-limiting.
fn rate_limiting_check(config: &Map<String, Value>) -> Result<(), String> {
    let limit = |period: &str| config.get(period).and_then(Value::as_f64);
    if RATE_LIMIT_PERIODS.iter().all(|p| limit(p).is_none()) {
        let fields: Vec<String> = RATE_LIMIT_PERIODS.iter().map(|p| format!("'config.{p}'")).collect();
        return Err(format!(
            "at least one of these fields must be non-empty: {}",
            fields.join(", ")
        ));
    }
    periods_in_order(&limit, "The limit")?;
    let text = |field: &str| config.get(field).and_then(Value::as_str).unwrap_or("");
    let sync_rate = config.get("sync_rate").and_then(Value::as_f64).unwrap_or(-1.0);
    if text("policy") != "redis" && sync_rate != -1.0 {
        return Err("sync_rate can only be used with the redis policy".into());
    }
    if text("policy") == "redis" {
        if sync_rate != -1.0 && sync_rate < 0.02 {
            return Err("sync_rate must be greater than 0.02, or -1 to disable".into());
        }
        let redis = config.get("redis").and_then(Value::as_object);
        for field in ["host", "port", "timeout"] {
            if redis.and_then(|r| r.get(field)).is_none_or(Value::is_null) {
                return Err(format!(
                    "config.redis.{field}: required field missing (policy is redis)"
                ));
            }
        }
    }
    for (limit_by, field) in [("header", "header_name"), ("path", "path")] {
        if text("limit_by") == limit_by && config.get(field).is_none_or(Value::is_null) {
            return Err(format!(
                "config.{field}: required field missing (limit_by is {limit_by})"
            ));
        }
    }
    Ok(())
}

/// Kong's `response-ratelimiting` schema.
pub(super) fn response_ratelimiting() -> PluginDef {
    let periods: Vec<(&'static str, Field)> = RATE_LIMIT_PERIODS
        .iter()
        .map(|period| (*period, Field::number().gt(0)))
        .collect();
    PluginDef::new(vec![
        ("header_name", Field::string().default(json!("x-kong-limit"))),
        (
            "limit_by",
            Field::string()
                .default(json!("consumer"))
                .one_of(&["consumer", "credential", "ip"]),
        ),
        (
            "policy",
            Field::string()
                .default(json!("local"))
                .one_of(&["local", "cluster", "redis"]),
        ),
        ("fault_tolerant", Field::boolean().required().default(json!(true))),
        ("redis", redis_record()),
        (
            "block_on_first_violation",
            Field::boolean().required().default(json!(false)),
        ),
        ("hide_client_headers", Field::boolean().required().default(json!(false))),
        (
            "limits",
            Field::map(Field::string(), Field::record(periods).required()).required(),
        ),
    ])
    .check(response_ratelimiting_check)
    .shorthands(REDIS_SHORTHANDS)
}

/// Kong's checks of response-ratelimiting: at least one limit, each with at
/// least one period, longer periods not lower; Redis settings with `redis`.
fn response_ratelimiting_check(config: &Map<String, Value>) -> Result<(), String> {
    let limits = config.get("limits").and_then(Value::as_object);
    let Some(limits) = limits.filter(|l| !l.is_empty()) else {
        return Err("config.limits: length must be at least 1".into());
    };
    for (name, limit) in limits {
        let period = |p: &str| limit.get(p).and_then(Value::as_f64);
        if RATE_LIMIT_PERIODS.iter().all(|p| period(p).is_none()) {
            let fields: Vec<String> = RATE_LIMIT_PERIODS.iter().map(|p| format!("'{p}'")).collect();
            return Err(format!(
                "config.limits.{name}: at least one of these fields must be non-empty: {}",
                fields.join(", ")
            ));
        }
        periods_in_order(&period, "the limit").map_err(|e| format!("config.limits.{name}: {e}"))?;
    }
    if config.get("policy").and_then(Value::as_str) == Some("redis") {
        let redis = config.get("redis").and_then(Value::as_object);
        for field in ["host", "port", "timeout"] {
            if redis.and_then(|r| r.get(field)).is_none_or(Value::is_null) {
                return Err(format!(
                    "config.redis.{field}: required field missing (policy is redis)"
                ));
            }
        }
    }
    Ok(())
}

/// Kong's `proxy-cache` schema. `strategy` has no default and only
/// `memory` exists in Kong's open-source build, as here.
pub(super) fn proxy_cache() -> PluginDef {
    PluginDef::new(vec![
        (
            "response_code",
            Field::array(Field::integer().between(100, 900))
                .required()
                .len_min(1)
                .default(json!([200, 301, 404])),
        ),
        (
            "request_method",
            Field::array(Field::string().one_of(&["HEAD", "GET", "POST", "PATCH", "PUT"]))
                .required()
                .default(json!(["GET", "HEAD"])),
        ),
        (
            "content_type",
            Field::array(Field::string())
                .required()
                .default(json!(["text/plain", "application/json"])),
        ),
        ("cache_ttl", Field::integer().gt(0).default(json!(300))),
        ("strategy", Field::string().required().one_of(&["memory"])),
        ("cache_control", Field::boolean().required().default(json!(false))),
        ("ignore_uri_case", Field::boolean().default(json!(false))),
        ("storage_ttl", Field::integer()),
        (
            "memory",
            Field::record(vec![(
                "dictionary_name",
                Field::string().required().default(json!("kong_db_cache")),
            )])
            .default_record(),
        ),
        ("vary_query_params", Field::array(Field::string())),
        ("vary_headers", Field::array(Field::string())),
        (
            "response_headers",
            Field::record(vec![
                ("age", Field::boolean().default(json!(true))),
                ("X-Cache-Status", Field::boolean().default(json!(true))),
                ("X-Cache-Key", Field::boolean().default(json!(true))),
            ])
            .default_record(),
        ),
    ])
    .any_protocol()
}
