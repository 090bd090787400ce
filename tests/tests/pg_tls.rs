//! `pg_ssl` and `pg_ssl_verify` against a real PostgreSQL that accepts TCP
//! sessions only over TLS (`hostssl`): a node without `pg_ssl` is refused,
//! one with it talks TLS on every connection (pool and LISTEN), and with
//! `pg_ssl_verify` the server's chain and name are checked.

use strait_e2e::gateway::{Gateway, GatewayOptions};
use strait_e2e::postgres::{failed_start_on, PgServer, DATABASE, USER};
use strait_e2e::tls::TestCa;

/// `strait start` on `server` with `env` besides; its stderr (it must fail).
fn failed_start(server: &PgServer, env: &[(&str, &str)]) -> String {
    let mut env = env.to_vec();
    env.push(("STRAIT_PG_TIMEOUT", "3000"));
    failed_start_on(server.port(), &env)
}

fn options(server: &PgServer) -> GatewayOptions {
    GatewayOptions::new()
        .setting("database", "postgres")
        .setting("pg_port", &server.port().to_string())
        .setting("pg_user", USER)
        .setting("pg_database", DATABASE)
        .setting("pg_ssl", "on")
}

/// The node's sessions on the server as `(ssl, count)` rows, e.g. `t|3`.
fn sessions(server: &PgServer) -> String {
    server.psql(
        "SELECT s.ssl, count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
         WHERE a.application_name = 'strait' GROUP BY s.ssl ORDER BY s.ssl",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_reach_postgresql_over_tls_and_verify_it_when_asked() {
    let ca = TestCa::new("strait test postgres ca");
    let leaf = ca.issue(&["127.0.0.1", "localhost"]);
    let mut server = PgServer::start();
    server.bootstrap();
    // pg_ssl = on never falls back to plaintext: a server without TLS is refused.
    let no_tls = failed_start(&server, &[("STRAIT_PG_SSL", "on")]);
    eprintln!("server without TLS: {no_tls}");
    assert!(no_tls.contains("does not support TLS"), "{no_tls}");
    server.require_tls(&leaf.cert_pem, &leaf.key_pem);

    // Without pg_ssl the server refuses the session, and the node says so.
    let plain = failed_start(&server, &[]);
    eprintln!("without pg_ssl: {plain}");
    assert!(plain.contains("no encryption"), "{plain}");

    // pg_ssl = on: every session is TLS, writes and their propagation work.
    let node = Gateway::start(options(&server)).await;
    let reply = node
        .admin(
            "POST",
            "/services",
            &[("content-type", "application/json")],
            r#"{"name":"over-tls","url":"http://127.0.0.1:9"}"#,
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(
        server
            .psql("SELECT count(*) FROM services WHERE name = 'over-tls'")
            .trim(),
        "1"
    );
    let rows = sessions(&server);
    assert!(rows.starts_with("t|") && !rows.contains("f|"), "sessions: {rows}");
    drop(node);

    // pg_ssl_verify = on checks the chain: a CA the node does not trust is refused...
    let untrusted = failed_start(&server, &[("STRAIT_PG_SSL", "on"), ("STRAIT_PG_SSL_VERIFY", "on")]);
    eprintln!("untrusted: {untrusted}");
    assert!(untrusted.contains("certificate"), "{untrusted}");

    // ... and the name: the certificate is not for 127.0.0.2.
    let ca_file = std::env::temp_dir().join(format!("strait-e2e-pg-ca-{}.pem", uuid::Uuid::new_v4()));
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let ca_path = ca_file.display().to_string();
    let other = ca.issue(&["127.0.0.2"]);
    let mut renamed = PgServer::start();
    renamed.bootstrap();
    renamed.require_tls(&other.cert_pem, &other.key_pem);
    let wrong_name = failed_start(
        &renamed,
        &[
            ("STRAIT_PG_SSL", "on"),
            ("STRAIT_PG_SSL_VERIFY", "on"),
            ("SSL_CERT_FILE", &ca_path),
        ],
    );
    eprintln!("wrong name: {wrong_name}");
    assert!(wrong_name.contains("certificate"), "{wrong_name}");

    // With the CA trusted (SSL_CERT_FILE, as for every outbound TLS), it starts.
    let verified = Gateway::start(
        options(&server)
            .setting("pg_ssl_verify", "on")
            .env("SSL_CERT_FILE", &ca_path),
    )
    .await;
    assert_eq!(verified.admin_get("/services/over-tls").await.status, 200);
    let _ = std::fs::remove_file(&ca_file);
}
