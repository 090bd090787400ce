//! The `configuration` block of `GET /`, in the shape Kong's tools read:
//! every setting with Kong's types (numbers as numbers, listen settings as
//! lists), the parsed `*_listeners`, and Kong's derived keys
//! (`router_flavor`, `plugins`). Secrets are masked. The Admin API adds
//! `loaded_plugins`, which it knows from the plugin registry.
//! Which tool reads which field is listed in docs/admin-api.md.

use serde_json::{json, Map, Value};
use strait_proxy::{parse_listen, ListenSpec};

use crate::settings::NodeSettings;

/// Settings whose values never leave the node.
const SECRETS: &[&str] = &["admin_token", "pg_password", "oauth2_redis_password"];

/// Settings that are Kong listen lists: shown as arrays of entries, with a
/// parsed `<name>ers` list beside them (`proxy_listen` -> `proxy_listeners`).
const LISTEN_SETTINGS: &[&str] = &["proxy_listen", "admin_listen", "status_listen", "cluster_listen"];
/// Comma-separated list settings Kong shows as arrays, besides the listeners.
const LIST_SETTINGS: &[&str] = &["headers", "headers_upstream", "dns_resolver", "dns_order"];

/// Kong's `configuration` object for this node's settings.
pub fn configuration(settings: &NodeSettings) -> Value {
    let mut out = Map::new();
    for (key, value) in &settings.raw.0 {
        let shown = if SECRETS.contains(&key.as_str()) && !value.is_empty() {
            Value::String("******".into())
        } else if LISTEN_SETTINGS.iter().chain(LIST_SETTINGS).any(|list| list == key) {
            listen_entries(value)
        } else {
            typed(value)
        };
        out.insert(key.clone(), shown);
    }
    for key in LISTEN_SETTINGS {
        let specs = parse_listen(settings.raw.0.get(*key).map_or("", String::as_str)).unwrap_or_default();
        let listeners: Vec<Value> = specs.iter().map(listener).collect();
        out.insert(format!("{key}ers"), Value::Array(listeners));
    }
    out.insert("plugins".into(), json!(["bundled"]));
    Value::Object(out)
}

/// `a, b` -> `["a", "b"]`; `off` or nothing -> `["off"]` / `[]` as Kong shows them.
fn listen_entries(value: &str) -> Value {
    let entries: Vec<Value> = value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| Value::String(entry.to_string()))
        .collect();
    Value::Array(entries)
}

/// Kong's parsed listener record.
fn listener(spec: &ListenSpec) -> Value {
    let mut directive = spec.addr.to_string();
    for (on, flag) in [(spec.ssl, "ssl"), (spec.http2, "http2"), (spec.reuseport, "reuseport")] {
        if on {
            directive.push(' ');
            directive.push_str(flag);
        }
    }
    json!({
        "ip": spec.addr.ip().to_string(),
        "port": spec.addr.port(),
        "listener": directive,
        "ssl": spec.ssl,
        "http2": spec.http2,
        "reuseport": spec.reuseport,
        "backlog": spec.backlog,
        "proxy_protocol": false,
        "deferred": false,
        "bind": false,
    })
}

/// Whole numbers and `on`/`off` as Kong types them; anything else stays a string.
fn typed(value: &str) -> Value {
    match value {
        "on" => Value::Bool(true),
        "off" => Value::Bool(false),
        // `007` keeps its leading zero: not a number Kong would have parsed.
        _ if value.len() > 1 && value.starts_with('0') => Value::String(value.to_string()),
        _ => value
            .parse::<u64>()
            .map_or_else(|_| Value::String(value.to_string()), |n| json!(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::RawSettings;

    fn settings(pairs: &[(&str, &str)]) -> NodeSettings {
        let env = pairs
            .iter()
            .map(|(k, v)| (format!("STRAIT_{}", k.to_ascii_uppercase()), v.to_string()));
        NodeSettings::from_raw(RawSettings::load(None, env).expect("load")).expect("valid")
    }

    #[test]
    fn kong_fields_have_kong_types() {
        let node = settings(&[
            ("admin_token", "s3cret"),
            ("admin_listen", "127.0.0.1:8001 reuseport"),
            ("pg_password", "pg-s3cret"),
            ("oauth2_redis_password", "redis-s3cret"),
        ]);
        let conf = configuration(&node);
        assert_eq!(conf["router_flavor"], "traditional_compatible");
        assert_eq!(conf["database"], "embedded");
        assert_eq!(conf["role"], "traditional");
        assert_eq!(conf["admin_token"], "******");
        assert_eq!(conf["pg_password"], "******");
        assert_eq!(conf["oauth2_redis_password"], "******");
        assert_eq!(conf["client_max_header_size"], 32768);
        assert_eq!(conf["admin_listen"], json!(["127.0.0.1:8001 reuseport"]));
        assert_eq!(conf["admin_listeners"][0]["port"], 8001);
        assert_eq!(conf["admin_listeners"][0]["listener"], "127.0.0.1:8001 reuseport");
        assert_eq!(conf["proxy_listeners"][1]["ssl"], true);
        assert_eq!(conf["plugins"], json!(["bundled"]));
    }

    #[test]
    fn numbers_and_switches_are_typed_strings_stay_strings() {
        assert_eq!(typed("100"), json!(100));
        assert_eq!(typed("0"), json!(0));
        assert_eq!(typed("007"), json!("007"));
        assert_eq!(typed("60s"), json!("60s"));
        assert_eq!(typed("off"), json!(false));
        assert_eq!(typed(""), json!(""));
    }
}
