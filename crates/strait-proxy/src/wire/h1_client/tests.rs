use super::*;
use crate::wire::h1_codec::find_double_crlf;
use http::Request;

fn head(bytes: &[u8]) -> Result<Option<Parsed>, ProxyError> {
    parse_head(&mut BytesMut::from(bytes), &mut Vec::new(), false)
}

/// Each field of a map in order, as text.
fn listed(map: &HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(name, value)| (name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect()
}

#[test]
fn a_relayed_head_holds_the_fields_and_framing_the_map_would() {
    let relayed = [
        &b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sat, 28 Nov 2026 03:30:00 GMT\r\n\
           Content-Type: application/octet-stream\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n"[..],
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\n\
          Keep-Alive: timeout=5\r\nConnection: Keep-Alive\r\nVIA: 1.1 edge\r\n\r\n",
        b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\nx-a: spaced  value\r\nX_Odd.Name~!: 1\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/1.0 201 Created\r\nConnection: keep-alive\r\nContent-Length: 3\r\nLocation: /x\r\n\r\n",
        b"HTTP/1.1 299 Whatever\r\nTE: x\r\nContent-Length: 1\r\nUpgrade: x\r\nProxy-Connection: y\r\n\r\n",
    ];
    for bytes in relayed {
        let text = String::from_utf8_lossy(bytes);
        let by_map = parse_head(&mut BytesMut::from(bytes), &mut Vec::new(), false)
            .unwrap()
            .unwrap();
        let mut buf = BytesMut::from(bytes);
        let by_relay = parse_head(&mut buf, &mut Vec::new(), true).unwrap().unwrap();
        let lines = by_relay
            .relayed
            .as_ref()
            .unwrap_or_else(|| panic!("not relayed: {text}"));
        assert!(by_relay.response.headers().is_empty(), "{text}");
        assert!(by_map.relayed.is_none());
        assert_eq!(listed(&lines.fields()), listed(by_map.response.headers()), "{text}");
        assert_eq!(by_relay.kind, by_map.kind, "{text}");
        assert_eq!(by_relay.keep_alive, by_map.keep_alive, "{text}");
        assert_eq!(by_relay.response.status(), by_map.response.status());
        assert_eq!(
            Some(lines.length),
            match by_map.kind {
                BodyKind::Length(n) => Some(n),
                _ => None,
            }
        );
        assert!(buf.is_empty(), "the head is taken off the buffer");
    }
    // Heads whose status, framing or fields only the map handles.
    for bytes in [
        &b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"[..],
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: X-Secret\r\nX-Secret: 1\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Kong-Proxy-Latency: 1\r\nContent-Length: 0\r\n\r\n",
        // httparse leaves whitespace around a value out of it: the line is
        // not the field's bytes.
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nx-a: \tb\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nx-a: b \r\n\r\n",
    ] {
        let parsed = parse_head(&mut BytesMut::from(bytes), &mut Vec::new(), true)
            .unwrap()
            .unwrap();
        assert!(parsed.relayed.is_none(), "{}", String::from_utf8_lossy(bytes));
    }
}

#[test]
fn framing_of_response_heads() {
    let kind = |bytes: &[u8]| head(bytes).unwrap().unwrap().kind;
    assert_eq!(
        kind(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n"),
        BodyKind::Length(12)
    );
    assert_eq!(
        kind(b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\n"),
        BodyKind::Length(5)
    );
    assert_eq!(
        kind(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"),
        BodyKind::Chunked
    );
    assert_eq!(
        kind(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n"),
        BodyKind::ChunkedOverLength
    );
    assert_eq!(
        kind(b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n"),
        BodyKind::Close
    );
    assert_eq!(kind(b"HTTP/1.1 200 OK\r\n\r\n"), BodyKind::Close);
    assert_eq!(
        kind(b"HTTP/1.1 204 No Content\r\ncontent-length: 3\r\n\r\n"),
        BodyKind::Length(0)
    );
    assert_eq!(kind(b"HTTP/1.1 304 Not Modified\r\n\r\n"), BodyKind::Length(0));
    assert!(head(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n").is_err());
    assert!(head(b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n").is_err());
    assert!(head(b"HTTP/1.1 200 OK\r\ncontent-length: 0x5\r\n\r\n").is_err());
    assert!(head(b"HTTP/1.1 200 OK\r\ncontent-le").unwrap().is_none());
    assert!(head(b"HTTP/1.1 2000 OK\r\n\r\n").is_err());
}

#[test]
fn hop_by_hop_fields_stay_out_of_the_map_and_still_decide_the_connection() {
    let parsed = head(
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\nX-Secret: 1\r\n\
          Proxy-Connection: x\r\nTE: trailers\r\nUpgrade: h2c\r\nX-Kept: yes\r\ncontent-length: 2\r\n\r\n",
    )
    .unwrap()
    .unwrap();
    let mut names: Vec<&str> = parsed.response.headers().keys().map(HeaderName::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["content-length", "x-kept"]);
    assert!(parsed.keep_alive);
    assert_eq!(parsed.kind, BodyKind::Length(2));
    let keep_alive = |bytes: &[u8]| head(bytes).unwrap().unwrap().keep_alive;
    assert!(!keep_alive(b"HTTP/1.1 200 OK\r\nConnection: Close\r\n\r\n"));
    assert!(keep_alive(b"HTTP/1.1 200 OK\r\n\r\n"));
    assert!(!keep_alive(b"HTTP/1.0 200 OK\r\n\r\n"));
    assert!(keep_alive(b"HTTP/1.0 200 OK\r\nconnection: Keep-Alive\r\n\r\n"));
    // Chunked framing is read from the field that is left out.
    let chunked = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(chunked.kind, BodyKind::Chunked);
    assert!(chunked.response.headers().is_empty());
    // A 101 keeps them all: the tunnel reads its `Upgrade`.
    let switching = head(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(switching.response.headers()[header::UPGRADE], "websocket");
    assert_eq!(switching.response.headers()[header::CONNECTION], "upgrade");
}

#[test]
fn head_values_keep_their_bytes_and_what_follows_stays() {
    let mut buf = BytesMut::from(&b"HTTP/1.1 201 Created\r\nX-A: one\r\nx-a: two\r\ncontent-length: 2\r\n\r\nhi"[..]);
    let parsed = parse_head(&mut buf, &mut Vec::new(), false).unwrap().unwrap();
    assert_eq!(parsed.response.status(), 201);
    let values: Vec<_> = parsed.response.headers().get_all("x-a").iter().collect();
    assert_eq!(values, ["one", "two"]);
    assert_eq!(&buf[..], b"hi");
}

#[test]
fn request_framing_as_hyper_sets_it() {
    let mut headers = HeaderMap::new();
    assert_eq!(
        request_framing(&mut headers, &crate::pipeline::body::empty()),
        Framing::None
    );
    assert!(headers.is_empty());
    let mut headers = HeaderMap::new();
    let body = crate::pipeline::body::full(Bytes::from_static(b"abc"));
    assert_eq!(request_framing(&mut headers, &body), Framing::Length(3));
    assert_eq!(headers[header::CONTENT_LENGTH], "3");
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("7"));
    assert_eq!(request_framing(&mut headers, &body), Framing::Length(7));
}

/// A raw origin: answers each request on a connection with the next
/// canned response; returns how many connections it accepted.
async fn origin(responses: Vec<&'static [u8]>) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        let mut responses = responses.into_iter();
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut seen = Vec::new();
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                let n = socket.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
                // One response per request head (the bodies here are tiny).
                while let Some(end) = find_double_crlf(&seen) {
                    let head = String::from_utf8_lossy(&seen[..end]).to_lowercase();
                    let body = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                    if seen.len() < end + 4 + body {
                        break;
                    }
                    seen.drain(..end + 4 + body);
                    let Some(response) = responses.next() else { return };
                    socket.write_all(response).await.unwrap();
                }
            }
        }
    });
    (addr, accepted)
}

/// `request` sent to `addr` through `pool`, with a 5 s connect and
/// write timeout and `read_timeout` for the head.
async fn dispatch(
    pool: &crate::upstream::Pool,
    addr: std::net::SocketAddr,
    request: Request<ProxyBody>,
    read_timeout: std::time::Duration,
) -> Result<Response<crate::upstream::UpstreamBody>, ProxyError> {
    let five = std::time::Duration::from_secs(5);
    let endpoint = crate::upstream::Endpoint {
        write_timeout: five,
        addr,
        http2: false,
        tls: None,
    };
    let lease = pool.acquire(&endpoint, five).await.unwrap();
    let send = crate::upstream::SendOptions {
        forwarding: None,
        read_timeout,
        relay: false,
    };
    pool.dispatch(lease, &endpoint, Box::new(request), send, five)
        .await
        .map(|(response, _)| response)
        .map_err(|f| f.error)
}

async fn exchange(
    pool: &crate::upstream::Pool,
    addr: std::net::SocketAddr,
    request: Request<ProxyBody>,
) -> (StatusCode, Bytes, Option<HeaderMap>) {
    use http_body_util::BodyExt;
    let response = dispatch(pool, addr, request, std::time::Duration::from_secs(5))
        .await
        .unwrap();
    let status = response.status();
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    (status, collected.to_bytes(), trailers)
}

#[tokio::test]
async fn chunked_bodies_trailers_and_informational_heads_then_the_connection_is_reused() {
    let (addr, accepted) = origin(vec![
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nx-t: 1\r\n\r\n",
        b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok",
        b"HTTP/1.1 204 No Content\r\n\r\n",
    ])
    .await;
    let pool = crate::upstream::Pool::default();
    let get = || Request::get("/a").body(crate::pipeline::body::empty()).unwrap();
    let (status, body, trailers) = exchange(&pool, addr, get()).await;
    assert_eq!(status, 200);
    assert_eq!(&body[..], b"abcde");
    assert_eq!(trailers.unwrap()["x-t"], "1");
    let post = Request::post("/b")
        .body(crate::pipeline::body::full(Bytes::from_static(b"hello")))
        .unwrap();
    let (status, body, _) = exchange(&pool, addr, post).await;
    assert_eq!((status, &body[..]), (StatusCode::CREATED, &b"ok"[..]));
    let (status, body, _) = exchange(&pool, addr, get()).await;
    assert_eq!((status, body.len()), (StatusCode::NO_CONTENT, 0));
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one kept-alive connection"
    );
    assert_eq!(pool.idle_http1(), 1);
}

/// One kept-alive connection's requests, answered after the given delays.
async fn slow_origin(delays: Vec<u64>) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        for delay in delays {
            let end = loop {
                if let Some(end) = find_double_crlf(&seen) {
                    break end;
                }
                let n = socket.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    return;
                }
                seen.extend_from_slice(&buf[..n]);
            };
            seen.drain(..end + 4);
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await;
        }
        let _ = socket.read(&mut buf).await;
    });
    addr
}

async fn timed(
    pool: &crate::upstream::Pool,
    addr: std::net::SocketAddr,
    read_timeout_ms: u64,
) -> Result<(), ProxyError> {
    use http_body_util::BodyExt;
    let request = Request::get("/").body(crate::pipeline::body::empty()).unwrap();
    let response = dispatch(pool, addr, request, std::time::Duration::from_millis(read_timeout_ms)).await?;
    response.into_body().collect().await.unwrap();
    Ok(())
}

#[tokio::test]
async fn the_read_timeout_counts_per_request_on_a_kept_connection() {
    // Answered at once under a short timeout (its timer stays set on the
    // connection), then slower than that timeout under a longer one (the
    // early timer must not end it), then slower than its own timeout.
    let addr = slow_origin(vec![0, 400, 2_000]).await;
    let pool = crate::upstream::Pool::default();
    timed(&pool, addr, 150).await.expect("answered at once");
    let started = std::time::Instant::now();
    timed(&pool, addr, 3_000).await.expect("within its own read_timeout");
    assert!(started.elapsed() >= std::time::Duration::from_millis(400));
    let started = std::time::Instant::now();
    let error = timed(&pool, addr, 300).await.expect_err("slower than its read_timeout");
    assert_eq!(error.kind, ErrorKind::UpstreamTimeout);
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(300) && waited < std::time::Duration::from_millis(1_500),
        "{waited:?}"
    );
}

