//! Proxying over plain HTTP/1.1: route matching and priority, strip_path, preserve_host,
//! forwarded headers, hop-by-hop stripping, bodies both ways, request-termination.

use serde_json::{json, Value};
use strait_e2e::declarative::{answering, config, route, service, terminating_service};
use strait_e2e::{get, get_host, request, Gateway, GatewayOptions, Reply, Upstream, UpstreamKind};

/// Status and `message` of a request through the proxy.
async fn answer(gw: &Gateway, req: http::Request<http_body_util::Full<bytes::Bytes>>) -> (u16, Option<String>) {
    let reply = gw.proxy(req).await;
    (reply.status.as_u16(), reply.message())
}

fn ok(message: &str) -> (u16, Option<String>) {
    (200, Some(message.to_string()))
}

fn upstream_headers(reply: &Reply) -> Value {
    assert_eq!(reply.status, 200, "upstream echo expected: {}", reply.text());
    reply.json()["headers"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_exact_and_wildcard_host() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![terminating_service(
        "hosts",
        vec![
            answering(json!({ "name": "exact", "hosts": ["api.example.com"] }), "exact"),
            answering(json!({ "name": "wild", "hosts": ["*.example.com"] }), "wild"),
        ],
    )]))
    .await;
    assert_eq!(answer(&gw, get_host("/", "api.example.com")).await, ok("exact"));
    assert_eq!(
        answer(&gw, get_host("/any/path", "api.example.com:8000")).await,
        ok("exact"),
        "port ignored"
    );
    assert_eq!(answer(&gw, get_host("/", "foo.example.com")).await, ok("wild"));
    assert_eq!(answer(&gw, get_host("/", "example.com")).await.0, 404);
    assert_eq!(answer(&gw, get_host("/", "api.example.org")).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_longest_prefix_and_regex() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![terminating_service(
        "paths",
        vec![
            answering(route("short", &["/p"]), "short"),
            answering(route("long", &["/p/long"]), "long"),
            answering(route("regex", &[r"~/users/\d+$"]), "regex"),
        ],
    )]))
    .await;
    assert_eq!(answer(&gw, get("/p")).await, ok("short"));
    assert_eq!(answer(&gw, get("/p/other")).await, ok("short"));
    assert_eq!(answer(&gw, get("/p/long")).await, ok("long"));
    assert_eq!(answer(&gw, get("/p/long/deeper?x=1")).await, ok("long"));
    assert_eq!(answer(&gw, get("/users/42")).await, ok("regex"));
    assert_eq!(answer(&gw, get("/users/abc")).await.0, 404);
    assert_eq!(
        answer(&gw, get("/users/42/more")).await.0,
        404,
        "regex is anchored with $"
    );
    assert_eq!(
        answer(&gw, get("/v1/users/42")).await.0,
        404,
        "regex is anchored at the start"
    );
    assert_eq!(answer(&gw, get("/q")).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_specific_routes_win() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![terminating_service(
        "priority",
        vec![
            answering(
                json!({ "name": "m-post", "paths": ["/m"], "methods": ["POST"] }),
                "m-post",
            ),
            answering(route("m-any", &["/m"]), "m-any"),
            answering(
                json!({ "name": "h-v2", "paths": ["/h"], "headers": { "x-version": ["v2"] } }),
                "h-v2",
            ),
            answering(route("h-any", &["/h"]), "h-any"),
            answering(json!({ "name": "hc", "hosts": ["h.test"], "paths": ["/c"] }), "hc"),
            answering(route("c", &["/c"]), "c"),
            answering(
                json!({ "name": "only-put", "paths": ["/put"], "methods": ["PUT"] }),
                "put",
            ),
        ],
    )]))
    .await;
    assert_eq!(answer(&gw, request("POST", "/m", &[], "x")).await, ok("m-post"));
    assert_eq!(answer(&gw, get("/m")).await, ok("m-any"));
    assert_eq!(
        answer(&gw, request("GET", "/h", &[("x-version", "v2")], "")).await,
        ok("h-v2")
    );
    assert_eq!(
        answer(&gw, request("GET", "/h", &[("x-version", "v1")], "")).await,
        ok("h-any")
    );
    assert_eq!(answer(&gw, get("/h")).await, ok("h-any"));
    assert_eq!(answer(&gw, get_host("/c", "h.test")).await, ok("hc"));
    assert_eq!(answer(&gw, get_host("/c", "other.test")).await, ok("c"));
    assert_eq!(answer(&gw, request("PUT", "/put", &[], "")).await, ok("put"));
    assert_eq!(answer(&gw, get("/put")).await.0, 404, "method does not match");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strip_path_and_service_path() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![
        service(
            "plain",
            &up.url("http"),
            vec![
                route("strip", &["/strip"]),
                json!({ "name": "keep", "paths": ["/keep"], "strip_path": false }),
            ],
        ),
        service(
            "based",
            &format!("{}/base", up.url("http")),
            vec![route("based", &["/based"])],
        ),
    ]))
    .await;
    let path = |reply: Reply| reply.json()["path"].as_str().unwrap_or_default().to_string();
    assert_eq!(path(gw.proxy(get("/strip/echo/a?x=1")).await), "/echo/a?x=1");
    assert_eq!(path(gw.proxy(get("/keep/echo?y=2")).await), "/keep/echo?y=2");
    assert_eq!(path(gw.proxy(get("/based/echo")).await), "/base/echo");
    assert_eq!(up.hits(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preserve_host_on_and_off() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![service(
        "s",
        &up.url("http"),
        vec![
            route("off", &["/off"]),
            json!({ "name": "on", "paths": ["/on"], "preserve_host": true }),
        ],
    )]))
    .await;
    let off = upstream_headers(&gw.proxy(get_host("/off/echo", "fwd.test")).await);
    assert_eq!(off["host"], format!("127.0.0.1:{}", up.port()));
    let on = upstream_headers(&gw.proxy(get_host("/on/echo", "fwd.test")).await);
    assert_eq!(on["host"], "fwd.test");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_and_via() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![service(
        "s",
        &up.url("http"),
        vec![route("fwd", &["/fwd"])],
    )]))
    .await;
    let version = gw.strait_version().await;
    let reply = gw
        .proxy(request(
            "GET",
            "/fwd/echo?q=1",
            &[("host", "fwd.test"), ("x-forwarded-for", "10.1.2.3")],
            "",
        ))
        .await;
    assert_eq!(
        reply.header("via").as_deref(),
        Some(format!("1.1 strait/{version}").as_str())
    );
    let headers = upstream_headers(&reply);
    assert_eq!(headers["x-forwarded-for"], "10.1.2.3, 127.0.0.1");
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert_eq!(headers["x-forwarded-host"], "fwd.test");
    assert_eq!(headers["x-forwarded-port"], gw.ports().proxy.to_string());
    assert_eq!(headers["x-forwarded-path"], "/fwd/echo");
    assert_eq!(headers["x-real-ip"], "127.0.0.1");
    // Without an incoming X-Forwarded-For the client address stands alone.
    let headers = upstream_headers(&gw.proxy(get_host("/fwd/echo", "fwd.test")).await);
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_headers_are_stripped_but_te_trailers_kept() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![service(
        "s",
        &up.url("http"),
        vec![route("hop", &["/hop"])],
    )]))
    .await;
    let reply = gw
        .proxy(request(
            "GET",
            "/hop/echo",
            &[
                ("connection", "keep-alive"),
                ("keep-alive", "timeout=5"),
                ("proxy-connection", "keep-alive"),
                ("te", "trailers"),
                ("x-end-to-end", "kept"),
            ],
            "",
        ))
        .await;
    let headers = upstream_headers(&reply);
    assert!(headers.get("keep-alive").is_none(), "keep-alive forwarded: {headers}");
    assert!(
        headers.get("proxy-connection").is_none(),
        "proxy-connection forwarded: {headers}"
    );
    assert_eq!(headers["te"], "trailers");
    assert_eq!(headers["x-end-to-end"], "kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_stream_both_ways() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![service(
        "s",
        &up.url("http"),
        vec![route("body", &["/body"])],
    )]))
    .await;
    let echoed = gw
        .proxy(request(
            "POST",
            "/body/echo",
            &[("content-type", "text/plain")],
            "hello body",
        ))
        .await;
    assert_eq!(echoed.json()["method"], "POST");
    assert_eq!(echoed.json()["body"], "hello body");

    let large = "y".repeat(1 << 20);
    let echoed = gw.proxy(request("PUT", "/body/echo", &[], large.clone())).await;
    assert_eq!(echoed.json()["body"].as_str().map(str::len), Some(large.len()));

    let big = gw.proxy(get("/body/big?bytes=3000000")).await;
    assert_eq!(big.status, 200);
    assert_eq!(big.body.len(), 3_000_000);
    assert!(big.body.iter().all(|b| *b == b'x'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_termination_answers_without_upstream() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let html = json!({ "name": "request-termination",
        "config": { "status_code": 200, "body": "<h1>hi</h1>", "content_type": "text/html" } });
    gw.apply(&config(vec![service(
        "s",
        &up.url("http"),
        vec![
            json!({ "name": "json", "paths": ["/term-json"],
                "plugins": [strait_e2e::declarative::termination(403, "forbidden zone")] }),
            json!({ "name": "html", "paths": ["/term-html"], "plugins": [html] }),
        ],
    )]))
    .await;
    let reply = gw.proxy(get("/term-json")).await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.json(), json!({ "message": "forbidden zone" }));
    assert!(reply
        .header("content-type")
        .unwrap_or_default()
        .starts_with("application/json"));
    let reply = gw.proxy(get("/term-html")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "<h1>hi</h1>");
    assert!(reply
        .header("content-type")
        .unwrap_or_default()
        .starts_with("text/html"));
    assert_eq!(up.hits(), 0, "request-termination must not reach the upstream");
}
