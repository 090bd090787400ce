//! `zipkin`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;

use crate::config_fields::{queue_check, queue_record_batching};

const INJECTORS: &[&str] = &["w3c", "b3", "b3-single", "jaeger", "ot", "datadog", "aws", "gcp"];
const EXTRACTORS: &[&str] = &["w3c", "b3", "jaeger", "ot", "datadog", "aws", "gcp"];
const INJECT: &[&str] = &["preserve", "w3c", "b3", "b3-single", "jaeger", "ot", "datadog", "aws", "gcp"];

/// Tags Kong sets itself, which `static_tags` may not name.
const PROTECTED_TAGS: &[&str] = &[
    "error",
    "http.method",
    "http.path",
    "http.status_code",
    "kong.balancer.state",
    "kong.balancer.try",
    "kong.consumer",
    "kong.credential",
    "kong.node.id",
    "kong.route",
    "kong.service",
    "lc",
    "peer.hostname",
];

fn not_protected(name: &str) -> Result<(), String> {
    match PROTECTED_TAGS.contains(&name) {
        true => Err(format!("must not be one of: {}", PROTECTED_TAGS.join(", "))),
        false => Ok(()),
    }
}

fn timeout(default: i64) -> Field {
    Field::integer().default(json!(default)).between(0, 2_147_483_646)
}

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        (
            "local_service_name",
            Field::string().required().default(json!("kong")),
        ),
        ("http_endpoint", Field::string().check(crate::config_fields::url)),
        ("sample_ratio", Field::number().default(json!(0.001)).between(0, 1)),
        ("default_service_name", Field::string()),
        ("include_credential", Field::boolean().required().default(json!(true))),
        (
            "traceid_byte_count",
            Field::integer().required().default(json!(16)).one_of_integers(&[8, 16]),
        ),
        (
            "header_type",
            Field::string().required().default(json!("preserve")).one_of(&[
                "preserve", "ignore", "b3", "b3-single", "w3c", "jaeger", "ot", "aws", "datadog", "gcp",
            ]),
        ),
        (
            "default_header_type",
            Field::string().required().default(json!("b3")).one_of(INJECTORS),
        ),
        ("tags_header", Field::string().required().default(json!("Zipkin-Tags"))),
        (
            "static_tags",
            Field::array(Field::record(vec![
                ("name", Field::string().required().check(not_protected)),
                ("value", Field::string().required()),
            ])),
        ),
        ("connect_timeout", timeout(2000)),
        ("send_timeout", timeout(5000)),
        ("read_timeout", timeout(5000)),
        ("http_response_header_for_traceid", Field::string()),
        (
            "http_span_name",
            Field::string()
                .required()
                .default(json!("method"))
                .one_of(&["method", "method_path"]),
        ),
        (
            "phase_duration_flavor",
            Field::string()
                .required()
                .default(json!("annotations"))
                .one_of(&["annotations", "tags"]),
        ),
        ("queue", queue_record_batching(1)),
        (
            "propagation",
            Field::record(vec![
                ("extract", Field::array(Field::string().one_of(EXTRACTORS))),
                ("clear", Field::array(Field::string())),
                ("inject", Field::array(Field::string().one_of(INJECT))),
                (
                    "default_format",
                    Field::string().required().default(json!("b3")).one_of(INJECTORS),
                ),
            ])
            .default_record(),
        ),
    ])
    .any_protocol()
    .check(zipkin_check)
}

fn zipkin_check(config: &Map<String, Value>) -> Result<(), String> {
    queue_check(config)?;
    let tags = config.get("static_tags").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let mut seen = std::collections::HashSet::new();
    for name in tags.iter().filter_map(|t| t.get("name").and_then(Value::as_str)) {
        if !seen.insert(name) {
            return Err(format!("repeated tags are not allowed: {name}"));
        }
    }
    Ok(())
}
