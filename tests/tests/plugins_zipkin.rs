//! zipkin end to end against a real Zipkin server (tests/src/zipkin.rs):
//! trace context read in b3, W3C and none, written upstream in the format
//! that came (or the configured ones), and the request's spans read back
//! from Zipkin's API with Kong's names, kinds, parents, tags and
//! annotations.

use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::plugins::{echo_headers, echo_service, gateway_with_echo};
use strait_e2e::zipkin::ZipkinServer;
use strait_e2e::{eventually, get, request};

const TRACE: &str = "463ac35c9f6413ad48485a3953bb6124";
const SPAN: &str = "0020000000000001";

async fn trace_of(zipkin: &ZipkinServer, trace_id: &str, spans: usize) -> Vec<Value> {
    eventually(Duration::from_secs(15), "spans in Zipkin", || async {
        let found = zipkin.trace(trace_id);
        anyhow::ensure!(found.len() >= spans, "{} spans: {found:?}", found.len());
        Ok(found)
    })
    .await
}

/// The span of `kind` named `name` (Zipkin stores names in lower case).
fn span<'a>(spans: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let name = name.to_lowercase();
    spans
        .iter()
        .find(|s| s["kind"] == kind && s["name"] == name.as_str())
        .unwrap_or_else(|| panic!("no {kind} span {name}: {spans:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zipkin_reports_spans_and_propagates_trace_context() {
    let zipkin = tokio::task::spawn_blocking(ZipkinServer::start).await.expect("zipkin");
    let endpoint = zipkin.spans_url();
    let routes = json!([
        { "name": "traced", "paths": ["/traced"], "plugins": [{ "name": "zipkin", "config": {
            "http_endpoint": endpoint, "sample_ratio": 1, "http_span_name": "method_path",
            "static_tags": [{ "name": "team", "value": "payments" }],
            "http_response_header_for_traceid": "x-trace-id", "default_service_name": "outside" } }] },
        { "name": "unsampled", "paths": ["/unsampled"], "plugins": [{ "name": "zipkin", "config": {
            "http_endpoint": endpoint, "sample_ratio": 0 } }] },
        { "name": "translated", "paths": ["/translated"], "plugins": [{ "name": "zipkin", "config": {
            "http_endpoint": endpoint, "sample_ratio": 1, "phase_duration_flavor": "tags",
            "propagation": { "extract": ["w3c"], "inject": ["datadog", "jaeger"], "clear": ["traceparent"],
                             "default_format": "w3c" } } }] }
    ]);
    let (gw, _upstream) = gateway_with_echo(&echo_service(routes, json!([]))).await;

    // b3 in: the server span takes the caller's span id; b3 goes upstream
    // with the proxy span's id and the server span as its parent.
    let reply = gw
        .proxy(request(
            "GET",
            "/traced/orders?id=7",
            &[
                ("x-b3-traceid", TRACE),
                ("x-b3-spanid", SPAN),
                ("x-b3-sampled", "1"),
                ("zipkin-tags", "customer=acme; tier=gold"),
            ],
            "",
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-trace-id").as_deref(), Some(TRACE));
    let sent = echo_headers(&reply);
    assert_eq!(sent["x-b3-traceid"], TRACE);
    assert_eq!(sent["x-b3-parentspanid"], SPAN);
    assert_eq!(sent["x-b3-sampled"], "1");
    let proxy_id = sent["x-b3-spanid"].as_str().expect("span id").to_string();
    assert_ne!(proxy_id, SPAN);

    let spans = trace_of(&zipkin, TRACE, 3).await;
    let name = "GET /traced/orders";
    let server = span(&spans, "SERVER", name);
    assert_eq!(server["id"], SPAN);
    assert!(server.get("parentId").is_none());
    assert_eq!(server["localEndpoint"]["serviceName"], "kong");
    assert_eq!(server["remoteEndpoint"]["ipv4"], "127.0.0.1");
    assert_eq!(server["remoteEndpoint"]["serviceName"], "outside");
    let tags = &server["tags"];
    for (tag, value) in [
        ("lc", "kong"),
        ("http.method", "GET"),
        ("http.path", "/traced/orders"),
        ("http.protocol", "HTTP/1.1"),
        ("http.status_code", "200"),
        ("team", "payments"),
        ("customer", "acme"),
        ("tier", "gold"),
    ] {
        assert_eq!(tags[tag], value, "{tag}: {server:#}");
    }
    assert!(
        tags["kong.node.id"].as_str().is_some_and(|id| id.len() == 36),
        "{server:#}"
    );
    let values: Vec<&str> = server["annotations"]
        .as_array()
        .expect("annotations")
        .iter()
        .filter_map(|a| a["value"].as_str())
        .collect();
    assert_eq!(values, ["krs"]);

    let proxy = span(&spans, "CLIENT", &format!("{name} (proxy)"));
    assert_eq!(proxy["id"], proxy_id.as_str());
    assert_eq!(proxy["parentId"], SPAN);
    assert_eq!(proxy["tags"]["kong.service_name"], "echo");
    assert_eq!(proxy["remoteEndpoint"]["serviceName"], "echo");
    let values: Vec<&str> = proxy["annotations"]
        .as_array()
        .expect("annotations")
        .iter()
        .filter_map(|a| a["value"].as_str())
        .collect();
    for expected in ["kas", "kaf", "khs", "khf", "kbs", "kbf"] {
        assert!(values.contains(&expected), "{expected}: {values:?}");
    }
    let balancer = span(&spans, "CLIENT", &format!("{name} (balancer try 1)"));
    assert_eq!(balancer["parentId"], SPAN);
    assert_eq!(balancer["tags"]["kong.balancer.try"], "1");
    assert_eq!(balancer["remoteEndpoint"]["ipv4"], "127.0.0.1");
    for span in &spans {
        assert!(
            span["timestamp"].as_u64().is_some() && span["duration"].as_u64().is_some(),
            "{span:#}"
        );
    }

    // W3C in: answered in W3C (preserve), the caller's span as the parent.
    let parent = "b7ad6b7169203331";
    let w3c_trace = "0af7651916cd43dd8448eb211c80319c";
    let reply = gw
        .proxy(request(
            "GET",
            "/traced",
            &[("traceparent", &format!("00-{w3c_trace}-{parent}-01"))],
            "",
        ))
        .await;
    let sent = echo_headers(&reply);
    let traceparent = sent["traceparent"].as_str().expect("traceparent");
    assert!(
        traceparent.starts_with(&format!("00-{w3c_trace}-")) && traceparent.ends_with("-01"),
        "{traceparent}"
    );
    assert!(sent.get("x-b3-traceid").is_none(), "only the format that came");
    let spans = trace_of(&zipkin, w3c_trace, 3).await;
    assert_eq!(span(&spans, "SERVER", "GET /traced")["parentId"], parent);

    // Nothing in: a new trace, sent upstream in the default format (b3).
    let reply = gw.proxy(get("/traced/new")).await;
    let sent = echo_headers(&reply);
    let new_trace = sent["x-b3-traceid"].as_str().expect("a new trace id").to_string();
    assert_eq!(new_trace.len(), 32);
    assert_eq!(reply.header("x-trace-id").as_deref(), Some(new_trace.as_str()));
    trace_of(&zipkin, &new_trace, 3).await;

    // Not sampled: the decision goes upstream, no span is sent.
    let reply = gw.proxy(get("/unsampled")).await;
    let sent = echo_headers(&reply);
    assert_eq!(sent["x-b3-sampled"], "0");
    let unsampled = sent["x-b3-traceid"].as_str().expect("trace id").to_string();

    // Configured propagation: W3C read, cleared, Datadog and Jaeger written;
    // durations as tags.
    let dd_trace = "00000000000000000000000000003039";
    let reply = gw
        .proxy(request(
            "GET",
            "/translated",
            &[("traceparent", &format!("00-{dd_trace}-{parent}-01"))],
            "",
        ))
        .await;
    let sent = echo_headers(&reply);
    assert!(sent.get("traceparent").is_none(), "cleared");
    assert_eq!(sent["x-datadog-trace-id"], "12345");
    assert_eq!(sent["x-datadog-sampling-priority"], "1");
    assert!(
        sent["uber-trace-id"]
            .as_str()
            .is_some_and(|v| v.starts_with(&format!("{dd_trace}:"))),
        "{sent:#}"
    );
    let spans = trace_of(&zipkin, dd_trace, 3).await;
    let proxy = span(&spans, "CLIENT", "GET (proxy)");
    assert!(proxy["tags"]["kong.access.duration_ms"].as_str().is_some(), "{proxy:#}");
    assert!(proxy.get("annotations").is_none());

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(zipkin.trace(&unsampled).is_empty(), "an unsampled trace is not sent");
}
