//! Config fields and checks several bundled plugins' schemas share: Kong's
//! `queue` record and log plugin fields, the Redis record and its
//! shorthands, the transformer plugins' entry formats.

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::formats;
use strait_core::schema::ConfigShorthand;

pub(crate) fn bool_default(value: bool) -> Field {
    Field::boolean().required().default(json!(value))
}

pub(crate) fn regex(value: &str) -> Result<(), String> {
    regex_syntax::Parser::new()
        .parse(value)
        .map(|_| ())
        .map_err(|_| format!("'{value}' is not a valid regex"))
}

/// Kong's `typedefs.lua_code`: accepted in the schema (so Kong documents
/// load), refused by [`no_lua`] unless empty.
pub(crate) fn lua_code() -> Field {
    Field::map(Field::string().len_min(1), Field::string().len_min(1))
}

/// Strait runs no Lua.
pub(crate) fn no_lua(config: &Map<String, Value>) -> Result<(), String> {
    match config.get("custom_fields_by_lua") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(fields)) if fields.is_empty() => Ok(()),
        Some(_) => Err("custom_fields_by_lua: Strait runs no Lua; custom fields are not supported".into()),
    }
}

/// Kong's `typedefs.url`: any scheme, a host required (LuaSocket's
/// `url.parse` split: `scheme:` then `//authority`).
pub(crate) fn url(value: &str) -> Result<(), String> {
    let value = value.split('#').next().unwrap_or("");
    let scheme = value.split_once(':').filter(|(scheme, _)| {
        let mut chars = scheme.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    });
    let rest = scheme.map_or(value, |(_, rest)| rest);
    let host = rest.strip_prefix("//").map(|authority| {
        let authority = authority.split(['/', '?']).next().unwrap_or("");
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        match host_port.rsplit_once(':') {
            Some((host, port)) if !port.contains(']') => host,
            _ => host_port,
        }
    });
    if host.is_none_or(str::is_empty) {
        return Err("missing host in url".into());
    }
    if scheme.is_none() {
        return Err("missing scheme in url".into());
    }
    Ok(())
}

pub(crate) fn http_url(value: &str) -> Result<(), String> {
    let lower = value.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .ok_or("missing scheme: expected http:// or https://")?;
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.is_empty() {
        return Err("missing host in url".into());
    }
    formats::host_with_optional_port(host_port)
}

/// The queue record with another `max_batch_size` default.
pub(crate) fn queue_record_batching(batch: i64) -> Field {
    Field::record(vec![
        (
            "max_batch_size",
            Field::integer().default(json!(batch)).between(1, 1_000_000),
        ),
        ("max_coalescing_delay", Field::number().default(json!(1))),
        (
            "max_entries",
            Field::integer().default(json!(10000)).between(1, 1_000_000),
        ),
        ("max_bytes", Field::integer()),
        ("max_retry_time", Field::number().default(json!(60))),
        ("initial_retry_delay", Field::number().default(json!(0.01))),
        ("max_retry_delay", Field::number().default(json!(60))),
        (
            "concurrency_limit",
            Field::integer().default(json!(1)).one_of_integers(&[-1, 1]),
        ),
    ])
    .default_record()
}

/// The `between` bounds of the queue's fractional fields.
pub(crate) fn queue_check(config: &Map<String, Value>) -> Result<(), String> {
    let Some(Value::Object(queue)) = config.get("queue") else {
        return Ok(());
    };
    let number = |field: &str| queue.get(field).and_then(Value::as_f64);
    let ranges: [(&str, f64, f64); 3] = [
        ("max_coalescing_delay", 0.0, 3600.0),
        ("initial_retry_delay", 0.001, 1_000_000.0),
        ("max_retry_delay", 0.001, 1_000_000.0),
    ];
    for (field, low, high) in ranges {
        if let Some(value) = number(field).filter(|v| *v < low || *v > high) {
            return Err(format!(
                "queue.{field}: value should be between {low} and {high}, got {value}"
            ));
        }
    }
    Ok(())
}

