//! The `http2_*` settings reach the wire (what a client reads in the gateway's SETTINGS frame
//! and its connection WINDOW_UPDATE), and the HTTP/2 attacks they bound: rapid reset and
//! CONTINUATION floods.

use std::time::Duration;

use strait_e2e::h2_raw::RawH2;
use strait_e2e::{Gateway, GatewayOptions};

const MAX_CONCURRENT_STREAMS: u16 = 0x3;
const INITIAL_WINDOW_SIZE: u16 = 0x4;
const MAX_FRAME_SIZE: u16 = 0x5;
const MAX_HEADER_LIST_SIZE: u16 = 0x6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_http2_setting_is_in_the_settings_frame() {
    let options = GatewayOptions::new()
        .setting("http2_max_concurrent_streams", "50")
        .setting("http2_initial_stream_window_size", "256k")
        .setting("http2_initial_connection_window_size", "4m")
        .setting("http2_max_frame_size", "32k")
        .setting("client_max_header_size", "16384");
    let gw = Gateway::start(options).await;
    let mut conn = RawH2::connect(gw.proxy_addr()).await.expect("connect");
    let (settings, window) = conn.server_settings(Duration::from_secs(2)).await;
    let value = |id: u16| settings.iter().find(|(key, _)| *key == id).map(|(_, v)| *v);
    assert_eq!(value(MAX_CONCURRENT_STREAMS), Some(50), "{settings:?}");
    assert_eq!(value(INITIAL_WINDOW_SIZE), Some(256 * 1024), "{settings:?}");
    assert_eq!(value(MAX_FRAME_SIZE), Some(32 * 1024), "{settings:?}");
    assert_eq!(value(MAX_HEADER_LIST_SIZE), Some(16384), "{settings:?}");
    assert_eq!(window, Some(4 * 1024 * 1024 - 65_535), "the connection window");
}

const RST_STREAM: u8 = 0x3;
const CONTINUATION: u8 = 0x9;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One client, one connection: `pairs` streams opened and reset at once (CVE-2023-44487).
/// The gateway goes away from that connection, sends few of the calls upstream, and keeps
/// serving others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_is_bounded() {
    use strait_e2e::declarative::{config, route, service};
    use strait_e2e::h2_raw::{frame, header_block, StreamOutcome, END_HEADERS, END_STREAM, HEADERS};
    let origin = strait_e2e::Upstream::start(strait_e2e::UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![service(
        "s",
        &origin.url("http"),
        vec![route("s", &["/s"])],
    )]))
    .await;
    let before = origin.hits();
    let mut attacker = RawH2::connect(gw.proxy_addr()).await.expect("connect");
    let _ = attacker.server_settings(Duration::from_millis(300)).await;
    let block = header_block(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/s/slow?ms=200"),
        (":authority", "a"),
    ]);
    let mut burst = Vec::new();
    for n in 0..2000u32 {
        let id = 2 * n + 1;
        burst.extend(frame(HEADERS, END_HEADERS | END_STREAM, id, &block));
        burst.extend(frame(RST_STREAM, 0, id, &0x8u32.to_be_bytes()));
    }
    let _ = attacker.send(&burst).await;
    let outcome = attacker.outcome_of(u32::MAX, Duration::from_secs(5)).await;
    assert!(
        matches!(
            outcome,
            StreamOutcome::GoAway(ENHANCE_YOUR_CALM) | StreamOutcome::Closed
        ),
        "the attacking connection is closed: {outcome:?}"
    );
    let reached = origin.hits() - before;
    eprintln!("rapid reset: {outcome:?}; {reached} of 2000 calls reached the upstream");
    assert!(reached < 2000, "{reached} of 2000 reset calls reached the upstream");
    let reply = gw.proxy(strait_e2e::get("/s/echo")).await;
    assert_eq!(reply.status, 200, "others are still served");
}

