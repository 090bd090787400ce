//! strait-proxy: the data plane. Listeners, HTTP/1.1 and HTTP/2, TLS with SNI
//! certificate choice, upstream pools and balancers, the snapshot the proxy
//! serves from and the compiler thread that publishes it.
//!
//! This crate sees only snapshots: it never depends on a store backend or the
//! Admin API.
#![deny(unsafe_code)]

pub mod access_log;
pub mod background;
pub mod balancer;
pub mod body;
mod coalesce;
pub mod compiler;
pub mod conn;
pub mod deadline;
pub mod dns;
pub mod error;
mod forwarding;
pub mod grpc;
pub mod h1_client;
pub(crate) mod h1_codec;
mod h1_names;
pub(crate) mod h1_server;
pub mod h2_body;
pub mod h2_client;
pub mod h2_server;
pub mod handler;
pub mod health_check;
pub mod kong_headers;
pub mod listen;
mod phases;
mod prefetch;
mod relay;
pub mod secrets;
pub mod snapshot;
pub mod stats;
pub mod tls;
pub mod tls_policy;
mod tunnel;
pub mod upstream;
pub mod workers;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

pub use compiler::{PublishError, SnapshotPublisher};
pub use conn::ClientLimits;
pub use h1_server::parse_request_head;
pub use listen::{parse_listen, ListenSpec};
pub use snapshot::{compile_snapshot, compile_snapshot_hashed, config_hash, CompileError, Snapshot, SnapshotBuilder};
pub use stats::ProxyStats;
pub use workers::{start_workers, WorkerModel, Workers};

/// Strait's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// `Server` header on responses Strait itself produces.
pub const SERVER_HEADER: &str = concat!("strait/", env!("CARGO_PKG_VERSION"));
/// `Via` value added to proxied requests and responses.
pub const VIA_VALUE: &str = concat!("1.1 strait/", env!("CARGO_PKG_VERSION"));

/// Proxy settings from the node configuration.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    pub listeners: Vec<ListenSpec>,
    pub limits: ClientLimits,
    pub worker_model: WorkerModel,
    pub worker_threads: usize,
    pub graceful_shutdown_timeout: Duration,
    /// Kong's `headers` / `headers_upstream`.
    pub headers: kong_headers::HeaderSwitches,
    /// `proxy_access_log` (None: `off`).
    pub access_log: Option<access_log::AccessLog>,
    /// `upstream_keepalive_*`.
    pub keepalive: upstream::Keepalive,
    /// `upstream_http2_*`: HTTP/2 connections to upstreams.
    pub upstream_http2: conn::Http2Settings,
}

/// Everything a worker needs, shared by all of them.
#[derive(Clone)]
pub struct ProxyContext {
    pub settings: ProxySettings,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub stats: Arc<ProxyStats>,
    pub tls: Arc<rustls::ServerConfig>,
}

/// Per-worker state handed to every connection.
pub struct Shared {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub stats: Arc<ProxyStats>,
    pub limits: ClientLimits,
    pub headers: kong_headers::HeaderSwitches,
    pub(crate) access_log: Option<access_log::WorkerLog>,
    pool: upstream::Pool,
}

impl Shared {
    pub fn pool(&self) -> &upstream::Pool {
        &self.pool
    }
}

/// Resolves once `shutdown` turns true (or its sender is gone).
pub async fn stopped(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}
