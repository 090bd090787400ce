//! The registry: the plugins this build runs, as entries of one type
//! whatever their kind. Bundled plugins are listed in [`crate::bundled`];
//! plugins another crate implements (strait-lua's `pre-function` and
//! `post-function`; later plugin servers and Wasm) are added at start-up
//! with [`add`], before any configuration is read.

use std::sync::{Arc, Once, PoisonError, RwLock};

use serde_json::{Map, Value};
use strait_core::schema::{register_plugin_schema, PluginSchema};

pub use crate::bundled::rate_limiting::PluginScope;
use crate::bundled::BUNDLED;
use crate::phase::Plugin;
use crate::PluginError;

/// One plugin kind: its name, Kong priority, config schema and factory.
#[derive(Clone, Copy)]
pub struct BundledPlugin {
    pub name: &'static str,
    /// Kong's priority (higher runs first).
    pub priority: i32,
    /// The config schema, registered with strait-core by [`install`].
    pub schema: fn() -> PluginSchema,
    /// Builds an instance from a validated (defaults-filled) config, for a
    /// plugin entity scoped to a route and service.
    pub build: PluginFactory,
}

/// Builds a plugin instance from its validated config and scope.
pub type PluginFactory = fn(&Map<String, Value>, PluginScope) -> Result<Arc<dyn Plugin>, PluginError>;

/// Names of the bundled plugins, as listed in [`crate::bundled`].
pub const AVAILABLE: &[&str] = &{
    let mut names = [""; BUNDLED.len()];
    let mut index = 0;
    while index < BUNDLED.len() {
        names[index] = BUNDLED[index].name;
        index += 1;
    }
    names
};

/// Registers every bundled plugin's config schema with strait-core, once
/// per process. Every entry point that validates configuration (the
/// binary, and tests that validate plugin configs) calls it first.
pub fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        for plugin in BUNDLED {
            register_plugin_schema(plugin.name, (plugin.schema)());
        }
    });
}

/// Entries added at start-up by other crates ([`add`]).
static ADDED: RwLock<Vec<BundledPlugin>> = RwLock::new(Vec::new());

/// Adds a plugin implemented outside this crate and registers its config
/// schema with strait-core, so every write path validates it. A name
/// already in the registry is replaced (adding twice is harmless).
pub fn add(plugin: BundledPlugin) {
    register_plugin_schema(plugin.name, (plugin.schema)());
    let mut added = ADDED.write().unwrap_or_else(PoisonError::into_inner);
    match added.iter_mut().find(|p| p.name == plugin.name) {
        Some(slot) => *slot = plugin,
        None => added.push(plugin),
    }
}

/// Names of every plugin this build runs (bundled and added), sorted.
pub fn available() -> Vec<&'static str> {
    let added = ADDED.read().unwrap_or_else(PoisonError::into_inner);
    let mut names: Vec<&'static str> = AVAILABLE.iter().copied().chain(added.iter().map(|p| p.name)).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The registry entry of plugin `name`.
pub fn find(name: &str) -> Option<BundledPlugin> {
    if let Some(plugin) = BUNDLED.iter().find(|plugin| plugin.name == name) {
        return Some(*plugin);
    }
    let added = ADDED.read().unwrap_or_else(PoisonError::into_inner);
    added.iter().find(|plugin| plugin.name == name).copied()
}

/// Kong's priority of a plugin this build runs (higher runs first).
pub fn priority_of(name: &str) -> Option<i32> {
    find(name).map(|plugin| plugin.priority)
}

/// Build an instance of plugin `name` from its (defaults-filled) config,
/// scoped to no route or service.
pub fn build_plugin(name: &str, config: &Map<String, Value>) -> Result<Arc<dyn Plugin>, PluginError> {
    build_scoped_plugin(name, config, PluginScope::default())
}

/// [`build_plugin`] for a plugin entity scoped to `scope` (the route and
/// service it is configured on), which keys state that outlives instances.
pub fn build_scoped_plugin(
    name: &str,
    config: &Map<String, Value>,
    scope: PluginScope,
) -> Result<Arc<dyn Plugin>, PluginError> {
    match find(name) {
        Some(plugin) => (plugin.build)(config, scope),
        None => Err(PluginError::NotImplemented(name.to_string())),
    }
}

#[cfg(test)]
mod entity_tests;
#[cfg(test)]
mod schema_tests;
#[cfg(test)]
mod tests;
