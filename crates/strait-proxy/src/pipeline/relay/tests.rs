use super::*;

fn scan(head: &[u8]) -> Option<Relayed> {
    scan_head(head)
}

fn lines(relayed: &Relayed) -> String {
    let mut out = BytesMut::new();
    relayed.head.put_lines(&mut out);
    String::from_utf8(out.to_vec()).expect("ASCII")
}

#[test]
fn a_usual_head_is_relayed_in_its_own_bytes_without_its_hop_by_hop_fields() {
    let relayed = scan(
        b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sat, 28 Nov 2026 03:30:00 GMT\r\n\
          Content-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\
          Keep-Alive: timeout=5\r\nX-Trace: a\r\n\r\nok",
    )
    .expect("relayed");
    assert_eq!(
        lines(&relayed),
        "Server: nginx/1.22.1\r\nDate: Sat, 28 Nov 2026 03:30:00 GMT\r\nContent-Type: text/plain\r\n\
         Content-Length: 2\r\nX-Trace: a\r\n"
    );
    assert_eq!(relayed.head.count, 2, "one run before Connection, one after Keep-Alive");
    assert!(relayed.head.has_server && relayed.head.has_date);
    assert_eq!(relayed.length.value(), Some(2));
    assert!(relayed.keep_alive && !relayed.close);
}

#[test]
fn connection_close_is_noted_and_left_out() {
    let relayed = scan(b"HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n").expect("relayed");
    assert!(relayed.close);
    assert_eq!(lines(&relayed), "content-length: 0\r\n");
    assert!(!relayed.head.has_server && !relayed.head.has_date);
}

#[test]
fn heads_only_the_map_handles_are_refused() {
    for head in [
        // Framed anew, or not by a single valid length.
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\n",
        // Fields that are removed or replaced by name.
        b"HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Kong-Upstream-Latency: 7\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Accel-Buffering: no\r\nContent-Length: 0\r\n\r\n",
        // Not written `name: value` CRLF, or a value outside ASCII.
        b"HTTP/1.1 200 OK\r\nContent-Type:text/plain\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type:  text/plain\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\nX-A: b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Latin: caf\xe9\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n",
        // More separate runs than a relayed head keeps.
        b"HTTP/1.1 200 OK\r\nA: 1\r\nTE: x\r\nB: 2\r\nUpgrade: x\r\nC: 3\r\nKeep-Alive: 1\r\nD: 4\r\n\
          Proxy-Connection: x\r\nContent-Length: 0\r\n\r\n",
    ] {
        assert!(scan(head).is_none(), "{}", String::from_utf8_lossy(head));
    }
    // Four runs are kept.
    let four = scan(
        b"HTTP/1.1 200 OK\r\nA: 1\r\nTE: x\r\nB: 2\r\nUpgrade: x\r\nC: 3\r\nKeep-Alive: 1\r\nContent-Length: 0\r\n\r\n",
    )
    .expect("relayed");
    assert_eq!(lines(&four), "A: 1\r\nB: 2\r\nC: 3\r\nContent-Length: 0\r\n");
}

#[test]
fn the_fields_are_the_map_of_the_kept_lines_in_order() {
    let relayed = scan(
        b"HTTP/1.1 404 Not Found\r\nSet-Cookie: a=1\r\nConnection: keep-alive\r\nset-cookie: b=2\r\n\
          Content-Length: 5\r\nVia: 1.1 edge\r\n\r\n",
    )
    .expect("relayed");
    let map = relayed.head.fields();
    let cookies: Vec<_> = map.get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
    assert_eq!(map["content-length"], "5");
    assert_eq!(map["via"], "1.1 edge");
    assert!(!map.contains_key("connection"));
    assert_eq!(map.len(), 4);
}