/// A header block that never ends (HEADERS without END_HEADERS, then CONTINUATION frames past
/// the header list limit, CVE-2024-27316): the connection is dropped, not buffered without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuation_flood_is_bounded() {
    use strait_e2e::h2_raw::{frame, header_block, StreamOutcome, HEADERS};
    let gw = Gateway::start(GatewayOptions::new().setting("client_max_header_size", "8192")).await;
    let rss_before = gw.rss_kib();
    let mut attacker = RawH2::connect(gw.proxy_addr()).await.expect("connect");
    let _ = attacker.server_settings(Duration::from_millis(300)).await;
    let start = header_block(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "a"),
    ]);
    let _ = attacker.send(&frame(HEADERS, 0, 1, &start)).await;
    let filler = "v".repeat(4000);
    let chunk = header_block(&[("x-flood", filler.as_str())]);
    let mut sent = 0usize;
    let mut refused = false;
    // Up to 64 MB of header block; the gateway must stop taking it long before.
    for _ in 0..16_000 {
        if attacker.send(&frame(CONTINUATION, 0, 1, &chunk)).await.is_err() {
            refused = true;
            break;
        }
        sent += chunk.len();
    }
    let outcome = attacker.outcome_of(1, Duration::from_secs(3)).await;
    assert!(
        refused
            || matches!(
                outcome,
                StreamOutcome::GoAway(_) | StreamOutcome::Closed | StreamOutcome::Reset(_)
            ),
        "the flood is cut off: {outcome:?} after {sent} bytes"
    );
    let grown = gw.rss_kib().saturating_sub(rss_before);
    eprintln!("continuation flood: {outcome:?} after {sent} bytes (refused: {refused}); RSS +{grown} KiB");
    assert!(grown < 32 * 1024, "gateway memory grew by {grown} KiB");
    let mut other = RawH2::connect(gw.proxy_addr()).await.expect("connect");
    assert!(
        !other.server_settings(Duration::from_secs(1)).await.0.is_empty(),
        "others are still served"
    );
}

/// The `upstream_http2_*` settings, as an HTTP/2 upstream reads them from Strait's SETTINGS
/// frame and connection WINDOW_UPDATE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_http2_settings_reach_the_upstream() {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.expect("accept");
        let mut preface = [0u8; 24];
        tcp.read_exact(&mut preface).await.expect("preface");
        let (mut settings, mut window) = (Vec::new(), None);
        while settings.is_empty() || window.is_none() {
            let mut head = [0u8; 9];
            if tcp.read_exact(&mut head).await.is_err() {
                break;
            }
            let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; length];
            tcp.read_exact(&mut payload).await.expect("payload");
            match head[3] {
                0x4 if head[4] & 0x1 == 0 => settings = strait_e2e::h2_raw::settings_params(&payload),
                0x8 => window = Some(u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])),
                _ => {}
            }
        }
        (settings, window)
    });
    let options = GatewayOptions::new()
        .setting("upstream_http2_initial_stream_window_size", "256k")
        .setting("upstream_http2_initial_connection_window_size", "4m")
        .setting("upstream_http2_max_frame_size", "32k");
    let gw = Gateway::start(options).await;
    let mut cfg = strait_e2e::declarative::config(vec![]);
    cfg["services"] = serde_json::json!([{ "name": "g", "url": format!("grpc://{addr}"), "read_timeout": 500,
        "retries": 0, "routes": [{ "name": "g", "paths": ["/g"], "protocols": ["grpc"] }] }]);
    gw.apply(&cfg).await;
    let mut conn = strait_e2e::Conn::h2c(gw.proxy_addr()).await.expect("h2c");
    let headers = [("content-type", "application/grpc"), ("te", "trailers")];
    let _ = conn.send(strait_e2e::request("POST", "/g/Call", &headers, "")).await;
    let (settings, window) = tokio::time::timeout(Duration::from_secs(5), seen)
        .await
        .expect("the upstream saw Strait's SETTINGS")
        .expect("task");
    let value = |id: u16| settings.iter().find(|(key, _)| *key == id).map(|(_, v)| *v);
    assert_eq!(value(INITIAL_WINDOW_SIZE), Some(256 * 1024), "{settings:?}");
    assert_eq!(value(MAX_FRAME_SIZE), Some(32 * 1024), "{settings:?}");
    assert_eq!(window, Some(4 * 1024 * 1024 - 65_535));
}

