//! `strait migrations` against a real PostgreSQL server: a fresh database,
//! repeated commands, a schema ahead of this build, the lock, reset, and
//! every lookup the store makes served by an index (EXPLAIN), and `up` on a
//! schema an earlier build made.

use std::process::Command;

use strait_e2e::postgres::{PgServer, DATABASE, USER};
use strait_e2e::process::strait_bin;

struct Run {
    code: i32,
    out: String,
    err: String,
}

fn migrations(server: &PgServer, args: &[&str]) -> Run {
    let out = Command::new(strait_bin())
        .arg("migrations")
        .args(args)
        .env("STRAIT_PG_HOST", "127.0.0.1")
        .env("STRAIT_PG_PORT", server.port().to_string())
        .env("STRAIT_PG_USER", USER)
        .env("STRAIT_PG_DATABASE", DATABASE)
        .env("STRAIT_PG_TIMEOUT", "5000")
        .output()
        .expect("run strait migrations");
    Run {
        code: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn bootstrap_up_list_and_reset_behave_as_kongs() {
    let server = PgServer::start();

    let fresh = migrations(&server, &["list"]);
    assert_eq!(fresh.code, 3, "{}{}", fresh.out, fresh.err);
    assert!(fresh.out.contains("Database needs bootstrapping"), "{}", fresh.out);
    let up = migrations(&server, &["up"]);
    assert_eq!(up.code, 1, "up on an empty database: {}{}", up.out, up.err);
    assert!(up.err.contains("strait migrations bootstrap"), "{}", up.err);

    let boot = migrations(&server, &["bootstrap"]);
    assert_eq!(boot.code, 0, "{}{}", boot.out, boot.err);
    assert!(boot.out.starts_with("Bootstrapping database...\n"), "{}", boot.out);
    assert!(
        boot.out.contains("core migrated up to: 000_base (executed)")
            && boot.out.contains("core migrated up to: 001_oauth2_tokens (executed)")
            && boot.out.contains("core migrated up to: 002_filter_chains (executed)")
            && boot.out.contains("core migrated up to: 003_runtime_kv (executed)"),
        "{}",
        boot.out
    );
    assert!(boot.out.trim_end().ends_with("Database is up-to-date"), "{}", boot.out);
    let tables = server.psql(
        "SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables \
         WHERE table_schema = 'public'",
    );
    for table in [
        "services",
        "routes",
        "consumers",
        "keyauth_credentials",
        "plugins",
        "filter_chains",
        "change_log",
        "schema_meta",
        "oauth2_tokens",
        "oauth2_authorization_codes",
    ] {
        assert!(
            tables.split(',').any(|t| t.trim() == table),
            "{table} missing from {tables}"
        );
    }

    // Repeated: nothing to do, said so, exit 0.
    let again = migrations(&server, &["bootstrap"]);
    assert_eq!((again.code, again.out.trim()), (0, "Database already bootstrapped"));
    let up = migrations(&server, &["up"]);
    assert_eq!((up.code, up.out.trim()), (0, "Database is already up-to-date"));
    let finish = migrations(&server, &["finish"]);
    assert_eq!((finish.code, finish.out.trim()), (0, "No pending migrations to finish"));
    let list = migrations(&server, &["list"]);
    assert_eq!(
        (list.code, list.out.trim()),
        (
            0,
            "Executed migrations:\ncore: 000_base, 001_oauth2_tokens, 002_filter_chains, 003_runtime_kv"
        )
    );
    let status = migrations(&server, &["status"]);
    let state: serde_json::Value = serde_json::from_str(&status.out).expect("status is JSON");
    assert_eq!(state["needs_bootstrap"], false);
    assert_eq!(
        state["executed"],
        serde_json::json!(["000_base", "001_oauth2_tokens", "002_filter_chains", "003_runtime_kv"])
    );

    // Another node holds the lock: reset refuses and drops nothing.
    server.psql("INSERT INTO locks (key, owner, ttl) VALUES ('migrations', 'other-node', now() + interval '1 hour')");
    let locked = migrations(&server, &["reset", "--yes"]);
    assert_eq!(locked.code, 1, "{}{}", locked.out, locked.err);
    assert!(
        locked
            .err
            .contains("aborted: another node is performing database changes"),
        "{}",
        locked.err
    );
    assert_eq!(server.psql("SELECT count(*) FROM services").trim(), "0");
    server.psql("DELETE FROM locks");

    // A schema a newer Strait migrated: refused with the reason.
    server.psql(
        "UPDATE schema_meta SET executed = array_append(executed, '999_from_the_future') WHERE key = 'schema_meta'",
    );
    let ahead = migrations(&server, &["list"]);
    assert_eq!(ahead.code, 1, "{}{}", ahead.out, ahead.err);
    assert!(ahead.out.contains("newer than this Strait") && ahead.out.contains("999_from_the_future"));
    let up = migrations(&server, &["up"]);
    assert_eq!(up.code, 1);
    assert!(up.err.contains("newer than this Strait"), "{}", up.err);

    // reset needs --yes, then drops everything.
    let careless = migrations(&server, &["reset"]);
    assert_eq!(careless.code, 1);
    assert!(careless.err.contains("--yes"), "{}", careless.err);
    let reset = migrations(&server, &["reset", "--yes"]);
    assert_eq!(reset.code, 0, "{}{}", reset.out, reset.err);
    assert_eq!(reset.out.trim(), "Resetting database...\nDatabase successfully reset");
    assert_eq!(migrations(&server, &["list"]).code, 3);
    let nothing = migrations(&server, &["reset", "--yes"]);
    assert_eq!(nothing.code, 1);
    assert!(
        nothing.err.contains("Database not bootstrapped, nothing to reset"),
        "{}",
        nothing.err
    );

    // bootstrap --force over a bootstrapped database starts it again.
    assert_eq!(migrations(&server, &["bootstrap"]).code, 0);
    server.psql("INSERT INTO config_meta (key, version) VALUES ('marker', 7)");
    let forced = migrations(&server, &["bootstrap", "--force"]);
    assert_eq!(forced.code, 0, "{}{}", forced.out, forced.err);
    assert_eq!(
        server
            .psql("SELECT count(*) FROM config_meta WHERE key = 'marker'")
            .trim(),
        "0"
    );
}

/// A database an earlier build bootstrapped (before the OAuth2 token
/// tables and filter chains) is behind: listed as such, refused by a node,
/// brought up to date by `up`, which runs only the new migrations.
#[test]
fn up_adds_the_oauth2_token_tables_to_an_earlier_schema() {
    let server = PgServer::start();
    assert_eq!(migrations(&server, &["bootstrap"]).code, 0);
    server
        .psql("INSERT INTO services (id, name, entity) VALUES ('00000000-0000-0000-0000-000000000001', 'kept', '{}')");
    server.psql(
        "DROP TABLE oauth2_tokens, oauth2_authorization_codes, filter_chains, runtime_kv; \
         UPDATE schema_meta SET executed = '{000_base}', last_executed = '000_base' WHERE key = 'schema_meta'",
    );
    let behind = migrations(&server, &["list"]);
    assert_eq!(behind.code, 5, "{}{}", behind.out, behind.err);
    assert!(
        behind
            .out
            .contains("New migrations available:\ncore: 001_oauth2_tokens, 002_filter_chains, 003_runtime_kv"),
        "{}",
        behind.out
    );
    let up = migrations(&server, &["up"]);
    assert_eq!(up.code, 0, "{}{}", up.out, up.err);
    assert!(
        up.out.contains("core migrated up to: 001_oauth2_tokens (executed)")
            && up.out.contains("core migrated up to: 002_filter_chains (executed)")
            && up.out.contains("core migrated up to: 003_runtime_kv (executed)")
            && !up.out.contains("000_base"),
        "{}",
        up.out
    );
    assert_eq!(server.psql("SELECT count(*) FROM oauth2_tokens").trim(), "0");
    assert_eq!(server.psql("SELECT count(*) FROM filter_chains").trim(), "0");
    assert_eq!(server.psql("SELECT count(*) FROM runtime_kv").trim(), "0");
    assert_eq!(server.psql("SELECT name FROM services").trim(), "kept");
    assert_eq!(migrations(&server, &["list"]).code, 0);
}

#[test]
fn a_database_that_cannot_be_reached_is_a_clear_error() {
    let server = PgServer::start();
    let port = server.port();
    drop(server);
    let out = Command::new(strait_bin())
        .args(["migrations", "list"])
        .env("STRAIT_PG_PORT", port.to_string())
        .env("STRAIT_PG_TIMEOUT", "2000")
        .output()
        .expect("run strait migrations");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[PostgreSQL error]") && err.contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
}

/// Every lookup the store makes by a unique key or a foreign key is an
/// index scan, never a sequential scan (sequential scans are switched off,
/// so a missing index shows as a Seq Scan plan).
#[test]
fn every_unique_and_foreign_key_lookup_is_an_index_scan() {
    let server = PgServer::start();
    assert_eq!(migrations(&server, &["bootstrap"]).code, 0);
    let lookups = [
        ("services", "name = 'x'"),
        ("routes", "name = 'x'"),
        ("routes", "service_id = '00000000-0000-0000-0000-000000000001'"),
        ("consumers", "username = 'x'"),
        ("consumers", "custom_id = 'x'"),
        ("keyauth_credentials", "key = 'x'"),
        (
            "keyauth_credentials",
            "consumer_id = '00000000-0000-0000-0000-000000000001'",
        ),
        ("oauth2_credentials", "client_id = 'x'"),
        ("plugins", "cache_key = 'x'"),
        ("plugins", "route_id = '00000000-0000-0000-0000-000000000001'"),
        ("targets", "upstream_id = '00000000-0000-0000-0000-000000000001'"),
        ("snis", "name = 'x'"),
        ("services", "id = '00000000-0000-0000-0000-000000000001'"),
        // The OAuth2 token store: every bearer request, refresh grant and
        // code exchange, the Admin API by id, and the purge.
        ("oauth2_tokens", "access_hash = '\\x00'"),
        ("oauth2_tokens", "refresh_hash = '\\x00'"),
        ("oauth2_tokens", "id = '00000000-0000-0000-0000-000000000001'"),
        ("oauth2_tokens", "purge_at <= 5"),
        ("oauth2_authorization_codes", "code_hash = '\\x00'"),
        ("oauth2_authorization_codes", "expires_at <= 5"),
    ];
    for (table, condition) in lookups {
        let plan = server.psql(&format!(
            "SET enable_seqscan = off; EXPLAIN SELECT * FROM \"{table}\" WHERE {condition}"
        ));
        assert!(
            !plan.contains("Seq Scan") && plan.contains("Index"),
            "{table} WHERE {condition}:\n{plan}"
        );
    }
}
