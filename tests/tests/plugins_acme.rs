//! acme end to end against Let's Encrypt's Pebble (tests/src/pebble.rs): a
//! handshake for an allowed domain starts an order, Pebble checks the
//! http-01 challenge through the gateway's plain proxy port, and the next
//! handshakes get the issued certificate (verified to Pebble's root) by
//! SNI without a restart; the Admin API's `/acme` orders (ECDSA and RSA),
//! lists, renews and refuses as Kong does.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strait_e2e::client::{Conn, TlsOptions};
use strait_e2e::gateway::{Gateway, GatewayOptions};
use strait_e2e::pebble::{minica, Pebble};
use strait_e2e::tls::Trust;
use strait_e2e::upstream::{Upstream, UpstreamKind};
use strait_e2e::{get, request, Reply};

const HOST: &str = "acme.strait.example";

fn config(upstream: &Upstream, acme: Value) -> Value {
    json!({
        "_format_version": "3.0",
        "services": [{ "name": "echo", "url": upstream.url("http"), "routes": [
            { "name": "all", "paths": ["/"] }
        ]}],
        "plugins": [{ "name": "acme", "config": acme }]
    })
}

/// The certificate the gateway serves for `sni`, and its issuer's CN.
async fn served(gw: &Gateway, sni: &str) -> Vec<u8> {
    let options = TlsOptions::new(Some(sni), &[b"http/1.1"], Trust::Anything);
    let conn = Conn::tls(gw.proxy_tls_addr(), &options).await.expect("handshake");
    conn.tls.expect("tls").peer_certificates[0].to_vec()
}

fn issuer_cn(der: &[u8]) -> String {
    strait_plugins::auth::x509::summary(der)
        .and_then(|s| s.issuer_cn)
        .unwrap_or_default()
}

/// Pebble's root (its management API), for verifying what it issued.
async fn pebble_root(pebble: &Pebble) -> String {
    let minica = std::fs::read_to_string(minica()).expect("minica");
    let options = TlsOptions::new(Some("localhost"), &[b"http/1.1"], Trust::CaPem(minica));
    let addr = format!("127.0.0.1:{}", pebble.management_port).parse().expect("addr");
    let mut conn = Conn::tls(addr, &options).await.expect("management API");
    let reply = conn.send(get("/roots/0")).await.expect("root");
    assert_eq!(reply.status, 200);
    reply.text()
}

