//! HTTP/2 and TLS: h2c and TLS+ALPN clients, HTTP/1.1 and HTTP/2 (grpc/grpcs) upstreams,
//! trailers end to end, SNI certificate choice, route `snis`, https upstreams and tls_verify.

use http::Version;
use serde_json::{json, Value};
use strait_e2e::declarative::{answering, config, route, service};
use strait_e2e::{request, Alpn, Conn, Gateway, GatewayOptions, TestCa, TlsOptions, Trust, Upstream, UpstreamKind};

/// A config with `certificate` serving `sni`, and an echo route for host `sni` to `upstream_url`.
fn tls_config(ca: &TestCa, sni: &str, upstream_url: &str) -> (Value, strait_e2e::LeafCert) {
    let leaf = ca.issue(&[sni]);
    let mut cfg = config(vec![service(
        "echo",
        upstream_url,
        vec![json!({ "name": "by-host", "hosts": [sni] })],
    )]);
    cfg["certificates"] = json!([{ "cert": leaf.cert_pem, "key": leaf.key_pem, "snis": [{ "name": sni }] }]);
    (cfg, leaf)
}

fn grpc_routes(paths: &[&str]) -> Value {
    json!({ "name": "grpc", "paths": paths, "protocols": ["grpc", "grpcs"], "strip_path": false })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_client_to_http1_upstream() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![service(
        "s",
        &up.url("http"),
        vec![route("r", &["/h2c"])],
    )]))
    .await;
    let mut conn = Conn::h2c(gw.proxy_addr()).await.expect("h2c connect");
    for i in 0..3 {
        let reply = conn
            .send(request("POST", "/h2c/echo", &[("host", "h.test")], format!("n{i}")))
            .await
            .expect("h2c request");
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.version, Version::HTTP_2);
        let echo = reply.json();
        assert_eq!(echo["version"], "HTTP/1.1");
        assert_eq!(echo["path"], "/echo");
        assert_eq!(echo["body"], format!("n{i}"));
    }
    assert_eq!(up.hits(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_h2c_reaches_http2_upstream_with_trailers() {
    let up = Upstream::start(UpstreamKind::H2c).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![service(
        "grpc",
        &up.url("grpc"),
        vec![grpc_routes(&["/trailers", "/echo.Service"])],
    )]))
    .await;
    let mut conn = Conn::h2c(gw.proxy_addr()).await.expect("h2c connect");
    let grpc_headers = [("content-type", "application/grpc"), ("te", "trailers")];
    let reply = conn
        .send(request("POST", "/trailers", &grpc_headers, "payload"))
        .await
        .expect("grpc request");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.text(), "trailers body");
    assert_eq!(
        reply.trailer("grpc-status").as_deref(),
        Some("0"),
        "trailers: {:?}",
        reply.trailers
    );
    assert_eq!(reply.trailer("x-trailer").as_deref(), Some("yes"));
    assert_eq!(
        reply.header("x-received-te").as_deref(),
        Some("trailers"),
        "te: trailers must reach the upstream"
    );

    let reply = conn
        .send(request("POST", "/echo.Service/Call", &grpc_headers, "abc"))
        .await
        .expect("grpc echo");
    let echo = reply.json();
    assert_eq!(echo["version"], "HTTP/2");
    assert_eq!(echo["path"], "/echo.Service/Call");
    assert_eq!(echo["body"], "abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_clients_negotiate_h2_or_http1_by_alpn() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let ca = TestCa::new("e2e ca");
    let gw = Gateway::start(GatewayOptions::new()).await;
    let (cfg, _) = tls_config(&ca, "secure.test", &up.url("http"));
    gw.apply(&cfg).await;
    let trust = Trust::CaPem(ca.cert_pem());
    // (ALPN offered, ALPN expected, HTTP version expected)
    type AlpnCase<'a> = (&'a [&'a [u8]], Option<&'a [u8]>, Version);
    let cases: [AlpnCase; 3] = [
        (&[b"h2", b"http/1.1"], Some(b"h2"), Version::HTTP_2),
        (&[b"http/1.1"], Some(b"http/1.1"), Version::HTTP_11),
        (&[], None, Version::HTTP_11),
    ];
    for (offer, expected_alpn, expected_version) in cases {
        let options = TlsOptions::new(Some("secure.test"), offer, trust.clone());
        let mut conn = Conn::tls(gw.proxy_tls_addr(), &options)
            .await
            .expect("TLS connect (verified against CA)");
        assert_eq!(conn.tls.as_ref().unwrap().alpn.as_deref(), expected_alpn);
        let reply = conn
            .send(request("GET", "/echo", &[("host", "secure.test")], ""))
            .await
            .expect("TLS request");
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.version, expected_version);
        let headers = &reply.json()["headers"];
        assert_eq!(headers["x-forwarded-proto"], "https");
        assert_eq!(headers["x-forwarded-port"], gw.ports().proxy_tls.to_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_selects_the_configured_certificate() {
    let up = Upstream::start(UpstreamKind::Http1).await;
    let ca = TestCa::new("e2e ca");
    let gw = Gateway::start(GatewayOptions::new()).await;
    let (cfg, leaf) = tls_config(&ca, "secure.test", &up.url("http"));
    gw.apply(&cfg).await;
    let peer = |conn: &Conn| {
        conn.tls
            .as_ref()
            .unwrap()
            .peer_certificates
            .first()
            .cloned()
            .expect("peer cert")
    };

    let verified = TlsOptions::new(Some("secure.test"), &[b"http/1.1"], Trust::CaPem(ca.cert_pem()));
    let conn = Conn::tls(gw.proxy_tls_addr(), &verified)
        .await
        .expect("configured certificate verifies");
    assert_eq!(peer(&conn), leaf.cert_der);

    let other = TlsOptions::new(Some("other.test"), &[b"http/1.1"], Trust::Anything);
    let conn = Conn::tls(gw.proxy_tls_addr(), &other)
        .await
        .expect("default certificate served");
    assert_ne!(
        peer(&conn),
        leaf.cert_der,
        "unknown SNI must get the default certificate"
    );

    let no_sni = TlsOptions::new(None, &[b"http/1.1"], Trust::Anything);
    let conn = Conn::tls(gw.proxy_tls_addr(), &no_sni)
        .await
        .expect("default certificate without SNI");
    assert_ne!(peer(&conn), leaf.cert_der);

    let other_verified = TlsOptions::new(Some("other.test"), &[b"http/1.1"], Trust::CaPem(ca.cert_pem()));
    assert!(
        Conn::tls(gw.proxy_tls_addr(), &other_verified).await.is_err(),
        "the default certificate must not verify against the test CA"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_match_on_sni() {
    let ca = TestCa::new("e2e ca");
    let gw = Gateway::start(GatewayOptions::new()).await;
    let (mut cfg, _) = tls_config(&ca, "secure.test", strait_e2e::declarative::NOWHERE_URL);
    cfg["services"][0]["routes"] = json!([answering(
        json!({ "name": "by-sni", "snis": ["secure.test"], "protocols": ["https"], "paths": ["/sni"] }),
        "sni-route"
    )]);
    gw.apply(&cfg).await;
    let matching = TlsOptions::new(Some("secure.test"), &[b"h2"], Trust::CaPem(ca.cert_pem()));
    let mut conn = Conn::tls(gw.proxy_tls_addr(), &matching).await.expect("TLS connect");
    let reply = conn
        .send(request("GET", "/sni", &[("host", "secure.test")], ""))
        .await
        .expect("request");
    assert_eq!(
        (reply.status.as_u16(), reply.message()),
        (200, Some("sni-route".to_string()))
    );

    let other = TlsOptions::new(Some("other.test"), &[b"h2"], Trust::Anything);
    let mut conn = Conn::tls(gw.proxy_tls_addr(), &other).await.expect("TLS connect");
    let reply = conn
        .send(request("GET", "/sni", &[("host", "secure.test")], ""))
        .await
        .expect("request");
    assert_eq!(reply.status, 404, "route requires SNI secure.test: {}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_verified_only_with_tls_verify() {
    let up = Upstream::start(UpstreamKind::Tls(Alpn::Http1)).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    let mut verified = service("verified", &up.url("https"), vec![route("on", &["/tls-on"])]);
    verified["tls_verify"] = json!(true);
    gw.apply(&config(vec![
        service("unverified", &up.url("https"), vec![route("off", &["/tls-off"])]),
        verified,
    ]))
    .await;

    let reply = gw.proxy(request("GET", "/tls-off/echo", &[], "")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["version"], "HTTP/1.1");
    assert_eq!(reply.json()["path"], "/echo");

    let reply = gw.proxy(request("GET", "/tls-on/echo", &[], "")).await;
    assert_eq!(
        reply.status,
        502,
        "an untrusted upstream certificate must fail verification: {}",
        reply.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcs_upstream_trailers_reach_a_tls_h2_client() {
    let up = Upstream::start(UpstreamKind::Tls(Alpn::H2)).await;
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&config(vec![service(
        "grpcs",
        &up.url("grpcs"),
        vec![grpc_routes(&["/trailers"])],
    )]))
    .await;
    let options = TlsOptions::new(None, &[b"h2"], Trust::Anything);
    let mut conn = Conn::tls(gw.proxy_tls_addr(), &options).await.expect("TLS connect");
    assert!(conn.is_http2(), "gateway must offer h2 over ALPN");
    let headers = [("content-type", "application/grpc"), ("te", "trailers")];
    let reply = conn
        .send(request("POST", "/trailers", &headers, "payload"))
        .await
        .expect("grpcs request");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.version, Version::HTTP_2);
    assert_eq!(reply.text(), "trailers body");
    assert_eq!(
        reply.trailer("grpc-status").as_deref(),
        Some("0"),
        "trailers: {:?}",
        reply.trailers
    );
    assert_eq!(reply.trailer("x-trailer").as_deref(), Some("yes"));
    assert_eq!(up.hits(), 1);
}

/// A verified upstream whose certificate (for `backend.test`, `*.mesh.test` and a SPIFFE id)
/// is not valid for the service's host `127.0.0.1`, unless `tls_sans` names one of its names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sans_widen_the_names_an_upstream_certificate_may_have() {
    let names = ["backend.test", "*.mesh.test", "spiffe://cluster/backend"];
    let up = Upstream::start_named(UpstreamKind::Tls(Alpn::Http1), &names).await;
    let ca_pem = up.ca_pem.clone().expect("the upstream's CA");
    let ca_id = "8d7c6b5a-4f3e-4d2c-9b1a-0e9f8d7c6b5a";
    let verified = |name: &str, sans: Value| {
        json!({
            "name": name, "url": up.url("https"),
            "tls_verify": true, "ca_certificates": [ca_id], "tls_sans": sans,
            "routes": [{ "name": name, "paths": [format!("/{name}")] }]
        })
    };
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&json!({
        "_format_version": "3.0",
        "ca_certificates": [{ "id": ca_id, "cert": ca_pem }],
        "services": [
            verified("plain", Value::Null),
            verified("by-name", json!({ "dnsnames": ["other.test", "backend.test"] })),
            verified("by-wildcard", json!({ "dnsnames": ["*.mesh.test"] })),
            verified("by-uri", json!({ "uris": ["spiffe://cluster/backend"] })),
            verified("wrong-names", json!({ "dnsnames": ["other.test", "*.other.test"], "uris": ["spiffe://cluster/other"] })),
        ]
    }))
    .await;
    let expected = [
        ("/plain", 502),
        ("/by-name", 200),
        ("/by-wildcard", 200),
        ("/by-uri", 200),
        ("/wrong-names", 502),
    ];
    for (path, status) in expected {
        let reply = gw.proxy(request("GET", path, &[], "")).await;
        assert_eq!(reply.status, status, "{path}: {}", reply.text());
    }
    let service = gw.admin_get("/services/by-name").await.json();
    assert_eq!(
        service["tls_sans"],
        json!({ "dnsnames": ["other.test", "backend.test"], "uris": null })
    );
    let reply = gw
        .admin(
            "PATCH",
            "/services/by-name",
            &[("content-type", "application/json")],
            json!({ "tls_sans": { "uris": ["not a uri"] } }).to_string(),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(reply.text().contains("invalid URI: not a uri"), "{}", reply.text());
}

/// An upstream that requires a client certificate (mTLS): the service's `client_certificate`,
/// or its upstream's, is presented; without one the handshake fails (502). Verification is on
/// with the upstream's CA, and off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_with_a_client_certificate() {
    let client_ca = TestCa::new("client ca");
    let client = client_ca.issue(&["strait-client"]);
    let up = Upstream::start_mutual(&client_ca).await;
    let ca_id = "1b2c3d4e-5f60-4a1b-8c2d-3e4f5a6b7c8d";
    let cert_id = "2c3d4e5f-6071-4b2c-9d3e-4f5a6b7c8d9e";
    let svc = |name: &str, host_url: &str, verify: bool, cert: bool| {
        let mut svc = json!({ "name": name, "url": host_url, "tls_verify": verify,
            "routes": [{ "name": name, "paths": [format!("/{name}")] }] });
        if verify {
            svc["ca_certificates"] = json!([ca_id]);
        }
        if cert {
            svc["client_certificate"] = json!({ "id": cert_id });
        }
        svc
    };
    let target = format!("127.0.0.1:{}", up.port());
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&json!({
        "_format_version": "3.0",
        "ca_certificates": [{ "id": ca_id, "cert": up.ca_pem.clone().expect("CA") }],
        "certificates": [{ "id": cert_id, "cert": client.cert_pem, "key": client.key_pem }],
        "upstreams": [{ "name": "mtls-pool", "client_certificate": { "id": cert_id },
            "targets": [{ "target": target }] }],
        "services": [
            svc("verified", &up.url("https"), true, true),
            svc("unverified", &up.url("https"), false, true),
            svc("no-cert", &up.url("https"), true, false),
            svc("by-upstream", "https://mtls-pool", true, false),
        ]
    }))
    .await;
    for (path, status) in [
        ("/verified", 200),
        ("/unverified", 200),
        ("/no-cert", 502),
        ("/by-upstream", 200),
    ] {
        let reply = gw.proxy(request("GET", &format!("{path}/echo"), &[], "")).await;
        assert_eq!(reply.status, status, "{path}: {}", reply.text());
    }
}

/// `tls_verify_depth`: at most that many intermediate certificates between the upstream's
/// certificate and the trusted CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verify_depth_limits_the_intermediates() {
    let up = Upstream::start_chained(2).await;
    let ca_id = "3d4e5f60-7182-4c3d-8e4f-5a6b7c8d9e0f";
    let svc = |name: &str, depth: Value| {
        json!({ "name": name, "url": up.url("https"), "tls_verify": true, "tls_verify_depth": depth,
            "ca_certificates": [ca_id], "routes": [{ "name": name, "paths": [format!("/{name}")] }] })
    };
    let gw = Gateway::start(GatewayOptions::new()).await;
    gw.apply(&json!({
        "_format_version": "3.0",
        "ca_certificates": [{ "id": ca_id, "cert": up.ca_pem.clone().expect("root") }],
        "services": [svc("unlimited", Value::Null), svc("two", json!(2)), svc("one", json!(1))],
    }))
    .await;
    for (path, status) in [("/unlimited", 200), ("/two", 200), ("/one", 502)] {
        let reply = gw.proxy(request("GET", &format!("{path}/echo"), &[], "")).await;
        assert_eq!(reply.status, status, "{path}: {}", reply.text());
    }
}
