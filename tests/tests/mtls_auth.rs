//! Client-certificate authentication at the TLS listener (`ssl_verify_client`,
//! `ssl_client_ca`) and the `mtls-auth` plugin, beside `jwt`: one service with an
//! mTLS-only route, a JWT-only route, and a route that takes either (Kong's
//! "logical OR": both plugins with `anonymous`, and the anonymous consumer
//! refused by a request-termination scoped to it). Over HTTP/1.1 and, for a
//! gRPC stream, HTTP/2.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rustls::version::TLS13;
use rustls::ClientConfig;
use serde_json::{json, Value};
use strait_e2e::tls::custom_client_config;
use strait_e2e::{Gateway, GatewayOptions, LeafCert, TempDir, TestCa, Upstream, UpstreamKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SUITES: [rustls::SupportedCipherSuite; 1] = [rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256];

fn hs256(secret: &str, claims: Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(json!({ "typ": "JWT", "alg": "HS256" }).to_string());
    let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, input.as_bytes());
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
}

/// `GET path` over TLS with `config`; the status and body (`None` when the
/// handshake or the request failed).
async fn call(addr: SocketAddr, config: &Arc<ClientConfig>, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    let mut stream = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .ok()?
        .ok()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    Some((status, body))
}

struct Setup {
    gw: Gateway,
    _upstream: Upstream,
    ca: TestCa,
    _dir: TempDir,
}

const CLIENT_CA_ID: &str = "00000000-0000-4000-8000-0000000000c1";
const OTHER_CA_ID: &str = "00000000-0000-4000-8000-0000000000c2";

async fn setup(verify: &str) -> Setup {
    let ca = TestCa::new("Strait Test Client CA");
    let other = TestCa::new("Another CA");
    let dir = TempDir::new();
    let bundle = dir.path().join("client-ca.pem");
    std::fs::write(&bundle, ca.cert_pem()).expect("write CA");
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(
        GatewayOptions::new()
            .setting("ssl_verify_client", verify)
            .setting("ssl_client_ca", bundle.to_str().expect("path")),
    )
    .await;
    let anonymous = "00000000-0000-4000-8000-0000000000a1";
    let cfg = json!({
        "_format_version": "3.0",
        "services": [{ "name": "api", "url": upstream.url("http"), "routes": [
            { "name": "mtls", "paths": ["/mtls"], "plugins": [{ "name": "mtls-auth" }] },
            { "name": "jwt", "paths": ["/jwt"], "plugins": [{ "name": "jwt" }] },
            { "name": "pinned", "paths": ["/pinned"],
              "plugins": [{ "name": "mtls-auth", "config": { "ca_certificates": [CLIENT_CA_ID] } }] },
            { "name": "other-ca", "paths": ["/other-ca"],
              "plugins": [{ "name": "mtls-auth", "config": { "ca_certificates": [OTHER_CA_ID] } }] },
            { "name": "either", "paths": ["/either"], "plugins": [
                { "name": "mtls-auth", "config": { "anonymous": anonymous } },
                { "name": "jwt", "config": { "anonymous": anonymous } },
            ] },
        ] }],
        "ca_certificates": [
            { "id": CLIENT_CA_ID, "cert": ca.cert_pem() },
            { "id": OTHER_CA_ID, "cert": other.cert_pem() },
        ],
        "consumers": [
            { "username": "alice" },
            { "username": "robot", "custom_id": "build-bot.internal" },
            { "username": "jwt-user", "jwt_secrets": [{ "key": "jwt-issuer", "secret": "jwt-secret" }] },
            { "id": anonymous, "username": "anonymous",
              "plugins": [{ "name": "request-termination",
                            "config": { "status_code": 401, "message": "mTLS or JWT required" } }] },
        ],
    });
    gw.apply(&cfg).await;
    Setup {
        gw,
        _upstream: upstream,
        ca,
        _dir: dir,
    }
}

