//! strait-proxy: the data plane. Listeners, HTTP/1.1 and HTTP/2, TLS with SNI
//! certificate choice, the request pipeline (route, plugin phases, upstream,
//! response), upstream pools, health probes and DNS.
//!
//! This crate sees only snapshots (compiled by `strait-snapshot`): it never
//! depends on a store backend, the Admin API or the cluster.
#![deny(unsafe_code)]

pub mod pipeline;
pub mod upstream;
pub mod wire;
pub mod workers;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use strait_runtime::stats::ProxyStats;
pub(crate) use strait_runtime::stopped;
use strait_snapshot::Snapshot;
pub use wire::conn::ClientLimits;
pub use wire::h1_server::parse_request_head;
pub use wire::listen::{parse_listen, ListenSpec};
pub use workers::{start_workers, WorkerModel, Workers};

pub use strait_core::{SERVER_HEADER, VERSION, VIA_VALUE};

static STOP_NOW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Make the coming stop immediate (`strait stop`, SIGTERM): the workers
/// close their connections without waiting for requests in flight.
pub fn stop_now() {
    STOP_NOW.store(true, std::sync::atomic::Ordering::Release);
}

pub(crate) fn stopping_now() -> bool {
    STOP_NOW.load(std::sync::atomic::Ordering::Acquire)
}

/// Proxy settings from the node configuration.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    pub listeners: Vec<ListenSpec>,
    pub limits: ClientLimits,
    pub worker_model: WorkerModel,
    pub worker_threads: usize,
    pub graceful_shutdown_timeout: Duration,
    /// Kong's `headers` / `headers_upstream`.
    pub headers: pipeline::kong_headers::HeaderSwitches,
    /// `proxy_access_log` (None: `off`).
    pub access_log: Option<pipeline::access_log::AccessLog>,
    /// `upstream_keepalive_*`.
    pub keepalive: upstream::Keepalive,
    /// `upstream_http2_*`: HTTP/2 connections to upstreams.
    pub upstream_http2: wire::conn::Http2Settings,
}

/// Everything a worker needs, shared by all of them.
#[derive(Clone)]
pub struct ProxyContext {
    pub settings: ProxySettings,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub stats: Arc<ProxyStats>,
    pub tls: Arc<rustls::ServerConfig>,
    /// The client limits every new connection takes (`settings.limits` at
    /// start; `strait reload` replaces them).
    pub limits: Arc<ArcSwap<ClientLimits>>,
}

/// Per-worker state handed to every connection.
pub struct Shared {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub stats: Arc<ProxyStats>,
    limits: Arc<ArcSwap<ClientLimits>>,
    pub headers: pipeline::kong_headers::HeaderSwitches,
    pub(crate) access_log: Option<pipeline::access_log::WorkerLog>,
    pool: upstream::Pool,
}

impl Shared {
    /// The client limits a new connection keeps for its life.
    pub fn limits(&self) -> Arc<ClientLimits> {
        self.limits.load_full()
    }

    pub fn pool(&self) -> &upstream::Pool {
        &self.pool
    }
}
