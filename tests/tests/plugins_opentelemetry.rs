//! `opentelemetry` on a real node: W3C `traceparent` in and out, spans for
//! the request, router, every plugin phase, balancer, upstream connect and
//! TTFB, exported in batches as OTLP/HTTP protobuf to a local collector
//! stub whose bodies are decoded by the official `opentelemetry-proto`
//! definitions; sampling decides what is exported, never what propagates.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::plugins::{echo_headers, gateway_with_echo};
use strait_e2e::sinks::HttpCollector;
use strait_e2e::{eventually, get, request};

const INCOMING: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn attribute(span: &Value, key: &str) -> Value {
    span["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["key"] == key)
        .map(|a| a["value"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_as_otlp_protobuf_and_context_propagates() {
    let collector = HttpCollector::start().await;
    let otel = |rate: f64, batch: u64| {
        json!({ "name": "opentelemetry", "config": {
            "traces_endpoint": collector.url("/v1/traces"),
            "headers": { "x-otlp-token": "t0k" },
            "resource_attributes": { "service.name": "edge", "deployment.environment": "test" },
            "http_response_header_for_traceid": "x-trace-id",
            "sampling_rate": rate,
            "queue": { "max_batch_size": batch, "max_coalescing_delay": 0.3 } } })
    };
    let config = json!({
        "_format_version": "3.0",
        "services": [{ "name": "echo", "url": "UPSTREAM", "routes": [
            { "name": "traced", "paths": ["/traced"], "plugins": [
                otel(1.0, 2),
                { "name": "request-transformer", "config": { "add": { "headers": ["x-added:1"] } } }
            ] },
            { "name": "unsampled", "paths": ["/unsampled"], "plugins": [otel(0.0, 1)] }
        ] }]
    });
    let (gw, _upstream) = gateway_with_echo(&config).await;

    // A caller's trace continues: same trace id, Strait's span as parent.
    let joined = gw
        .proxy(request("GET", "/traced/a", &[("traceparent", INCOMING)], ""))
        .await;
    assert_eq!(joined.status, 200);
    let sent = echo_headers(&joined)["traceparent"]
        .as_str()
        .expect("traceparent upstream")
        .to_string();
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts[0], "00");
    assert_eq!(parts[1], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_ne!(
        parts[2], "00f067aa0ba902b7",
        "Strait's own span is the upstream's parent"
    );
    assert_eq!(parts[3], "01");
    assert_eq!(
        joined.header("x-trace-id").as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    // No caller trace: a new one.
    let fresh = gw.proxy(get("/traced/b")).await;
    let fresh_parent = echo_headers(&fresh)["traceparent"].as_str().unwrap().to_string();
    let fresh_trace = fresh.header("x-trace-id").expect("trace id header");
    assert_eq!(fresh_trace.len(), 32);
    assert!(fresh_parent.contains(&fresh_trace));

    let export = eventually(Duration::from_secs(5), "one export of two requests", || async {
        let received = collector.received();
        anyhow::ensure!(received.len() == 1, "{} exports", received.len());
        Ok(received[0].clone())
    })
    .await;
    assert_eq!(export.method, "POST");
    assert_eq!(export.path, "/v1/traces");
    assert_eq!(export.headers["content-type"], "application/x-protobuf");
    assert_eq!(export.headers["x-otlp-token"], "t0k");
    let decoded = strait_e2e::otlp::decode(&export.body);
    let resource_spans = &decoded["resource_spans"][0];
    let resource: HashMap<String, Value> = resource_spans["resource"]["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["key"].as_str().unwrap().to_string(), a["value"].clone()))
        .collect();
    assert_eq!(resource["service.name"], json!({"string_value": "edge"}));
    assert_eq!(resource["deployment.environment"], json!({"string_value": "test"}));
    assert!(resource.contains_key("service.version"));
    let scope_spans = &resource_spans["scope_spans"][0];
    assert_eq!(scope_spans["scope"]["name"], "kong-internal");
    let spans = scope_spans["spans"].as_array().unwrap();

    let joined_spans: Vec<&Value> = spans
        .iter()
        .filter(|s| s["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736")
        .collect();
    let fresh_spans = spans.iter().filter(|s| s["trace_id"] == fresh_trace.as_str()).count();
    assert_eq!(joined_spans.len() + fresh_spans, spans.len(), "two traces in the batch");
    assert!(fresh_spans > 0);
    let by_name = |name: &str| -> &Value {
        joined_spans
            .iter()
            .copied()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no span {name} in {joined_spans:#?}"))
    };
    let root = by_name("kong");
    assert_eq!(root["kind"], "SPAN_KIND_SERVER");
    assert_eq!(root["parent_span_id"], "00f067aa0ba902b7");
    assert_eq!(attribute(root, "http.method"), json!({"string_value": "GET"}));
    assert_eq!(attribute(root, "http.status_code"), json!({"int_value": "200"}));
    assert_eq!(attribute(root, "http.flavor"), json!({"string_value": "1.1"}));
    let root_id = root["span_id"].as_str().unwrap();
    for name in [
        "kong.router",
        "kong.access.plugin.opentelemetry",
        "kong.access.plugin.request-transformer",
        "kong.header_filter.plugin.request-transformer",
        "kong.balancer",
    ] {
        let span = by_name(name);
        assert_eq!(span["parent_span_id"], root_id, "{name} is under the request span");
        let (start, end) = (
            span["start_time_unix_nano"].as_u64().unwrap(),
            span["end_time_unix_nano"].as_u64().unwrap(),
        );
        assert!(start <= end, "{name}: {start} > {end}");
        assert!(
            start >= root["start_time_unix_nano"].as_u64().unwrap()
                && end <= root["end_time_unix_nano"].as_u64().unwrap(),
            "{name} lies within the request span"
        );
    }
    let balancer = by_name("kong.balancer");
    assert_eq!(balancer["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(
        balancer["span_id"], parts[2],
        "the upstream saw the balancer span as parent"
    );
    assert_eq!(attribute(balancer, "net.peer.ip"), json!({"string_value": "127.0.0.1"}));
    for name in ["kong.upstream.connect", "kong.upstream.ttfb"] {
        assert_eq!(by_name(name)["parent_span_id"], balancer["span_id"], "{name}");
    }

    // Sampled out: nothing exported, but the context still propagates
    // (flags 00) so the upstream can join the trace.
    let quiet = gw.proxy(get("/unsampled/x")).await;
    let quiet_parent = echo_headers(&quiet)["traceparent"].as_str().unwrap().to_string();
    assert!(quiet_parent.ends_with("-00"), "{quiet_parent}");
    // A caller that sampled its trace is followed, whatever the rate.
    let followed = gw
        .proxy(request("GET", "/unsampled/y", &[("traceparent", INCOMING)], ""))
        .await;
    assert!(echo_headers(&followed)["traceparent"]
        .as_str()
        .unwrap()
        .ends_with("-01"));
    let exports = eventually(Duration::from_secs(5), "the followed trace's export", || async {
        let received = collector.received();
        anyhow::ensure!(received.len() == 2, "{} exports", received.len());
        Ok(received)
    })
    .await;
    let second = strait_e2e::otlp::decode(&exports[1].body);
    let traces: Vec<&str> = second["resource_spans"][0]["scope_spans"][0]["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["trace_id"].as_str().unwrap())
        .collect();
    assert!(
        traces.iter().all(|t| *t == "4bf92f3577b34da6a3ce929d0e0e4736"),
        "{traces:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(collector.received().len(), 2, "the unsampled request was not exported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_trace_formats_are_refused_with_the_field() {
    let (gw, _upstream) = gateway_with_echo(&json!({"_format_version": "3.0"})).await;
    let reply = gw
        .admin(
            "POST",
            "/plugins",
            &[("content-type", "application/json")],
            json!({"name": "opentelemetry", "config": {
                "traces_endpoint": "http://127.0.0.1:4318/v1/traces", "header_type": "b3" }})
            .to_string(),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(reply.text().contains("W3C"), "{}", reply.text());
}
