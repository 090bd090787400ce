use super::*;
use serde_json::json;

use crate::observability::statsd::test_support::{record, summary};

fn lines_of(config: Value, status: u16, upstream_ms: Option<u64>) -> String {
    let plugin = Statsd::from_config(config.as_object().expect("object")).expect("valid");
    let summary = summary();
    let mut out = Vec::new();
    plugin.lines(&record(&summary, status, upstream_ms), &mut out);
    String::from_utf8(out).expect("utf-8")
}

fn metrics(list: &[(&str, &str, Option<f64>)]) -> Value {
    list.iter()
        .map(|(name, stat_type, rate)| json!({"name": name, "stat_type": stat_type, "sample_rate": rate}))
        .collect()
}

#[test]
fn a_request_without_a_service_is_global_unmatched() {
    let config = json!({"metrics": metrics(&[
        ("request_count", "counter", Some(1.0)),
        ("latency", "timer", None),
        ("upstream_latency", "timer", None),
        ("kong_latency", "timer", None),
        ("request_size", "counter", Some(0.5)),
        ("status_count", "counter", Some(1.0)),
        ("unique_users", "set", None),
        ("shdict_usage", "gauge", Some(1.0)),
    ])});
    assert_eq!(
        lines_of(config.clone(), 200, Some(4)),
        "kong.global.unmatched.request.count:1|c\n\
         kong.global.unmatched.latency:9|ms\n\
         kong.global.unmatched.upstream_latency:4|ms\n\
         kong.global.unmatched.kong_latency:5|ms\n\
         kong.global.unmatched.request.size:80|c|@0.5\n\
         kong.global.unmatched.status.200:1|c"
    );
    // No upstream answered: its latency (-1 in Kong's entry) is not sent.
    assert!(!lines_of(config, 200, None).contains("upstream_latency"));
}

#[test]
fn tag_styles_write_the_plain_metrics_only_and_untagged_without_a_service() {
    let config = json!({"tag_style": "dogstatsd", "prefix": "edge", "metrics": metrics(&[
        ("request_count", "counter", Some(1.0)),
        ("status_count", "counter", Some(1.0)),
    ])});
    assert_eq!(lines_of(config, 404, None), "edge.request.count:1|c");
}

#[test]
fn only_statuses_in_the_allowed_ranges_are_counted() {
    let plugin = Statsd::from_config(
        json!({"allow_status_codes": ["200-299", "500-504"]})
            .as_object()
            .expect("object"),
    )
    .expect("valid");
    let ranges = plugin.allow_status.as_deref().expect("ranges");
    assert!(ranges.iter().any(|(a, b)| (*a..=*b).contains(&204)));
    assert!(!ranges.iter().any(|(a, b)| (*a..=*b).contains(&404)));
}

#[test]
fn the_node_goes_in_the_prefix_when_asked_and_untagged() {
    let plugin = Statsd::from_config(json!({"hostname_in_prefix": true}).as_object().expect("object")).expect("valid");
    assert_eq!(plugin.prefix, format!("kong.node.{}", plugin.node));
    let tagged = Statsd::from_config(
        json!({"hostname_in_prefix": true, "tag_style": "influxdb"})
            .as_object()
            .expect("object"),
    )
    .expect("valid");
    assert_eq!(tagged.prefix, "kong");
}

/// A request's template filled with its values writes the lines the text
/// path writes, in every tag style, with and without an upstream.
#[test]
fn a_template_with_the_requests_values_writes_its_lines() {
    let all = metrics(&[
        ("request_count", "counter", Some(1.0)),
        ("latency", "timer", None),
        ("upstream_latency", "timer", None),
        ("kong_latency", "histogram", None),
        ("request_size", "counter", Some(0.5)),
        ("response_size", "gauge", Some(1.0)),
        ("status_count", "counter", Some(1.0)),
        ("unique_users", "set", None),
        ("status_count_per_workspace", "counter", Some(1.0)),
        ("shdict_usage", "gauge", Some(1.0)),
    ]);
    for style in [None, Some("dogstatsd"), Some("influxdb"), Some("librato"), Some("signalfx")] {
        let config = json!({"tag_style": style, "metrics": all});
        let plugin = Statsd::from_config(config.as_object().expect("object")).expect("valid");
        for (status, upstream) in [(200, Some(4)), (502, None)] {
            let summary = summary();
            let record = record(&summary, status, upstream);
            let (written, text) = crate::observability::statsd::test_support::templated_and_text(
                &Stat::values(&record),
                || plugin.template(&record),
                |out| plugin.lines(&record, out),
            );
            assert_eq!(written, text, "{style:?} {status}");
            assert!(!text.is_empty());
        }
    }
}
