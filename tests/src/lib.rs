//! End-to-end test harness: starts the real `strait` binary on free ports with its own prefix
//! directory, real upstream servers (HTTP/1.1, h2c, TLS with ALPN), and real clients (HTTP/1.1,
//! h2c prior knowledge, TLS with SNI and ALPN, raw TCP for malformed input).
//!
//! It must not depend on any gateway crate: the tests see Strait only through its sockets, its
//! command line and its exit codes, exactly as a user would. Every wait is bounded.

pub mod admin_api;
pub mod bad_inputs;
pub mod cassandra;
pub mod client;
pub mod deck;
pub mod declarative;
pub mod gateway;
pub mod grpc;
pub mod h2_raw;
pub mod h3;
pub mod kafka;
pub mod ldap;
pub mod llm;
pub mod otlp;
pub mod pebble;
pub mod plugins;
pub mod postgres;
pub mod process;
pub mod prometheus;
pub mod redis;
pub mod sinks;
pub mod store_contract;
pub mod tls;
pub mod tools;
pub mod upstream;
pub mod zipkin;

use std::collections::BTreeSet;
use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::sync::Mutex;
use std::time::Duration;

pub use client::{get, get_host, request, send_h1, send_h1_raw, send_h2c, Conn, RawConn, RawReply, Reply, TlsOptions};
pub use gateway::{Gateway, GatewayOptions, Ports};
pub use process::{run_strait, strait_bin, CliOutput, StraitProcess, TempDir};
pub use tls::{LeafCert, TestCa, Trust};
pub use upstream::{refusing_addr, Alpn, Upstream, UpstreamKind};

/// A port on 127.0.0.1 that was free a moment ago, never handed out before by this process.
///
/// Ports come from 20000..32000, below Linux's ephemeral range (32768+), so an
/// outgoing connection of another test cannot take the port between this
/// check and the gateway binding it. Tests in one binary run in parallel and
/// a gateway binds its ports only once it has started, so a port that is free
/// now may already belong to another test's gateway: every port handed out is
/// remembered and never handed out again. Test binaries also run side by side
/// (scripts/e2e-suites.py): a port is handed out only with a lock on
/// `<tmp>/strait-e2e-ports/<port>` that this process holds until it exits
/// (the kernel drops it then, whatever the exit), so no two processes get it.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    static LOCKS: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let locks_dir = std::env::temp_dir().join("strait-e2e-ports");
    let _ = std::fs::create_dir_all(&locks_dir);
    for _ in 0..1000 {
        let random = u16::from_le_bytes(*uuid::Uuid::new_v4().as_bytes().first_chunk().expect("16 bytes"));
        let port = 20000 + random % 12000;
        if handed_out.contains(&port) {
            continue;
        }
        let Ok(lock) = std::fs::File::create(locks_dir.join(port.to_string())) else {
            continue;
        };
        if lock.try_lock().is_err() {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            LOCKS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(lock);
            return port;
        }
    }
    panic!("no free port found in 20000..32000")
}

/// `127.0.0.1:<port>`.
pub fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Awaits `fut` for at most `limit`, panicking with `what` when it runs out.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {limit:?}: {what}"),
    }
}

/// Polls `check` every 50 ms until it returns `Ok`, or panics with the last error after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let attempt = tokio::time::timeout(limit, check()).await;
        let error = match attempt {
            Ok(Ok(value)) => return value,
            Ok(Err(error)) => format!("{error:#}"),
            Err(_) => "check itself timed out".to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            panic!("{what}: still failing after {limit:?}: {error}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A short random hex string for unique names (directories, markers).
pub fn random_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}
