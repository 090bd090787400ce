//! `statsd`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::{formats, PluginSchema};

use crate::config_fields::{queue_check, queue_record_batching};

pub(super) const METRIC_NAMES: &[&str] = &[
    "kong_latency",
    "latency",
    "request_count",
    "request_per_user",
    "request_size",
    "response_size",
    "status_count",
    "status_count_per_user",
    "unique_users",
    "upstream_latency",
    "status_count_per_workspace",
    "status_count_per_user_per_route",
    "shdict_usage",
];

const STAT_TYPES: &[&str] = &["counter", "gauge", "histogram", "meter", "set", "timer"];
const CONSUMER_IDENTIFIERS: &[&str] = &["consumer_id", "custom_id", "username"];
const SERVICE_IDENTIFIERS: &[&str] = &["service_id", "service_name", "service_host", "service_name_or_host"];
const WORKSPACE_IDENTIFIERS: &[&str] = &["workspace_id", "workspace_name"];

/// Kong's `DEFAULT_METRICS`, in its order.
fn default_metrics() -> Value {
    let metric = |name: &str, stat_type: &str, rate: Option<i64>| {
        json!({
            "name": name,
            "stat_type": stat_type,
            "sample_rate": rate,
            "consumer_identifier": null,
            "service_identifier": null,
            "workspace_identifier": null,
        })
    };
    json!([
        metric("request_count", "counter", Some(1)),
        metric("latency", "timer", None),
        metric("request_size", "counter", Some(1)),
        metric("status_count", "counter", Some(1)),
        metric("response_size", "counter", Some(1)),
        metric("unique_users", "set", None),
        metric("request_per_user", "counter", Some(1)),
        metric("upstream_latency", "timer", None),
        metric("kong_latency", "timer", None),
        metric("status_count_per_user", "counter", Some(1)),
        metric("status_count_per_workspace", "counter", Some(1)),
        metric("status_count_per_user_per_route", "counter", Some(1)),
        metric("shdict_usage", "gauge", Some(1)),
    ])
}

fn status_range(value: &str) -> Result<(), String> {
    let valid = value
        .split_once('-')
        .is_some_and(|(a, b)| [a, b].iter().all(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit())));
    match valid {
        true => Ok(()),
        false => Err(format!("invalid value: {value}")),
    }
}

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("host", Field::string().default(json!("localhost")).check(formats::host)),
        ("port", Field::integer().default(json!(8125)).between(0, 65535)),
        ("prefix", Field::string().default(json!("kong"))),
        (
            "metrics",
            Field::array(Field::record(vec![
                ("name", Field::string().required().one_of(METRIC_NAMES)),
                ("stat_type", Field::string().required().one_of(STAT_TYPES)),
                ("sample_rate", Field::number().gt(0)),
                ("consumer_identifier", Field::string().one_of(CONSUMER_IDENTIFIERS)),
                ("service_identifier", Field::string().one_of(SERVICE_IDENTIFIERS)),
                ("workspace_identifier", Field::string().one_of(WORKSPACE_IDENTIFIERS)),
            ]))
            .default(default_metrics()),
        ),
        ("allow_status_codes", Field::array(Field::string().check(status_range))),
        ("udp_packet_size", Field::number().default(json!(0)).between(0, 65507)),
        ("use_tcp", Field::boolean().default(json!(false))),
        ("hostname_in_prefix", Field::boolean().default(json!(false))),
        (
            "consumer_identifier_default",
            Field::string().required().default(json!("custom_id")).one_of(CONSUMER_IDENTIFIERS),
        ),
        (
            "service_identifier_default",
            Field::string()
                .required()
                .default(json!("service_name_or_host"))
                .one_of(SERVICE_IDENTIFIERS),
        ),
        (
            "workspace_identifier_default",
            Field::string()
                .required()
                .default(json!("workspace_id"))
                .one_of(WORKSPACE_IDENTIFIERS),
        ),
        ("retry_count", Field::integer()),
        ("queue_size", Field::integer()),
        ("flush_timeout", Field::number()),
        ("tag_style", Field::string().one_of(&["dogstatsd", "influxdb", "librato", "signalfx"])),
        ("queue", queue_record_batching(1)),
    ])
    .any_protocol()
    .check(statsd_check)
}

/// Kong's per-metric check, and the queue's ranges.
fn statsd_check(config: &Map<String, Value>) -> Result<(), String> {
    queue_check(config)?;
    crate::observability::statsd::metrics_need_rates(config)
}
