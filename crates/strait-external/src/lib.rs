//! Plugins in Go, Python and JavaScript, run by Kong's plugin servers
//! (issue 61; what Kong 3.9 and its PDKs do is docs/design/plugin-servers.md):
//! `pluginserver_names` and each server's `_socket`, `_start_cmd` and
//! `_query_cmd`, as in Kong. At start-up each server's query command names
//! its plugin, priority, phases and schema; the plugin joins the registry
//! with that schema (so every write path validates its config) and the
//! server is started and kept running. A request's `access` phase is an
//! event on the server, its PDK calls (pdk.rs) served from the request.
//!
//! Both of Kong's protocols: `MsgPack:1` (the Python and JavaScript PDKs,
//! mp_rpc.rs) and `ProtoBuf:1` (go-pdk, pb_rpc.rs), over one PDK (pdk.rs).
#![deny(unsafe_code)]

mod child;
mod mp_rpc;
pub mod msgpack;
mod pb_rpc;
mod pdk;
mod plugin;
mod server;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value as Json};
use strait_core::schema::kong_dsl;

pub use pdk::set_node;
pub use server::{PluginInfo, Protocol, ServerSettings};

/// The plugin servers' settings.
#[derive(Debug, Clone, Default)]
pub struct ExternalSettings {
    pub servers: Vec<ServerSettings>,
    /// The most one event (a phase of a request) may take on a server.
    pub timeout: Duration,
}

/// Phases a plugin server's plugin may have that this version runs.
const RUN: [&str; 2] = ["access", "log"];

/// Queries every server, adds each plugin named in `plugins` to the
/// registry, and (with `start`) starts the servers. Returns the names of
/// the plugins the servers provide. The error is Kong's shape: `error
/// loading plugin schemas: on plugin '<name>': <why>`.
pub fn load(settings: &ExternalSettings, plugins: &[String], start: bool) -> Result<Vec<String>, String> {
    let mut served = Vec::new();
    for server_settings in &settings.servers {
        let info =
            server::query(server_settings).map_err(|why| format!("pluginserver {}: {why}", server_settings.name))?;
        let name = info.name.clone();
        if !plugins.contains(&name) {
            tracing::warn!(
                "pluginserver {} serves plugin '{name}', which `plugins` does not name: it is not loaded",
                server_settings.name
            );
            continue;
        }
        let why = |why: String| format!("error loading plugin schemas: on plugin '{name}': {why}");
        if strait_plugins::priority_of(&name).is_some() {
            return Err(why("a plugin of that name is already bundled".into()));
        }
        if let Some(phase) = info.phases.iter().find(|p| !RUN.contains(&p.as_str())) {
            return Err(why(format!(
                "the plugin has a {phase} phase: Strait runs a plugin server's access and log phases in this version"
            )));
        }
        let schema = kong_dsl::plugin_schema(&info.schema).map_err(why)?;
        let server = match start {
            true => server::supervise(server_settings),
            false => Arc::new(server::Server::unmanaged(server_settings)),
        };
        let (static_name, priority) = (info.name_static, info.priority);
        // Kept for the process's life, as the name: one per server.
        let version: &'static str = Box::leak(info.version.clone().into_boxed_str());
        let host = Arc::new(plugin::Host::new(info, server, settings.timeout));
        strait_plugins::add_versioned(
            static_name,
            priority,
            Some(version),
            schema,
            Arc::new(move |config: &Map<String, Json>, scope| {
                Ok(Arc::new(plugin::External::new(host.clone(), config, scope)) as Arc<dyn strait_plugins::Plugin>)
            }),
        );
        served.push(name);
    }
    Ok(served)
}
