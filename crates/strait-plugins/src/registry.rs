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

/// Builds an instance of a plugin whose definition arrives at run time
/// (a custom Lua plugin's handler and schema): a closure over it.
pub type DynamicFactory =
    Arc<dyn Fn(&Map<String, Value>, PluginScope) -> Result<Arc<dyn Plugin>, PluginError> + Send + Sync>;

/// An entry another crate added ([`add`], [`add_dynamic`]).
struct Added {
    name: &'static str,
    priority: i32,
    /// The plugin's own version (a custom plugin's `VERSION`, a plugin
    /// server's `Version`); `None` for Strait's own.
    version: Option<&'static str>,
    build: DynamicFactory,
}

/// Entries added at start-up by other crates.
static ADDED: RwLock<Vec<Added>> = RwLock::new(Vec::new());

/// Adds a plugin implemented outside this crate and registers its config
/// schema with strait-core, so every write path validates it. A name
/// already added is replaced (adding twice is harmless).
pub fn add(plugin: BundledPlugin) {
    let build = plugin.build;
    add_dynamic(plugin.name, plugin.priority, (plugin.schema)(), Arc::new(build));
}

/// [`add`] for a plugin whose schema and factory are made at run time.
pub fn add_dynamic(name: &'static str, priority: i32, schema: PluginSchema, build: DynamicFactory) {
    add_versioned(name, priority, None, schema, build);
}

/// [`add_dynamic`] for a plugin with a version of its own (Kong shows it
/// in `GET /`'s `available_on_server`).
pub fn add_versioned(
    name: &'static str,
    priority: i32,
    version: Option<&'static str>,
    schema: PluginSchema,
    build: DynamicFactory,
) {
    register_plugin_schema(name, schema);
    let entry = Added {
        name,
        priority,
        version,
        build,
    };
    let mut added = ADDED.write().unwrap_or_else(PoisonError::into_inner);
    match added.iter_mut().find(|p| p.name == name) {
        Some(slot) => *slot = entry,
        None => added.push(entry),
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

/// The bundled entry of plugin `name`.
fn find(name: &str) -> Option<&'static BundledPlugin> {
    BUNDLED.iter().find(|plugin| plugin.name == name)
}

/// The priority and factory of an added plugin `name`.
fn find_added(name: &str) -> Option<(i32, DynamicFactory)> {
    let added = ADDED.read().unwrap_or_else(PoisonError::into_inner);
    added
        .iter()
        .find(|plugin| plugin.name == name)
        .map(|plugin| (plugin.priority, plugin.build.clone()))
}

/// The version of an added plugin that has its own (`None`: Strait's).
pub fn version_of(name: &str) -> Option<&'static str> {
    let added = ADDED.read().unwrap_or_else(PoisonError::into_inner);
    added
        .iter()
        .find(|plugin| plugin.name == name)
        .and_then(|plugin| plugin.version)
}

/// Kong's priority of a plugin this build runs (higher runs first).
pub fn priority_of(name: &str) -> Option<i32> {
    match find(name) {
        Some(plugin) => Some(plugin.priority),
        None => find_added(name).map(|(priority, _)| priority),
    }
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
    if let Some(plugin) = find(name) {
        return (plugin.build)(config, scope);
    }
    match find_added(name) {
        Some((_, build)) => build(config, scope),
        None => Err(PluginError::NotImplemented(name.to_string())),
    }
}

#[cfg(test)]
mod entity_tests;
#[cfg(test)]
mod schema_tests;
#[cfg(test)]
mod tests;