#[tokio::test]
async fn a_body_that_came_with_its_head_frees_the_connection_before_it_is_read() {
    use http_body_util::BodyExt;
    let (addr, accepted) = origin(vec![
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nbye",
    ])
    .await;
    let pool = crate::upstream::Pool::default();
    for expect in [&b"hello"[..], &b"bye"[..]] {
        let request = Request::get("/").body(crate::pipeline::body::empty()).unwrap();
        let response = dispatch(&pool, addr, request, std::time::Duration::from_secs(5))
            .await
            .unwrap();
        // Back in the pool with the head: the body was all there.
        assert_eq!(pool.idle_http1(), 1);
        let body = response.into_body();
        assert!(body.is_whole());
        assert_eq!(body.size_hint().exact(), Some(expect.len() as u64));
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], expect);
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_head_larger_than_the_socket_takes_is_sent_whole() {
    let (addr, _) = origin(vec![
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nb",
    ])
    .await;
    let pool = crate::upstream::Pool::default();
    // Far more than loopback's socket buffers take in one write.
    let big = "x".repeat(4 << 20);
    let request = Request::get("/big")
        .header("x-big", big.as_str())
        .body(crate::pipeline::body::empty())
        .unwrap();
    let (status, body, _) = tokio::time::timeout(std::time::Duration::from_secs(20), exchange(&pool, addr, request))
        .await
        .expect("the whole head reached the origin");
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"a"[..]));
    let small = Request::get("/small").body(crate::pipeline::body::empty()).unwrap();
    let (status, body, _) = exchange(&pool, addr, small).await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"b"[..]));
}

#[tokio::test]
async fn a_response_read_to_the_close_is_not_kept_and_the_next_request_opens_a_connection() {
    let (addr, accepted) = origin(vec![
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\ny",
    ])
    .await;
    let pool = crate::upstream::Pool::default();
    let get = || Request::get("/").body(crate::pipeline::body::empty()).unwrap();
    assert_eq!(&exchange(&pool, addr, get()).await.1[..], b"x");
    assert_eq!(pool.idle_http1(), 0);
    assert_eq!(&exchange(&pool, addr, get()).await.1[..], b"y");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// The fuzz target's entry point reads heads and bodies of every framing to their end.
#[test]
fn response_bytes_are_read_to_their_end() {
    for data in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhell",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.0 200 OK\r\n\r\nuntil close",
        b"HTTP/1.1 999999 what\r\n\r\n",
        b"not http at all",
    ] {
        read_response_bytes(data);
    }
}
