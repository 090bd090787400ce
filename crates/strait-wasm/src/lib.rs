//! strait-wasm: the host for proxy-wasm filters (Kong's `filter_chains`).
//!
//! At start-up, with `wasm = on`, every filter in `wasm_filters_path` is
//! compiled once (Wasmtime, Cranelift) and checked; its name and config
//! schema go to strait-core (which validates `filter_chains` on every write
//! path), and a factory goes to strait-plugins, through which the snapshot
//! compiler turns each route's filters into one plugin ([`chain`]). Each
//! worker thread instantiates a filter on its first request for it
//! ([`instance`]); the host functions are in [`host`].
//!
//! Limits: a request's callbacks run at most `wasm_max_run_time` together
//! (epoch interruption, [`runtime`]); an instance's memory is capped at
//! `wasm_max_memory`. A trap fails the request with Kong's 500 and a log
//! line, and the thread's instance is made again.
#![forbid(unsafe_code)]

mod access;
mod calls;
mod chain;
mod exchange;
mod filter;
mod host;
mod instance;
mod runtime;
mod schema;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use strait_plugins::filters::{FilterScope, FilterSpec};
use strait_plugins::Plugin;

use crate::chain::{ChainEntry, FilterChain};
use crate::filter::{Filter, Limits};

/// The Kong version filters see in `kong.version`.
pub(crate) const KONG_VERSION: &str = "3.9.0";

/// `wasm`, `wasm_filters_path`, `wasm_filters`, and Strait's limits.
#[derive(Debug, Clone)]
pub struct WasmSettings {
    pub enabled: bool,
    pub filters_path: Option<PathBuf>,
    /// Kong's `wasm_filters`: `bundled`, `user`, `off`, or filter names.
    pub filters: Vec<String>,
    pub max_memory: usize,
    pub max_run_time: Duration,
}

/// A loaded filter, as strait-core needs to know it.
#[derive(Debug, Clone)]
pub struct LoadedFilter {
    pub name: String,
    /// The `config_schema` of its meta file, if any.
    pub config_schema: Option<Value>,
}

/// Checks `config` against a filter's `config_schema`.
pub fn check_config(schema: &Value, config: &Value) -> Result<(), String> {
    schema::validate(schema, config)
}

/// Loads the filters and installs the factory that builds filter chains.
/// With `wasm = off` nothing is loaded (and filter chains are refused).
pub fn load(settings: &WasmSettings) -> Result<Vec<LoadedFilter>, String> {
    if !settings.enabled || settings.filters.iter().any(|f| f == "off") {
        return Ok(Vec::new());
    }
    let limits = Limits {
        max_memory: settings.max_memory,
        max_run_time: settings.max_run_time,
    };
    let filters: Vec<Arc<Filter>> = match &settings.filters_path {
        Some(dir) => filter::load_all(dir, &settings.filters, limits)?
            .into_iter()
            .map(Arc::new)
            .collect(),
        None => Vec::new(),
    };
    let loaded = filters
        .iter()
        .map(|f| LoadedFilter {
            name: f.name.to_string(),
            config_schema: f.config_schema.clone(),
        })
        .collect();
    let budget = settings.max_run_time;
    strait_plugins::filters::set_filter_chain_factory(Arc::new(move |specs, scope| {
        build_chain(&filters, specs, scope, budget)
    }));
    Ok(loaded)
}

fn build_chain(
    filters: &[Arc<Filter>],
    specs: &[FilterSpec],
    _scope: FilterScope,
    budget: Duration,
) -> Result<Arc<dyn Plugin>, String> {
    let mut entries = Vec::with_capacity(specs.len());
    for spec in specs {
        let filter = filters
            .iter()
            .find(|f| *f.name == *spec.name)
            .ok_or_else(|| format!("no such filter: {}", spec.name))?;
        entries.push(ChainEntry {
            filter: filter.clone(),
            configuration: chain::Configuration::interned(configuration_bytes(spec.config.as_ref())),
        });
    }
    Ok(Arc::new(FilterChain { entries, budget }))
}

/// What `proxy_on_configure` reads: a string config as written, any
/// other JSON encoded (Kong's rule), nothing for none.
fn configuration_bytes(config: Option<&Value>) -> Arc<[u8]> {
    match config {
        None | Some(Value::Null) => Arc::from(Vec::new()),
        Some(Value::String(text)) => Arc::from(text.as_bytes()),
        Some(other) => Arc::from(other.to_string().into_bytes()),
    }
}

/// The wasmtime release filters run on: the version the workspace pins
/// (`=` in Cargo.toml; a test keeps the two equal).
pub const WASMTIME_VERSION: &str = "48.0.8";

#[cfg(test)]
mod version_tests {
    #[test]
    fn the_reported_wasmtime_version_is_the_pinned_one() {
        let manifest = include_str!("../../../Cargo.toml");
        let pinned = format!("wasmtime = {{ version = \"={}\"", super::WASMTIME_VERSION);
        assert!(
            manifest.contains(&pinned),
            "Cargo.toml pins another wasmtime than {}",
            super::WASMTIME_VERSION
        );
    }
}
