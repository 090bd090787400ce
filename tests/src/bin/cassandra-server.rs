//! One Cassandra node for a whole test run: scripts/test.sh starts it once and exports
//! `STRAIT_TEST_CASSANDRA`, so the Cassandra tests share it, each in a keyspace of its own.
//! `cassandra-server DIR PORT` starts the node as tests/src/cassandra.rs does (guardrails on,
//! the `strait` role created), writes the node's process id to DIR/cassandra.pid once it
//! serves, and exits, leaving the node running for the script to stop.

use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(port)) = (args.next(), args.next().and_then(|p| p.parse::<u16>().ok())) else {
        eprintln!("usage: cassandra-server DIR PORT");
        std::process::exit(2);
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("create the server's folder");
    let child = strait_e2e::cassandra::launch(&dir, port);
    let pid = child.id();
    std::fs::write(dir.join("cassandra.pid"), pid.to_string()).expect("write the pid file");
    println!("Cassandra serves 127.0.0.1:{port} (pid {pid})");
    // The node outlives this process on purpose (the script stops it by
    // its pid): it is handed to init, which reaps it.
    std::mem::forget(child);
}
