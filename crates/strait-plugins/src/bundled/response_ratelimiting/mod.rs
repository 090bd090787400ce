//! `response-ratelimiting` (Kong priority 900): limits the upstream itself
//! spends, reported per response in `X-Kong-Limit: <name>=<n>, ...`.
//!
//! As in Kong: access reads each named limit's usage (refusing at once when
//! `block_on_first_violation` and a limit is used up) and tells the
//! upstream what remains in `X-RateLimit-Remaining-<name>`; header_filter
//! reads the upstream's increments, answers the usage headers, removes the
//! upstream's header, and refuses (429, no body) a response that would
//! spend from a limit already used up; the log phase, after the response,
//! adds the increments to the counters (`local`: this node's, `redis`:
//! shared, under Kong's key names).

mod schema;

/// `response-ratelimiting` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "response-ratelimiting",
    priority: 900,
    schema: schema::schema,
    build: |config, scope| {
        // Counters are keyed by route and service as in Kong, never by the
        // plugin entity's id: a config re-posted with new ids keeps them.
        let counters = PluginScope { plugin: None, ..scope };
        Ok(std::sync::Arc::new(ResponseRateLimiting::from_config(config, counters)?))
    },
};

use std::sync::LazyLock;

use http::{HeaderName, StatusCode};
use serde_json::{Map, Value};
use strait_runtime::redis::{Redis, Script, Value as RedisValue};

use crate::config::ConfigReader;
use crate::context::{LogRecord, RequestCtx, ResponseCtx, ResponseSource, SharedStore};
use crate::phase::{AccessFuture, DropResponseBody, Flow, Plugin, PluginResponse};
use strait_runtime::counters::{LocalCounters, WindowCounters, WindowSpan};
use crate::bundled::rate_limiting::redis::{identifier_text, unanswered};
use crate::bundled::rate_limiting::windows::{unix_now, Windows, PERIODS};
use crate::bundled::rate_limiting::{number_text, number_value, redis_client, CounterKey, Identifier, PluginScope};
use crate::PluginError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LimitBy {
    Consumer,
    Credential,
    Ip,
}

/// One named limit with its header names, built once.
#[derive(Debug)]
struct NamedLimit {
    name: Box<str>,
    periods: [Option<f64>; 6],
    /// `x-ratelimit-remaining-<name>`, to the upstream.
    upstream_remaining: Option<HeaderName>,
    /// `x-ratelimit-limit-<name>-<period>` and `...-remaining-...`.
    limit_headers: [Option<HeaderName>; 6],
    remaining_headers: [Option<HeaderName>; 6],
}

#[derive(Debug)]
pub struct ResponseRateLimiting {
    limits: Vec<NamedLimit>,
    header_name: HeaderName,
    limit_by: LimitBy,
    block_on_first_violation: bool,
    hide_client_headers: bool,
    fault_tolerant: bool,
    scope: PluginScope,
    redis: Option<Redis>,
    /// `response-ratelimit:<route>:<service>:`, the plugin's part of every
    /// Redis key.
    key_prefix: String,
    /// The counters without Redis (runtime data, shared by every instance).
    counters: std::sync::Arc<dyn WindowCounters<NamedKey>>,
}

/// What access found, for the later phases.
struct Usage {
    identifier: Identifier,
    windows: Windows,
    /// Per limit (in `limits` order), per period: `(limit, remaining)`.
    remaining: Vec<[Option<(f64, f64)>; 6]>,
}

/// What header_filter read: each limit's increment.
struct Increments(Vec<f64>);

/// Set when header_filter refused the response: nothing is counted.
struct Refused;

fn header_name(text: &str) -> Option<HeaderName> {
    HeaderName::from_bytes(text.to_ascii_lowercase().as_bytes()).ok()
}

