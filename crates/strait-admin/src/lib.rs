//! strait-admin: the Admin API (Kong's shapes) and the status API.
//!
//! Runs on its own runtime thread, apart from the proxy workers. Writes go
//! through the store in one transaction and reach the proxy through the
//! snapshot compiler; nothing here touches a proxy worker.
#![forbid(unsafe_code)]
// Handlers return early with a ready response as their error value; boxing
// every response to satisfy the size lint would only add allocations.
#![allow(clippy::result_large_err)]

mod body;
mod clustering;
mod config_endpoint;
mod crud;
mod dispatch;

pub use dispatch::in_read_request;
mod acme;
pub mod endpoints;
mod errors;
mod filter_chains;
pub mod fuzzing;
pub mod gui;
mod health;
mod meta;
mod metrics;
mod oauth2_tokens;
pub mod openapi;
pub mod origin;
mod proxy_cache;
mod request;
mod request_id;
mod response;
mod root;
mod server;
mod sessions;
mod short_writes;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde_json::Value;
use strait_core::RouterFlavor;
use strait_runtime::stats::ProxyStats;
use strait_snapshot::SnapshotPublisher;
use strait_store::Store;

pub use config_endpoint::{load_declarative, LoadError};
pub use server::{serve_admin, serve_status};

/// Kong Admin API version Strait follows.
pub const KONG_COMPATIBLE_VERSION: &str = "3.9.0";

/// What the Admin API needs from the node.
pub struct AdminState {
    pub store: Arc<dyn Store>,
    pub publisher: SnapshotPublisher,
    pub stats: Arc<ProxyStats>,
    pub node_id: String,
    pub hostname: String,
    /// The node's effective settings, shown by `GET /`.
    pub configuration: Value,
    /// Set once startup has loaded the stored configuration.
    pub ready: Arc<AtomicBool>,
    /// `router_flavor`: which route fields writes may use.
    pub router_flavor: RouterFlavor,
    /// `admin_token`: when set, requests need `Authorization: Bearer <token>`.
    pub admin_token: Option<String>,
    /// Held by every configuration write from its first read to its publish,
    /// so writes apply (and reach the compiler) one at a time, in order.
    pub writes: tokio::sync::Mutex<()>,
    /// What the last accepted declarative document held, for parsing the
    /// next one as changes (see `load_declarative`).
    pub declarative: std::sync::Mutex<Option<strait_core::Memo>>,
    /// Kong's `headers` setting (`Server`, `X-Kong-Admin-Latency`).
    pub headers: strait_core::header_switches::HeaderSwitches,
    /// The node's side in hybrid mode, if it has one.
    pub cluster: Cluster,
    /// The origins that may drive the Admin API from a browser (the admin
    /// UI's); requests from any other are refused.
    pub origins: origin::AllowedOrigins,
}

/// What the Admin API knows of hybrid mode.
pub enum Cluster {
    /// `role = traditional`.
    None,
    /// The data planes this control plane serves.
    ControlPlane(std::sync::Arc<strait_cluster::cp::DataPlanes>),
    /// This data plane's link to its control plane; configuration writes
    /// are refused.
    DataPlane(std::sync::Arc<strait_cluster::dp::DataPlaneStatus>),
}

impl AdminState {
    /// The declarative memo (a poisoned lock still holds a valid memo or none).
    pub fn declarative_memo(&self) -> std::sync::MutexGuard<'_, Option<strait_core::Memo>> {
        self.declarative.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
