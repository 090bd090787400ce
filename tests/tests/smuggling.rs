//! Request smuggling, in-house: requests whose framing two parsers could read differently.
//! Each is refused with 400 and a closed connection, or handled as RFC 9112 requires; in every
//! case the upstream sees at most the one request the client framed, never a smuggled
//! `/smuggled` behind it. The upstream records every request it receives.

use std::time::Duration;

use serde_json::json;
use strait_e2e::h2_raw::{frame, header_block, RawH2, StreamOutcome, DATA, END_HEADERS, END_STREAM, HEADERS};
use strait_e2e::{Gateway, GatewayOptions, RawConn, Upstream, UpstreamKind};

async fn gateway_to(origin: &Upstream) -> Gateway {
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&json!({
        "_format_version": "3.0",
        "services": [
            { "name": "app", "url": origin.url("http"), "routes": [{ "name": "all", "paths": ["/"] }] },
            {
                "name": "hosts", "url": "http://127.0.0.1:9",
                "routes": [
                    { "name": "a", "hosts": ["a.example"], "paths": ["/by-host"],
                      "plugins": [{ "name": "request-termination", "config": { "status_code": 200, "message": "host a" } }] },
                    { "name": "b", "hosts": ["b.example"], "paths": ["/by-host"],
                      "plugins": [{ "name": "request-termination", "config": { "status_code": 200, "message": "host b" } }] }
                ]
            }
        ]
    }))
    .await;
    gw
}

/// Writes `bytes` on a fresh connection; returns every byte answered and whether it closed.
async fn exchange(gw: &Gateway, bytes: &[u8]) -> (String, bool) {
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    let _ = raw.write(bytes).await;
    let reply = raw.read_until_close(Duration::from_secs(3)).await;
    (reply.text(), reply.closed)
}

fn smuggled(origin: &Upstream) -> Vec<String> {
    origin
        .requests()
        .into_iter()
        .filter(|r| r.contains("smuggled"))
        .collect()
}

