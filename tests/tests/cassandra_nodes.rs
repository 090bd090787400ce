//! Strait nodes on one Cassandra keyspace (`database = cassandra`): `strait migrations` on
//! Cassandra, a write through either node's Admin API live on the other within a second
//! (the follower polls every 250 ms), and one unique name posted on both nodes at once: one
//! 201 and Kong's 409, every round.

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
