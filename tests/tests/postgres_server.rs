//! The test PostgreSQL server itself: starts, answers SQL, survives a kill
//! and a restart on the same port with what it had committed.

use strait_e2e::postgres::PgServer;

#[test]
fn a_killed_server_restarts_with_its_committed_rows() {
    let mut server = PgServer::start();
    server.psql("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1), (2);");
    assert_eq!(server.psql("SELECT count(*) FROM t").trim(), "2");
    server.kill();
    server.restart();
    assert_eq!(
        server
            .psql("SELECT string_agg(id::text, ',' ORDER BY id) FROM t")
            .trim(),
        "1,2"
    );
}
