//! `http-log` (Kong priority 12): Kong's entry sent to `http_endpoint`
//! through Kong 3.x's queue (`queue.*`): batches of `max_batch_size`
//! entries (one entry: the JSON object; more: a JSON array), retried with
//! backoff until `max_retry_time`, `max_entries` waiting at most (a full
//! queue drops and counts). Instances with the same sink settings share one
//! queue, as in Kong, and it outlives configuration changes that keep them.

mod schema;

/// `http-log` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "http-log",
    priority: 12,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(HttpLog::from_config(config)?)),
};

use std::fmt::Write as _;

use base64::Engine as _;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde_json::{Map, Value};
use strait_runtime::logs::queue::Queue;
use strait_runtime::logs::sinks::{BatchBody, HttpSink, HttpTarget};

use crate::observability::QueuedLog;
use crate::config::ConfigReader;
use crate::PluginError;

/// An `http(s)://[user:password@]host[:port][/path]` endpoint, parsed.
pub(crate) fn endpoint(field: &str, url: &str) -> Result<(HttpTarget, Option<String>), PluginError> {
    let invalid = |message: &str| PluginError::invalid(field, message);
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("missing scheme"))?;
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "http" => false,
        "https" => true,
        _ => return Err(invalid("scheme must be http or https")),
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    let (userinfo, host_port) = match authority.rsplit_once('@') {
        Some((user, host)) => (Some(user.to_string()), host),
        None => (None, authority),
    };
    let (host, port) = match host_port.rsplit_once(':') {
        Some((host, port)) if !host_port.ends_with(']') => {
            (host, port.parse::<u16>().map_err(|_| invalid("invalid port number"))?)
        }
        _ => (host_port, if tls { 443 } else { 80 }),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(invalid("missing host"));
    }
    let target = HttpTarget {
        tls,
        host: host.to_string(),
        port,
        path,
        method: Method::POST,
        headers: HeaderMap::new(),
        timeout: std::time::Duration::from_secs(10),
        keepalive: std::time::Duration::from_secs(60),
    };
    Ok((target, userinfo))
}

/// Builds http-log instances.
pub struct HttpLog;

impl HttpLog {
    pub fn from_config(config: &Map<String, Value>) -> Result<QueuedLog, PluginError> {
        let c = ConfigReader::new(config);
        let url = c
            .string("http_endpoint")?
            .ok_or_else(|| PluginError::invalid("http_endpoint", "required field missing"))?;
        let (mut target, userinfo) = endpoint("http_endpoint", &url)?;
        let method = c.string("method")?.unwrap_or_else(|| "POST".into());
        target.method =
            Method::from_bytes(method.as_bytes()).map_err(|_| PluginError::invalid("method", "invalid method"))?;
        target.timeout = crate::observability::millis(c.number("timeout", 10_000.0)?);
        target.keepalive = crate::observability::millis(c.number("keepalive", 60_000.0)?);
        let content_type = c.string("content_type")?.unwrap_or_else(|| "application/json".into());
        let params = crate::observability::queue_params_with_deprecated(&c)?;
        let header = |name: &str, value: &str| -> Result<(HeaderName, HeaderValue), PluginError> {
            let at = format!("headers.{name}");
            Ok((
                HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| PluginError::invalid(&at, "invalid header name"))?,
                HeaderValue::from_str(value).map_err(|_| PluginError::invalid(&at, "invalid header value"))?,
            ))
        };
        let (name, value) = header("content-type", &content_type)?;
        target.headers.insert(name, value);
        if let Some(userinfo) = &userinfo {
            let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(userinfo));
            let (name, value) = header("authorization", &basic)?;
            target.headers.insert(name, value);
        }
        let mut name = format!(
            "http-log:{url}:{method}:{content_type}:{:?}:{:?}",
            target.timeout, target.keepalive
        );
        if let Some(Value::Object(extra)) = config.get("headers") {
            for (key, value) in extra {
                let Some(value) = value.as_str() else { continue };
                let (key, value) = header(key, value)?;
                // Never overrides Content-Type, Authorization (Kong's rule).
                if !target.headers.contains_key(&key) {
                    let _ = write!(name, ":{key}={}", value.to_str().unwrap_or(""));
                    target.headers.insert(key, value);
                }
            }
        }
        let _ = write!(name, ":{params:?}");
        let shape = match params.max_batch_size {
            1 => BatchBody::Single,
            _ => BatchBody::JsonArray,
        };
        let queue = Queue::shared(name, &params, || Box::new(HttpSink::new(target, shape)));
        Ok(QueuedLog {
            name: "http-log",
            priority: 12,
            queue,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_with_kong_defaults() {
        let (target, user) = endpoint("f", "http://u:p@logs.example:9000/in?x=1").unwrap();
        assert_eq!(
            (target.tls, target.host.as_str(), target.port, target.path.as_str()),
            (false, "logs.example", 9000, "/in?x=1")
        );
        assert_eq!(user.as_deref(), Some("u:p"));
        let (target, _) = endpoint("f", "https://logs.example").unwrap();
        assert_eq!((target.port, target.path.as_str()), (443, "/"));
        assert!(endpoint("f", "ftp://x").is_err());
        assert!(endpoint("f", "http://x:99999/").is_err());
    }
}
