//! Two Strait nodes on one PostgreSQL database: a write through either
//! node's Admin API is live on the other within a second, versions stay in
//! step, `POST /config` on one node replaces the store for both, and a
//! node will not start on a database that is not bootstrapped.

use std::time::{Duration, Instant};

use strait_e2e::client::get;
use strait_e2e::gateway::{Gateway, GatewayOptions};
use strait_e2e::postgres::{failed_start_on, PgServer};
use strait_e2e::upstream::{Upstream, UpstreamKind};

fn pg_options(server: &PgServer) -> GatewayOptions {
    server.node_options()
}

/// The `orders` service on `origin` with a route on `path`, through `node`.
async fn create_orders(node: &Gateway, origin: &Upstream, route: &str, path: &str) {
    let service = format!(r#"{{"name":"orders","url":"{}"}}"#, origin.url("http"));
    let reply = node
        .admin("POST", "/services", &[("content-type", "application/json")], service)
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let route = format!(r#"{{"name":"{route}","paths":["{path}"]}}"#);
    let reply = node
        .admin(
            "POST",
            "/services/orders/routes",
            &[("content-type", "application/json")],
            route,
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
}

/// POST `body` to `path` on `node` until the database is back to take it
/// (at most 10 s).
async fn post_once_back(node: &Gateway, path: &str, body: &'static str) {
    let started = Instant::now();
    loop {
        let reply = node
            .admin("POST", path, &[("content-type", "application/json")], body)
            .await;
        if reply.status == 201 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "writes did not resume: {}",
            reply.text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A bootstrapped server, an origin, and two nodes on it (`pg_timeout` 1 s)
/// serving the `orders` service's route `r` on `/orders`.
async fn two_nodes_with_orders() -> (PgServer, Upstream, Gateway, Gateway) {
    let server = PgServer::start();
    server.bootstrap();
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let options = pg_options(&server).setting("pg_timeout", "1000");
    let a = Gateway::start(options.clone()).await;
    let b = Gateway::start(options).await;
    create_orders(&a, &origin, "r", "/orders").await;
    (server, origin, a, b)
}

/// Poll `node`'s proxy for `path` until it answers `status` (at most 5 s).
async fn until_proxied(node: &Gateway, path: &str, status: u16) -> Duration {
    node.until_proxied(path, status, Duration::from_secs(5)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_on_one_node_are_live_on_the_other_within_a_second() {
    let server = PgServer::start();
    server.bootstrap();
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let a = Gateway::start(pg_options(&server)).await;
    let b = Gateway::start(pg_options(&server)).await;

    create_orders(&a, &origin, "orders-route", "/orders").await;
    assert_eq!(
        a.proxy(get("/orders")).await.status,
        200,
        "live on the node that wrote it at once"
    );
    let took = until_proxied(&b, "/orders", 200).await;
    eprintln!("route visible on node B after {took:?}");
    assert!(took < Duration::from_secs(1), "the route reached node B after {took:?}");
    assert_eq!(b.admin_get("/routes/orders-route").await.status, 200);

    // And the other way, with a write that depends on the first node's.
    let reply = b
        .admin(
            "POST",
            "/services/orders/routes",
            &[("content-type", "application/json")],
            r#"{"name":"orders-v2","paths":["/v2/orders"]}"#,
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let took = until_proxied(&a, "/v2/orders", 200).await;
    assert!(
        took < Duration::from_secs(1),
        "node B's route reached node A after {took:?}"
    );

    // Deletes travel too; the route stops matching on both nodes.
    assert_eq!(a.admin("DELETE", "/routes/orders-route", &[], "").await.status, 204);
    let took = until_proxied(&b, "/orders", 404).await;
    assert!(
        took < Duration::from_secs(1),
        "the delete reached node B after {took:?}"
    );

    // Writes interleaved from both nodes: every one lands, in one order.
    for i in 0..20 {
        let node = if i % 2 == 0 { &a } else { &b };
        let body = format!(r#"{{"username":"user-{i}"}}"#);
        let reply = node
            .admin("POST", "/consumers", &[("content-type", "application/json")], body)
            .await;
        assert_eq!(reply.status, 201, "consumer {i}: {}", reply.text());
    }
    let started = Instant::now();
    loop {
        let count_a = a.admin_get("/consumers?size=100").await.json()["data"]
            .as_array()
            .map_or(0, Vec::len);
        let count_b = b.admin_get("/consumers?size=100").await.json()["data"]
            .as_array()
            .map_or(0, Vec::len);
        if count_a == 20 && count_b == 20 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "consumers: a {count_a}, b {count_b}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // POST /config on one node replaces the shared store whole: the other
    // node serves exactly that document within a second.
    let doc = serde_json::json!({"_format_version": "3.0", "services": [{"name": "whole",
        "url": origin.url("http"), "routes": [{"name": "w", "paths": ["/whole"]}]}]});
    let (status, body) = a.post_config(&doc.to_string()).await;
    assert_eq!(status, 201, "{body}");
    let took = until_proxied(&b, "/whole", 200).await;
    assert!(took < Duration::from_secs(1), "/config reached node B after {took:?}");
    until_proxied(&b, "/v2/orders", 404).await;
    assert_eq!(b.admin_get("/consumers").await.json()["data"], serde_json::json!([]));

    // Node B writes after it; the same document posted again on node A is
    // not taken as "no change" to what A posted before: it replaces the
    // store again, so B's route goes on both nodes.
    let reply = b
        .admin(
            "POST",
            "/services/whole/routes",
            &[("content-type", "application/json")],
            r#"{"name":"extra","paths":["/extra"]}"#,
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    until_proxied(&a, "/extra", 200).await;
    let (status, body) = a.post_config(&doc.to_string()).await;
    assert_eq!(status, 201, "{body}");
    until_proxied(&a, "/extra", 404).await;
    until_proxied(&b, "/extra", 404).await;
    assert_eq!(b.proxy(get("/whole")).await.status, 200);

    // And when node A posts before it has seen node B's write: its changes
    // from its own (older) snapshot are refused by the database, and the
    // document goes in whole. Either way the store is the document.
    for round in 0..5 {
        let name = format!("late-{round}");
        let route = format!(r#"{{"name":"{name}","paths":["/{name}"]}}"#);
        let reply = b
            .admin(
                "POST",
                "/services/whole/routes",
                &[("content-type", "application/json")],
                route,
            )
            .await;
        assert_eq!(reply.status, 201, "{}", reply.text());
        let (status, body) = a.post_config(&doc.to_string()).await;
        assert_eq!(status, 201, "{body}");
        for node in [&a, &b] {
            until_proxied(node, &format!("/{name}"), 404).await;
            let routes = node.admin_get("/routes").await.json()["data"].clone();
            assert_eq!(routes.as_array().map(Vec::len), Some(1), "round {round}: {routes}");
        }
    }

    // The same with a write whose notification never came (committed by
    // hand, without NOTIFY): node A's snapshot is certainly older than the
    // database when it posts, and only the poll would tell it.
    server.psql(
        "BEGIN; \
         UPDATE config_meta SET version = version + 1 WHERE key = 'config'; \
         INSERT INTO routes (id, name, service_id, entity) \
           SELECT gen_random_uuid(), 'silent', service_id, \
                  entity || '{\"name\": \"silent\", \"paths\": [\"/silent\"]}'::jsonb \
           FROM routes WHERE name = 'w'; \
         INSERT INTO change_log (version, seq, kind, op, id) \
           SELECT (SELECT version FROM config_meta WHERE key = 'config'), 0, 'routes', 'upsert', id \
           FROM routes WHERE name = 'silent'; \
         COMMIT;",
    );
    let (status, body) = a.post_config(&doc.to_string()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(server.psql("SELECT count(*) FROM routes").trim(), "1");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for node in [&a, &b] {
        assert_eq!(node.proxy(get("/silent")).await.status, 404);
        assert_eq!(node.proxy(get("/whole")).await.status, 200);
    }
}

/// `strait start` on `server`'s database; the node's stderr when it fails.
fn failed_start(server: &PgServer) -> String {
    failed_start_on(server.port(), &[])
}

#[test]
fn a_node_refuses_a_schema_that_is_missing_behind_or_ahead() {
    let server = PgServer::start();
    let missing = failed_start(&server);
    assert!(missing.contains("strait migrations bootstrap"), "{missing}");

    server.bootstrap();
    // Behind: a migration this version has is not recorded as run.
    server.psql("UPDATE schema_meta SET executed = '{}' WHERE key = 'schema_meta'");
    let behind = failed_start(&server);
    assert!(
        behind.contains("New migrations available; run 'strait migrations up'"),
        "{behind}"
    );

    // Ahead: a newer Strait ran a migration this one does not know.
    server.psql("UPDATE schema_meta SET executed = '{000_base,999_newer}' WHERE key = 'schema_meta'");
    let ahead = failed_start(&server);
    assert!(
        ahead.contains("newer than this Strait") && ahead.contains("999_newer"),
        "{ahead}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_keep_serving_through_a_database_outage_and_catch_up_after() {
    let (mut server, _origin, a, b) = two_nodes_with_orders().await;
    until_proxied(&b, "/orders", 200).await;

    server.kill();
    // The proxies serve what they had.
    for node in [&a, &b] {
        assert_eq!(node.proxy(get("/orders")).await.status, 200);
    }
    // A write fails fast and clearly, and leaves nothing behind.
    let started = Instant::now();
    let reply = a
        .admin(
            "POST",
            "/consumers",
            &[("content-type", "application/json")],
            r#"{"username":"lost"}"#,
        )
        .await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert!(reply.json()["message"]
        .as_str()
        .unwrap_or_default()
        .contains("the database is unavailable"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the write took {:?}",
        started.elapsed()
    );
    assert_eq!(
        a.proxy(get("/orders")).await.status,
        200,
        "still serving after the failed write"
    );
    let status = b.admin_get("/status").await.json();
    assert_eq!(status["database"]["reachable"], false, "{status}");
    let served = status["config_version"].as_u64().expect("config_version");

    server.restart();
    // Writes resume once the pool reconnects; the other node catches up.
    post_once_back(&b, "/consumers", r#"{"username":"back"}"#).await;
    let started = Instant::now();
    // Admin reads go to the database; what node A *serves* is its
    // snapshot, which its follower brings up to the new version.
    while a.admin_get("/status").await.json()["config_version"].as_u64() != Some(served + 1) {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "node A did not catch up within 1 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("node A caught up {:?} after the write", started.elapsed());
    for node in [&a, &b] {
        assert_eq!(
            node.admin_get("/consumers/lost").await.status,
            404,
            "the failed write left nothing"
        );
        let status = node.admin_get("/status").await.json();
        assert_eq!(status["database"]["reachable"], true, "{status}");
        assert_eq!(
            status["config_version"].as_u64(),
            Some(served + 1),
            "one write since the outage"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_while_the_database_is_down_serves_its_cache() {
    let mut server = PgServer::start();
    server.bootstrap();
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let mut a = Gateway::start(pg_options(&server).setting("pg_timeout", "1000")).await;
    create_orders(&a, &origin, "r", "/orders").await;
    assert_eq!(a.proxy(get("/orders")).await.status, 200);

    server.kill();
    a.restart().await;
    assert_eq!(a.proxy(get("/orders")).await.status, 200, "served from the cache");
    let status = a.admin_get("/status").await.json();
    assert_eq!(status["database"]["reachable"], false, "{status}");
    assert_eq!(status["config_version"], 2, "{status}");

    server.restart();
    post_once_back(&a, "/services/orders/routes", r#"{"name":"r2","paths":["/after"]}"#).await;
    until_proxied(&a, "/after", 200).await;
    assert_eq!(a.admin_get("/status").await.json()["config_version"], 3);
}

#[test]
fn a_node_without_a_cache_or_a_database_does_not_start() {
    let server = PgServer::start();
    let port = server.port();
    drop(server);
    let err = failed_start_on(port, &[("STRAIT_PG_TIMEOUT", "1000")]);
    assert!(
        err.contains("unreachable") && err.contains("no cached configuration"),
        "{err}"
    );
}

/// Writes that cascade (a consumer deleted with its key) in flight while
/// the database is killed: each one is all there or not at all, in the
/// database and on both nodes, and the nodes agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_killed_mid_write_leaves_no_partial_change() {
    let (mut server, _origin, a, b) = two_nodes_with_orders().await;
    let plugin = r#"{"name":"key-auth","config":{"key_names":["apikey"]}}"#;
    let json = [("content-type", "application/json")];
    assert_eq!(a.admin("POST", "/routes/r/plugins", &json, plugin).await.status, 201);
    const USERS: usize = 30;
    for i in 0..USERS {
        let reply = a
            .admin("POST", "/consumers", &json, format!(r#"{{"username":"u{i}"}}"#))
            .await;
        assert_eq!(reply.status, 201, "{}", reply.text());
        let key = format!(r#"{{"key":"key-{i}"}}"#);
        let reply = a.admin("POST", &format!("/consumers/u{i}/key-auth"), &json, key).await;
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    let keyed = |i: usize| {
        http::Request::get("/orders")
            .header("apikey", format!("key-{i}"))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .expect("request")
    };
    let started = Instant::now();
    while b.proxy(keyed(USERS - 1)).await.status != 200 {
        assert!(started.elapsed() < Duration::from_secs(2), "node B never saw the keys");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Delete every consumer (each with its key, one transaction each) at
    // once through both nodes, and kill the database while they are in
    // flight.
    let (a, b) = (std::sync::Arc::new(a), std::sync::Arc::new(b));
    let mut deletes = tokio::task::JoinSet::new();
    for i in 0..USERS {
        let node = if i % 2 == 0 { a.clone() } else { b.clone() };
        deletes.spawn(async move {
            (
                i,
                node.admin("DELETE", &format!("/consumers/u{i}"), &[], "").await.status,
            )
        });
    }
    // The first answer means the rest are queued or in flight.
    let mut answers = vec![0u16; USERS];
    let (i, status) = deletes.join_next().await.expect("a delete").expect("delete task");
    answers[i] = status.as_u16();
    server.kill();
    while let Some(done) = deletes.join_next().await {
        let (i, status) = done.expect("delete task");
        answers[i] = status.as_u16();
    }
    assert!(answers.iter().all(|s| *s == 204 || *s == 503), "{answers:?}");
    eprintln!("answers with the database killed mid-flight: {answers:?}");
    server.restart();

    // In the database: a consumer and its key both gone or both there, and
    // gone wherever the client was told 204. (A 503 may still have
    // committed: the commit can land as the connection dies.)
    let mut gone = [false; USERS];
    for i in 0..USERS {
        let consumer = server.psql(&format!("SELECT count(*) FROM consumers WHERE username = 'u{i}'"));
        let key = server.psql(&format!(
            "SELECT count(*) FROM keyauth_credentials WHERE key = 'key-{i}'"
        ));
        assert_eq!(
            consumer.trim(),
            key.trim(),
            "u{i}: a consumer and its key, not one of them"
        );
        gone[i] = consumer.trim() == "0";
        if answers[i] == 204 {
            assert!(gone[i], "u{i} was acknowledged deleted");
        }
    }
    // On both nodes, once caught up: the deleted keys are refused, the
    // others still work.
    for node in [&*a, &*b] {
        let started = Instant::now();
        loop {
            let mut agree = true;
            for (i, gone) in gone.iter().enumerate() {
                let expected = if *gone { 401 } else { 200 };
                agree &= node.proxy(keyed(i)).await.status.as_u16() == expected;
            }
            if agree {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "a node never agreed with the database"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
