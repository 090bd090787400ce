//! Route rules that span fields: Kong's per-protocol subschemas (http,
//! stream, grpc), mutually exclusive protocol sets and the `snis` condition.

use serde_json::{json, Map, Value};

use super::proxy::{has, lowercase_headers};
use crate::error::FieldError;

const EXCLUSIVE_SETS: &[&[&str]] = &[
    &["http", "https"],
    &["tcp", "tls", "udp"],
    &["tls_passthrough"],
    &["grpc", "grpcs"],
    &["ws", "wss"],
];

const SNI_PROTOCOLS: &[&str] = &["grpcs", "https", "tls", "tls_passthrough", "wss"];

/// Kong's message when an http(s) route sets nothing to match on.
pub const ROUTE_HTTPS_NEEDS_MATCHER: &str =
    "must set one of 'methods', 'hosts', 'headers', 'paths', 'snis' when 'protocols' is 'https'";
/// Kong's message when an http-only route sets nothing to match on.
pub const ROUTE_HTTP_NEEDS_MATCHER: &str =
    "must set one of 'methods', 'hosts', 'headers', 'paths' when 'protocols' is 'http'";

pub(crate) fn entity_checks_json() -> Value {
    json!([
        { "conditional": { "if_field": "protocols",
            "if_match": { "elements": { "type": "string", "not_one_of": SNI_PROTOCOLS } },
            "then_field": "snis", "then_match": { "len_eq": 0 } } },
        { "conditional_at_least_one_of": { "if_field": "protocols",
            "if_match": { "contains": "https" },
            "then_at_least_one_of": ["methods", "hosts", "headers", "paths", "snis"],
            "else_match": { "contains": "http" },
            "else_then_at_least_one_of": ["methods", "hosts", "headers", "paths"] } },
    ])
}

pub(crate) fn route_checks(out: &mut Map<String, Value>, raw: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    lowercase_headers(out);
    let Some(protocols) = protocol_list(out) else {
        return;
    };
    check_exclusive_sets(&protocols, errors);
    if has(raw, "snis") && !protocols.iter().any(|p| SNI_PROTOCOLS.contains(&p.as_str())) {
        errors.push(FieldError::new(
            "",
            "'snis' can only be set when 'protocols' is 'grpcs', 'https', 'tls', 'tls_passthrough', or 'wss'",
        ));
    }
    let contains = |p: &str| protocols.iter().any(|q| q == p);
    match protocols.first().map(String::as_str) {
        Some("http" | "https") => http_rules(raw, contains("https"), errors),
        Some("tcp" | "tls" | "udp" | "tls_passthrough") => stream_rules(raw, &protocols, errors),
        Some("grpc" | "grpcs") => grpc_rules(out, raw, contains("grpcs"), errors),
        _ => {}
    }
}

fn protocol_list(out: &Map<String, Value>) -> Option<Vec<String>> {
    let items = out.get("protocols")?.as_array()?;
    Some(items.iter().filter_map(Value::as_str).map(str::to_string).collect())
}

fn check_exclusive_sets(protocols: &[String], errors: &mut Vec<FieldError>) {
    let mut members: Vec<&[&str]> = Vec::new();
    for protocol in protocols {
        if let Some(set) = EXCLUSIVE_SETS.iter().find(|s| s.contains(&protocol.as_str())) {
            if !members.contains(set) {
                members.push(set);
            }
        }
    }
    if members.len() > 1 {
        let listed: Vec<String> = members
            .iter()
            .map(|set| {
                let quoted: Vec<String> = set.iter().map(|p| format!("'{p}'")).collect();
                format!("({})", quoted.join(", "))
            })
            .collect();
        errors.push(FieldError::new(
            "protocols",
            format!("these sets are mutually exclusive: {}", listed.join(", ")),
        ));
    }
}

/// Presence checks read the input as given: a field that is set but invalid
/// still counts as set (Kong runs these checks with invalid fields too).
fn forbid(given: &Map<String, Value>, fields: &[&str], why: &str, errors: &mut Vec<FieldError>) {
    for field in fields {
        if given.get(*field).is_some_and(|v| !v.is_null()) {
            errors.push(FieldError::new(*field, format!("cannot set '{field}' when {why}")));
        }
    }
}

fn needs_one_of(given: &Map<String, Value>, fields: &[&str], message: &str, errors: &mut Vec<FieldError>) {
    // Expression routes match on their expression instead.
    if has(given, "expression") || fields.iter().any(|f| has(given, f)) {
        return;
    }
    errors.push(FieldError::new("", message));
}

fn http_rules(given: &Map<String, Value>, https: bool, errors: &mut Vec<FieldError>) {
    let why = "'protocols' is 'http' or 'https'";
    forbid(given, &["sources", "destinations"], why, errors);
    if https {
        let fields = ["methods", "hosts", "headers", "paths", "snis"];
        needs_one_of(given, &fields, ROUTE_HTTPS_NEEDS_MATCHER, errors);
    } else {
        let fields = ["methods", "hosts", "headers", "paths"];
        needs_one_of(given, &fields, ROUTE_HTTP_NEEDS_MATCHER, errors);
    }
}

fn stream_rules(given: &Map<String, Value>, protocols: &[String], errors: &mut Vec<FieldError>) {
    let why = "'protocols' is 'tcp', 'tls', 'tls_passthrough' or 'udp'";
    forbid(given, &["methods", "hosts", "paths", "headers"], why, errors);
    if protocols.iter().any(|p| p == "tls_passthrough") {
        let message = "must set snis when 'protocols' is 'tls_passthrough'";
        needs_one_of(given, &["snis"], message, errors);
    } else {
        let message = "must set one of 'sources', 'destinations', 'snis' when 'protocols' is 'tcp', 'tls' or 'udp'";
        needs_one_of(given, &["sources", "destinations", "snis"], message, errors);
    }
}

fn grpc_rules(out: &mut Map<String, Value>, raw: &Map<String, Value>, grpcs: bool, errors: &mut Vec<FieldError>) {
    let why = "'protocols' is 'grpc' or 'grpcs'";
    match raw.get("strip_path") {
        Some(Value::Bool(true)) => forbid(raw, &["strip_path"], why, errors),
        Some(Value::Bool(false)) => {}
        // The grpc subschema's default: gRPC paths are never stripped.
        _ => {
            out.insert("strip_path".into(), json!(false));
        }
    }
    forbid(raw, &["methods", "sources", "destinations"], why, errors);
    if grpcs {
        let message = "must set one of 'hosts', 'headers', 'paths', 'snis' when 'protocols' is 'grpcs'";
        needs_one_of(raw, &["hosts", "headers", "paths", "snis"], message, errors);
    } else {
        let message = "must set one of 'hosts', 'headers', 'paths' when 'protocols' is 'grpc'";
        needs_one_of(raw, &["hosts", "headers", "paths"], message, errors);
    }
}
