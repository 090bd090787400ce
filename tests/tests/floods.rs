//! Floods and limits: a worker's connection cap, thousands of idle and slowloris connections,
//! HTTP/2 stream and header-list limits, and a client that never reads its response. In each
//! case the gateway keeps answering other clients and its memory stays bounded.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strait_e2e::h2_raw::{frame, header_block, RawH2, StreamOutcome, END_HEADERS, END_STREAM, HEADERS, REFUSED_STREAM};
use strait_e2e::{get, Gateway, GatewayOptions, RawConn, Upstream, UpstreamKind};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

async fn proxied(options: GatewayOptions, origin: &Upstream) -> Gateway {
    let gw = Gateway::start(options).await;
    gw.apply(&json!({
        "_format_version": "3.0",
        "services": [{ "name": "origin", "url": origin.url("http"), "routes": [{ "name": "all", "paths": ["/"] }] }]
    }))
    .await;
    gw
}

async fn status_counters(gw: &Gateway) -> Value {
    let reply = gw.admin_get("/status").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

/// Waits (5 s at most) until `/status` counts exactly `count` open client connections.
async fn wait_for_active(gw: &Gateway, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let active = status_counters(gw).await["server"]["connections_active"].as_u64();
        if active == Some(count) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "connections_active stayed {active:?}, waiting for {count}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `worker_connections`: past the cap a worker closes new connections at once (and counts
/// them); once connections end, new ones are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_connections_caps_each_worker() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let options = GatewayOptions::new()
        .setting("worker_threads", "1")
        .setting("worker_connections", "3");
    let gw = proxied(options, &origin).await;
    // The harness's own polling connections must be gone before the count starts.
    wait_for_active(&gw, 0).await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(gw.proxy_addr()).await.expect("connect"));
    }
    wait_for_active(&gw, 3).await;
    let mut refused = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    let _ = refused.write(b"GET /echo HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let reply = refused.read_until_close(Duration::from_secs(2)).await;
    assert!(
        reply.closed && reply.bytes.is_empty(),
        "closed unanswered: {:?}",
        reply.text()
    );
    let counters = status_counters(&gw).await;
    assert!(
        counters["server"]["connections_refused"].as_u64() >= Some(1),
        "{counters}"
    );
    drop(idle);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answered = gw.proxy(get("/echo/after")).await;
    assert_eq!(answered.status, 200, "served again once connections ended");
}

/// 10,000 connections that never send a request, or send one byte-slow and never finish it,
/// do not keep a normal client from its answers: every one of its requests is answered within
/// 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_and_slowloris_connections_do_not_delay_others() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = proxied(GatewayOptions::new(), &origin).await;
    let mut flood = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let mut stream = TcpStream::connect(gw.proxy_addr())
            .await
            .unwrap_or_else(|e| panic!("flood connection {i}: {e} (raise `ulimit -n`; scripts/test.sh does)"));
        if i % 2 == 1 {
            // slowloris: an unfinished head
            let _ = stream.write_all(b"GET /echo HTTP/1.1\r\nHost: a\r\nX-Slow: ").await;
        }
        flood.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let active = status_counters(&gw).await["server"]["connections_active"]
        .as_u64()
        .unwrap_or(0);
    assert!(active >= 10_000, "the flood is held open: {active}");
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let started = Instant::now();
        let reply = gw.proxy(get(&format!("/echo/normal/{i}"))).await;
        let took = started.elapsed();
        assert_eq!(reply.status, 200);
        slowest = slowest.max(took);
    }
    eprintln!("flood of {active} connections: slowest of 20 normal requests {slowest:?}");
    assert!(slowest < Duration::from_millis(100), "slowest answer took {slowest:?}");
    drop(flood);
}

