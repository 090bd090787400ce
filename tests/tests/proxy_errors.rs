//! Proxy errors with Kong's codes and bodies: 404 without a route, 502 on refused connections
//! (after retries), 504 on read timeouts, aborted client responses when the upstream resets
//! mid-body, and upstream statuses passed through untouched.

use std::time::{Duration, Instant};

use serde_json::json;
use strait_e2e::declarative::{config, route, service};
use strait_e2e::{get, refusing_addr, Conn, Gateway, GatewayOptions, Upstream, UpstreamKind};

const BAD_GATEWAY: &str = "An invalid response was received from the upstream server";
const TIMING_OUT: &str = "The upstream server is timing out";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_is_404_with_kong_body() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![])).await;
    let reply = gw.proxy(get("/nothing/here")).await;
    assert_eq!(reply.status, 404);
    // Kong 3.5+: the body carries the request's X-Kong-Request-Id.
    let id = reply.header("x-kong-request-id").expect("X-Kong-Request-Id");
    assert_eq!(
        reply.json(),
        json!({ "message": "no Route matched with those values", "request_id": id })
    );
    assert!(reply.header("x-kong-response-latency").is_some());
    assert!(reply.header("x-kong-proxy-latency").is_none(), "nothing was proxied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connection_is_502_after_retries() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let mut svc = service(
        "dead",
        &format!("http://{}", refusing_addr()),
        vec![route("dead", &["/dead"])],
    );
    svc["retries"] = json!(2);
    svc["connect_timeout"] = json!(1000);
    gw.apply(&config(vec![svc])).await;
    let started = Instant::now();
    let reply = gw.proxy(get("/dead")).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(reply.message().as_deref(), Some(BAD_GATEWAY));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
}

/// Two targets, one refusing: with retries every request lands on the live one exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_move_on_to_a_live_target() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let pool = |name: &str| {
        json!({ "name": name, "targets": [
            { "target": refusing_addr().to_string() },
            { "target": up.addr().to_string() },
        ] })
    };
    let mut with_retries = service("with-retries", "http://pool-retry", vec![route("retry", &["/retry"])]);
    with_retries["retries"] = json!(5);
    let mut without = service("without-retries", "http://pool-none", vec![route("none", &["/none"])]);
    without["retries"] = json!(0);
    let mut cfg = config(vec![with_retries, without]);
    cfg["upstreams"] = json!([pool("pool-retry"), pool("pool-none")]);
    gw.apply(&cfg).await;

    for i in 0..20 {
        let reply = gw.proxy(get(&format!("/retry/echo?i={i}"))).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.text());
    }
    assert_eq!(up.hits(), 20, "each request reaches the live target exactly once");

    let mut statuses = Vec::new();
    for i in 0..12 {
        statuses.push(gw.proxy(get(&format!("/none/echo?i={i}"))).await.status.as_u16());
    }
    assert!(
        statuses.contains(&502),
        "without retries the dead target must surface: {statuses:?}"
    );
    assert!(statuses.contains(&200), "the live target still serves: {statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_timeout_is_504() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let mut svc = service("slow", &up.url("http"), vec![route("slow", &["/s"])]);
    svc["read_timeout"] = json!(500);
    gw.apply(&config(vec![svc])).await;

    for path in ["/s/slow?ms=5000", "/s/hang"] {
        let started = Instant::now();
        let reply = gw.proxy(get(path)).await;
        assert_eq!(reply.status, 504, "{path}: {}", reply.text());
        assert_eq!(reply.message().as_deref(), Some(TIMING_OUT));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_secs(4),
            "{path} took {took:?}"
        );
    }
    let reply = gw.proxy(get("/s/slow?ms=50")).await;
    assert_eq!(reply.status, 200, "a fast enough answer still passes");
}

