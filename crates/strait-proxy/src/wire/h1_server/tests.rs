use super::*;
use http::header::HeaderName;

fn limits() -> ClientLimits {
    ClientLimits {
        max_header_bytes: 256,
        max_headers: 4,
        ..ClientLimits::default()
    }
}

fn parse(input: &[u8]) -> Result<Option<Parsed>, ErrorKind> {
    let mut buf = BytesMut::from(input);
    parse_request(&mut buf, &limits(), &mut Vec::new())
}

#[test]
fn a_head_becomes_a_request_sharing_its_bytes() {
    let mut buf = BytesMut::from(&b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-Two: 2\r\n\r\nnext"[..]);
    let parsed = parse_request(&mut buf, &limits(), &mut Vec::new())
        .expect("valid")
        .expect("complete");
    assert_eq!(&buf[..], b"next", "the head is taken off the buffer");
    let request = &parsed.request;
    assert_eq!(request.method(), Method::GET);
    assert_eq!(request.uri(), "/a?b=1");
    assert_eq!(request.headers()["host"], "x");
    assert_eq!(request.headers()["x-two"], "2");
    assert_eq!(parsed.kind, BodyKind::Length(0));
    assert!(parsed.keep_alive && !parsed.expect_continue && !parsed.upgrade);
    assert!(parse(b"GET / HTTP/1.1\r\nHost: x\r\n").expect("valid").is_none());
}

#[test]
fn keep_alive_follows_the_version_and_connection() {
    let keep = |head: &[u8]| parse(head).expect("valid").expect("complete").keep_alive;
    assert!(!keep(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    assert!(!keep(b"GET / HTTP/1.0\r\n\r\n"));
    assert!(keep(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
}

#[test]
fn framing_is_settled_or_refused() {
    let kind = |head: &[u8]| parse(head).map(|p| p.expect("complete").kind);
    assert_eq!(
        kind(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n"),
        Ok(BodyKind::Length(3))
    );
    assert_eq!(
        kind(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n"),
        Ok(BodyKind::Chunked)
    );
    // Refused as nginx refuses them (tests/differential/): a coding list, both lengths, a
    // repeated length even when equal, a tab before a framing value, no Host on HTTP/1.1.
    for refused in [
        &b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\t3\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n",
        b"get / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET http://u@x/ HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        assert_eq!(
            kind(refused).err(),
            Some(ErrorKind::BadRequest),
            "{:?}",
            String::from_utf8_lossy(refused)
        );
    }
    assert_eq!(
        kind(b"TRACE / HTTP/1.1\r\nHost: x\r\n\r\n").err(),
        Some(ErrorKind::MethodNotAllowed)
    );
    for refused in [
        &b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A: b\r\n folded\r\n\r\n",
    ] {
        assert_eq!(
            kind(refused).err(),
            Some(ErrorKind::BadRequest),
            "{:?}",
            String::from_utf8_lossy(refused)
        );
    }
}

#[test]
fn limits_on_count_and_size_are_431() {
    let many = b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\ne: 5\r\n\r\n";
    assert_eq!(parse(many).err(), Some(ErrorKind::HeadersTooLarge));
    let big = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(300));
    assert_eq!(parse(big.as_bytes()).err(), Some(ErrorKind::HeadersTooLarge));
}

fn encode(status: StatusCode, headers: &[(&str, &str)], body: ProxyBody, meta: Meta) -> (String, Framing, bool) {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map.insert(header::DATE, HeaderValue::from_static("now"));
    let mut keep_alive = true;
    let mut out = BytesMut::new();
    let framing = encode_head(status, &mut map, None, &body, &meta, &mut keep_alive, &mut out);
    (String::from_utf8(out.to_vec()).unwrap(), framing, keep_alive)
}

/// A body of unknown length.
struct Unsized;

impl Body for Unsized {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(None)
    }
}

fn meta(version: Version) -> Meta {
    Meta {
        version,
        head: false,
        trailers: false,
    }
}

#[test]
fn response_heads_carry_their_framing() {
    let (head, framing, keep) = encode(
        StatusCode::OK,
        &[],
        crate::pipeline::body::full("abc"),
        meta(Version::HTTP_11),
    );
    assert_eq!(head, "HTTP/1.1 200 OK\r\ndate: now\r\ncontent-length: 3\r\n\r\n");
    assert_eq!((framing, keep), (Framing::Length(3), true));
    let streamed = crate::pipeline::body::boxed(Unsized);
    let (head, framing, _) = encode(StatusCode::OK, &[], streamed, meta(Version::HTTP_11));
    assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
    assert_eq!(framing, Framing::Chunked);
    let streamed = crate::pipeline::body::boxed(Unsized);
    let (head, framing, keep) = encode(StatusCode::OK, &[], streamed, meta(Version::HTTP_10));
    assert!(
        head.starts_with("HTTP/1.0 200 OK\r\n") && !head.contains("keep-alive"),
        "{head}"
    );
    assert_eq!((framing, keep), (Framing::Close, false));
    let (head, _, keep) = encode(
        StatusCode::NOT_FOUND,
        &[("connection", "close"), ("content-length", "2")],
        crate::pipeline::body::full("no"),
        meta(Version::HTTP_11),
    );
    assert_eq!(head.matches("close").count(), 1, "{head}");
    assert!(!keep);
    let (head, framing, _) = encode(
        StatusCode::OK,
        &[("content-length", "10")],
        crate::pipeline::body::empty(),
        Meta {
            head: true,
            ..meta(Version::HTTP_11)
        },
    );
    assert!(head.contains("content-length: 10\r\n"), "HEAD keeps the length: {head}");
    assert_eq!(framing, Framing::Empty);
}

/// A head's lines with names in lower case, for comparing heads whose
/// names were written in other cases.
fn lowered(head: &str) -> Vec<String> {
    head.split("\r\n")
        .map(|line| match line.split_once(": ") {
            Some((name, value)) => format!("{}: {value}", name.to_ascii_lowercase()),
            None => line.to_string(),
        })
        .collect()
}

#[test]
fn a_relayed_head_goes_out_as_its_map_would() {
    let upstream = &b"HTTP/1.1 200 OK\r\nServer: origin\r\nDate: Sat, 28 Nov 2026 03:30:00 GMT\r\n\
        Content-Type: text/plain\r\nConnection: keep-alive\r\nContent-Length: 2\r\nX-Up: 1\r\n\r\n"[..];
    let undated = &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"[..];
    let id = crate::pipeline::kong_headers::RequestId::new();
    let kong = |relayed: Option<&crate::pipeline::relay::Relayed>| {
        let mut fields = KongFields::default();
        fields.via = true;
        fields.server = true;
        fields.set_upstream_latency(3);
        fields.set_proxy_latency(0);
        fields.set_request_id(&id);
        fields.relayed = relayed.map(|relayed| Box::new(relayed.head.clone()));
        fields
    };
    let cases = [
        (upstream, true, meta(Version::HTTP_11)),
        (upstream, false, meta(Version::HTTP_11)),
        (undated, true, meta(Version::HTTP_11)),
        // Relayed lines the encoder cannot pass on as they are go
        // through the map.
        (upstream, true, meta(Version::HTTP_10)),
        (
            upstream,
            true,
            Meta {
                head: true,
                ..meta(Version::HTTP_11)
            },
        ),
    ];
    for (bytes, keep, meta) in cases {
        let relayed = crate::pipeline::relay::scan_head(bytes).expect("relayed");
        // What the proxy added to the map after the head was parsed.
        let cookie = HeaderValue::from_static("lb=1");
        let encode = |fields: &KongFields, map: &mut HeaderMap| {
            let mut keep_alive = keep;
            let mut out = BytesMut::new();
            let framing = encode_head(
                StatusCode::OK,
                map,
                Some(fields),
                &crate::pipeline::body::full("ok"),
                &meta,
                &mut keep_alive,
                &mut out,
            );
            (String::from_utf8(out.to_vec()).unwrap(), framing, keep_alive)
        };
        let mut added = HeaderMap::new();
        added.append(header::SET_COOKIE, cookie.clone());
        let by_relay = encode(&kong(Some(&relayed)), &mut added);
        let mut map = relayed.head.fields();
        map.append(header::SET_COOKIE, cookie);
        let by_map = encode(&kong(None), &mut map);
        let date_of = |head: &str| head.lines().find(|l| l.starts_with("date: ")).map(str::to_string);
        if bytes == undated {
            // Each made its own `Date`; they may fall on two seconds.
            assert!(date_of(&by_relay.0).is_some(), "{}", by_relay.0);
            let drop_date = |head: &str| {
                lowered(head)
                    .into_iter()
                    .filter(|l| !l.starts_with("date: "))
                    .collect::<Vec<_>>()
            };
            assert_eq!(drop_date(&by_relay.0), drop_date(&by_map.0));
        } else {
            assert_eq!(lowered(&by_relay.0), lowered(&by_map.0), "{meta:?}");
        }
        assert_eq!((by_relay.1, by_relay.2), (by_map.1, by_map.2));
        assert!(by_relay.0.contains("set-cookie: lb=1\r\n"), "{}", by_relay.0);
        assert_eq!(
            by_relay.0.contains("server: strait"),
            bytes == undated,
            "{}",
            by_relay.0
        );
        if meta.version == Version::HTTP_11 && !meta.head {
            // The upstream's own spelling went out.
            assert!(by_relay.0.contains("Content-Length: 2\r\n"), "{}", by_relay.0);
        }
    }
}