/// With `http2_keepalive_interval` on, a client that stops answering PINGs is closed after
/// the interval and `http2_keepalive_timeout`; one that answers (the h2 crate does) stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_pings_close_clients_that_stop_answering() {
    let gw = Gateway::start(
        GatewayOptions::new()
            .setting("http2_keepalive_interval", "300ms")
            .setting("http2_keepalive_timeout", "300ms"),
    )
    .await;
    let mut silent = RawH2::connect(gw.proxy_addr()).await.expect("connect");
    let started = std::time::Instant::now();
    let outcome = silent.outcome(Duration::from_secs(5)).await;
    let closed_after = started.elapsed();
    assert!(
        matches!(outcome, strait_e2e::h2_raw::StreamOutcome::Closed),
        "{outcome:?}"
    );
    assert!(
        closed_after >= Duration::from_millis(550) && closed_after < Duration::from_secs(3),
        "{closed_after:?}"
    );

    let tcp = tokio::net::TcpStream::connect(gw.proxy_addr()).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let driver = tokio::spawn(connection);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut client = client.ready().await.expect("an answering client is kept");
    let request = http::Request::get("http://gateway/nowhere").body(()).expect("request");
    let (response, _) = client.send_request(request, true).expect("send");
    assert_eq!(response.await.expect("response").status(), 404);
    driver.abort();
}

const PING: u8 = 0x6;

/// SETTINGS and PING floods from a client that never reads the acknowledgements: the gateway
/// holds at most one unsent acknowledgement of each per connection and stops reading the
/// connection while it cannot write, so the flood is pushed back onto the attacker's socket;
/// gateway memory stays flat and other clients are served during the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_and_ping_floods_are_bounded() {
    use strait_e2e::h2_raw::{frame, SETTINGS};
    let gw = Gateway::start(GatewayOptions::new()).await;
    let rss_before = gw.rss_kib();
    let mut attacker = RawH2::connect(gw.proxy_addr()).await.expect("connect");
    let mut chunk = Vec::new();
    for n in 0..2000u64 {
        chunk.extend(frame(PING, 0, 0, &n.to_be_bytes()));
        chunk.extend(frame(SETTINGS, 0, 0, &[]));
    }
    let mut sent = 0usize;
    let mut pushed_back = false;
    // Up to 200 MB of control frames (8 million acknowledgements owed).
    while sent < 200 << 20 {
        match tokio::time::timeout(Duration::from_millis(500), attacker.send(&chunk)).await {
            Ok(Ok(())) => sent += chunk.len(),
            Ok(Err(_)) => break,
            Err(_) => {
                pushed_back = true;
                break;
            }
        }
    }
    eprintln!("control-frame flood: {sent} bytes taken before the gateway pushed back ({pushed_back})");
    assert!(pushed_back, "the gateway stopped reading the flood");
    assert!(sent < 64 << 20, "{sent} bytes of flood were read");
    // While the attacker holds its connection, stuck, others are served at once.
    let started = std::time::Instant::now();
    let mut other = RawH2::connect(gw.proxy_addr()).await.expect("connect");
    assert!(
        !other.server_settings(Duration::from_secs(1)).await.0.is_empty(),
        "others are served during the flood"
    );
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    let grown = gw.rss_kib().saturating_sub(rss_before);
    eprintln!("control-frame flood: RSS +{grown} KiB");
    assert!(grown < 16 * 1024, "gateway memory grew by {grown} KiB");
    drop(attacker);
}
