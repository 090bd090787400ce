//! strait-runtime: runtime data that never goes into a snapshot, and the
//! clients that hold it outside the process. Today: a Redis client
//! (pipelined, per worker, reconnecting with backoff) for cluster-wide
//! counters, the TLS client pieces it shares with the proxy, and the queues
//! and sinks that ship logs and traces off the proxy workers.
#![deny(unsafe_code)]

pub mod ai_metrics;
pub mod aws;
pub mod background;
pub mod cache;
pub mod clock;
pub mod cluster_counters;
pub mod counters;
pub mod health;
pub mod http_client;
pub mod kafka;
pub mod kv;
pub mod ldap;
pub mod lmdb_writer;
pub mod logs;
pub mod metrics;
pub mod oauth2;
pub mod pace;
pub mod random;
pub mod redis;
pub mod stats;
pub mod tls;

/// True at most once per wall-clock second for each `last` (error lines
/// that may fire on every request: Redis down, a full log queue, a log
/// file that cannot be written).
pub(crate) fn once_a_second(last: &std::sync::atomic::AtomicU64) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    last.swap(now, std::sync::atomic::Ordering::Relaxed) != now
}

static NODE_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Records this node's id (Kong's `kong.node.get_id()`), once, at start.
pub fn set_node_id(id: &str) {
    let _ = NODE_ID.set(id.to_string());
}

/// This node's id, once the node has one.
pub fn node_id() -> Option<&'static str> {
    NODE_ID.get().map(String::as_str)
}

/// The machine's host name (Kong's `kong.node.get_hostname()`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// Resolves once `shutdown` turns true (or its sender is gone).
pub async fn stopped(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}
