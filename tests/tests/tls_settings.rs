//! Kong's TLS settings on the proxy and the Admin API: `ssl_cipher_suite` profiles,
//! `custom` with `ssl_protocols`/`ssl_ciphers`/`ssl_prefer_server_ciphers`, session resumption,
//! the Admin API over TLS with an optional client-certificate requirement, and settings that
//! cannot be honoured refused at start with the setting named.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::ring::cipher_suite as suites;
use rustls::version::{TLS12, TLS13};
use rustls::{ClientConfig, HandshakeKind, ProtocolVersion, SupportedCipherSuite};
use strait_e2e::tls::custom_client_config;
use strait_e2e::{run_strait, Gateway, GatewayOptions, LeafCert, TempDir, TestCa};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ALL_SUITES: [SupportedCipherSuite; 5] = [
    suites::TLS13_AES_128_GCM_SHA256,
    suites::TLS13_CHACHA20_POLY1305_SHA256,
    suites::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    suites::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
];

#[derive(Debug)]
struct Handshake {
    version: Option<ProtocolVersion>,
    suite: Option<SupportedCipherSuite>,
    kind: Option<HandshakeKind>,
    /// The first line of the answer to `GET <path>`.
    status_line: String,
}

/// A TLS handshake with `config`, then `GET path` over HTTP/1.1, reading the answer (which also
/// takes in TLS 1.3 session tickets).
async fn handshake(addr: SocketAddr, config: &Arc<ClientConfig>, path: &str) -> Result<Handshake, String> {
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut stream = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .map_err(|_| "handshake timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let (version, suite, kind) = {
        let (_, session) = stream.get_ref();
        (
            session.protocol_version(),
            session.negotiated_cipher_suite(),
            session.handshake_kind(),
        )
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    let status_line = text.lines().next().unwrap_or("").to_string();
    Ok(Handshake {
        version,
        suite,
        kind,
        status_line,
    })
}

fn client(
    versions: &[&'static rustls::SupportedProtocolVersion],
    suites: &[SupportedCipherSuite],
) -> Arc<ClientConfig> {
    custom_client_config(versions, suites, None, &[b"http/1.1"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intermediate_by_default_modern_is_tls13_only() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let tls12 = handshake(gw.proxy_tls_addr(), &client(&[&TLS12], &ALL_SUITES), "/")
        .await
        .expect("TLS 1.2");
    assert_eq!(tls12.version, Some(ProtocolVersion::TLSv1_2));
    let tls13 = handshake(gw.proxy_tls_addr(), &client(&[&TLS13], &ALL_SUITES), "/")
        .await
        .expect("TLS 1.3");
    assert_eq!(tls13.version, Some(ProtocolVersion::TLSv1_3));
    assert!(tls13.status_line.starts_with("HTTP/1.1 404"), "{}", tls13.status_line);

    let modern = Gateway::start(GatewayOptions::new().setting("ssl_cipher_suite", "modern")).await;
    let refused = handshake(modern.proxy_tls_addr(), &client(&[&TLS12], &ALL_SUITES), "/").await;
    assert!(refused.is_err(), "TLS 1.2 refused under modern: {refused:?}");
    let tls13 = handshake(modern.proxy_tls_addr(), &client(&[&TLS13], &ALL_SUITES), "/")
        .await
        .expect("TLS 1.3");
    assert_eq!(tls13.version, Some(ProtocolVersion::TLSv1_3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_protocols_ciphers_and_server_preference() {
    let options = |prefer: &str| {
        GatewayOptions::new()
            .setting("ssl_cipher_suite", "custom")
            .setting("ssl_protocols", "TLSv1.2")
            .setting(
                "ssl_ciphers",
                "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256",
            )
            .setting("ssl_prefer_server_ciphers", prefer)
    };
    let gw = Gateway::start(options("on")).await;
    let addr = gw.proxy_tls_addr();
    assert!(
        handshake(addr, &client(&[&TLS13], &ALL_SUITES), "/").await.is_err(),
        "TLS 1.3 not listed"
    );
    let chacha_only = [suites::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256];
    assert!(
        handshake(addr, &client(&[&TLS12], &chacha_only), "/").await.is_err(),
        "cipher not listed"
    );
    // The client prefers AES-128; the server's order (AES-256 first) wins when preferred.
    let client_order = [
        suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        suites::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ];
    let chosen = handshake(addr, &client(&[&TLS12], &client_order), "/")
        .await
        .expect("handshake");
    assert_eq!(chosen.suite, Some(suites::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384));
    let gw = Gateway::start(options("off")).await;
    let chosen = handshake(gw.proxy_tls_addr(), &client(&[&TLS12], &client_order), "/")
        .await
        .expect("handshake");
    assert_eq!(
        chosen.suite,
        Some(suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
        "client order when not preferred"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_resume_with_tickets_and_without() {
    for (tickets, versions) in [("on", [&TLS13]), ("on", [&TLS12]), ("off", [&TLS12])] {
        let gw = Gateway::start(GatewayOptions::new().setting("ssl_session_tickets", tickets)).await;
        let config = client(&versions, &ALL_SUITES);
        let first = handshake(gw.proxy_tls_addr(), &config, "/").await.expect("first");
        assert_eq!(first.kind, Some(HandshakeKind::Full));
        let second = handshake(gw.proxy_tls_addr(), &config, "/").await.expect("second");
        assert_eq!(
            second.kind,
            Some(HandshakeKind::Resumed),
            "tickets {tickets}, {:?}",
            second.version
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_over_tls_with_optional_client_certificates() {
    let dir = TempDir::new();
    let ca = TestCa::new("admin clients");
    let server = LeafCert::self_signed(&["localhost"]);
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path.display().to_string()
    };
    let (cert, key, client_ca) = (
        write("admin.crt", &server.cert_pem),
        write("admin.key", &server.key_pem),
        write("ca.crt", &ca.cert_pem()),
    );
    let port = strait_e2e::free_port();
    let listen = format!("127.0.0.1:{port} ssl");
    let admin_tls = SocketAddr::from(([127, 0, 0, 1], port));
    let plain = Gateway::start(
        GatewayOptions::new()
            .extra_admin_listen(&listen)
            .setting("admin_ssl_cert", &cert)
            .setting("admin_ssl_cert_key", &key),
    )
    .await;
    let anyone = client(&[&TLS13], &ALL_SUITES);
    let root = handshake(admin_tls, &anyone, "/").await.expect("admin over TLS");
    assert!(root.status_line.starts_with("HTTP/1.1 200"), "{}", root.status_line);
    drop(plain);

    let port = strait_e2e::free_port();
    let listen = format!("127.0.0.1:{port} ssl");
    let admin_tls = SocketAddr::from(([127, 0, 0, 1], port));
    let _mtls = Gateway::start(
        GatewayOptions::new()
            .extra_admin_listen(&listen)
            .setting("admin_ssl_client_ca", &client_ca),
    )
    .await;
    let refused = handshake(admin_tls, &anyone, "/").await;
    assert!(
        refused.as_ref().map_or(true, |h| h.status_line.is_empty()),
        "no certificate, no answer: {refused:?}"
    );
    let member = ca.issue(&["operator"]);
    let with_cert = custom_client_config(&[&TLS13], &ALL_SUITES, Some(&member), &[b"http/1.1"]);
    let root = handshake(admin_tls, &with_cert, "/")
        .await
        .expect("with a client certificate");
    assert!(root.status_line.starts_with("HTTP/1.1 200"), "{}", root.status_line);
    let stranger = LeafCert::self_signed(&["stranger"]);
    let with_other = custom_client_config(&[&TLS13], &ALL_SUITES, Some(&stranger), &[b"http/1.1"]);
    let refused = handshake(admin_tls, &with_other, "/").await;
    assert!(
        refused.as_ref().map_or(true, |h| h.status_line.is_empty()),
        "a certificate from another CA: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_tls_cannot_honour_are_refused_at_start() {
    for (key, value, expected) in [
        ("ssl_cipher_suite", "old", "ssl_cipher_suite: 'old'"),
        ("ssl_cipher_suite", "strong", "ssl_cipher_suite: expected"),
        (
            "ssl_protocols",
            "TLSv1.1 TLSv1.2",
            "ssl_protocols: TLSv1.1 is not supported",
        ),
        (
            "ssl_prefer_server_ciphers",
            "maybe",
            "ssl_prefer_server_ciphers: expected on or off",
        ),
        (
            "ssl_verify_client",
            "optional",
            "ssl_verify_client = optional needs ssl_client_ca",
        ),
        (
            "ssl_verify_client",
            "maybe",
            "ssl_verify_client: expected off, optional or on",
        ),
        (
            "admin_ssl_cert",
            "/nonexistent.crt",
            "admin_ssl_cert and admin_ssl_cert_key",
        ),
    ] {
        let dir = TempDir::new();
        let conf = dir.path().join("strait.conf");
        let mut text = format!("prefix = {}\n{key} = {value}\n", dir.path().join("data").display());
        if key == "ssl_protocols" {
            text.push_str("ssl_cipher_suite = custom\n");
        }
        std::fs::write(&conf, text).expect("conf");
        let out = run_strait(&["start", "--conf", conf.to_str().expect("path")], dir.path(), &[]).await;
        assert_ne!(out.code, Some(0), "{key} = {value} must not start");
        assert!(out.all().contains(expected), "{key} = {value}: {}", out.all());
    }
}
