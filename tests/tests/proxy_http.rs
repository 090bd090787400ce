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

/// Sends two GETs on one connection and returns both raw responses (the
/// second is empty when the gateway closed the connection after the first).
async fn two_on_one_connection(gw: &Gateway, path: &str) -> (String, String) {
    use std::time::Duration;
    let mut conn = strait_e2e::RawConn::connect(gw.proxy_addr()).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: example.test\r\n\r\n");
    conn.write(request.as_bytes()).await.expect("first request");
    let first = conn.read_head(Duration::from_secs(10)).await.expect("first response");
    // The second request only after the first response's body has arrived.
    let rest = conn.read_until_close(Duration::from_millis(300)).await;
    assert!(!rest.closed, "the gateway closed the client connection after: {first}");
    let first = format!("{first}{}", String::from_utf8_lossy(&rest.bytes));
    let second = match conn.write(request.as_bytes()).await {
        Ok(()) => conn.read_head(Duration::from_secs(10)).await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    (first, second)
}

/// Python's http.server answers HTTP/1.0 and closes after each response; a
/// second upstream answers HTTP/1.0 with no length (the body ends at close).
/// The HTTP/1.1 client still gets HTTP/1.1 responses on one kept-alive
/// connection, the whole body each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http10_upstream_does_not_downgrade_the_client_connection() {
    let dir = strait_e2e::TempDir::new();
    std::fs::write(dir.path().join("hello.txt"), "hello from http.server\n").expect("file");
    let python_port = strait_e2e::free_port();
    let mut python = std::process::Command::new("python3")
        .args(["-m", "http.server", &python_port.to_string(), "--bind", "127.0.0.1"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 -m http.server");
    // An HTTP/1.0 response without Content-Length: the body runs to the close.
    let unframed = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let unframed_port = unframed.local_addr().expect("addr").port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = unframed.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nbody until close\n")
                    .await;
            });
        }
    });
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![
        service(
            "python",
            &format!("http://127.0.0.1:{python_port}"),
            vec![route("python", &["/py"])],
        ),
        service(
            "unframed",
            &format!("http://127.0.0.1:{unframed_port}"),
            vec![route("unframed", &["/unframed"])],
        ),
    ]))
    .await;
    // http.server needs a moment to listen.
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", python_port)).is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let (first, second) = two_on_one_connection(&gw, "/py/hello.txt").await;
    let _ = python.kill();
    let _ = python.wait();
    for response in [&first, &second] {
        assert!(response.starts_with("HTTP/1.1 200 "), "{response}");
        assert!(
            !response.to_ascii_lowercase().contains("connection: close"),
            "{response}"
        );
    }
    assert!(first.ends_with("hello from http.server\n"), "{first}");

    let (first, second) = two_on_one_connection(&gw, "/unframed/x").await;
    for response in [&first, &second] {
        assert!(response.starts_with("HTTP/1.1 200 "), "{response}");
        assert!(
            !response.to_ascii_lowercase().contains("connection: close"),
            "{response}"
        );
    }
    // No length from the upstream: chunked to the HTTP/1.1 client.
    assert!(
        first.to_ascii_lowercase().contains("transfer-encoding: chunked"),
        "{first}"
    );
    assert!(first.contains("body until close\n"), "{first}");
}
