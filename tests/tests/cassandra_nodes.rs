//! Strait nodes on one Cassandra keyspace (`database = cassandra`): `strait migrations` on
//! Cassandra, a write through either node's Admin API live on the other within a second
//! (the follower polls every 250 ms), one unique name posted on both nodes at once: one
//! 201 and Kong's 409, every round, and `cassandra_ssl` with and without verification.

use std::time::Duration;

use serde_json::{json, Value};
use strait_e2e::cassandra::CassandraServer;
use strait_e2e::client::get;
use strait_e2e::gateway::{Gateway, GatewayOptions};
use strait_e2e::upstream::{Upstream, UpstreamKind};

async fn post(node: &Gateway, path: &str, body: &Value) -> strait_e2e::client::Reply {
    node.admin("POST", path, &[("content-type", "application/json")], body.to_string())
        .await
}

fn options(server: &CassandraServer) -> GatewayOptions {
    server.node_options()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_then_two_nodes_see_each_others_writes_within_a_second() {
    let server = CassandraServer::start();
    let (code, text) = server.migrations(&["list"]);
    assert_eq!(code, Some(3), "not bootstrapped yet: {text}");
    server.bootstrap();
    let (code, text) = server.migrations(&["list"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("000_base"), "{text}");
    let (code, text) = server.migrations(&["status"]);
    assert_eq!(code, Some(0), "{text}");
    let status: Value = serde_json::from_str(text.trim()).expect("status is JSON");
    assert_eq!(status["needs_bootstrap"], false, "{status}");
    let (code, text) = server.migrations(&["bootstrap"]);
    assert_eq!(code, Some(0), "a second bootstrap is harmless: {text}");

    let origin = Upstream::start(UpstreamKind::Http1).await;
    let a = Gateway::start(options(&server)).await;
    let b = Gateway::start(options(&server)).await;
    let reply = post(&a, "/services", &json!({ "name": "orders", "url": origin.url("http") })).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let reply = post(
        &a,
        "/services/orders/routes",
        &json!({ "name": "orders-route", "paths": ["/orders"] }),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(a.proxy(get("/orders")).await.status, 200, "live on the writer at once");
    let took = b.until_proxied("/orders", 200, Duration::from_secs(5)).await;
    eprintln!("route visible on node B after {took:?}");
    assert!(took < Duration::from_secs(1), "the route reached node B after {took:?}");
    assert_eq!(b.admin_get("/routes/orders-route").await.status, 200);

    let reply = post(
        &b,
        "/services/orders/routes",
        &json!({ "name": "orders-v2", "paths": ["/v2/orders"] }),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let took = a.until_proxied("/v2/orders", 200, Duration::from_secs(5)).await;
    assert!(
        took < Duration::from_secs(1),
        "node B's route reached node A after {took:?}"
    );

    assert_eq!(a.admin("DELETE", "/routes/orders-route", &[], "").await.status, 204);
    let took = b.until_proxied("/orders", 404, Duration::from_secs(5)).await;
    assert!(
        took < Duration::from_secs(1),
        "the delete reached node B after {took:?}"
    );

    // A whole replacement on one node: the other reloads it.
    let config = json!({ "_format_version": "3.0", "services": [{ "name": "fresh", "url": origin.url("http"),
        "routes": [{ "name": "fresh", "paths": ["/fresh"] }] }] });
    let (status, body) = a.post_config(&config.to_string()).await;
    assert_eq!(status, 201, "{body}");
    let took = b.until_proxied("/fresh", 200, Duration::from_secs(5)).await;
    assert!(
        took < Duration::from_secs(1),
        "the replacement reached node B after {took:?}"
    );
    b.until_proxied("/v2/orders", 404, Duration::from_secs(5)).await;
    let a_version = a.admin_get("/status").await.json()["configuration_hash"].clone();
    let b_version = b.admin_get("/status").await.json()["configuration_hash"].clone();
    assert_eq!(a_version, b_version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_of_one_name_on_two_nodes_give_one_201_and_one_409() {
    let server = CassandraServer::start();
    server.bootstrap();
    let a = Gateway::start(options(&server)).await;
    let b = Gateway::start(options(&server)).await;
    for round in 0..10 {
        let body = json!({ "username": format!("racer-{round}") });
        let (x, y) = tokio::join!(post(&a, "/consumers", &body), post(&b, "/consumers", &body));
        let statuses = (x.status.as_u16(), y.status.as_u16());
        let loser = match statuses {
            (201, 409) => &y,
            (409, 201) => &x,
            _ => panic!(
                "round {round}: expected one 201 and one 409, got {statuses:?}: {} / {}",
                x.text(),
                y.text()
            ),
        };
        assert_eq!(loser.json()["name"], "unique constraint violation", "{}", loser.text());
        let stored = a.admin_get(&format!("/consumers/racer-{round}")).await;
        assert_eq!(stored.status, 200, "{}", stored.text());
    }
}

/// The server's client connections of [`strait_e2e::cassandra::USER`] as `(ssl, count)`.
async fn tls_clients(server: &CassandraServer) -> (usize, usize) {
    let session = strait_store::cassandra::connect(&server.config())
        .await
        .expect("connect");
    let rows = session
        .query_unpaged("SELECT username, ssl_enabled FROM system_views.clients", ())
        .await
        .expect("clients")
        .into_rows_result()
        .expect("rows");
    let (mut tls, mut plain) = (0, 0);
    for row in rows.rows::<(Option<String>, Option<bool>)>().expect("typed") {
        match row.expect("row") {
            (Some(user), Some(true)) if user == strait_e2e::cassandra::USER => tls += 1,
            (Some(user), _) if user == strait_e2e::cassandra::USER => plain += 1,
            _ => {}
        }
    }
    (tls, plain)
}

/// `cassandra_ssl`: a node's every connection to Cassandra is TLS (the test server takes TLS
/// beside plaintext, and lists which each client uses), and with `cassandra_ssl_verify` the
/// node's certificate is checked against the trusted roots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_reach_cassandra_over_tls_and_check_its_certificate() {
    let server = CassandraServer::start();
    server.bootstrap();
    let (tls_before, _) = tls_clients(&server).await;
    let node = Gateway::start(options(&server).setting("cassandra_ssl", "on")).await;
    let reply = post(&node, "/consumers", &json!({ "username": "over-tls" })).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let (tls, _) = tls_clients(&server).await;
    assert!(
        tls > tls_before,
        "no TLS connection from the node: {tls} (before: {tls_before})"
    );
    drop(node);

    let ca = server.ca_file.display().to_string();
    let verified = Gateway::start(
        options(&server)
            .setting("cassandra_ssl", "on")
            .setting("cassandra_ssl_verify", "on")
            .env("SSL_CERT_FILE", &ca),
    )
    .await;
    assert_eq!(verified.admin_get("/consumers/over-tls").await.status, 200);
    drop(verified);

    // Verified against roots that do not hold the server's CA: refused.
    let out = std::process::Command::new(strait_e2e::process::strait_bin())
        .args(["migrations", "list"])
        .envs(server.env())
        .env("STRAIT_CASSANDRA_SSL", "on")
        .env("STRAIT_CASSANDRA_SSL_VERIFY", "on")
        .env("STRAIT_CASSANDRA_TIMEOUT", "3000")
        .env("SSL_CERT_FILE", std::env::temp_dir().join("strait-no-such-roots.pem"))
        .output()
        .expect("run strait migrations");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("untrusted: {text}");
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("certificate"), "{text}");
}

/// Two control planes on one keyspace, a data plane on the second: a route written through
/// the first reaches the data plane (Cassandra, the second control plane's follower, then the
/// cluster protocol) within a second and a half.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_planes_on_cassandra_feed_their_data_planes() {
    let server = CassandraServer::start();
    server.bootstrap();
    let dir = std::env::temp_dir().join(format!("strait-cassandra-cp-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let shared = strait_e2e::tls::LeafCert::self_signed(&["kong_clustering"]);
    let (cert, key) = (dir.join("cluster.crt"), dir.join("cluster.key"));
    std::fs::write(&cert, &shared.cert_pem).expect("cert");
    std::fs::write(&key, &shared.key_pem).expect("key");
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let control_plane = |port: u16| {
        options(&server)
            .setting("role", "control_plane")
            .setting("cluster_listen", &format!("127.0.0.1:{port}"))
            .setting("cluster_cert", &cert)
            .setting("cluster_cert_key", &key)
    };
    let (port_a, port_b) = (strait_e2e::free_port(), strait_e2e::free_port());
    let cp_a = Gateway::start(control_plane(port_a)).await;
    let _cp_b = Gateway::start(control_plane(port_b)).await;
    let dp = Gateway::start(
        GatewayOptions::new()
            .setting("role", "data_plane")
            .setting("database", "off")
            .setting("cluster_control_plane", &format!("127.0.0.1:{port_b}"))
            .setting("cluster_cert", &cert)
            .setting("cluster_cert_key", &key),
    )
    .await;
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let reply = post(
        &cp_a,
        "/services",
        &json!({ "name": "orders", "url": origin.url("http") }),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let reply = post(
        &cp_a,
        "/services/orders/routes",
        &json!({ "name": "r", "paths": ["/orders"] }),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let took = dp.until_proxied("/orders", 200, Duration::from_secs(10)).await;
    eprintln!("a route written on control plane A served by B's data plane after {took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
