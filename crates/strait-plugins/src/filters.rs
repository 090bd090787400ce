//! Kong's `filter_chains`, as the snapshot compiler sees them: for each
//! route, the enabled filters of its service's chain then those of its own
//! chain, built into one plugin instance by the Wasm host (strait-wasm),
//! which installs its factory at start-up when `wasm = on`. This crate only
//! carries the hook, so the snapshot compiler needs no Wasm runtime.

use std::sync::{Arc, PoisonError, RwLock};

use serde_json::Value;
use uuid::Uuid;

use crate::phase::Plugin;

/// One enabled filter of a chain, in chain order.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterSpec {
    /// The filter's name: its module's file name without `.wasm`.
    pub name: String,
    /// The filter's `config` as stored (any JSON; `None` when absent).
    pub config: Option<Value>,
}

/// What a built chain is attached to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterScope {
    pub route: Option<Uuid>,
    pub service: Option<Uuid>,
}

/// Builds the plugin instance that runs a route's filters.
pub type FilterChainFactory = Arc<dyn Fn(&[FilterSpec], FilterScope) -> Result<Arc<dyn Plugin>, String> + Send + Sync>;

static FACTORY: RwLock<Option<FilterChainFactory>> = RwLock::new(None);

/// Installs the Wasm host's factory (once, at start-up, before any
/// configuration is compiled).
pub fn set_filter_chain_factory(factory: FilterChainFactory) {
    *FACTORY.write().unwrap_or_else(PoisonError::into_inner) = Some(factory);
}

/// The instance running `filters` (non-empty, enabled ones, in order) for
/// a route; an error names why it cannot run (Wasm is off, a filter is
/// missing, its configuration is refused by the filter).
pub fn build_filter_chain(filters: &[FilterSpec], scope: FilterScope) -> Result<Arc<dyn Plugin>, String> {
    let factory = FACTORY.read().unwrap_or_else(PoisonError::into_inner).clone();
    match factory {
        Some(factory) => factory(filters, scope),
        None => Err("wasm support is not enabled".to_string()),
    }
}