pub(crate) fn timeout(default: i64) -> Field {
    Field::number().default(json!(default))
}

/// Kong's `validate_periods_order`: a longer period's limit is not lower
/// than a shorter one's (`lead` starts the message: Kong's two plugins
/// capitalize it differently).
pub(crate) fn periods_in_order(limit: &dyn Fn(&str) -> Option<f64>, lead: &str) -> Result<(), String> {
    for (at, lower) in RATE_LIMIT_PERIODS.iter().enumerate() {
        let Some(v1) = limit(lower) else { continue };
        for upper in &RATE_LIMIT_PERIODS[at + 1..] {
            if let Some(v2) = limit(upper).filter(|v2| *v2 < v1) {
                return Err(format!(
                    "{lead} for {upper}({v2:.1}) cannot be lower than the limit for {lower}({v1:.1})"
                ));
            }
        }
    }
    Ok(())
}

/// Kong's rate-limiting periods, shortest first.
pub const RATE_LIMIT_PERIODS: &[&str] = &["second", "minute", "hour", "day", "month", "year"];

/// Kong 3.9's deprecated `redis_*` fields of rate-limiting and
/// response-ratelimiting, each standing for a field of `config.redis`.
pub(crate) const REDIS_SHORTHANDS: &[ConfigShorthand] = &[
    redis_shorthand("redis_host", "host"),
    redis_shorthand("redis_port", "port"),
    redis_shorthand("redis_password", "password"),
    redis_shorthand("redis_username", "username"),
    redis_shorthand("redis_ssl", "ssl"),
    redis_shorthand("redis_ssl_verify", "ssl_verify"),
    redis_shorthand("redis_server_name", "server_name"),
    redis_shorthand("redis_timeout", "timeout"),
    redis_shorthand("redis_database", "database"),
];

/// `name`, standing for `config.redis.<field>`.
pub(crate) const fn redis_shorthand(name: &'static str, field: &'static str) -> ConfigShorthand {
    ConfigShorthand {
        name,
        path: ["redis", field],
    }
}

/// Kong's shared `redis` record (`kong/tools/redis/schema.lua`).
pub(crate) fn redis_record() -> Field {
    Field::record(vec![
        ("host", Field::string().check(formats::host)),
        ("port", Field::integer().between(0, 65535).default(json!(6379))),
        (
            "timeout",
            Field::integer().between(0, 2_147_483_646).default(json!(2000)),
        ),
        ("username", Field::string().referenceable()),
        ("password", Field::string().len_min(0).referenceable()),
        ("database", Field::integer().default(json!(0))),
        ("ssl", Field::boolean().default(json!(false))),
        ("ssl_verify", Field::boolean().default(json!(false))),
        ("server_name", Field::string().check(formats::sni)),
    ])
    .default_record()
}

pub(crate) fn list(element: Field) -> Field {
    Field::array(element).required().default(json!([]))
}

pub(crate) fn port() -> Field {
    Field::integer().required().between(0, 65535)
}

/// Whether the list `field` of `config` holds something (acl's and
/// ip-restriction's allow and deny).
pub(crate) fn non_empty_list(config: &Map<String, Value>, field: &str) -> bool {
    config
        .get(field)
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_endpoints_need_a_scheme_and_host() {
        assert!(http_url("http://127.0.0.1:9000/logs").is_ok());
        assert!(http_url("https://user:pw@logs.example").is_ok());
        assert!(http_url("logs.example").is_err());
        assert!(http_url("http:///x").is_err());
    }

    #[test]
    fn a_url_takes_any_scheme_and_needs_a_host() {
        assert!(url("https://example.com/a?b#c").is_ok());
        assert!(url("ftp://user@[::1]:21").is_ok());
        assert_eq!(url("example.com/a"), Err("missing host in url".into()));
        assert_eq!(url("mailto:a@b"), Err("missing host in url".into()));
        assert_eq!(url("//example.com/a"), Err("missing scheme in url".into()));
    }
}