/// `http2_max_concurrent_streams`: streams past the limit are refused (REFUSED_STREAM) while
/// the ones within it proceed; a header list over `client_max_header_size` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_stream_and_header_list_limits() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let options = GatewayOptions::new()
        .setting("http2_max_concurrent_streams", "4")
        .setting("client_max_header_size", "2048");
    let gw = proxied(options, &origin).await;
    let mut conn = RawH2::connect(gw.proxy_addr()).await.expect("h2c");
    // Learn the server's SETTINGS before opening streams, as a client must.
    let _ = conn.outcome_of(99, Duration::from_millis(300)).await;
    let open = header_block(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/echo/open"),
        (":authority", "a"),
    ]);
    for id in [1, 3, 5, 7, 9] {
        // No END_STREAM: each stream stays open, waiting for its body.
        conn.send(&frame(HEADERS, END_HEADERS, id, &open))
            .await
            .expect("headers");
    }
    assert_eq!(
        conn.outcome_of(9, Duration::from_secs(3)).await,
        StreamOutcome::Reset(REFUSED_STREAM),
        "the fifth concurrent stream"
    );
    let mut big = RawH2::connect(gw.proxy_addr()).await.expect("h2c");
    let padding = "x".repeat(4096);
    let fields = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/echo/big"),
        (":authority", "a"),
        ("x-big", padding.as_str()),
    ];
    big.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &header_block(&fields)))
        .await
        .expect("headers");
    let outcome = big.outcome(Duration::from_secs(3)).await;
    eprintln!("header list over client_max_header_size: {outcome:?}");
    // hyper answers 431 (a status HPACK codes as a literal, not a static-table index).
    assert!(
        matches!(
            outcome,
            StreamOutcome::Response(None) | StreamOutcome::Reset(_) | StreamOutcome::GoAway(_)
        ),
        "header list over the limit: {outcome:?}"
    );
    assert!(
        !origin.requests().iter().any(|r| r.contains("/echo/big")),
        "the oversized request never reached the upstream: {:?}",
        origin.requests()
    );
}

/// Clients that ask for large responses and never read them: the gateway stops reading from
/// the upstream when the client's window is full (backpressure), so its memory grows by a
/// bounded amount, not by the size of the responses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_cannot_grow_gateway_memory() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = proxied(GatewayOptions::new(), &origin).await;
    let rss = |status: Value| status["memory"]["rss_bytes"].as_u64().expect("rss_bytes");
    let before = rss(status_counters(&gw).await);
    let clients = 20;
    let each: u64 = 64 << 20;
    let mut stalled = Vec::new();
    for _ in 0..clients {
        let mut stream = TcpStream::connect(gw.proxy_addr()).await.expect("connect");
        let request = format!("GET /big?bytes={each} HTTP/1.1\r\nHost: a\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        stalled.push(stream);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = rss(status_counters(&gw).await);
    let grown = after.saturating_sub(before);
    let requested = clients * each;
    eprintln!(
        "{} MiB of unread responses: gateway RSS grew {} KiB",
        requested >> 20,
        grown >> 10
    );
    assert!(
        grown < 64 << 20,
        "memory grew by {} MiB for {} MiB of unread responses",
        grown >> 20,
        requested >> 20
    );
    assert_eq!(gw.proxy(get("/echo/still-serving")).await.status, 200);
    drop(stalled);
}

/// An idle connection does not hold a worker's slot for long: a keep-alive connection with no
/// next request closes `client_header_timeout` after its last response, and a connection that
/// never sends a byte gets 408 then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_after_client_header_timeout() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = proxied(GatewayOptions::new().setting("client_header_timeout", "700ms"), &origin).await;
    let mut kept = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    kept.write(b"GET /echo/first HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .expect("write");
    let head = kept.read_head(Duration::from_secs(2)).await.expect("first response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let answered = Instant::now();
    let rest = kept.read_until_close(Duration::from_secs(5)).await;
    assert!(rest.closed, "idle keep-alive connection closed");
    let idle_for = answered.elapsed();
    assert!(
        idle_for >= Duration::from_millis(500) && idle_for < Duration::from_secs(3),
        "closed after {idle_for:?}"
    );
    let started = Instant::now();
    let mut silent = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    let reply = silent.read_until_close(Duration::from_secs(5)).await;
    assert_eq!(reply.status(), Some(408), "{}", reply.text());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "after {:?}",
        started.elapsed()
    );
}
