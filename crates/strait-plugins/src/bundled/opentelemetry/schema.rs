//! `opentelemetry`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;
use strait_core::schema::formats;

use crate::config_fields::{http_url, queue_check, queue_record_batching};

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

pub(super) fn schema() -> PluginSchema {
    let formats = || Field::array(Field::string().one_of(&TRACE_FORMATS[1..]));
    PluginSchema::new(vec![
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
