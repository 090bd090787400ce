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

/// Upper bounds (ms) of the response latency buckets the admin UI's
/// dashboard reads (time until the response head; the last bucket is
/// everything slower).
pub const LATENCY_BOUNDS_MS: [u64; 15] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000,
];

/// One thread's response counters: status classes and latency buckets.
/// Written only by its thread (no contended cache line per request), read
/// by the dashboard summing every thread's.
#[repr(align(128))]
#[derive(Default)]
struct ResponseCounters {
    classes: [AtomicU64; 5],
    latency: [AtomicU64; LATENCY_BOUNDS_MS.len() + 1],
}

static RESPONSE_COUNTERS: std::sync::Mutex<Vec<&'static ResponseCounters>> = std::sync::Mutex::new(Vec::new());

thread_local! {
    static COUNTERS: &'static ResponseCounters = {
        let counters: &'static ResponseCounters = Box::leak(Box::default());
        RESPONSE_COUNTERS.lock().unwrap_or_else(|e| e.into_inner()).push(counters);
        counters
    };
}

/// Count a response: its status class and how long its head took.
#[inline]
pub fn record_response(status: u16, elapsed: std::time::Duration) {
    let class = (status / 100).clamp(1, 5) as usize - 1;
    let ms = elapsed.as_millis() as u64;
    let bucket = LATENCY_BOUNDS_MS
        .iter()
        .position(|bound| ms < *bound)
        .unwrap_or(LATENCY_BOUNDS_MS.len());
    COUNTERS.with(|counters| {
        counters.classes[class].fetch_add(1, Ordering::Relaxed);
        counters.latency[bucket].fetch_add(1, Ordering::Relaxed);
    });
}

/// Every thread's response counters summed: `{"responses": {"1xx": n, ...},
/// "latency_ms": {"bounds": [...], "counts": [...]}}` (counts since start;
/// the last count is above the last bound).
pub fn responses_json() -> serde_json::Value {
    let mut classes = [0u64; 5];
    let mut latency = [0u64; LATENCY_BOUNDS_MS.len() + 1];
    for counters in RESPONSE_COUNTERS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        for (sum, count) in classes.iter_mut().zip(&counters.classes) {
            *sum += count.load(Ordering::Relaxed);
        }
        for (sum, count) in latency.iter_mut().zip(&counters.latency) {
            *sum += count.load(Ordering::Relaxed);
        }
    }
    serde_json::json!({
        "responses": {"1xx": classes[0], "2xx": classes[1], "3xx": classes[2], "4xx": classes[3], "5xx": classes[4]},
        "latency_ms": {"bounds": LATENCY_BOUNDS_MS, "counts": latency},
    })
}

#[cfg(test)]
mod response_tests {
    use std::time::Duration;

    #[test]
    fn responses_are_counted_by_class_and_latency_across_threads() {
        let before = super::responses_json();
        super::record_response(200, Duration::from_micros(300));
        std::thread::spawn(|| super::record_response(503, Duration::from_millis(70)))
            .join()
            .expect("thread");
        let after = super::responses_json();
        let delta = |path: &str| {
            after.pointer(path).unwrap().as_u64().unwrap() - before.pointer(path).unwrap().as_u64().unwrap()
        };
        assert_eq!(delta("/responses/2xx"), 1);
        assert_eq!(delta("/responses/5xx"), 1);
        assert_eq!(delta("/latency_ms/counts/0"), 1, "under 1 ms");
        assert_eq!(delta("/latency_ms/counts/6"), 1, "50 to 100 ms");
    }
}