fn consumer_of(body: &str) -> Option<String> {
    let echo: Value = serde_json::from_str(body).ok()?;
    echo["headers"]["x-consumer-username"].as_str().map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_only_jwt_only_and_either_or_routes() {
    let s = setup("optional").await;
    let addr = s.gw.proxy_tls_addr();
    let alice = s.ca.issue(&["alice"]);
    // The consumer by custom_id, from a subject alternative name.
    let robot = s.ca.issue(&["worker-7", "build-bot.internal"]);
    let with_alice = custom_client_config(&[&TLS13], &SUITES, Some(&alice), &[b"http/1.1"]);
    let with_robot = custom_client_config(&[&TLS13], &SUITES, Some(&robot), &[b"http/1.1"]);
    let no_cert = custom_client_config(&[&TLS13], &SUITES, None, &[b"http/1.1"]);
    let token = hs256("jwt-secret", json!({ "iss": "jwt-issuer" }));

    // mTLS only.
    let (status, body) = call(addr, &with_alice, "/mtls/echo", None).await.expect("answer");
    assert_eq!(status, 200, "{body}");
    assert_eq!(consumer_of(&body).as_deref(), Some("alice"));
    let (status, body) = call(addr, &with_robot, "/mtls/echo", None).await.expect("answer");
    assert_eq!((status, consumer_of(&body).as_deref()), (200, Some("robot")), "{body}");
    let (status, body) = call(addr, &no_cert, "/mtls/echo", Some(&token)).await.expect("answer");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("No required TLS certificate was sent"), "{body}");

    // JWT only: a certificate is not enough.
    let (status, body) = call(addr, &no_cert, "/jwt/echo", Some(&token)).await.expect("answer");
    assert_eq!(
        (status, consumer_of(&body).as_deref()),
        (200, Some("jwt-user")),
        "{body}"
    );
    let (status, _) = call(addr, &with_alice, "/jwt/echo", None).await.expect("answer");
    assert_eq!(status, 401);

    // Either: a certificate, or a token, or refused.
    let (status, body) = call(addr, &with_alice, "/either/echo", None).await.expect("answer");
    assert_eq!((status, consumer_of(&body).as_deref()), (200, Some("alice")), "{body}");
    let (status, body) = call(addr, &no_cert, "/either/echo", Some(&token))
        .await
        .expect("answer");
    assert_eq!(
        (status, consumer_of(&body).as_deref()),
        (200, Some("jwt-user")),
        "{body}"
    );
    let (status, body) = call(addr, &no_cert, "/either/echo", None).await.expect("answer");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("mTLS or JWT required"), "{body}");

    // A certificate from another CA never completes the handshake.
    let stranger = LeafCert::self_signed(&["alice"]);
    let with_stranger = custom_client_config(&[&TLS13], &SUITES, Some(&stranger), &[b"http/1.1"]);
    assert_eq!(call(addr, &with_stranger, "/either/echo", Some(&token)).await, None);

    // `ca_certificates` narrows a route to what those CAs issued.
    for _ in 0..2 {
        let (status, body) = call(addr, &with_alice, "/pinned/echo", None).await.expect("answer");
        assert_eq!((status, consumer_of(&body).as_deref()), (200, Some("alice")), "{body}");
        let (status, body) = call(addr, &with_alice, "/other-ca/echo", None).await.expect("answer");
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("TLS certificate failed verification"), "{body}");
    }

    // A verified certificate naming no consumer is refused.
    let nobody = s.ca.issue(&["nobody"]);
    let with_nobody = custom_client_config(&[&TLS13], &SUITES, Some(&nobody), &[b"http/1.1"]);
    let (status, _) = call(addr, &with_nobody, "/mtls/echo", None).await.expect("answer");
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_stream_authenticates_by_its_certificate() {
    use strait_e2e::grpc::{frame, GrpcUpstream, Msg, SERVICE};
    let s = setup("optional").await;
    let upstream = GrpcUpstream::start().await;
    let mut cfg = strait_e2e::declarative::config(vec![]);
    cfg["services"] = json!([{ "name": "grpc", "url": upstream.url(), "routes": [
        { "name": "grpc", "paths": [format!("/{SERVICE}/")], "protocols": ["grpcs"], "strip_path": false,
          "plugins": [{ "name": "mtls-auth" }] }] }]);
    cfg["consumers"] = json!([{ "username": "alice" }]);
    s.gw.apply(&cfg).await;
    let alice = s.ca.issue(&["alice"]);
    let call = |identity: Option<LeafCert>| {
        let addr = s.gw.proxy_tls_addr();
        let identity_given = identity.as_ref().map(|_| ());
        async move {
            let config = custom_client_config(&[&TLS13], &SUITES, identity.as_ref(), &[b"h2"]);
            let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .expect("handshake");
            let (client, connection) = h2::client::handshake(tls).await.expect("h2");
            tokio::spawn(connection);
            let mut client = client.ready().await.expect("ready");
            let request = http::Request::post(format!("https://localhost/{SERVICE}/Ack"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .expect("request");
            let (response, mut body) = client.send_request(request, false).expect("send");
            for seq in 0..3 {
                let msg = Msg {
                    seq,
                    payload: bytes::Bytes::from_static(b"x"),
                };
                // A refused call may be answered (trailers-only, then the stream
                // closed) before all its messages are sent: the answer is what counts.
                if body.send_data(frame(&msg), seq == 2).is_err() {
                    assert!(identity_given.is_none(), "an authenticated call's stream closed early");
                    break;
                }
            }
            let response = response.await.expect("response");
            let head_status = response
                .headers()
                .get("grpc-status")
                .map(|v| v.to_str().unwrap_or("").to_string());
            let mut stream = response.into_body();
            let mut bytes = 0;
            while let Some(chunk) = stream.data().await {
                let chunk = chunk.expect("chunk");
                bytes += chunk.len();
                let _ = stream.flow_control().release_capacity(chunk.len());
            }
            let trailers = stream.trailers().await.ok().flatten();
            let status = head_status
                .or_else(|| trailers.and_then(|t| t.get("grpc-status").map(|v| v.to_str().unwrap_or("").to_string())));
            (status, bytes)
        }
    };
    let (status, bytes) = call(Some(alice)).await;
    assert_eq!(status.as_deref(), Some("0"));
    assert!(bytes >= 3 * 5, "three acks came back: {bytes} bytes");
    let (status, _) = call(None).await;
    assert_eq!(status.as_deref(), Some("16"), "UNAUTHENTICATED without a certificate");
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_verify_client_on_refuses_clients_without_a_certificate() {
    let s = setup("on").await;
    let addr = s.gw.proxy_tls_addr();
    let no_cert = custom_client_config(&[&TLS13], &SUITES, None, &[b"http/1.1"]);
    let token = hs256("jwt-secret", json!({ "iss": "jwt-issuer" }));
    assert_eq!(call(addr, &no_cert, "/jwt/echo", Some(&token)).await, None);
    let alice = s.ca.issue(&["alice"]);
    let with_alice = custom_client_config(&[&TLS13], &SUITES, Some(&alice), &[b"http/1.1"]);
    let (status, _) = call(addr, &with_alice, "/mtls/echo", None).await.expect("answer");
    assert_eq!(status, 200);
}
