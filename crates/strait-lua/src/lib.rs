//! Lua plugins on an embedded LuaJIT (issue 60; the design, with what
//! Kong 3.9 does, is docs/design/lua-plugins.md): Kong's `pre-function`
//! and `post-function`, under Kong's `untrusted_lua` setting, with a
//! subset of Kong's PDK (docs/plugins.md "Writing plugins in Lua" lists
//! it), one Lua state per worker thread and a time budget per phase call.
#![deny(unsafe_code)]

mod budget;
mod ctx;
mod custom;
mod fast;
mod functions;
mod ngx;
mod pdk;
mod scoped;
mod settings;
mod worker;

pub use custom::load as load_custom_plugins;
pub use pdk::client::set_node;
pub use settings::{configure, list, LuaSettings, UntrustedLua};

/// Adds `pre-function` and `post-function` to the plugin registry (their
/// schemas included): called once at start-up, after
/// `strait_plugins::install`, before any configuration is read.
pub fn install() {
    strait_plugins::add(functions::PRE_FUNCTION);
    strait_plugins::add(functions::POST_FUNCTION);
}

/// The Lua the plugins run on, as its `jit.version` (or `_VERSION`) says.
pub fn lua_version() -> String {
    let lua = mlua::Lua::new();
    lua.load("return (jit and jit.version) or _VERSION")
        .eval::<String>()
        .unwrap_or_else(|_| "unknown".to_string())
}
