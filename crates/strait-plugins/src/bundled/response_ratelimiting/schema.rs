//! `response-ratelimiting`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::{RATE_LIMIT_PERIODS, REDIS_SHORTHANDS, periods_in_order, redis_record};

/// Kong's `response-ratelimiting` schema.
pub(super) fn schema() -> PluginSchema {
    let periods: Vec<(&'static str, Field)> = RATE_LIMIT_PERIODS
        .iter()
        .map(|period| (*period, Field::number().gt(0)))
        .collect();
    PluginSchema::new(vec![
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
