//! strait-plugins: the plugin phase trait, the registry that builds plugin
//! instances from configuration, and the bundled plugins (one module each).
//!
//! Plugins are built when a snapshot is compiled, never per request. This crate
//! knows nothing of sockets or stores: phases take a request context and return
//! a [`Flow`].
#![forbid(unsafe_code)]

mod request_termination;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

pub use request_termination::RequestTermination;

/// A response produced by a plugin instead of proxying.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// What a phase tells the proxy to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Flow {
    Continue,
    Respond(PluginResponse),
}

/// The request as plugins see it in the access phase.
#[derive(Debug)]
pub struct RequestContext<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a http::HeaderMap,
}

/// A built plugin instance. Every phase defaults to doing nothing.
pub trait Plugin: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    /// Kong's priority number: higher runs first.
    fn priority(&self) -> i32;
    fn access(&self, _ctx: &RequestContext<'_>) -> Flow {
        Flow::Continue
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PluginError {
    #[error("config.{field}: {message}")]
    InvalidConfig { field: String, message: String },
    #[error("plugin '{0}' is not implemented by this version of Strait")]
    NotImplemented(String),
}

/// Plugins this build can run.
pub const AVAILABLE: &[&str] = &["request-termination"];

/// Build an instance of plugin `name` from its (defaults-filled) config.
pub fn build_plugin(name: &str, config: &Map<String, Value>) -> Result<Arc<dyn Plugin>, PluginError> {
    match name {
        "request-termination" => Ok(Arc::new(RequestTermination::from_config(config)?)),
        other => Err(PluginError::NotImplemented(other.to_string())),
    }
}

/// An ordered list of plugin instances for one route.
#[derive(Debug, Clone, Default)]
pub struct PluginChain {
    plugins: Vec<Arc<dyn Plugin>>,
}

impl PluginChain {
    /// Order by Kong priority, highest first.
    pub fn new(mut plugins: Vec<Arc<dyn Plugin>>) -> PluginChain {
        plugins.sort_by_key(|p| std::cmp::Reverse(p.priority()));
        PluginChain { plugins }
    }

    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// Run the access phase of every plugin until one responds.
    pub fn access(&self, ctx: &RequestContext<'_>) -> Flow {
        for plugin in &self.plugins {
            if let Flow::Respond(response) = plugin.access(ctx) {
                return Flow::Respond(response);
            }
        }
        Flow::Continue
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }
}
