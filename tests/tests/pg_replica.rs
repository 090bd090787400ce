//! `pg_ro_*`: a node with a read-only replica sends its Admin API GET
//! requests there and everything else (writes and the reads they make, the
//! change feed, the proxy's configuration) to the primary, against a real
//! streaming replica.

use std::time::{Duration, Instant};

use strait_e2e::gateway::{Gateway, GatewayOptions};
use strait_e2e::postgres::{PgServer, DATABASE, USER};

/// POST `body`, which must be created (201).
async fn create(node: &Gateway, path: &str, body: &str) {
    let reply = node
        .admin("POST", path, &[("content-type", "application/json")], body.to_string())
        .await;
    assert_eq!(reply.status, 201, "POST {path}: {}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reads_go_to_the_replica_and_writes_to_the_primary() {
    let server = PgServer::start();
    server.bootstrap();
    let mut replica = server.start_replica();
    let node = Gateway::start(
        GatewayOptions::new()
            .setting("database", "postgres")
            .setting("pg_port", &server.port().to_string())
            .setting("pg_user", USER)
            .setting("pg_database", DATABASE)
            .setting("pg_ro_host", "127.0.0.1")
            .setting("pg_ro_port", &replica.port().to_string())
            .setting("pg_ro_timeout", "1000"),
    )
    .await;

    create(&node, "/services", r#"{"name":"svc","url":"http://127.0.0.1:9"}"#).await;
    // The replica replays the write shortly after; GET reads it there.
    let started = Instant::now();
    while node.admin_get("/services/svc").await.status != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the replica never had the service"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sessions = replica.psql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'strait'");
    assert_ne!(sessions.trim(), "0", "no session of the node on the replica");

    // Without the replica, GET requests fail fast (503) and nothing else does:
    // writes, including the reads a write makes, go to the primary.
    replica.kill();
    let reply = node.admin_get("/services/svc").await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    create(&node, "/services/svc/routes", r#"{"name":"r","paths":["/r"]}"#).await;
    let patched = node
        .admin(
            "PATCH",
            "/services/svc",
            &[("content-type", "application/json")],
            r#"{"retries":3}"#,
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    assert_eq!(server.psql("SELECT count(*) FROM routes WHERE name = 'r'").trim(), "1");
}