impl ResponseRateLimiting {
    pub fn from_config(config: &Map<String, Value>, scope: PluginScope) -> Result<ResponseRateLimiting, PluginError> {
        let c = ConfigReader::new(config);
        let mut limits = Vec::new();
        if let Some(Value::Object(map)) = config.get("limits") {
            for (name, periods) in map {
                let Value::Object(periods) = periods else {
                    return Err(PluginError::invalid(&format!("limits.{name}"), "expected a record"));
                };
                let mut values = [None; 6];
                for (at, (period, _)) in PERIODS.iter().enumerate() {
                    values[at] = periods.get(*period).and_then(Value::as_f64);
                }
                let per_period =
                    |kind: &str| PERIODS.map(|(period, _)| header_name(&format!("x-ratelimit-{kind}-{name}-{period}")));
                limits.push(NamedLimit {
                    name: name.as_str().into(),
                    periods: values,
                    upstream_remaining: header_name(&format!("x-ratelimit-remaining-{name}")),
                    limit_headers: per_period("limit"),
                    remaining_headers: per_period("remaining"),
                });
            }
        }
        if limits.is_empty() {
            return Err(PluginError::invalid("limits", "length must be at least 1"));
        }
        limits.sort_by(|a, b| a.name.cmp(&b.name));
        let limit_by = match c.string("limit_by")?.as_deref().unwrap_or("consumer") {
            "consumer" => LimitBy::Consumer,
            "credential" => LimitBy::Credential,
            "ip" => LimitBy::Ip,
            other => return Err(PluginError::invalid("limit_by", format!("unknown value '{other}'"))),
        };
        let redis = match c.string("policy")?.as_deref().unwrap_or("local") {
            "local" => None,
            "redis" => Some(redis_client(&c)?),
            other => {
                return Err(PluginError::invalid(
                    "policy",
                    format!(
                        "the '{other}' policy is not supported by response-ratelimiting: use 'redis' to share counters between nodes, or 'local'"
                    ),
                ))
            }
        };
        let header = c.string("header_name")?.unwrap_or_else(|| "x-kong-limit".into());
        Ok(ResponseRateLimiting {
            limits,
            header_name: header_name(&header)
                .ok_or_else(|| PluginError::invalid("header_name", "not a valid header name"))?,
            limit_by,
            block_on_first_violation: c.bool("block_on_first_violation", false)?,
            hide_client_headers: c.bool("hide_client_headers", false)?,
            fault_tolerant: c.bool("fault_tolerant", true)?,
            scope,
            redis,
            key_prefix: format!(
                "response-ratelimit:{}:{}:",
                scope.route.unwrap_or_default(),
                scope.service.unwrap_or_default()
            ),
            counters: strait_runtime::counters::shared::<LocalCounters<NamedKey>>("response-ratelimiting"),
        })
    }

    /// Kong's identifier: the consumer (or credential), the credential, or
    /// the client IP.
    fn identifier(&self, ctx: &RequestCtx<'_>) -> Identifier {
        let chosen = match self.limit_by {
            LimitBy::Consumer => ctx.consumer.map(|c| c.id).or(ctx.credential.as_ref().map(|c| c.id)),
            LimitBy::Credential => ctx.credential.as_ref().map(|c| c.id),
            LimitBy::Ip => None,
        };
        chosen.map(Identifier::Id).unwrap_or(Identifier::Ip(ctx.client_ip))
    }

    fn key(&self, identifier: &Identifier) -> CounterKey {
        CounterKey {
            scope: self.scope,
            identifier: identifier.clone(),
        }
    }

    /// Kong's Redis key of one limit's period.
    fn redis_key(&self, identifier: &str, windows: &Windows, name: &str, at: usize) -> String {
        format!(
            "{}{identifier}:{}:{name}:{}",
            self.key_prefix,
            windows.starts[at] * 1000,
            PERIODS[at].0
        )
    }

    /// The usage from counts (per limit, per period; `None` for an
    /// unconfigured period).
    fn usage(&self, identifier: Identifier, windows: Windows, counts: &[[f64; 6]]) -> Usage {
        let remaining = self
            .limits
            .iter()
            .zip(counts)
            .map(|(limit, counts)| {
                let mut out = [None; 6];
                for (at, value) in limit.periods.iter().enumerate() {
                    if let Some(value) = value {
                        out[at] = Some((*value, value - counts[at]));
                    }
                }
                out
            })
            .collect();
        Usage {
            identifier,
            windows,
            remaining,
        }
    }

    /// Refusal or the upstream headers, once usage is known.
    fn decide(&self, ctx: &mut RequestCtx<'_>, usage: Usage) -> Flow {
        for (limit, remaining) in self.limits.iter().zip(&usage.remaining) {
            let mut least: Option<f64> = None;
            for (_, left) in remaining.iter().flatten() {
                if self.block_on_first_violation && *left <= 0.0 {
                    return Flow::Respond(PluginResponse::message(
                        429,
                        &format!("API rate limit exceeded for '{}'", limit.name),
                    ));
                }
                least = Some(least.map_or(*left, |l: f64| l.min(*left)));
            }
            if let (Some(name), Some(least)) = (&limit.upstream_remaining, least) {
                if let Some(value) = number_value(least) {
                    ctx.headers.insert(name.clone(), value);
                }
            }
        }
        ctx.shared.insert(usage);
        Flow::Continue
    }
}

/// A local counter's key: the rate-limiting key and the limit's name.
type NamedKey = (CounterKey, Box<str>);

