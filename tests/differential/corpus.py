"""The HTTP/1 differential corpus: ambiguous and malformed requests, each a name and raw bytes.

Every case is built here from its parts (nothing is read from elsewhere), so the corpus is the
same on every run. `cases()` returns them in a fixed order; names are unique. Each case is sent
alone on a fresh connection; `/ok` marks what a proxy forwarding the request should ask the
origin for, `/smuggled` what must never reach it.
"""

from __future__ import annotations

HOST = b"Host: differential.test\r\n"


def req(head: bytes, body: bytes = b"") -> bytes:
    return head + body


def line(method: bytes = b"GET", target: bytes = b"/ok", version: bytes = b"HTTP/1.1") -> bytes:
    return method + b" " + target + b" " + version + b"\r\n"


def with_body(headers: bytes, body: bytes, method: bytes = b"POST") -> bytes:
    return line(method) + HOST + headers + b"\r\n" + body


def cases() -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []

    def add(name: str, raw: bytes) -> None:
        out.append((name, raw))

    smuggled = b"GET /smuggled HTTP/1.1\r\n" + HOST + b"\r\n"

    # --- baselines
    add("get", line() + HOST + b"\r\n")
    add("post-content-length", with_body(b"Content-Length: 5\r\n", b"hello"))
    add("post-chunked", with_body(b"Transfer-Encoding: chunked\r\n", b"5\r\nhello\r\n0\r\n\r\n"))
    add("head", line(b"HEAD") + HOST + b"\r\n")
    add("http10", line(version=b"HTTP/1.0") + HOST + b"\r\n")
    add("http10-no-host", line(version=b"HTTP/1.0") + b"\r\n")
    add("http11-no-host", line() + b"\r\n")

    # --- Content-Length values
    for label, value in [
        ("same-twice-list", b"5, 5"), ("different-list", b"5, 6"), ("plus", b"+5"), ("minus", b"-5"),
        ("leading-space", b" 5"), ("trailing-space", b"5 "), ("hex", b"0x5"), ("leading-zero", b"05"),
        ("decimal", b"5.0"), ("empty", b""), ("tab", b"\t5"), ("letters", b"five"), ("inner-space", b"5 5"),
        ("huge", b"99999999999999999999999"), ("u64-max", b"18446744073709551615"), ("comma-only", b","),
        ("trailing-comma", b"5,"), ("leading-comma", b",5"), ("nul", b"5\x00"), ("unicode-digit", "５".encode()),
        ("zero-body-extra", b"0"), ("short", b"3"), ("long", b"9"),
    ]:
        add(f"cl-{label}", with_body(b"Content-Length: " + value + b"\r\n", b"hello"))
    add("cl-twice-same", with_body(b"Content-Length: 5\r\nContent-Length: 5\r\n", b"hello"))
    add("cl-twice-different", with_body(b"Content-Length: 5\r\nContent-Length: 6\r\n", b"hello!"))
    add("cl-space-before-colon", with_body(b"Content-Length : 5\r\n", b"hello"))
    add("cl-tab-before-colon", with_body(b"Content-Length\t: 5\r\n", b"hello"))
    add("cl-upper", with_body(b"CONTENT-LENGTH: 5\r\n", b"hello"))
    add("cl-underscore", with_body(b"Content_Length: 5\r\n", b"hello"))
    add("cl-on-get", line() + HOST + b"Content-Length: 5\r\n\r\nhello")
    add("cl-smuggle-prefix", with_body(b"Content-Length: 0\r\n", smuggled))
    add("cl-too-short-smuggle", with_body(b"Content-Length: 4\r\n", b"helloGET /smuggled HTTP/1.1\r\n" + HOST + b"\r\n"))

    # --- Transfer-Encoding values
    chunked_body = b"5\r\nhello\r\n0\r\n\r\n"
    for label, value in [
        ("Chunked", b"Chunked"), ("CHUNKED", b"CHUNKED"), ("leading-space", b" chunked"),
        ("trailing-space", b"chunked "), ("tab", b"\tchunked"), ("xchunked", b"xchunked"),
        ("chunked-identity", b"chunked, identity"), ("identity-chunked", b"identity, chunked"),
        ("gzip-chunked", b"gzip, chunked"), ("chunked-gzip", b"chunked, gzip"), ("chunked-semicolon", b"chunked;"),
        ("chunked-param", b"chunked; q=1"), ("quoted", b'"chunked"'), ("identity", b"identity"),
        ("empty", b""), ("chunked-chunked", b"chunked, chunked"), ("comma-chunked", b", chunked"),
        ("chunked-comma", b"chunked,"), ("x-space-chunked", b"x chunked"), ("nul", b"chunked\x00"),
        ("vertical-tab", b"\x0bchunked"), ("form-feed", b"\x0cchunked"), ("unicode", "chunkеd".encode()),
        ("cow", b"cow"), ("deflate", b"deflate"),
    ]:
        add(f"te-{label}", with_body(b"Transfer-Encoding: " + value + b"\r\n", chunked_body))
    add("te-twice", with_body(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", chunked_body))
    add("te-identity-then-chunked", with_body(b"Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n", chunked_body))
    add("te-chunked-then-identity", with_body(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", chunked_body))
    add("te-space-before-colon", with_body(b"Transfer-Encoding : chunked\r\n", chunked_body))
    add("te-obs-fold", with_body(b"Transfer-Encoding:\r\n chunked\r\n", chunked_body))
    add("te-underscore", with_body(b"Transfer_Encoding: chunked\r\n", chunked_body))
    add("te-http10", line(b"POST", version=b"HTTP/1.0") + HOST + b"Transfer-Encoding: chunked\r\n\r\n" + chunked_body)
    add("te-on-get", line() + HOST + b"Transfer-Encoding: chunked\r\n\r\n" + chunked_body)
    add("te-upper-name", with_body(b"TRANSFER-ENCODING: chunked\r\n", chunked_body))

    # --- Content-Length with Transfer-Encoding
    add("cl-te", with_body(b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", chunked_body))
    add("te-cl", with_body(b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", chunked_body))
    add("cl-te-smuggle", with_body(b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n" + smuggled))
    add("te-cl-smuggle", with_body(b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", b"5\r\nhello\r\n0\r\n\r\n" + smuggled))
    add("cl-xchunked", with_body(b"Content-Length: 5\r\nTransfer-Encoding: xchunked\r\n", b"hello"))
    add("cl-te-identity", with_body(b"Content-Length: 5\r\nTransfer-Encoding: identity\r\n", b"hello"))

    # --- chunk sizes and extensions
    for label, body in [
        ("size-leading-zero", b"05\r\nhello\r\n0\r\n\r\n"), ("size-upper-hex", b"A\r\nhellohello\r\n0\r\n\r\n"),
        ("size-0x", b"0x5\r\nhello\r\n0\r\n\r\n"), ("size-space", b"5 \r\nhello\r\n0\r\n\r\n"),
        ("size-leading-space", b" 5\r\nhello\r\n0\r\n\r\n"), ("size-tab", b"5\t\r\nhello\r\n0\r\n\r\n"),
        ("size-minus", b"-5\r\nhello\r\n0\r\n\r\n"), ("size-plus", b"+5\r\nhello\r\n0\r\n\r\n"),
        ("size-huge", b"ffffffffffffffffff\r\nhello\r\n0\r\n\r\n"), ("size-u64", b"ffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
        ("size-letters", b"g\r\nhello\r\n0\r\n\r\n"), ("size-empty", b"\r\nhello\r\n0\r\n\r\n"),
        ("ext", b"5;ext\r\nhello\r\n0\r\n\r\n"), ("ext-value", b"5;a=b\r\nhello\r\n0\r\n\r\n"),
        ("ext-quoted", b'5;a="b c"\r\nhello\r\n0\r\n\r\n'), ("ext-space", b"5 ;a=b\r\nhello\r\n0\r\n\r\n"),
        ("ext-bare-lf", b"5;a\nb\r\nhello\r\n0\r\n\r\n"), ("ext-nul", b"5;a\x00\r\nhello\r\n0\r\n\r\n"),
        ("ext-long", b"5;" + b"a" * 5000 + b"\r\nhello\r\n0\r\n\r\n"),
        ("lf-after-size", b"5\nhello\r\n0\r\n\r\n"), ("lf-after-data", b"5\r\nhello\n0\r\n\r\n"),
        ("lf-last", b"5\r\nhello\r\n0\n\n"), ("cr-after-size", b"5\rhello\r\n0\r\n\r\n"),
        ("data-longer", b"3\r\nhello\r\n0\r\n\r\n"), ("data-shorter", b"7\r\nhello\r\n0\r\n\r\n"),
        ("no-crlf-after-data", b"5\r\nhello0\r\n\r\n"), ("no-last-chunk", b"5\r\nhello\r\n"),
        ("last-chunk-ext", b"5\r\nhello\r\n0;x=y\r\n\r\n"), ("last-chunk-000", b"5\r\nhello\r\n000\r\n\r\n"),
        ("trailer", b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n"),
        ("trailer-no-colon", b"5\r\nhello\r\n0\r\nbad trailer\r\n\r\n"),
        ("trailer-cl", b"5\r\nhello\r\n0\r\nContent-Length: 5\r\n\r\n"),
        ("trailer-obs-fold", b"5\r\nhello\r\n0\r\nX-T: 1\r\n 2\r\n\r\n"),
        ("smuggle-after-last", b"5\r\nhello\r\n0\r\n\r\n" + smuggled),
        ("two-chunks", b"2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n"), ("zero-only", b"0\r\n\r\n"),
    ]:
        add(f"chunk-{label}", with_body(b"Transfer-Encoding: chunked\r\n", body))

    # --- line endings and whitespace in the head
    add("lf-only", b"GET /ok HTTP/1.1\nHost: differential.test\n\n")
    add("lf-mixed", b"GET /ok HTTP/1.1\r\nHost: differential.test\n\r\n")
    add("cr-only", b"GET /ok HTTP/1.1\rHost: differential.test\r\r")
    add("cr-in-line", b"GET /ok\r HTTP/1.1\r\n" + HOST + b"\r\n")
    add("cr-in-header-value", line() + HOST + b"X-A: a\rb\r\n\r\n")
    add("cr-in-header-name", line() + HOST + b"X\rA: a\r\n\r\n")
    add("leading-crlf", b"\r\n" + line() + HOST + b"\r\n")
    add("leading-crlf-twice", b"\r\n\r\n" + line() + HOST + b"\r\n")
    add("leading-space-line", b" " + line() + HOST + b"\r\n")
    add("double-space-line", b"GET  /ok HTTP/1.1\r\n" + HOST + b"\r\n")
    add("tab-in-line", b"GET\t/ok HTTP/1.1\r\n" + HOST + b"\r\n")
    add("trailing-space-version", b"GET /ok HTTP/1.1 \r\n" + HOST + b"\r\n")
    add("space-before-header", line() + b" Host: differential.test\r\n\r\n")
    add("first-header-folded", line() + b" X-A: b\r\n" + HOST + b"\r\n")
    add("header-trailing-space-name", line() + HOST + b"X-A : b\r\n\r\n")
    add("header-no-colon", line() + HOST + b"X-A b\r\n\r\n")
    add("header-empty-name", line() + HOST + b": b\r\n\r\n")
    add("header-space-in-name", line() + HOST + b"X A: b\r\n\r\n")
    add("header-obs-fold", line() + HOST + b"X-A: a\r\n b\r\n\r\n")
    add("header-obs-fold-tab", line() + HOST + b"X-A: a\r\n\tb\r\n\r\n")
    add("header-nul-value", line() + HOST + b"X-A: a\x00b\r\n\r\n")
    add("header-nul-name", line() + HOST + b"X-\x00A: b\r\n\r\n")
    for code in [0x01, 0x08, 0x0b, 0x0c, 0x1b, 0x1f, 0x7f]:
        add(f"header-ctl-{code:02x}", line() + HOST + b"X-A: a" + bytes([code]) + b"b\r\n\r\n")
        add(f"name-ctl-{code:02x}", line() + HOST + b"X-" + bytes([code]) + b": b\r\n\r\n")
    add("header-high-bytes", line() + HOST + b"X-A: \xc3\xa9\xff\r\n\r\n")
    add("header-name-high-bytes", line() + HOST + b"X-\xc3\xa9: b\r\n\r\n")
    for separator in [b"(", b")", b"<", b">", b"@", b",", b";", b"\\", b'"', b"/", b"[", b"]", b"?", b"=", b"{", b"}"]:
        add(f"name-separator-{separator.hex()}", line() + HOST + b"X" + separator + b"A: b\r\n\r\n")
    add("header-long-value", line() + HOST + b"X-A: " + b"a" * 9000 + b"\r\n\r\n")
    add("header-huge-value", line() + HOST + b"X-A: " + b"a" * 70000 + b"\r\n\r\n")
    add("headers-many", line() + HOST + b"".join(b"X-%d: v\r\n" % i for i in range(300)) + b"\r\n")
    add("headers-no-end", line() + HOST)

    # --- request line: methods
    for method in [b"get", b"Get", b"G3T", b"GET_", b"GE T", b"FOO", b"PROPFIND", b"M-SEARCH", b"G\x00T", b"G\xc3\xa9T",
                   b"A" * 40, b"A" * 5000, b"", b"GET(", b"GET\"", b"CONNECT", b"TRACE", b"OPTIONS", b"DELETE", b"PATCH",
                   b"PRI", b"\x16\x03\x01"]:
        add(f"method-{method[:12].hex() or 'empty'}-{len(method)}", line(method) + HOST + b"\r\n")

    # --- request line: targets
    for label, target in [
        ("space", b"/o k"), ("tab", b"/o\tk"), ("nul", b"/o\x00k"), ("ctl", b"/o\x01k"), ("del", b"/o\x7fk"),
        ("high", b"/o\xc3\xa9k"), ("fragment", b"/ok#frag"), ("query", b"/ok?a=b"), ("percent-bad", b"/o%zzk"),
        ("percent-nul", b"/o%00k"), ("double-slash", b"//ok"), ("dot-dot", b"/../ok"), ("dot", b"/./ok"),
        ("backslash", b"/o\\k"), ("asterisk", b"*"), ("empty", b""), ("relative", b"ok"), ("at", b"@ok"),
        ("absolute", b"http://differential.test/ok"), ("absolute-other-host", b"http://other.test/ok"),
        ("absolute-https", b"https://differential.test/ok"), ("absolute-no-path", b"http://differential.test"),
        ("absolute-userinfo", b"http://user@differential.test/ok"), ("absolute-bad-scheme", b"ftp://differential.test/ok"),
        ("authority", b"differential.test:80"), ("long", b"/" + b"a" * 9000), ("huge", b"/" + b"a" * 70000),
        ("brackets", b"/[ok]"), ("braces", b"/{ok}"), ("pipe", b"/o|k"), ("caret", b"/o^k"), ("backtick", b"/o`k"),
        ("quote", b'/o"k'), ("angle", b"/<ok>"),
    ]:
        add(f"target-{label}", line(target=target) + HOST + b"\r\n")
    add("connect-authority", b"CONNECT differential.test:443 HTTP/1.1\r\n" + HOST + b"\r\n")
    add("options-asterisk", b"OPTIONS * HTTP/1.1\r\n" + HOST + b"\r\n")

    # --- versions
    for label, version in [
        ("1.2", b"HTTP/1.2"), ("2.0", b"HTTP/2.0"), ("3.0", b"HTTP/3.0"), ("0.9", b"HTTP/0.9"), ("lower", b"http/1.1"),
        ("01.1", b"HTTP/01.1"), ("1.10", b"HTTP/1.10"), ("1", b"HTTP/1"), ("1.", b"HTTP/1."), ("1.1.1", b"HTTP/1.1.1"),
        ("space", b"HTTP /1.1"), ("slashless", b"HTTP1.1"), ("empty", b""), ("junk", b"FOO/1.1"), ("9.9", b"HTTP/9.9"),
        ("1.x", b"HTTP/1.x"), ("unicode", "HTTP/１.1".encode()),
    ]:
        add(f"version-{label}", line(version=version) + HOST + b"\r\n")
    add("http09-simple", b"GET /ok\r\n")
    add("http09-simple-lf", b"GET /ok\n")

    # --- Host
    add("host-twice", line() + HOST + HOST + b"\r\n")
    add("host-twice-different", line() + HOST + b"Host: other.test\r\n\r\n")
    add("host-empty", line() + b"Host:\r\n\r\n")
    add("host-space", line() + b"Host: differential test\r\n\r\n")
    add("host-slash", line() + b"Host: differential.test/x\r\n\r\n")
    add("host-port", line() + b"Host: differential.test:8080\r\n\r\n")
    add("host-bad-port", line() + b"Host: differential.test:abc\r\n\r\n")
    add("host-userinfo", line() + b"Host: user@differential.test\r\n\r\n")
    add("host-ipv6", line() + b"Host: [::1]\r\n\r\n")
    add("host-ipv6-unclosed", line() + b"Host: [::1\r\n\r\n")
    add("host-nul", line() + b"Host: differ\x00ential.test\r\n\r\n")
    add("host-high", line() + b"Host: diff\xc3\xa9rential.test\r\n\r\n")
    add("host-underscore", line() + b"Host: differ_ential.test\r\n\r\n")
    add("host-trailing-dot", line() + b"Host: differential.test.\r\n\r\n")
    add("host-comma", line() + b"Host: a.test, b.test\r\n\r\n")

    # --- Expect
    add("expect-100", with_body(b"Content-Length: 5\r\nExpect: 100-continue\r\n", b"hello"))
    add("expect-100-upper", with_body(b"Content-Length: 5\r\nExpect: 100-Continue\r\n", b"hello"))
    add("expect-unknown", with_body(b"Content-Length: 5\r\nExpect: 200-ok\r\n", b"hello"))
    add("expect-100-http10", line(b"POST", version=b"HTTP/1.0") + HOST + b"Content-Length: 5\r\nExpect: 100-continue\r\n\r\nhello")
    add("expect-100-no-body", line() + HOST + b"Expect: 100-continue\r\n\r\n")

    # --- Connection and upgrade oddities
    add("connection-close", line() + HOST + b"Connection: close\r\n\r\n")
    add("connection-te", line() + HOST + b"Connection: TE\r\nTE: trailers\r\n\r\n")
    add("connection-names-cl", with_body(b"Content-Length: 5\r\nConnection: Content-Length\r\n", b"hello"))
    add("connection-names-host", line() + HOST + b"Connection: Host\r\n\r\n")
    add("upgrade-h2c", line() + HOST + b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
    add("upgrade-websocket-no-key", line() + HOST + b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n")

    # --- pipelining
    good = line() + HOST + b"\r\n"
    add("pipeline-two", good + good)
    add("pipeline-then-garbage", good + b"GARBAGE\r\n\r\n")
    add("pipeline-garbage-then-good", b"GARBAGE\r\n\r\n" + good)
    add("pipeline-bad-cl-then-smuggle", with_body(b"Content-Length: 5, 6\r\n", b"hello") + smuggled)
    add("pipeline-bad-te-then-smuggle", with_body(b"Transfer-Encoding: xchunked\r\n", b"0\r\n\r\n") + smuggled)
    add("pipeline-post-then-get", with_body(b"Content-Length: 5\r\n", b"hello") + good)
    add("pipeline-chunked-then-get", with_body(b"Transfer-Encoding: chunked\r\n", chunked_body) + good)
    add("pipeline-bare-lf-then-get", b"GET /ok HTTP/1.1\nHost: differential.test\n\n" + good)
    add("pipeline-http10-then-get", line(version=b"HTTP/1.0") + HOST + b"\r\n" + good)

    # --- not HTTP at all, and HTTP/2 prefaces
    add("garbage", b"GARBAGE\r\n\r\n")
    add("random-binary", bytes(range(256)))
    add("tls-client-hello", bytes.fromhex("16030100a5010000a10303") + b"\x00" * 32 + b"\r\n\r\n")
    add("ssh-banner", b"SSH-2.0-OpenSSH_9.0\r\n")
    add("h2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    add("h2-preface-truncated", b"PRI * HTTP/2.0\r\n\r\nSM\r\n")
    add("h2-preface-lower", b"pri * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    add("h2-preface-wrong-body", b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")
    add("h2-preface-http11", b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n")
    add("only-crlf", b"\r\n\r\n\r\n")
    add("empty-line-then-eof", b"\r\n")
    add("json", b'{"method":"GET"}\r\n\r\n')

    # --- HTTP/1.0 and more framing corners
    add("http10-keep-alive", line(version=b"HTTP/1.0") + HOST + b"Connection: keep-alive\r\n\r\n" + good)
    add("http10-post-no-length", line(b"POST", version=b"HTTP/1.0") + HOST + b"\r\nhello")
    add("http11-post-no-length", line(b"POST") + HOST + b"\r\nhello")
    add("cl-obs-fold", with_body(b"Content-Length:\r\n 5\r\n", b"hello"))
    add("cl-with-nul-name", with_body(b"Content-Length\x00: 5\r\n", b"hello"))
    add("chunk-size-underscore", with_body(b"Transfer-Encoding: chunked\r\n", b"0_5\r\nhello\r\n0\r\n\r\n"))
    add("chunk-size-64-digits", with_body(b"Transfer-Encoding: chunked\r\n", b"0" * 64 + b"5\r\nhello\r\n0\r\n\r\n"))
    add("te-trailing-comma-space", with_body(b"Transfer-Encoding: chunked , \r\n", chunked_body))
    add("te-list-in-two-lines-gzip", with_body(b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", chunked_body))
    add("get-with-body-no-length", line() + HOST + b"\r\nhello")
    return out


if __name__ == "__main__":
    corpus = cases()
    names = [name for name, _ in corpus]
    assert len(names) == len(set(names)), "duplicate case names"
    print(len(corpus))
