//! strait-runtime: runtime data that never goes into a snapshot, and the
//! clients that hold it outside the process. Today: a Redis client
//! (pipelined, per worker, reconnecting with backoff) for cluster-wide
//! counters, the TLS client pieces it shares with the proxy, and the queues
//! and sinks that ship logs and traces off the proxy workers.
#![forbid(unsafe_code)]

pub mod logs;
pub mod metrics;
pub mod redis;
pub mod tls;
