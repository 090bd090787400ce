//! Filters on disk: every `<name>.wasm` at the top of `wasm_filters_path`
//! (Kong's rule: no recursion, the name is the file name without `.wasm`),
//! with its `<name>.meta.json` when there is one. Each is compiled once,
//! at start-up, and checked to be a proxy-wasm filter of ABI 0.2.0 or 0.2.1.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use wasmtime::{InstancePre, Module};

use crate::instance::HostState;

/// What one instance of a filter may use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Linear memory, in bytes.
    pub max_memory: usize,
    /// Time the request's callbacks may run, all together.
    pub max_run_time: Duration,
}

pub(crate) struct Filter {
    pub name: Arc<str>,
    /// Its place in the list: the index of its thread-local instances.
    pub index: usize,
    pub pre: InstancePre<HostState>,
    pub limits: Limits,
    /// `config_schema` of its meta file (JSON Schema draft 4).
    pub config_schema: Option<Value>,
    /// It imports `proxy_http_call`: its requests may wait on calls.
    pub makes_calls: bool,
}

/// The `.wasm` files at the top of `dir`, sorted by name, as (name, path).
fn listed(dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("wasm_filters_path {}: {e}", dir.display()))?;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(stem) = name.strip_suffix(".wasm").filter(|s| !s.is_empty()) {
            if path.is_file() {
                found.push((stem.to_string(), path.clone()));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Loads the filters of `dir` that `wanted` lets in (Kong's
/// `wasm_filters`: `bundled`, `user` or names; Strait bundles none).
pub(crate) fn load_all(dir: &Path, wanted: &[String], limits: Limits) -> Result<Vec<Filter>, String> {
    let everything = wanted.iter().any(|w| w == "user");
    let mut filters = Vec::new();
    for (name, path) in listed(dir)? {
        if !everything && !wanted.contains(&name) {
            continue;
        }
        let index = filters.len();
        filters.push(load_one(&name, &path, index, limits)?);
    }
    for name in wanted {
        let keyword = matches!(name.as_str(), "user" | "bundled" | "off");
        if !keyword && !filters.iter().any(|f| &*f.name == name) {
            return Err(format!("wasm_filters: no filter named {name} in {}", dir.display()));
        }
    }
    Ok(filters)
}

fn load_one(name: &str, path: &Path, index: usize, limits: Limits) -> Result<Filter, String> {
    let engine = crate::runtime::engine()?;
    let bytes = std::fs::read(path).map_err(|e| format!("filter {name} ({}): {e}", path.display()))?;
    let module = Module::new(engine, &bytes).map_err(|e| format!("filter {name} ({}): {e:#}", path.display()))?;
    check_abi(name, &module)?;
    let linker = crate::host::linker(&module).map_err(|e| format!("filter {name}: {e:#}"))?;
    let pre = linker
        .instantiate_pre(&module)
        .map_err(|e| format!("filter {name}: {e:#}"))?;
    let config_schema = meta_schema(name, path)?;
    let makes_calls = module
        .imports()
        .any(|i| i.module() == "env" && i.name() == "proxy_http_call");
    Ok(Filter {
        makes_calls,
        name: Arc::from(name),
        index,
        pre,
        limits,
        config_schema,
    })
}

/// ABI 0.2.0 and 0.2.1 are served; 0.1.0 (and a module that is no filter)
/// is refused at start-up, by name.
fn check_abi(name: &str, module: &Module) -> Result<(), String> {
    let exports: Vec<&str> = module.exports().map(|e| e.name()).collect();
    if exports
        .iter()
        .any(|e| matches!(*e, "proxy_abi_version_0_2_0" | "proxy_abi_version_0_2_1"))
    {
        return Ok(());
    }
    match exports.iter().find(|e| e.starts_with("proxy_abi_version_")) {
        Some(other) => Err(format!(
            "filter {name}: {other} is not supported (proxy-wasm ABI 0.2.0 and 0.2.1 are)"
        )),
        None => Err(format!(
            "filter {name}: not a proxy-wasm filter (no proxy_abi_version_* export)"
        )),
    }
}

/// The `config_schema` of `<name>.meta.json` beside the module, if any.
fn meta_schema(name: &str, path: &Path) -> Result<Option<Value>, String> {
    let meta = path.with_file_name(format!("{name}.meta.json"));
    let text = match std::fs::read_to_string(&meta) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("filter {name}: {}: {error}", meta.display())),
    };
    let bad = |why: String| {
        format!(
            "Failed to load metadata for one or more filters: {}: {why}",
            meta.display()
        )
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let Value::Object(mut object) = value else {
        return Err(bad("not a JSON object".into()));
    };
    let Some(schema) = object.remove("config_schema") else {
        return Ok(None);
    };
    crate::schema::check_supported(&schema).map_err(|e| bad(format!("config_schema: {e}")))?;
    Ok(Some(schema))
}