/// The upstream sends headers and part of the body, then aborts: the client must not see a
/// clean, complete 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_reset_mid_body_aborts_the_client() {
    let up = Upstream::start(UpstreamKind::Auto).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![service("r", &up.url("http"), vec![route("r", &["/r"])])]))
        .await;

    let mut h1 = Conn::h1(gw.proxy_addr()).await.expect("connect");
    match h1.send(get("/r/reset")).await {
        Err(_) => {}
        Ok(reply) => assert!(
            reply.status.as_u16() >= 500,
            "HTTP/1.1 client got a clean {} with {} bytes",
            reply.status,
            reply.body.len()
        ),
    }
    let mut h2 = Conn::h2c(gw.proxy_addr()).await.expect("connect");
    match h2.send(get("/r/reset")).await {
        Err(_) => {}
        Ok(reply) => assert!(
            reply.status.as_u16() >= 500,
            "HTTP/2 client got a clean {} with {} bytes",
            reply.status,
            reply.body.len()
        ),
    }
    // The h2 connection itself survives a reset stream; the gateway keeps serving.
    let reply = h2.send(get("/r/echo")).await.expect("h2 connection still usable");
    assert_eq!(reply.status, 200);
    assert_eq!(gw.proxy(get("/r/echo")).await.status, 200);
}

/// A route for `https` only, asked over plain HTTP: Kong's 426 with its upgrade headers, or
/// the route's `https_redirect_status_code`; a route for both is proxied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_only_routes_refuse_plain_http() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let mut secure = route("secure", &["/secure"]);
    secure["protocols"] = json!(["https"]);
    let mut moved = route("moved", &["/moved"]);
    moved["protocols"] = json!(["https"]);
    moved["https_redirect_status_code"] = json!(301);
    let mut plain = route("plain", &["/plain"]);
    plain["protocols"] = json!(["http", "https"]);
    gw.apply(&config(vec![service(
        "tls",
        &up.url("http"),
        vec![secure, moved, plain],
    )]))
    .await;

    let reply = gw.proxy(get("/secure")).await;
    assert_eq!(reply.status, 426, "{}", reply.text());
    let id = reply.header("x-kong-request-id").expect("X-Kong-Request-Id");
    assert_eq!(
        reply.json(),
        json!({ "message": "Please use HTTPS protocol", "request_id": id })
    );
    assert_eq!(reply.header("upgrade").as_deref(), Some("TLS/1.2, HTTP/1.1"));
    let reply = gw.proxy(get("/moved")).await;
    assert_eq!(reply.status, 301, "{}", reply.text());
    let reply = gw.proxy(get("/plain/status/201")).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_statuses_pass_through() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![service(
        "st",
        &up.url("http"),
        vec![route("st", &["/st"])],
    )]))
    .await;
    for code in [201u16, 404, 503] {
        let reply = gw.proxy(get(&format!("/st/status/{code}"))).await;
        assert_eq!(reply.status.as_u16(), code);
        assert_eq!(
            reply.json(),
            json!({ "status": code }),
            "upstream body must be untouched"
        );
    }
}

/// An upstream that accepts but never reads: once socket buffers fill, the body write stalls
/// and the service's `write_timeout` turns it into a 504 instead of a stuck request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_upstream_write_is_504_after_write_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sink = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind sink");
    let sink_addr = sink.local_addr().expect("sink addr");
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = sink.accept().await {
            held.push(stream);
        }
    });
    let gw = Gateway::start(GatewayOptions::new()).await;
    let mut svc = service("sink", &format!("http://{sink_addr}"), vec![route("sink", &["/sink"])]);
    svc["write_timeout"] = json!(500);
    svc["read_timeout"] = json!(60000);
    gw.apply(&config(vec![svc])).await;
    let total: usize = 256 * 1024 * 1024;
    let stream = tokio::net::TcpStream::connect(gw.proxy_addr()).await.expect("connect");
    let (mut reader, mut writer) = stream.into_split();
    let started = Instant::now();
    let sender = tokio::spawn(async move {
        let head = format!("POST /sink HTTP/1.1\r\nHost: x\r\nContent-Length: {total}\r\n\r\n");
        writer.write_all(head.as_bytes()).await.ok();
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..total / chunk.len() {
            if writer.write_all(&chunk).await.is_err() {
                break;
            }
        }
    });
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(15), async {
        while !String::from_utf8_lossy(&response).contains("\r\n\r\n") {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => response.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no response within 15 s");
    let text = String::from_utf8_lossy(&response).to_string();
    assert!(text.starts_with("HTTP/1.1 504"), "response: {text:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    sender.abort();
    holder.abort();
}
