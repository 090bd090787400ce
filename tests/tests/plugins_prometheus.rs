//! `prometheus` on a real node, every scrape parsed by the official
//! Prometheus text-format parser: `/metrics` on the status listener and the
//! Admin API, each of Kong's switches (`status_code_metrics`,
//! `latency_metrics`, `bandwidth_metrics`, `upstream_health_metrics`,
//! `per_consumer`) adding exactly its metric names, labels resolved from the
//! live configuration, and the node-wide gauges.

use serde_json::json;
use strait_e2e::plugins::gateway_with_echo;
use strait_e2e::prometheus::{parse, Exposition};
use strait_e2e::{get, request, Gateway, Reply};

/// `/metrics` from the status listener: 200 in Prometheus' text format.
async fn scrape_reply(gw: &Gateway) -> Reply {
    let reply = strait_e2e::send_h1(gw.status_addr(), get("/metrics"))
        .await
        .expect("scrape the status listener");
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type").as_deref(),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    reply
}

async fn scrape(gw: &Gateway) -> Exposition {
    parse(&scrape_reply(gw).await.text())
}

fn config(switches: serde_json::Value) -> serde_json::Value {
    json!({
        "_format_version": "3.0",
        "consumers": [{ "username": "alice", "keyauth_credentials": [{ "key": "alice-key" }] }],
        "upstreams": [{ "name": "pool", "targets": [{ "target": "127.0.0.1:9" }] }],
        "services": [{
            "name": "echo", "url": "UPSTREAM",
            "routes": [
                { "name": "counted", "paths": ["/counted"],
                  "plugins": [{ "name": "prometheus", "config": switches }] },
                { "name": "keyed", "paths": ["/keyed"],
                  "plugins": [
                      { "name": "key-auth" },
                      { "name": "prometheus", "config": { "status_code_metrics": true, "per_consumer": true } }
                  ] },
                { "name": "silent", "paths": ["/silent"] },
                { "id": "5e7c0000-0000-4000-8000-000000000001", "name": "exit", "paths": ["/exit"],
                  "plugins": [
                      { "name": "request-termination", "config": { "status_code": 418, "message": "no" } },
                      { "name": "prometheus", "config": { "status_code_metrics": true } }
                  ] }
            ]
        }]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_switch_adds_its_metrics_with_kongs_names_and_labels() {
    let all = json!({ "status_code_metrics": true, "latency_metrics": true, "bandwidth_metrics": true,
        "upstream_health_metrics": true });
    let (gw, _upstream) = gateway_with_echo(&config(all)).await;
    for _ in 0..3 {
        assert_eq!(gw.proxy(get("/counted")).await.status, 200);
    }
    assert_eq!(
        gw.proxy(request("GET", "/counted", &[], "twelve bytes")).await.status,
        200
    );
    assert_eq!(gw.proxy(get("/silent")).await.status, 200);
    assert_eq!(gw.proxy(get("/exit")).await.status, 418);
    assert_eq!(gw.proxy(get("/keyed")).await.status, 401);
    let ok = gw.proxy(request("GET", "/keyed", &[("apikey", "alice-key")], "")).await;
    assert_eq!(ok.status, 200);

    let metrics = scrape(&gw).await;
    // kong_http_requests_total: service, route, code, source, workspace, consumer.
    assert_eq!(metrics.family_type("kong_http_requests"), Some("counter"));
    let base = [("service", "echo"), ("route", "counted"), ("workspace", "default")];
    let ok_labels = [
        base.as_slice(),
        &[("code", "200"), ("source", "service"), ("consumer", "")],
    ]
    .concat();
    assert_eq!(metrics.value("kong_http_requests_total", &ok_labels), 4.0);
    assert_eq!(
        metrics.value(
            "kong_http_requests_total",
            &[("route", "exit"), ("code", "418"), ("source", "kong")]
        ),
        1.0
    );
    // per_consumer fills the consumer label (empty for the refused request).
    assert_eq!(
        metrics.value(
            "kong_http_requests_total",
            &[("route", "keyed"), ("code", "200"), ("consumer", "alice")]
        ),
        1.0
    );
    assert_eq!(
        metrics.value(
            "kong_http_requests_total",
            &[("route", "keyed"), ("code", "401"), ("consumer", "")]
        ),
        1.0
    );
    // A route without the plugin is not counted.
    assert!(metrics
        .find("kong_http_requests_total", &[("route", "silent")])
        .is_empty());

    // Latency histograms: Kong's names and buckets.
    for (family, first_bucket) in [
        ("kong_kong_latency_ms", "1.0"),
        ("kong_upstream_latency_ms", "25.0"),
        ("kong_request_latency_ms", "25.0"),
    ] {
        assert_eq!(metrics.family_type(family), Some("histogram"), "{family}");
        assert_eq!(metrics.value(&format!("{family}_count"), &base), 4.0, "{family}");
        let inf = [base.as_slice(), &[("le", "+Inf")]].concat();
        assert_eq!(metrics.value(&format!("{family}_bucket"), &inf), 4.0);
        let first = [base.as_slice(), &[("le", first_bucket)]].concat();
        assert_eq!(
            metrics.find(&format!("{family}_bucket"), &first).len(),
            1,
            "{family} le={first_bucket}"
        );
    }
    // Bandwidth: egress is the body sent, ingress the request as it came.
    // (Kong writes the counter as `kong_bandwidth_bytes`; the parser names
    // a counter's samples `_total`.)
    assert_eq!(metrics.family_type("kong_bandwidth_bytes"), Some("counter"));
    let egress = metrics.value(
        "kong_bandwidth_bytes_total",
        &[base.as_slice(), &[("direction", "egress"), ("consumer", "")]].concat(),
    );
    assert!(egress > 0.0);
    let ingress = metrics.value(
        "kong_bandwidth_bytes_total",
        &[base.as_slice(), &[("direction", "ingress")]].concat(),
    );
    assert!(ingress >= 4.0 * 20.0 + 12.0, "{ingress}");

    // Upstream health: no health checks configured, so healthchecks_off; a target marked
    // down through the Admin API reads unhealthy at the next scrape.
    let target = [("upstream", "pool"), ("target", "127.0.0.1:9")];
    let health = |metrics: &Exposition, state: &str| {
        metrics.value(
            "kong_upstream_target_health",
            &[target.as_slice(), &[("state", state)]].concat(),
        )
    };
    assert_eq!(health(&metrics, "healthchecks_off"), 1.0);
    assert_eq!(health(&metrics, "healthy"), 0.0);
    let marked = gw
        .admin("PUT", "/upstreams/pool/targets/127.0.0.1:9/unhealthy", &[], "")
        .await;
    assert_eq!(marked.status, 204, "{}", marked.text());
    let after = scrape(&gw).await;
    assert_eq!(health(&after, "unhealthy"), 1.0);
    assert_eq!(health(&after, "healthchecks_off"), 0.0);

    // Node-wide gauges.
    assert_eq!(metrics.value("kong_datastore_reachable", &[]), 1.0);
    assert!(metrics.value("kong_nginx_requests_total", &[("subsystem", "http")]) >= 9.0);
    assert!(metrics.value("kong_nginx_connections_total", &[("state", "accepted")]) >= 9.0);
    assert_eq!(metrics.find("kong_node_info", &[]).len(), 1);
    assert!(metrics.value("strait_memory_resident_bytes", &[]) > 1e6);
    assert_eq!(metrics.value("strait_redis_errors_total", &[]), 0.0);

    // The Admin API serves the same exposition.
    let admin = gw.admin_get("/metrics").await;
    assert_eq!(admin.status, 200);
    let admin = parse(&admin.text());
    assert_eq!(admin.value("kong_http_requests_total", &ok_labels), 4.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switches_off_record_nothing_and_renames_show_at_once() {
    let (gw, upstream) = gateway_with_echo(&config(json!({}))).await;
    for _ in 0..2 {
        assert_eq!(gw.proxy(get("/counted")).await.status, 200);
    }
    let metrics = scrape(&gw).await;
    for family in [
        "kong_kong_latency_ms_count",
        "kong_upstream_latency_ms_count",
        "kong_request_latency_ms_count",
        "kong_bandwidth_bytes_total",
        "kong_upstream_target_health",
    ] {
        assert!(
            metrics.find(family, &[("route", "counted")]).is_empty() && metrics.find(family, &[]).is_empty(),
            "{family} without its switch"
        );
    }
    assert!(metrics
        .find("kong_http_requests_total", &[("route", "counted")])
        .is_empty());
    // The other routes' plugins still count (status_code_metrics on /exit).
    assert_eq!(gw.proxy(get("/exit")).await.status, 418);
    let metrics = scrape(&gw).await;
    assert_eq!(metrics.value("kong_http_requests_total", &[("route", "exit")]), 1.0);
    // Labels come from the configuration now live: a renamed route's
    // series shows its new name.
    let mut renamed = config(json!({}));
    renamed["services"][0]["routes"][3]["name"] = json!("teapot");
    let text = renamed.to_string().replace("UPSTREAM", &upstream.url("http"));
    gw.apply(&serde_json::from_str(&text).unwrap()).await;
    let metrics = scrape(&gw).await;
    assert!(metrics
        .find("kong_http_requests_total", &[("route", "exit")])
        .is_empty());
    assert_eq!(metrics.value("kong_http_requests_total", &[("route", "teapot")]), 1.0);
}

/// A scrape larger than one 256 KiB piece is sent while it is rendered (chunked) and parses
/// whole; a small one keeps its length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_scrape_is_sent_as_it_is_rendered() {
    const ROUTES: usize = 120;
    let routes: Vec<serde_json::Value> = (0..ROUTES)
        .map(|i| json!({ "name": format!("r{i}"), "paths": [format!("/r{i}")] }))
        .collect();
    let document = json!({
        "_format_version": "3.0",
        "plugins": [{ "name": "prometheus", "config": { "latency_metrics": true, "status_code_metrics": true } }],
        "services": [{ "name": "echo", "url": "UPSTREAM", "routes": routes }]
    });
    let (gw, _upstream) = gateway_with_echo(&document).await;

    let small = scrape_reply(&gw).await;
    assert!(
        small.header("transfer-encoding").is_none(),
        "{} bytes",
        small.body.len()
    );
    assert_eq!(small.header("content-length"), Some(small.body.len().to_string()));

    for i in 0..ROUTES {
        assert_eq!(gw.proxy(get(&format!("/r{i}"))).await.status, 200);
    }
    // A request is counted in its log phase, once its body went out: the
    // client may see the last answer a moment before it is counted.
    let last = format!("r{}", ROUTES - 1);
    let mut big = scrape_reply(&gw).await;
    for _ in 0..100 {
        let exposition = parse(&big.text());
        let series = exposition.find("kong_request_latency_ms_count", &[("route", last.as_str())]);
        if series.first().map(|sample| sample.value) == Some(1.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        big = scrape_reply(&gw).await;
    }
    assert_eq!(big.header("transfer-encoding").as_deref(), Some("chunked"));
    assert!(big.header("content-length").is_none());
    assert!(big.body.len() > 256 * 1024, "{} bytes", big.body.len());
    let metrics = parse(&big.text());
    for i in 0..ROUTES {
        let route = format!("r{i}");
        let labels = [("route", route.as_str())];
        assert_eq!(metrics.value("kong_request_latency_ms_count", &labels), 1.0, "{route}");
    }
    assert_eq!(
        metrics.find("kong_node_info", &[]).len(),
        1,
        "the exposition's tail arrived"
    );

    // HTTP/1.0 has no chunked framing: the same scrape comes whole, with its
    // length, so a cut one could not pass for complete.
    let raw = strait_e2e::send_h1_raw(gw.status_addr(), b"GET /metrics HTTP/1.0\r\n\r\n").await;
    let (head, body) = raw.split_once("\r\n\r\n").expect("a response head");
    assert!(head.contains(" 200 "), "{head}");
    let fields = head.to_ascii_lowercase();
    assert!(!fields.contains("transfer-encoding"), "{head}");
    assert!(body.len() > 256 * 1024, "{} bytes", body.len());
    let length = fields
        .lines()
        .find_map(|line| line.strip_prefix("content-length:").map(|v| v.trim().to_string()));
    assert_eq!(length, Some(body.len().to_string()), "{head}");
    assert!(body.contains("kong_node_info"), "the exposition's tail arrived");
}