async fn admin_json(gw: &Gateway, method: &str, path: &str, body: Value) -> Reply {
    gw.admin(method, path, &[("content-type", "application/json")], body.to_string())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_orders_a_certificate_that_later_handshakes_get() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new().env("SSL_CERT_FILE", &minica().to_string_lossy())).await;
    let pebble = Pebble::start(gw.proxy_addr().port());
    let acme = json!({
        "account_email": "ops@strait.example",
        "api_uri": pebble.directory(),
        "domains": [HOST, "*.wild.strait.example"],
        "cert_type": "ecc",
        "storage": "kong"
    });
    let reply = gw.apply(&config(&upstream, acme)).await;
    assert!(reply.status.is_success(), "{}", reply.text());

    // The sanity probe and unknown tokens, on plain HTTP for an allowed host.
    let probe = gw
        .proxy(request("GET", "/.well-known/acme-challenge/x", &[("host", HOST)], ""))
        .await;
    assert_eq!((probe.status.as_u16(), probe.text().as_str()), (404, "Not found\n"));
    let unknown = gw
        .proxy(request(
            "GET",
            "/.well-known/acme-challenge/nothing",
            &[("host", HOST)],
            "",
        ))
        .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.message().as_deref(), Some("Not found"));
    // Other hosts are proxied as usual.
    let other = gw
        .proxy(request(
            "GET",
            "/.well-known/acme-challenge/x",
            &[("host", "other.example")],
            "",
        ))
        .await;
    assert_eq!(other.status, 200);

    // The first handshake gets the default certificate and starts the order.
    let first = served(&gw, HOST).await;
    assert!(!issuer_cn(&first).starts_with("Pebble"), "{}", issuer_cn(&first));
    let deadline = Instant::now() + Duration::from_secs(60);
    let issued = loop {
        let cert = served(&gw, HOST).await;
        if issuer_cn(&cert).starts_with("Pebble") {
            break cert;
        }
        assert!(Instant::now() < deadline, "no certificate issued: {}", pebble.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let summary = strait_plugins::auth::x509::summary(&issued).expect("x509");
    assert_eq!(summary.key_type, "id-ecPublicKey");
    let names = strait_plugins::auth::x509::parse(&issued).expect("x509").sans;
    assert_eq!(names, vec![HOST.to_string()]);

    // The chain verifies to Pebble's root, and HTTPS requests go through.
    let root = pebble_root(&pebble).await;
    let verified = TlsOptions::new(Some(HOST), &[b"http/1.1"], Trust::CaPem(root));
    let mut conn = Conn::tls(gw.proxy_tls_addr(), &verified)
        .await
        .expect("the issued chain verifies");
    assert_eq!(conn.send(get("/hello")).await.expect("request").status, 200);

    // The Admin API lists it as Kong does.
    let listed = gw.admin_get("/acme/certificates").await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    let data = listed.json()["data"].clone();
    assert_eq!(data.as_array().map(Vec::len), Some(1), "{data}");
    assert_eq!(data[0]["host"], HOST);
    assert_eq!(data[0]["valid"], true, "{data}");
    assert_eq!(data[0]["pubkey_type"], "id-ecPublicKey");
    assert!(data[0]["issuer_cn"].as_str().is_some_and(|i| i.starts_with("Pebble")));
    assert!(data[0]["serial_number"].as_str().is_some_and(|s| s.contains(':')));
    let invalid = gw.admin_get("/acme/certificates?invalid_only=true").await;
    assert_eq!(invalid.json()["data"], json!([]));
    let one = gw.admin_get(&format!("/acme/certificates/{HOST}")).await;
    assert_eq!(one.json()["data"]["host"], HOST);
    let missing = gw.admin_get("/acme/certificates/nope.example").await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.message().as_deref(),
        Some("Certificate for host nope.examplenot found in storage")
    );

    // POST /acme orders at once (a wildcard-matched name).
    let created = admin_json(&gw, "POST", "/acme", json!({ "host": "b.wild.strait.example" })).await;
    assert_eq!(created.status, 201, "{} {}", created.text(), pebble.log());
    assert_eq!(
        created.message().as_deref(),
        Some("certificate for host b.wild.strait.example is created")
    );
    let issued = served(&gw, "b.wild.strait.example").await;
    assert!(issuer_cn(&issued).starts_with("Pebble"));
    assert_eq!(
        gw.admin_get("/acme/certificates").await.json()["data"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // Refusals, with Kong's messages.
    let no_host = admin_json(&gw, "POST", "/acme", json!({})).await;
    assert_eq!(no_host.status, 400);
    assert_eq!(
        no_host.message().as_deref(),
        Some("host must be provided and containing a single domain")
    );
    let port = admin_json(&gw, "POST", "/acme", json!({ "host": "a.example:8443" })).await;
    assert_eq!(port.message().as_deref(), Some("port is not allowed in host"));
    let unlisted = admin_json(
        &gw,
        "POST",
        "/acme",
        json!({ "host": "elsewhere.example", "test_http_challenge_flow": true }),
    )
    .await;
    assert_eq!(unlisted.status, 400);
    assert_eq!(
        unlisted.message().as_deref(),
        Some("problem found running sanity check for elsewhere.example: host is not included in plugin config.domains")
    );
    // Pebble refuses the blocked domain: 500, then the host backs off.
    let refused = admin_json(&gw, "POST", "/acme", json!({ "host": "blocked-domain.example" })).await;
    assert_eq!(refused.status, 500, "{}", refused.text());
    assert!(
        refused
            .message()
            .is_some_and(|m| m.starts_with("failed to update certificate: ")),
        "{}",
        refused.text()
    );
    let backed_off = admin_json(&gw, "POST", "/acme", json!({ "host": "blocked-domain.example" })).await;
    assert!(
        backed_off
            .message()
            .is_some_and(|m| m.contains("please try again in 5 minutes")),
        "{}",
        backed_off.text()
    );
    let renewal = admin_json(&gw, "PATCH", "/acme", json!({})).await;
    assert_eq!(renewal.status, 202);
    assert_eq!(
        renewal.message().as_deref(),
        Some("Renewal process started successfully")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsa_certificates_and_kongs_config_checks() {
    let upstream = Upstream::start(UpstreamKind::Http1).await;
    let gw = Gateway::start(GatewayOptions::new().env("SSL_CERT_FILE", &minica().to_string_lossy())).await;

    // Without an acme plugin, /acme is 404 with no body.
    assert_eq!(
        admin_json(&gw, "POST", "/acme", json!({ "host": HOST })).await.status,
        404
    );
    assert_eq!(gw.admin_get("/acme/certificates").await.status, 404);

    let pebble = Pebble::start(gw.proxy_addr().port());
    let acme = json!({
        "account_email": "ops@strait.example",
        "api_uri": pebble.directory(),
        "domains": [HOST],
        "rsa_key_size": 2048
    });
    let reply = gw.apply(&config(&upstream, acme)).await;
    assert!(reply.status.is_success(), "{}", reply.text());
    let created = admin_json(&gw, "POST", "/acme", json!({ "host": HOST })).await;
    assert_eq!(created.status, 201, "{} {}", created.text(), pebble.log());
    let issued = served(&gw, HOST).await;
    let summary = strait_plugins::auth::x509::summary(&issued).expect("x509");
    assert_eq!(summary.key_type, "rsaEncryption");
    assert!(summary.issuer_cn.is_some_and(|i| i.starts_with("Pebble")));

    // Kong's schema: global only, terms of service for Let's Encrypt, redis needs a host.
    let scoped = admin_json(
        &gw,
        "POST",
        "/routes/all/plugins",
        json!({ "name": "acme", "config": { "account_email": "a@b.example" } }),
    )
    .await;
    assert_eq!(scoped.status, 400, "{}", scoped.text());
    assert_eq!(scoped.json()["fields"]["route"], "value must be null");
    let tos = admin_json(
        &gw,
        "POST",
        "/schemas/plugins/validate",
        json!({ "name": "acme", "config": {
            "account_email": "a@b.example", "api_uri": "https://acme-v02.api.letsencrypt.org" } }),
    )
    .await;
    assert_eq!(tos.status, 400, "{}", tos.text());
    assert!(
        tos.text().contains("terms of service must be accepted"),
        "{}",
        tos.text()
    );
    let email = admin_json(
        &gw,
        "POST",
        "/schemas/plugins/validate",
        json!({ "name": "acme", "config": { "account_email": "nobody" } }),
    )
    .await;
    assert_eq!(email.status, 400, "{}", email.text());
    assert!(
        email.json()["fields"]["config"]["account_email"].is_string(),
        "{}",
        email.text()
    );
}
