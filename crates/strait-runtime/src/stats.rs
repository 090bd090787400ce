//! Lock-free counters for `/status` and `/metrics`: connections, requests,
//! bytes held in HTTP/2 stream buffers.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes held in HTTP/2 stream inboxes, all connections of the node, both
/// directions (`strait_http2_buffered_bytes`).
pub static HTTP2_BUFFERED_BYTES: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Default)]
pub struct ProxyStats {
    pub connections_accepted: AtomicU64,
    pub connections_handled: AtomicU64,
    pub connections_active: AtomicU64,
    /// Accepted and closed at once: the worker was at `worker_connections`.
    pub connections_refused: AtomicU64,
    pub total_requests: AtomicU64,
}

impl ProxyStats {
    pub fn connection_opened(&self) {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        self.connections_active.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections_handled.fetch_add(1, Ordering::Relaxed);
        self.connections_active.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub fn request_started(&self) {
        self.total_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Kong's `/status` `server` object.
    pub fn to_json(&self) -> serde_json::Value {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "connections_accepted": get(&self.connections_accepted),
            "connections_handled": get(&self.connections_handled),
            "connections_active": get(&self.connections_active),
            "connections_reading": 0,
            "connections_writing": get(&self.connections_active),
            "connections_waiting": 0,
            "connections_refused": get(&self.connections_refused),
            "total_requests": get(&self.total_requests),
        })
    }
}
