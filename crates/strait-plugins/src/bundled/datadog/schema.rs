//! `datadog`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::{formats, PluginSchema};

use crate::config_fields::{queue_check, queue_record_batching};

const STAT_NAMES: &[&str] = &[
    "kong_latency",
    "latency",
    "request_count",
    "request_size",
    "response_size",
    "upstream_latency",
];
const STAT_TYPES: &[&str] = &["counter", "gauge", "histogram", "meter", "set", "timer", "distribution"];

/// Kong's `DEFAULT_METRICS`, in its order.
fn default_metrics() -> Value {
    let metric = |name: &str, stat_type: &str, rate: Option<i64>| {
        json!({
            "name": name,
            "stat_type": stat_type,
            "tags": ["app:kong"],
            "sample_rate": rate,
            "consumer_identifier": "custom_id",
        })
    };
    json!([
        metric("request_count", "counter", Some(1)),
        metric("latency", "timer", None),
        metric("request_size", "timer", None),
        metric("response_size", "timer", None),
        metric("upstream_latency", "timer", None),
        metric("kong_latency", "timer", None),
    ])
}

/// Kong's `^.*[^:]$`: a tag does not end with `:`.
fn tag(value: &str) -> Result<(), String> {
    match value.is_empty() || value.ends_with(':') {
        true => Err(format!("invalid value: {value}")),
        false => Ok(()),
    }
}

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        (
            "host",
            Field::string().default(json!("localhost")).check(formats::host).referenceable(),
        ),
        ("port", Field::integer().default(json!(8125)).between(0, 65535)),
        ("prefix", Field::string().default(json!("kong"))),
        ("service_name_tag", Field::string().default(json!("name"))),
        ("status_tag", Field::string().default(json!("status"))),
        ("consumer_tag", Field::string().default(json!("consumer"))),
        ("retry_count", Field::integer()),
        ("queue_size", Field::integer()),
        ("flush_timeout", Field::number()),
        ("queue", queue_record_batching(1)),
        (
            "metrics",
            Field::array(Field::record(vec![
                ("name", Field::string().required().one_of(STAT_NAMES)),
                ("stat_type", Field::string().required().one_of(STAT_TYPES)),
                ("tags", Field::array(Field::string().check(tag))),
                ("sample_rate", Field::number().between(0, 1)),
                (
                    "consumer_identifier",
                    Field::string().one_of(&["consumer_id", "custom_id", "username"]),
                ),
            ]))
            .required()
            .default(default_metrics()),
        ),
    ])
    .any_protocol()
    .check(datadog_check)
}

fn datadog_check(config: &Map<String, Value>) -> Result<(), String> {
    queue_check(config)?;
    crate::observability::statsd::metrics_need_rates(config)
}
