//! strait-proxy: the data plane. Listeners, HTTP/1.1 and HTTP/2, TLS with SNI
//! certificate choice, the request pipeline (route, plugin phases, upstream,
//! response), upstream pools, health probes and DNS.
//!
//! This crate sees only snapshots (compiled by `strait-snapshot`): it never
//! depends on a store backend, the Admin API or the cluster.
#![deny(unsafe_code)]

pub mod access_log;
pub mod body;
mod coalesce;
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
pub mod tls;
pub mod tls_policy;
mod tunnel;
pub mod upstream;
pub mod workers;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

pub use conn::ClientLimits;
pub use h1_server::parse_request_head;
pub use listen::{parse_listen, ListenSpec};
use strait_runtime::stats::ProxyStats;
pub(crate) use strait_runtime::stopped;
use strait_snapshot::Snapshot;
pub use workers::{start_workers, WorkerModel, Workers};

pub use strait_core::{SERVER_HEADER, VERSION, VIA_VALUE};

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
