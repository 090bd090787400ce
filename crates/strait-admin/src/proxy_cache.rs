//! Kong's proxy-cache Admin endpoints, over the memory strategy's stores:
//! `DELETE /proxy-cache` (flush every store), `GET`/`DELETE
//! /proxy-cache/{cache_key}` (look in every store) and `GET`/`DELETE
//! /proxy-cache/{plugin_id}/caches/{cache_key}` (only that plugin's store).
//! Cached responses are runtime data: purging never touches configuration.

use http::{Method, StatusCode};
use serde_json::Value;
use strait_core::{Entity, EntityKind};
use strait_runtime::cache::{self as store, MemoryStore};
use uuid::Uuid;

use crate::response::{empty_response, failure, json_response, not_found, AdminResponse};
use crate::AdminState;

/// `DELETE /proxy-cache`.
pub fn flush_all() -> AdminResponse {
    for (_, cache) in store::all() {
        cache.flush();
    }
    empty_response(StatusCode::NO_CONTENT)
}

fn get_or_purge(cache: &MemoryStore, key: &str, method: &Method) -> Option<AdminResponse> {
    let cached = cache.fetch(key)?;
    if method == Method::DELETE {
        cache.purge(key);
        return Some(empty_response(StatusCode::NO_CONTENT));
    }
    Some(json_response(StatusCode::OK, &cached.to_json()))
}

/// `GET` / `DELETE /proxy-cache/{cache_key}`: the first store holding it.
pub fn by_key(key: &str, method: &Method) -> AdminResponse {
    store::all()
        .iter()
        .find_map(|(_, cache)| get_or_purge(cache, key, method))
        .unwrap_or_else(not_found)
}

/// `GET` / `DELETE /proxy-cache/{plugin_id}/caches/{cache_key}`.
pub fn by_plugin(state: &AdminState, plugin_id: &str, key: &str, method: &Method) -> AdminResponse {
    let Ok(id) = Uuid::parse_str(plugin_id) else {
        return not_found();
    };
    let plugin = match state.store.get(EntityKind::Plugins, id) {
        Ok(Some(Entity::Plugin(plugin))) if plugin.name == "proxy-cache" => plugin,
        Ok(_) => return not_found(),
        Err(error) => return failure(&error),
    };
    let dictionary = plugin
        .config
        .get("memory")
        .and_then(|m| m.get("dictionary_name"))
        .and_then(Value::as_str)
        .unwrap_or("kong_db_cache");
    store::existing(dictionary)
        .and_then(|cache| get_or_purge(&cache, key, method))
        .unwrap_or_else(not_found)
}
