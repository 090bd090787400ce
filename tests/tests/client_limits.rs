//! Misbehaving clients: malformed request lines (400), oversized or too many headers (431),
//! headers that never complete (408 or a plain close), byte-by-byte trickling. Each gets a closed
//! connection, and the gateway keeps serving others.

use std::time::{Duration, Instant};

use strait_e2e::client::tls_stream;
use strait_e2e::declarative::{answering, config, route, terminating_service};
use strait_e2e::{get, Gateway, GatewayOptions, RawConn, TlsOptions, Trust};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CLOSE_WAIT: Duration = Duration::from_secs(5);

async fn gateway(options: GatewayOptions) -> Gateway {
    let gw = Gateway::start(options).await;
    gw.apply(&config(vec![terminating_service(
        "ok",
        vec![answering(route("ok", &["/ok"]), "ok")],
    )]))
    .await;
    gw
}

async fn assert_still_serving(gw: &Gateway) {
    let reply = gw.proxy(get("/ok")).await;
    assert_eq!((reply.status.as_u16(), reply.message()), (200, Some("ok".to_string())));
}

/// Sends `bytes` on a fresh connection and expects `status`, then a close.
async fn expect_status_and_close(gw: &Gateway, bytes: &[u8], status: u16) {
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    // The gateway may stop reading early; what it answered is still readable.
    let _ = raw.write(bytes).await;
    let reply = raw.read_until_close(CLOSE_WAIT).await;
    assert_eq!(reply.status(), Some(status), "reply: {:?}", reply.text());
    assert!(reply.closed, "connection must be closed after {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_line_is_400_and_closed() {
    let gw = gateway(GatewayOptions::new()).await;
    expect_status_and_close(&gw, b"GET /ok HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400).await;
    expect_status_and_close(&gw, b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", 400).await;
    assert_still_serving(&gw).await;
}

/// First bytes that are not HTTP, on the plain port (HTTP/1.1 and h2c) and on the TLS port
/// without ALPN `h2`. Only the exact HTTP/2 preface selects h2c.
const NOT_HTTP: [&[u8]; 7] = [
    b"GARBAGE / NOT-HTTP\r\n\r\n",
    b"GET / FOO/1.1\r\n\r\n",
    b"GET\r\n\r\n",
    b"GARBAGE\r\n\r\n",
    b"INVALID CONNECTION PREFACE\r\n\r\n",
    b"GET /ok HTTQ/1.1\r\nHost: x\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
];

/// Kong's 400: `{"message":"Bad request", ...}` as JSON, then a closed connection.
fn assert_kong_400(reply: &strait_e2e::client::RawReply, sent: &[u8]) {
    let sent = String::from_utf8_lossy(sent);
    assert_eq!(reply.status(), Some(400), "{sent:?}: {:?}", reply.text());
    assert!(reply.closed, "{sent:?}: the connection must be closed after the 400");
    let text = reply.text();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    assert!(
        head.to_ascii_lowercase().contains("content-type: application/json"),
        "{sent:?}: {head}"
    );
    let body: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{sent:?}: {e}: {body}"));
    assert_eq!(body["message"], "Bad request", "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_bytes_that_are_not_http_get_kongs_400_on_the_plain_port() {
    let gw = gateway(GatewayOptions::new()).await;
    for bytes in NOT_HTTP {
        let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
        let _ = raw.write(bytes).await;
        assert_kong_400(&raw.read_until_close(CLOSE_WAIT).await, bytes);
    }
    // The 400 ends in a reset, not a FIN: an HTTP/2 client that sent a bad preface reads the
    // answer as a frame header announcing megabytes, and only the reset ends its wait.
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    raw.write(b"INVALID CONNECTION PREFACE\r\n\r\n").await.expect("write");
    let mut answer = Vec::new();
    let ended = tokio::time::timeout(CLOSE_WAIT, raw.stream_mut().read_to_end(&mut answer)).await;
    let ended = ended.expect("the connection ends");
    assert_eq!(
        ended.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        answer.starts_with(b"HTTP/1.1 400 "),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    // The exact preface is still HTTP/2 prior knowledge.
    let h2c = strait_e2e::send_h2c(gw.proxy_addr(), get("/ok")).await.expect("h2c");
    assert_eq!(h2c.status, 200);
    assert_eq!(h2c.version, http::Version::HTTP_2);
    assert_still_serving(&gw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_bytes_that_are_not_http_get_kongs_400_on_the_tls_port() {
    let gw = gateway(GatewayOptions::new()).await;
    for alpn in [&[b"http/1.1".as_slice()][..], &[]] {
        for bytes in NOT_HTTP {
            let options = TlsOptions::new(Some("localhost"), alpn, Trust::Anything);
            let mut tls = tls_stream(gw.proxy_tls_addr(), &options).await.expect("TLS");
            let _ = tls.write_all(bytes).await;
            let mut read = Vec::new();
            let closed = tokio::time::timeout(CLOSE_WAIT, tls.read_to_end(&mut read))
                .await
                .is_ok();
            let reply = strait_e2e::client::RawReply { bytes: read, closed };
            assert_kong_400(&reply, bytes);
        }
    }
    assert_still_serving(&gw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_over_configured_size_are_431() {
    let gw = gateway(GatewayOptions::new().setting("client_max_header_size", "4096")).await;
    let small = format!("GET /ok HTTP/1.1\r\nHost: x\r\nX-Fill: {}\r\n\r\n", "a".repeat(2000));
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    raw.write(small.as_bytes()).await.expect("write");
    let head = raw
        .read_head(CLOSE_WAIT)
        .await
        .expect("response to a request under the limit");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    let big = format!("GET /ok HTTP/1.1\r\nHost: x\r\nX-Fill: {}\r\n\r\n", "a".repeat(5000));
    expect_status_and_close(&gw, big.as_bytes(), 431).await;
    assert_still_serving(&gw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_over_default_size_are_431() {
    let gw = gateway(GatewayOptions::new()).await;
    let big = format!("GET /ok HTTP/1.1\r\nHost: x\r\nX-Fill: {}\r\n\r\n", "a".repeat(40_000));
    expect_status_and_close(&gw, big.as_bytes(), 431).await;
    assert_still_serving(&gw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_headers_are_431() {
    let gw = gateway(GatewayOptions::new()).await;
    let many = |count: usize| {
        let mut text = String::from("GET /ok HTTP/1.1\r\nHost: x\r\n");
        for i in 0..count {
            text.push_str(&format!("X-H{i}: v\r\n"));
        }
        text.push_str("\r\n");
        text
    };
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    raw.write(many(50).as_bytes()).await.expect("write");
    let head = raw.read_head(CLOSE_WAIT).await.expect("response to 51 headers");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    expect_status_and_close(&gw, many(120).as_bytes(), 431).await;
    assert_still_serving(&gw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_header_count_limit() {
    let gw = gateway(GatewayOptions::new().setting("client_max_headers", "10")).await;
    let mut text = String::from("GET /ok HTTP/1.1\r\nHost: x\r\n");
    for i in 0..15 {
        text.push_str(&format!("X-H{i}: v\r\n"));
    }
    text.push_str("\r\n");
    expect_status_and_close(&gw, text.as_bytes(), 431).await;
    assert_still_serving(&gw).await;
}

/// Reads until close; asserts it happened between `min` and `max`, and that anything sent was a 408.
async fn expect_timeout_close(mut raw: RawConn, started: Instant, min: Duration, max: Duration) {
    let reply = raw.read_until_close(max + Duration::from_secs(2)).await;
    let took = started.elapsed();
    assert!(reply.closed, "connection still open after {took:?}");
    assert!(
        took >= min && took <= max,
        "closed after {took:?}, expected {min:?}..{max:?}"
    );
    if !reply.bytes.is_empty() {
        assert_eq!(reply.status(), Some(408), "reply: {:?}", reply.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_headers_time_out() {
    let gw = gateway(GatewayOptions::new().setting("client_header_timeout", "500ms")).await;
    let started = Instant::now();
    let mut partial = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    partial.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n").await.expect("write");
    let silent = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    // Meanwhile others are served promptly.
    assert_still_serving(&gw).await;
    expect_timeout_close(partial, started, Duration::from_millis(400), Duration::from_secs(3)).await;
    expect_timeout_close(silent, started, Duration::from_millis(400), Duration::from_secs(3)).await;
    assert_still_serving(&gw).await;
}

/// A kept connection waits `client_header_timeout` for its next request. A limit of a second or
/// more is timed from the coarse clock (crates/strait-proxy/src/wire/deadline.rs), which must never
/// close the connection early: here the clock starts after the response, later than `started`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_waits_its_whole_second_long_header_timeout() {
    let gw = gateway(GatewayOptions::new().setting("client_header_timeout", "1s")).await;
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    let started = Instant::now();
    raw.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("write");
    let head = raw.read_head(CLOSE_WAIT).await.expect("a response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    expect_timeout_close(raw, started, Duration::from_secs(1), Duration::from_millis(2_500)).await;
}

/// One header byte every 100 ms keeps the connection busy but never completes the head: the
/// timeout covers the whole head, not each read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_headers_time_out() {
    let gw = gateway(GatewayOptions::new().setting("client_header_timeout", "500ms")).await;
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    let started = Instant::now();
    let head = format!("GET /ok HTTP/1.1\r\nHost: x\r\nX-Slow: {}", "z".repeat(200));
    let mut closed_after = None;
    for byte in head.as_bytes() {
        if raw.write(&[*byte]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let reply = raw.read_until_close(Duration::from_millis(100)).await;
        if reply.closed {
            if !reply.bytes.is_empty() {
                assert_eq!(reply.status(), Some(408), "reply: {:?}", reply.text());
            }
            closed_after = Some(started.elapsed());
            break;
        }
        if !reply.bytes.is_empty() {
            assert_eq!(reply.status(), Some(408), "unexpected reply: {:?}", reply.text());
        }
    }
    let took = closed_after.expect("trickling client was never cut off");
    assert!(took < Duration::from_secs(3), "cut off only after {took:?}");
    assert_still_serving(&gw).await;
}
