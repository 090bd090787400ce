//! `strait config db_import` and `db_export` against a real PostgreSQL:
//! an import is live on a running node, repeated imports change nothing,
//! a conflicting import writes nothing, an export round-trips.

use std::process::Command;
use std::time::{Duration, Instant};

use strait_e2e::client::get;
use strait_e2e::gateway::{Gateway, GatewayOptions};
use strait_e2e::postgres::{PgServer, DATABASE, USER};
use strait_e2e::process::{strait_bin, TempDir};
use strait_e2e::upstream::{Upstream, UpstreamKind};

fn strait(server: &PgServer, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(strait_bin())
        .args(args)
        .env("STRAIT_PG_PORT", server.port().to_string())
        .env("STRAIT_PG_USER", USER)
        .env("STRAIT_PG_DATABASE", DATABASE)
        .output()
        .expect("run strait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn db_import_and_export_round_trip_through_a_running_node() {
    let server = PgServer::start();
    server.bootstrap();
    let origin = Upstream::start(UpstreamKind::Http1).await;
    let node = Gateway::start(
        GatewayOptions::new()
            .setting("database", "postgres")
            .setting("pg_port", &server.port().to_string())
            .setting("pg_user", USER)
            .setting("pg_database", DATABASE),
    )
    .await;
    let dir = TempDir::new();
    let file = dir.path().join("kong.yml");
    std::fs::write(
        &file,
        format!(
            "_format_version: \"3.0\"\nservices:\n- name: billing\n  url: {}\n  routes:\n  - name: billing-route\n    paths: [/billing]\nconsumers:\n- username: alice\n",
            origin.url("http")
        ),
    )
    .unwrap();
    let path = file.display().to_string();

    let (code, out, err) = strait(&server, &["config", "db_import", &path]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("parse successful, beginning import\nimport successful"),
        "{out}"
    );
    let started = Instant::now();
    while node.proxy(get("/billing")).await.status != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "the import never reached the node"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Again: the same ids, nothing new.
    let (code, out, err) = strait(&server, &["config", "db_import", &path]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(server.psql("SELECT count(*) FROM services").trim(), "1");
    assert_eq!(server.psql("SELECT count(*) FROM consumers").trim(), "1");

    // A consumer whose username another (with another id) holds: nothing
    // of the file is written, not even its new service.
    let reply = node
        .admin(
            "POST",
            "/consumers",
            &[("content-type", "application/json")],
            r#"{"username":"bob"}"#,
        )
        .await;
    assert_eq!(reply.status, 201);
    let clash = dir.path().join("clash.yml");
    std::fs::write(
        &clash,
        "_format_version: \"3.0\"\nservices:\n- name: extra\n  url: http://127.0.0.1:9\nconsumers:\n- id: 11111111-1111-4111-8111-111111111111\n  username: bob\n",
    )
    .unwrap();
    let (code, out, err) = strait(&server, &["config", "db_import", &clash.display().to_string()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("nothing was written") && err.contains("username"), "{err}");
    assert_eq!(
        server.psql("SELECT count(*) FROM services WHERE name = 'extra'").trim(),
        "0"
    );

    // A file that does not parse says where.
    let broken = dir.path().join("broken.yml");
    std::fs::write(&broken, "_format_version: \"3.0\"\nservices:\n- name: x\n  url: nope\n").unwrap();
    let (code, _, err) = strait(&server, &["config", "db_import", &broken.display().to_string()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("services[0]") || err.contains("services.0") || err.contains("url"),
        "{err}"
    );

    // Export: the database's configuration as a declarative file, never
    // over an existing one.
    let exported = dir.path().join("export.yml");
    let (code, out, err) = strait(&server, &["config", "db_export", &exported.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(&exported).unwrap();
    for name in ["billing", "billing-route", "alice", "bob"] {
        assert!(text.contains(name), "{name} missing from the export:\n{text}");
    }
    let (code, _, err) = strait(&server, &["config", "db_export", &exported.display().to_string()]);
    assert_eq!(code, 1);
    assert!(err.contains("already exists. Will not overwrite it."), "{err}");
    let (code, out, err) = strait(&server, &["config", "validate", &exported.display().to_string()]);
    assert_eq!(code, 0, "the export is a valid declarative file: {out}{err}");
}