impl ResponseRateLimiting {
    /// Reads the counts of every period of `name` (0 for an ended window).
    fn local_counts(&self, key: NamedKey, windows: &Windows, now: i64) -> [f64; 6] {
        let span = WindowSpan {
            starts: &windows.starts,
            ends: &windows.ends,
        };
        self.counters.counts(&key, span, now)
    }

    /// Adds `value` to each configured period of `key`.
    fn local_add(&self, key: NamedKey, windows: &Windows, periods: &[Option<f64>; 6], value: f64, now: i64) {
        let span = WindowSpan {
            starts: &windows.starts,
            ends: &windows.ends,
        };
        let selected = periods.map(|limit| limit.is_some());
        self.counters.take(key, span, selected, value, &|_| true, now);
    }
}

/// KEYS: counters; returns each one's count (0 when absent).
const READ: &str = r#"
local counts = {}
for i = 1, #KEYS do counts[i] = tonumber(redis.call('GET', KEYS[i]) or '0') end
return counts
"#;

/// KEYS: counters; ARGV: each key's increment, then each key's expiry
/// (Unix seconds, its window's end).
const ADD: &str = r#"
local k = #KEYS
for i = 1, k do
  local by = tonumber(ARGV[i])
  if redis.call('INCRBY', KEYS[i], by) == by then
    redis.call('EXPIREAT', KEYS[i], ARGV[k + i])
  end
end
return k
"#;

static READ_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(READ));
static ADD_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ADD));

/// Kong's `X-Kong-Limit` value: `name=n` pairs separated by commas; only
/// configured names count, a later pair for a name wins.
fn parse_increments(values: &[&str], limits: &[NamedLimit]) -> Vec<f64> {
    let mut increments = vec![0.0; limits.len()];
    for part in values.iter().flat_map(|v| v.split(',')) {
        let mut pieces = part.splitn(3, '=');
        let (Some(name), Some(number), None) = (pieces.next(), pieces.next(), pieces.next()) else {
            continue;
        };
        let Some(at) = limits.iter().position(|l| &*l.name == name.trim()) else {
            continue;
        };
        if let Ok(value) = number.trim().parse::<f64>() {
            if value.is_finite() {
                increments[at] = value;
            }
        }
    }
    increments
}

