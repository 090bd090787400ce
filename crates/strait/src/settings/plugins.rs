//! The settings of plugins that are not Strait's own code: Lua (`untrusted_lua*`,
//! `lua_*`, custom `plugins`), Kong's plugin servers (`pluginserver_*`) and
//! proxy-wasm filters (`wasm*`).

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};

use super::{parse_duration, parse_size, parse_switch, RawSettings};

/// `untrusted_lua*`, `lua_*` and the custom plugins `plugins` names.
pub fn lua_settings(raw: &RawSettings) -> Result<strait_lua::LuaSettings> {
    Ok(strait_lua::LuaSettings {
        untrusted_lua: raw
            .get("untrusted_lua")
            .parse()
            .map_err(|e: String| anyhow!("untrusted_lua: {e}"))?,
        sandbox_requires: strait_lua::list(raw.get("untrusted_lua_sandbox_requires")),
        sandbox_environment: strait_lua::list(raw.get("untrusted_lua_sandbox_environment")),
        max_run_time: parse_duration("lua_max_run_time", raw.get("lua_max_run_time"))?,
        memory_limit: parse_size("lua_memory_limit", raw.get("lua_memory_limit"))?,
        custom_plugins: strait_lua::list(raw.get("plugins"))
            .into_iter()
            .filter(|name| name != "bundled" && name != "off")
            .collect(),
        package_path: raw.get("lua_package_path").to_string(),
    })
}

/// `pluginserver_names` and each server's settings, with Kong's defaults:
/// the socket `<prefix>/<name>.socket`; the start and query commands
/// `/usr/local/bin/<name>` and `/usr/local/bin/<name> -dump` when that file
/// exists. A server without a query command is refused (Kong's message).
pub fn external_settings(raw: &RawSettings) -> Result<strait_external::ExternalSettings> {
    let prefix = PathBuf::from(raw.get("prefix"));
    let mut servers = Vec::new();
    for name in strait_lua::list(raw.get("pluginserver_names")) {
        let name = name.to_ascii_lowercase();
        if name == "off" || name == "none" {
            continue;
        }
        let key = |suffix: &str| format!("pluginserver_{}_{suffix}", name.replace('-', "_"));
        let set = |suffix: &str| {
            Some(raw.get(&key(suffix)).trim())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let installed = PathBuf::from("/usr/local/bin").join(&name);
        let installed = installed.exists().then(|| installed.display().to_string());
        let query_cmd = set("query_cmd")
            .or_else(|| installed.as_ref().map(|path| format!("{path} -dump")))
            .ok_or_else(|| anyhow!("query_command undefined for pluginserver {name}"))?;
        servers.push(strait_external::ServerSettings {
            socket: set("socket").map_or_else(|| prefix.join(format!("{name}.socket")), PathBuf::from),
            start_cmd: set("start_cmd").or(installed),
            query_cmd,
            name,
        });
    }
    Ok(strait_external::ExternalSettings {
        servers,
        timeout: parse_duration("pluginserver_timeout", raw.get("pluginserver_timeout"))?,
    })
}

/// `wasm`, `wasm_filters_path`, `wasm_filters` (Kong's), and Strait's
/// `wasm_max_run_time` and `wasm_max_memory`. With `wasm = on` the
/// filters path must be set (Kong refuses to start without filters).
pub fn wasm_settings(raw: &RawSettings) -> Result<strait_wasm::WasmSettings> {
    let enabled = parse_switch("wasm", raw.get("wasm"))?;
    let path = raw.get("wasm_filters_path").trim();
    let filters_path = (!path.is_empty()).then(|| PathBuf::from(path));
    if enabled && filters_path.is_none() {
        bail!("wasm_filters_path: must be set when wasm = on");
    }
    let filters = strait_lua::list(raw.get("wasm_filters"));
    if filters.iter().any(|f| f == "off") && filters.len() > 1 {
        bail!("wasm_filters: 'off' cannot be used with other values");
    }
    let max_run_time = parse_duration("wasm_max_run_time", raw.get("wasm_max_run_time"))?;
    if max_run_time.is_zero() {
        bail!("wasm_max_run_time: must be more than 0");
    }
    Ok(strait_wasm::WasmSettings {
        enabled,
        filters_path,
        filters,
        max_memory: parse_size("wasm_max_memory", raw.get("wasm_max_memory"))?,
        max_run_time,
    })
}
