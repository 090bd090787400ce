//! The node settings Lua plugins read: Kong's `untrusted_lua`,
//! `untrusted_lua_sandbox_requires` and `untrusted_lua_sandbox_environment`,
//! and Strait's own `lua_max_run_time`.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// Kong's `untrusted_lua`: whether code sent through the Admin API
/// (pre-function, post-function) may run, and in what environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UntrustedLua {
    /// Never loaded: a request that needs it gets 500.
    Off,
    /// Kong's sandbox: a whitelist of globals, protected modules, `require`
    /// only of the modules named in `untrusted_lua_sandbox_requires`.
    Sandbox,
    /// Everything the worker's state has.
    On,
}

impl std::str::FromStr for UntrustedLua {
    type Err = String;

    fn from_str(text: &str) -> Result<UntrustedLua, String> {
        match text {
            "off" => Ok(UntrustedLua::Off),
            "sandbox" => Ok(UntrustedLua::Sandbox),
            "on" => Ok(UntrustedLua::On),
            other => Err(format!("expected one of off, sandbox, on (got {other:?})")),
        }
    }
}

/// What a worker's Lua state is made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaSettings {
    pub untrusted_lua: UntrustedLua,
    /// Modules sandboxed code may `require`.
    pub sandbox_requires: Vec<String>,
    /// Dotted global names (`ngx.re`) sandboxed code may read.
    pub sandbox_environment: Vec<String>,
    /// The most one phase call of Lua code may run; zero for no limit.
    pub max_run_time: Duration,
    /// The most memory one worker's Lua state may hold, in bytes; zero for
    /// no limit.
    pub memory_limit: usize,
    /// Custom plugins to load (`plugins` without `bundled`).
    pub custom_plugins: Vec<String>,
    /// `lua_package_path`: where `require` looks first.
    pub package_path: String,
}

impl Default for LuaSettings {
    fn default() -> LuaSettings {
        LuaSettings {
            untrusted_lua: UntrustedLua::Sandbox,
            sandbox_requires: Vec::new(),
            sandbox_environment: Vec::new(),
            max_run_time: Duration::from_millis(100),
            memory_limit: 256 << 20,
            custom_plugins: Vec::new(),
            package_path: "./?.lua;./?/init.lua;".into(),
        }
    }
}

static SETTINGS: RwLock<Option<Arc<LuaSettings>>> = RwLock::new(None);

/// Sets the settings the workers' states are made with (at start-up).
pub fn configure(settings: LuaSettings) {
    *SETTINGS.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(settings));
}

/// The settings in force (the defaults until [`configure`]).
pub(crate) fn current() -> Arc<LuaSettings> {
    SETTINGS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
}

/// A comma-separated list setting (Kong's array type).
pub fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(String::from)
        .collect()
}
