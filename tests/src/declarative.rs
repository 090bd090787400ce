//! Builders for Kong declarative configs (as JSON values, which Kong and Strait both accept).

use serde_json::{json, Value};

/// Path of the marker route [`crate::Gateway::apply`] adds to know a config is live.
pub const MARKER_PATH: &str = "/__e2e_marker";

/// A service URL nothing should ever be proxied to (request-termination answers first).
pub const NOWHERE_URL: &str = "http://127.0.0.1:9";

/// `{"_format_version": "3.0", "services": services}`.
pub fn config(services: Vec<Value>) -> Value {
    json!({ "_format_version": "3.0", "services": services })
}

/// A service with nested routes.
pub fn service(name: &str, url: &str, routes: Vec<Value>) -> Value {
    json!({ "name": name, "url": url, "routes": routes })
}

/// A route matching path prefixes (or `~` regexes).
pub fn route(name: &str, paths: &[&str]) -> Value {
    json!({ "name": name, "paths": paths })
}

/// The request-termination plugin answering `status` with `{"message": message}`.
pub fn termination(status: u16, message: &str) -> Value {
    json!({ "name": "request-termination", "config": { "status_code": status, "message": message } })
}

/// Adds a request-termination plugin answering 200 `{"message": message}` to `route`.
pub fn answering(mut route: Value, message: &str) -> Value {
    route["plugins"] = json!([termination(200, message)]);
    route
}

/// A service whose routes all answer without an upstream.
pub fn terminating_service(name: &str, routes: Vec<Value>) -> Value {
    service(name, NOWHERE_URL, routes)
}

/// The marker service [`crate::Gateway::apply`] appends.
pub fn marker_service(token: &str) -> Value {
    terminating_service(
        "e2e-marker-service",
        vec![answering(route("e2e-marker", &[MARKER_PATH]), token)],
    )
}

/// A config of `count` routes `/r{i}` answering `r{i}`, plus `/version` answering `version`.
pub fn many_routes(count: usize, version: &str) -> Value {
    let mut routes: Vec<Value> = (0..count)
        .map(|i| answering(route(&format!("r{i}"), &[&format!("/r{i}")]), &format!("r{i}")))
        .collect();
    routes.push(answering(route("version", &["/version"]), version));
    config(vec![terminating_service("many", routes)])
}
