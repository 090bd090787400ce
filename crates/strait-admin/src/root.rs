//! `GET /`, `GET /status`, `GET /status/ready`.

use std::sync::atomic::Ordering;

use http::StatusCode;
use serde_json::{json, Value};

use crate::response::{json_response, message, AdminResponse};
use crate::{AdminState, KONG_COMPATIBLE_VERSION};

pub fn root(state: &AdminState) -> AdminResponse {
    let snapshot = state.publisher.current().load_full();
    let enabled = snapshot.enabled_plugin_names();
    // Kong 3.x: each plugin's handler VERSION and PRIORITY.
    let available: serde_json::Map<String, Value> = strait_plugins::available()
        .into_iter()
        .map(|name| {
            let version = strait_plugins::version_of(name).unwrap_or(strait_core::VERSION);
            let entry = json!({ "version": version, "priority": strait_plugins::priority_of(name) });
            (name.to_string(), entry)
        })
        .collect();
    let mut configuration = state.configuration.clone();
    if let Some(object) = configuration.as_object_mut() {
        let loaded = available.keys().map(|name| (name.clone(), Value::Bool(true))).collect();
        object.insert("loaded_plugins".into(), Value::Object(loaded));
    }
    let body = json!({
        "version": KONG_COMPATIBLE_VERSION,
        "strait_version": strait_core::VERSION,
        "edition": "community",
        "tagline": "Welcome to strait",
        "hostname": state.hostname,
        "node_id": state.node_id,
        "lua_version": Value::Null,
        "configuration": configuration,
        "plugins": {
            "available_on_server": available,
            "enabled_in_cluster": enabled,
        },
        "pids": { "master": std::process::id(), "workers": [std::process::id()] },
        "timers": { "running": 0, "pending": 0 },
    });
    json_response(StatusCode::OK, &body)
}

pub fn status(state: &AdminState) -> AdminResponse {
    let snapshot = state.publisher.current().load_full();
    let reachable = state.store.version().is_ok();
    let mut body = json!({
        "server": state.stats.to_json(),
        "database": { "reachable": reachable },
        "configuration_hash": snapshot.hash,
        "config_version": snapshot.version,
        "memory": { "rss_bytes": rss_bytes() },
        // Calls to Redis (rate-limiting's redis policy) that failed.
        "redis": { "errors_total": strait_runtime::redis::errors_total() },
        // Log entries dropped (full queue, retries exhausted, file writer
        // behind) and lines lost to file errors.
        "logs": {
            "dropped_total": strait_runtime::logs::queue::dropped_total()
                + strait_runtime::logs::files::dropped_total(),
            "write_failures_total": strait_runtime::logs::files::failed_total(),
        },
        // Responses by status class and by latency bucket since start: the
        // admin UI's dashboard takes rates and percentiles from these.
        "requests": strait_runtime::stats::responses_json(),
    });
    if let crate::Cluster::DataPlane(link) = &state.cluster {
        body["clustering"] = crate::clustering::link_json(link, snapshot.version);
    }
    json_response(StatusCode::OK, &body)
}

pub fn ready(state: &AdminState) -> AdminResponse {
    if state.ready.load(Ordering::Acquire) {
        message(StatusCode::OK, "ready")
    } else {
        message(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: configuration not loaded yet",
        )
    }
}

/// Resident set size of this process, from /proc.
pub(crate) fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
