//! Self-test of the harness, without the gateway: upstreams, clients and TLS helpers talk to each
//! other directly. If these fail, the other tests' failures say nothing about Strait.

use std::time::Duration;

use http::Version;
use strait_e2e::{
    get, refusing_addr, request, send_h1, Alpn, Conn, RawConn, TestCa, TlsOptions, Trust, Upstream, UpstreamKind,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_echo_over_http1_and_h2c() {
    for kind in [UpstreamKind::Http1, UpstreamKind::Auto] {
        let up = Upstream::start(kind).await;
        let reply = send_h1(up.addr(), request("POST", "/echo/x?q=1", &[("x-a", "1")], "body"))
            .await
            .unwrap();
        let echo = reply.json();
        assert_eq!(echo["path"], "/echo/x?q=1");
        assert_eq!(echo["method"], "POST");
        assert_eq!(echo["body"], "body");
        assert_eq!(echo["version"], "HTTP/1.1");
        assert_eq!(echo["headers"]["x-a"], "1");
        assert_eq!(up.hits(), 1);
    }
    for kind in [UpstreamKind::H2c, UpstreamKind::Auto] {
        let up = Upstream::start(kind).await;
        let mut conn = Conn::h2c(up.addr()).await.unwrap();
        let reply = conn.send(get("/echo")).await.unwrap();
        assert_eq!(reply.version, Version::HTTP_2);
        assert_eq!(reply.json()["version"], "HTTP/2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_special_paths() {
    let up = Upstream::start(UpstreamKind::H2c).await;
    let mut conn = Conn::h2c(up.addr()).await.unwrap();
    let reply = conn
        .send(request("POST", "/trailers", &[("te", "trailers")], ""))
        .await
        .unwrap();
    assert_eq!(reply.text(), "trailers body");
    assert_eq!(reply.trailer("grpc-status").as_deref(), Some("0"));
    assert_eq!(reply.trailer("x-trailer").as_deref(), Some("yes"));
    assert_eq!(reply.header("x-received-te").as_deref(), Some("trailers"));
    assert_eq!(conn.send(get("/status/418")).await.unwrap().status, 418);
    assert_eq!(conn.send(get("/big?bytes=200000")).await.unwrap().body.len(), 200_000);
    assert!(
        conn.send(get("/reset")).await.is_err(),
        "reset must surface as an error"
    );
    let started = std::time::Instant::now();
    assert_eq!(conn.send(get("/slow?ms=300")).await.unwrap().status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
    let hang = tokio::time::timeout(Duration::from_millis(300), conn.send(get("/hang"))).await;
    assert!(hang.is_err(), "/hang must not answer");

    let h1 = Upstream::start(UpstreamKind::Http1).await;
    assert!(
        send_h1(h1.addr(), get("/reset")).await.is_err(),
        "HTTP/1.1 reset must surface as an error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_upstream_negotiates_alpn() {
    for (alpn, offer, expected) in [
        (Alpn::H2, &[b"h2".as_slice()][..], Version::HTTP_2),
        (Alpn::Http1, &[b"http/1.1".as_slice()][..], Version::HTTP_11),
        (
            Alpn::Both,
            &[b"h2".as_slice(), b"http/1.1".as_slice()][..],
            Version::HTTP_2,
        ),
    ] {
        let up = Upstream::start(UpstreamKind::Tls(alpn)).await;
        let pem = up.ca_pem.clone().unwrap();
        let options = TlsOptions::new(Some("localhost"), offer, Trust::CaPem(pem));
        let mut conn = Conn::tls(up.addr(), &options)
            .await
            .expect("verified against its own certificate");
        let reply = conn.send(get("/echo")).await.unwrap();
        assert_eq!(reply.version, expected, "{alpn:?}");
        let anything = TlsOptions::new(None, offer, Trust::Anything);
        assert!(Conn::tls(up.addr(), &anything).await.is_ok());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_ca_issues_verifiable_certificates() {
    let ca = TestCa::new("harness ca");
    let leaf = ca.issue(&["secure.test"]);
    let config = strait_e2e::tls::server_config(&leaf, &[b"http/1.1"]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _tls = acceptor.accept(tcp).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            });
        }
    });
    let good = TlsOptions::new(Some("secure.test"), &[b"http/1.1"], Trust::CaPem(ca.cert_pem()));
    let conn = Conn::tls(addr, &good).await.expect("leaf verifies against the CA");
    assert_eq!(conn.tls.as_ref().unwrap().peer_certificates[0], leaf.cert_der);
    let wrong_name = TlsOptions::new(Some("other.test"), &[b"http/1.1"], Trust::CaPem(ca.cert_pem()));
    assert!(Conn::tls(addr, &wrong_name).await.is_err(), "name mismatch must fail");
    let other_ca = TestCa::new("other ca");
    let wrong_ca = TlsOptions::new(Some("secure.test"), &[b"http/1.1"], Trust::CaPem(other_ca.cert_pem()));
    assert!(Conn::tls(addr, &wrong_ca).await.is_err(), "unknown CA must fail");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_connection_reads_status_and_close() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let mut raw = RawConn::connect(up.addr()).await.unwrap();
    raw.write(b"GARBAGE\r\n\r\n").await.unwrap();
    let reply = raw.read_until_close(Duration::from_secs(5)).await;
    assert_eq!(reply.status(), Some(400), "{:?}", reply.text());
    assert!(reply.closed);
    let mut raw = RawConn::connect(up.addr()).await.unwrap();
    raw.write(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let head = raw.read_head(Duration::from_secs(5)).await.unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(RawConn::connect(refusing_addr()).await.is_err());
}

#[test]
fn free_ports_differ() {
    let a = strait_e2e::free_port();
    let b = strait_e2e::free_port();
    assert!(a > 0 && b > 0);
}
