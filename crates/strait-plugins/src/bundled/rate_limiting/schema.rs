//! `rate-limiting`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;
use strait_core::schema::formats;

use crate::config_fields::{RATE_LIMIT_PERIODS, REDIS_SHORTHANDS, periods_in_order, redis_record};

/// Kong's `rate-limiting` schema.
pub(super) fn schema() -> PluginSchema {
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
    PluginSchema::new(config)
        .check(rate_limiting_check)
        .shorthands(REDIS_SHORTHANDS)
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
    // Kong's check; Strait also takes sync_rate with its Cassandra-backed
    // `cluster` policy (Kong's cluster policy is synchronous only).
    if !matches!(text("policy"), "redis" | "cluster") && sync_rate != -1.0 {
        return Err("sync_rate can only be used with the redis policy".into());
    }
    if sync_rate != -1.0 && sync_rate < 0.02 {
        return Err("sync_rate must be greater than 0.02, or -1 to disable".into());
    }
    if text("policy") == "redis" {
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