impl Plugin for ResponseRateLimiting {
    fn name(&self) -> &'static str {
        "response-ratelimiting"
    }

    fn priority(&self) -> i32 {
        900
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let now = unix_now();
        let windows = Windows::at(now);
        let identifier = self.identifier(ctx);
        let counts: Vec<[f64; 6]> = self
            .limits
            .iter()
            .map(|limit| self.local_counts((self.key(&identifier), limit.name.clone()), &windows, now))
            .collect();
        let usage = self.usage(identifier, windows, &counts);
        self.decide(ctx, usage)
    }

    fn waits(&self) -> bool {
        self.redis.is_some()
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(async move {
            let Some(redis) = &self.redis else {
                return self.access(ctx);
            };
            let now = unix_now();
            let windows = Windows::at(now);
            let identifier = self.identifier(ctx);
            let text = identifier_text(&identifier);
            let mut keys = Vec::new();
            for limit in &self.limits {
                for (at, period) in limit.periods.iter().enumerate() {
                    if period.is_some() {
                        keys.push(self.redis_key(&text, &windows, &limit.name, at));
                    }
                }
            }
            let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            let reply = redis.eval(&READ_SCRIPT, &key_refs, &[]).await;
            let values = match reply {
                Ok(RedisValue::Array(values)) if values.len() == keys.len() => values,
                other => {
                    let error = match other {
                        Err(error) => error,
                        Ok(value) => strait_runtime::redis::RedisError::Reply(
                            redis.config().label(),
                            format!("unexpected reply {value:?}"),
                        ),
                    };
                    return unanswered(&error, self.fault_tolerant);
                }
            };
            let mut values = values.iter().map(|v| v.as_int().unwrap_or(0) as f64);
            let counts: Vec<[f64; 6]> = self
                .limits
                .iter()
                .map(|limit| {
                    let mut counts = [0.0; 6];
                    for (at, period) in limit.periods.iter().enumerate() {
                        if period.is_some() {
                            counts[at] = values.next().unwrap_or(0.0);
                        }
                    }
                    counts
                })
                .collect();
            let usage = self.usage(identifier, windows, &counts);
            self.decide(ctx, usage)
        })
    }

    fn filters_headers(&self) -> bool {
        true
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        // Only an upstream's answer reports increments.
        let values: Vec<&str> = match ctx.source {
            ResponseSource::Service => ctx
                .headers
                .get_all(&self.header_name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect(),
            _ => Vec::new(),
        };
        let increments = parse_increments(&values, &self.limits);
        ctx.headers.remove(&self.header_name);
        let Some(usage) = ctx.shared.get::<Usage>() else {
            return;
        };
        let mut stop = false;
        let mut headers = Vec::new();
        for ((limit, remaining), increment) in self.limits.iter().zip(&usage.remaining).zip(&increments) {
            for (at, period) in remaining.iter().enumerate() {
                let Some((value, left)) = period else { continue };
                if !self.hide_client_headers {
                    let shown = (left - increment).max(0.0);
                    if let (Some(name), Some(value)) = (&limit.limit_headers[at], number_value(*value)) {
                        headers.push((name.clone(), value));
                    }
                    if let (Some(name), Some(value)) = (&limit.remaining_headers[at], number_value(shown)) {
                        headers.push((name.clone(), value));
                    }
                }
                if *increment > 0.0 && *left <= 0.0 {
                    stop = true;
                }
            }
        }
        for (name, value) in headers {
            ctx.headers.insert(name, value);
        }
        if stop {
            *ctx.status = StatusCode::TOO_MANY_REQUESTS;
            ctx.headers.remove(http::header::CONTENT_TYPE);
            ctx.headers.remove(http::header::CONTENT_ENCODING);
            ctx.shared.insert(DropResponseBody);
            ctx.shared.insert(Refused);
        }
        ctx.shared.insert(Increments(increments));
    }

    fn logs(&self) -> bool {
        true
    }

    fn log(&self, _record: &LogRecord, shared: &SharedStore) {
        if shared.get::<Refused>().is_some() {
            return;
        }
        let (Some(usage), Some(Increments(increments))) = (shared.get::<Usage>(), shared.get::<Increments>()) else {
            return;
        };
        if increments.iter().all(|i| *i == 0.0) {
            return;
        }
        let now = unix_now();
        match &self.redis {
            None => {
                for (limit, increment) in self.limits.iter().zip(increments) {
                    if *increment != 0.0 {
                        let key = (self.key(&usage.identifier), limit.name.clone());
                        self.local_add(key, &usage.windows, &limit.periods, *increment, now);
                    }
                }
            }
            Some(redis) => {
                let text = identifier_text(&usage.identifier);
                let (mut keys, mut by, mut expiries) = (Vec::new(), Vec::new(), Vec::new());
                for (limit, increment) in self.limits.iter().zip(increments) {
                    if *increment == 0.0 {
                        continue;
                    }
                    for (at, period) in limit.periods.iter().enumerate() {
                        if period.is_some() {
                            keys.push(self.redis_key(&text, &usage.windows, &limit.name, at));
                            by.push(number_text(increment.trunc()));
                            expiries.push(usage.windows.ends[at].to_string());
                        }
                    }
                }
                by.extend(expiries);
                redis.spawn_eval(
                    &ADD_SCRIPT,
                    keys,
                    by,
                    "response-ratelimiting: failed to add increments in Redis",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(config: Value) -> ResponseRateLimiting {
        ResponseRateLimiting::from_config(config.as_object().unwrap(), PluginScope::default()).unwrap()
    }

    #[test]
    fn increments_parse_as_kong_parses_them() {
        let p = plugin(serde_json::json!({ "limits": { "video": { "minute": 5 }, "image": { "hour": 9 } } }));
        // limits are sorted: image, video.
        assert_eq!(parse_increments(&["video=2, image = 3"], &p.limits), vec![3.0, 2.0]);
        assert_eq!(parse_increments(&["video=2", "video=4"], &p.limits), vec![0.0, 4.0]);
        assert_eq!(
            parse_increments(&["audio=1, video, image=x, video=1=2"], &p.limits),
            vec![0.0, 0.0]
        );
    }

    #[test]
    fn counts_add_up_per_name_and_window() {
        let p = plugin(serde_json::json!({ "limits": { "video": { "minute": 5, "hour": 10 } } }));
        let now = 1_700_000_000;
        let windows = Windows::at(now);
        let key = || (p.key(&Identifier::Text("t".into())), "video".into());
        p.local_add(key(), &windows, &p.limits[0].periods, 3.0, now);
        p.local_add(key(), &windows, &p.limits[0].periods, 1.0, now);
        let counts = p.local_counts(key(), &windows, now);
        assert_eq!((counts[1], counts[2]), (4.0, 4.0));
        // The next minute starts over; the hour keeps counting.
        let later = Windows::at(now + 60);
        let counts = p.local_counts(key(), &later, now + 60);
        assert_eq!((counts[1], counts[2]), (0.0, 4.0));
    }
}
