//! The client-facing HTTP/1.1 codec (strait-proxy/src/wire/h1_server.rs) on a real socket:
//! `Expect: 100-continue`, pipelined requests, HTTP/1.0 keep-alive, chunked uploads and
//! responses, and a request body nobody read. The smuggling, limits, timeouts, upgrade and
//! connection-age suites cover the rest.

use std::time::Duration;

use serde_json::json;
use strait_e2e::{Gateway, GatewayOptions, RawConn, Upstream, UpstreamKind};

async fn gateway_to(origin: &Upstream) -> Gateway {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&json!({
        "_format_version": "3.0",
        "services": [
            { "name": "app", "url": origin.url("http"), "routes": [
                { "name": "all", "paths": ["/"] },
                { "name": "closed", "paths": ["/closed"],
                  "plugins": [{ "name": "request-termination", "config": { "status_code": 403, "message": "no" } }] }
            ] }
        ]
    }))
    .await;
    gw
}

const WAIT: Duration = Duration::from_secs(5);

/// Responses read one at a time off a raw connection, keeping what arrived past each.
struct Responses {
    raw: RawConn,
    read: Vec<u8>,
}

impl Responses {
    fn new(raw: RawConn) -> Responses {
        Responses { raw, read: Vec::new() }
    }

    async fn more(&mut self) {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(WAIT, self.raw.stream_mut().read(&mut buf))
            .await
            .expect("bytes in time")
            .expect("read");
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&self.read));
        self.read.extend_from_slice(&buf[..n]);
    }

    /// The next response: its head, then a `Content-Length` body (none for a `100`).
    async fn next(&mut self) -> String {
        let head_end = loop {
            if let Some(at) = self.read.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            self.more().await;
        };
        let head = String::from_utf8_lossy(&self.read[..head_end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        while self.read.len() < head_end + length {
            self.more().await;
        }
        let whole: Vec<u8> = self.read.drain(..head_end + length).collect();
        String::from_utf8_lossy(&whole).into_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_answered_before_the_body_is_sent() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    raw.write(b"POST /echo/continue HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        .await
        .expect("write head");
    let mut responses = Responses::new(raw);
    let interim = responses.next().await;
    assert_eq!(interim, "HTTP/1.1 100 Continue\r\n\r\n");
    responses.raw.write(b"abcde").await.expect("write body");
    let reply = responses.next().await;
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(reply.contains(r#""body":"abcde""#), "{reply}");
}

/// A plugin answers without reading the body: no `100 Continue`, the answer, and a closed
/// connection (what the client would send next is an unread body, not a request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_body_gets_the_answer_and_a_closed_connection() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    raw.write(b"POST /closed HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        .await
        .expect("write head");
    let reply = raw.read_until_close(WAIT).await;
    let text = reply.text();
    assert_eq!(reply.status(), Some(403), "{text}");
    assert!(!text.contains("100 Continue"), "{text}");
    assert!(text.to_ascii_lowercase().contains("connection: close\r\n"), "{text}");
    assert!(reply.closed, "closed after the answer");
    assert_eq!(origin.requests(), Vec::<String>::new());
}

/// The same without `Expect`: the body arrived with the head, so it is read and dropped, and the
/// connection carries the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_body_already_sent_is_discarded_and_the_connection_kept() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    let raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    let mut responses = Responses::new(raw);
    responses
        .raw
        .write(b"POST /closed HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nabcde")
        .await
        .expect("write");
    let reply = responses.next().await;
    assert!(reply.starts_with("HTTP/1.1 403 "), "{reply}");
    assert!(!reply.to_ascii_lowercase().contains("connection: close"), "{reply}");
    responses
        .raw
        .write(b"GET /echo/after HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .expect("write");
    let reply = responses.next().await;
    assert!(reply.contains(r#""path":"/echo/after""#), "{reply}");
    assert_eq!(origin.requests(), vec!["GET /echo/after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    raw.write(
        b"GET /echo/one HTTP/1.1\r\nHost: a\r\n\r\n\
          POST /echo/two HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nxyz\
          GET /echo/three HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .await
    .expect("write");
    let mut responses = Responses::new(raw);
    for (path, body) in [("/echo/one", ""), ("/echo/two", "xyz"), ("/echo/three", "")] {
        let reply = responses.next().await;
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{path}: {reply}");
        assert!(reply.contains(&format!(r#""path":"{path}""#)), "{path}: {reply}");
        assert!(reply.contains(&format!(r#""body":"{body}""#)), "{path}: {reply}");
    }
    assert_eq!(
        origin.requests(),
        vec!["GET /echo/one", "POST /echo/two", "GET /echo/three"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_clients_get_http10_answers_and_keep_alive_only_when_asked() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    let mut responses = Responses::new(RawConn::connect(gw.proxy_addr()).await.expect("connect"));
    for n in 1..=2 {
        responses
            .raw
            .write(b"GET /echo/ten HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n")
            .await
            .expect("write");
        let reply = responses.next().await;
        assert!(reply.starts_with("HTTP/1.0 200 OK\r\n"), "request {n}: {reply}");
        assert!(
            reply.to_ascii_lowercase().contains("connection: keep-alive\r\n"),
            "request {n}: {reply}"
        );
    }
    let mut raw = responses.raw;
    raw.write(b"GET /echo/ten HTTP/1.0\r\nHost: a\r\n\r\n")
        .await
        .expect("write");
    let reply = raw.read_until_close(WAIT).await;
    assert!(reply.text().starts_with("HTTP/1.0 200 OK\r\n"), "{}", reply.text());
    assert!(reply.closed, "HTTP/1.0 without keep-alive closes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_upload_arrives_whole_and_a_date_is_always_sent() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    raw.write(b"POST /echo/chunks HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        .await
        .expect("first chunk");
    tokio::time::sleep(Duration::from_millis(100)).await;
    raw.write(b"4;ext=1\r\ndefg\r\n0\r\nx-trailer: t\r\n\r\n")
        .await
        .expect("rest");
    let mut responses = Responses::new(raw);
    let reply = responses.next().await;
    assert!(reply.contains(r#""body":"abcdefg""#), "{reply}");
    assert!(reply.to_ascii_lowercase().contains("\r\ndate: "), "{reply}");
    // The connection carries the next request; a gateway-made answer has a date too.
    responses
        .raw
        .write(b"GET /closed HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .expect("write");
    let reply = responses.next().await;
    assert!(reply.starts_with("HTTP/1.1 403 "), "{reply}");
    assert!(reply.to_ascii_lowercase().contains("\r\ndate: "), "{reply}");
}