/// Framing that must never be guessed at: 400, connection closed, upstream untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_framing_is_400_and_closed() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    let tail = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let cases: Vec<(&str, String)> = vec![
        ("TE not chunked", format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n{tail}")),
        ("space before colon", format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n{tail}")),
        ("chunked not last", format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{tail}")),
        ("TE twice", format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n{tail}")),
        ("TE on HTTP/1.0", format!("POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{tail}")),
        ("CL twice, different", format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc{tail}")),
        ("CL with sign", format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc{tail}")),
        ("CL negative", format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n{tail}")),
        ("CL inner space", format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 0\r\n\r\nabcdefghij{tail}")),
        ("CL list, different", format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 40\r\n\r\nabc{tail}")),
        ("obs-fold", format!("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n Transfer-Encoding: chunked\r\n\r\n{tail}")),
        ("NUL in value", format!("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n{tail}")),
        ("CR in value", format!("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n{tail}")),
        ("space in target", format!("GET /a {tail}")),
        ("oversize chunk size", format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\nabc\r\n0\r\n\r\n{tail}")),
        ("bad chunk size", format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3x\r\nabc\r\n0\r\n\r\n{tail}")),
    ];
    for (name, request) in cases {
        let (reply, closed) = exchange(&gw, request.as_bytes()).await;
        assert!(reply.starts_with("HTTP/1.1 400 "), "{name}: {reply:?}");
        assert_eq!(reply.matches("HTTP/1.1 ").count(), 1, "{name}: one response: {reply:?}");
        assert!(closed, "{name}: connection closed");
    }
    assert_eq!(smuggled(&origin), Vec::<String>::new());
    let reached: Vec<String> = origin.requests();
    assert!(
        reached.iter().all(|r| r == "POST /"),
        "only a chunked POST whose body failed mid-way may have started upstream: {reached:?}"
    );
}

/// Both lengths (CL.TE, TE.CL) and a repeated `Content-Length`, even with the same value, are
/// refused with 400 and a closed connection, as nginx refuses them (RFC 9112 §6.1 lets a server
/// reject them; tests/differential/ compares every such case with nginx). Nothing reaches the
/// upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_lengths_and_repeated_lengths_are_refused() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    let cl_te = "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n\
                 3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let te_cl = "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n\
                 3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let same = "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc";
    for (name, request) in [("CL.TE", cl_te), ("TE.CL", te_cl), ("CL twice", same)] {
        let (reply, closed) = exchange(&gw, request.as_bytes()).await;
        assert!(reply.starts_with("HTTP/1.1 400 "), "{name}: {reply:?}");
        assert_eq!(reply.matches("HTTP/1.1 ").count(), 1, "{name}: one answer: {reply:?}");
        assert!(closed, "{name}: closed after the answer");
    }
    assert_eq!(smuggled(&origin), Vec::<String>::new());
    assert!(origin.requests().is_empty(), "{:?}", origin.requests());
}

/// A bare LF ends lines (RFC 9112 §2.2 allows it); the request goes upstream re-framed with CRLF
/// and is answered at once instead of waiting out the header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_lf_heads_are_answered_at_once() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    let started = std::time::Instant::now();
    let mut raw = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    raw.write(b"GET /echo/lf HTTP/1.1\nHost: a\nConnection: close\n\n")
        .await
        .expect("write");
    let reply = raw.read_until_close(Duration::from_secs(5)).await;
    assert_eq!(reply.status(), Some(200), "{}", reply.text());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered without waiting: {:?}",
        started.elapsed()
    );
    assert_eq!(origin.requests(), vec!["GET /echo/lf"]);
}

/// Absolute-form: the authority in the request line names the host, the Host header is ignored
/// (RFC 9112 §3.2.2), so routing cannot be steered by a second, contradicting host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_routes_by_its_own_authority() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    for (target, host, expected) in [
        ("http://b.example/by-host", "a.example", "host b"),
        ("http://a.example/by-host", "b.example", "host a"),
        ("/by-host", "b.example", "host b"),
    ] {
        let request = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let (reply, _) = exchange(&gw, request.as_bytes()).await;
        assert!(reply.contains(expected), "{target} with Host {host}: {reply:?}");
    }
}

async fn h2_request(gw: &Gateway, fields: &[(&str, &str)], data: Option<&[u8]>) -> StreamOutcome {
    let mut conn = RawH2::connect(gw.proxy_addr()).await.expect("h2c connect");
    let block = header_block(fields);
    let flags = END_HEADERS | if data.is_none() { END_STREAM } else { 0 };
    conn.send(&frame(HEADERS, flags, 1, &block)).await.expect("headers");
    if let Some(body) = data {
        conn.send(&frame(DATA, END_STREAM, 1, body)).await.expect("data");
    }
    conn.outcome(Duration::from_secs(3)).await
}

fn request_fields<'a>(path: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut fields = vec![
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "a"),
    ];
    fields.extend_from_slice(extra);
    fields
}

/// A name, the request's header fields, and its DATA (none: END_STREAM on HEADERS).
type H2Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Option<&'a [u8]>);

fn refused(outcome: &StreamOutcome) -> bool {
    matches!(
        outcome,
        StreamOutcome::Reset(_) | StreamOutcome::GoAway(_) | StreamOutcome::Response(Some(400)) | StreamOutcome::Closed
    )
}

/// HTTP/2 requests that a downgrade to HTTP/1.1 could turn into two requests, or that are
/// malformed (RFC 9113 §8.2, §8.2.2, §8.1.1): refused, and nothing reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_malformed_requests_never_reach_the_upstream() {
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&origin).await;
    let smuggle = b"abcGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let cases: Vec<H2Case> = vec![
        (
            "content-length below DATA",
            request_fields("/echo", &[("content-length", "3")]),
            Some(smuggle),
        ),
        (
            "content-length above DATA",
            request_fields("/echo", &[("content-length", "100")]),
            Some(b"abc"),
        ),
        (
            "two content-lengths",
            request_fields("/echo", &[("content-length", "3"), ("content-length", "40")]),
            Some(smuggle),
        ),
        (
            "upper-case field name",
            request_fields("/echo", &[("X-Upper", "1")]),
            None,
        ),
        (
            "connection field",
            request_fields("/echo", &[("connection", "keep-alive")]),
            None,
        ),
        (
            "transfer-encoding field",
            request_fields("/echo", &[("transfer-encoding", "chunked")]),
            Some(b"3\r\nabc\r\n0\r\n\r\n"),
        ),
        (
            "te other than trailers",
            request_fields("/echo", &[("te", "gzip")]),
            None,
        ),
        (
            "keep-alive field",
            request_fields("/echo", &[("keep-alive", "timeout=5")]),
            None,
        ),
        (
            "no :path",
            vec![(":method", "GET"), (":scheme", "http"), (":authority", "a")],
            None,
        ),
    ];
    for (name, fields, data) in cases {
        let outcome = h2_request(&gw, &fields, data).await;
        assert!(refused(&outcome), "{name}: {outcome:?}");
    }
    assert_eq!(smuggled(&origin), Vec::<String>::new());
    let reached = origin.requests();
    assert!(
        reached.iter().all(|r| r == "POST /echo"),
        "only a request whose DATA contradicted its length mid-way may have started upstream: {reached:?}"
    );
    // The same connection kind with a well-formed request still works.
    let outcome = h2_request(&gw, &request_fields("/echo", &[("content-length", "3")]), Some(b"abc")).await;
    assert_eq!(outcome, StreamOutcome::Response(Some(200)));
}
