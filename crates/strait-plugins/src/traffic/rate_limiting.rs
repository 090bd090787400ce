//! `rate-limiting` (Kong priority 910), `local` policy: per-node counters
//! that are exact. Kong's `local` policy reads the counters, decides, and
//! increments them later in a timer, so concurrent requests can all pass
//! the last free slot; here the check and the increment of every period
//! happen under one shard lock, so a node never admits more than the limit.
//!
//! Counters are runtime data, outside any snapshot: they are keyed like
//! Kong's (the plugin's route and service scope, the identifier, the
//! period's window), so a configuration change, even to the plugin itself,
//! keeps them. Windows are aligned as Kong aligns them (UTC second, minute,
//! hour, day, calendar month, calendar year).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::{LazyLock, Mutex};

use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::traffic::proxy_cache::http::days_from_civil;
use crate::PluginError;

/// Kong's periods with the `EXPIRATION` (seconds) its reset header uses.
const PERIODS: [(&str, i64); 6] = [
    ("second", 1),
    ("minute", 60),
    ("hour", 3600),
    ("day", 86_400),
    ("month", 2_592_000),
    ("year", 31_536_000),
];

const X_LIMIT: [&str; 6] = [
    "x-ratelimit-limit-second",
    "x-ratelimit-limit-minute",
    "x-ratelimit-limit-hour",
    "x-ratelimit-limit-day",
    "x-ratelimit-limit-month",
    "x-ratelimit-limit-year",
];
const X_REMAINING: [&str; 6] = [
    "x-ratelimit-remaining-second",
    "x-ratelimit-remaining-minute",
    "x-ratelimit-remaining-hour",
    "x-ratelimit-remaining-day",
    "x-ratelimit-remaining-month",
    "x-ratelimit-remaining-year",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LimitBy {
    Consumer,
    Credential,
    Ip,
    Service,
    Header,
    Path,
}

/// The route and service a plugin instance is scoped to (Kong keys its
/// counters by them; a global plugin counts across every route).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PluginScope {
    pub route: Option<Uuid>,
    pub service: Option<Uuid>,
}

#[derive(Debug)]
pub struct RateLimiting {
    /// The limit of each period, `None` when not configured.
    limits: [Option<f64>; 6],
    /// Each limit as a header value, built once.
    limit_values: [Option<HeaderValue>; 6],
    limit_by: LimitBy,
    header_name: Option<String>,
    path: Option<String>,
    hide_client_headers: bool,
    error_code: u16,
    error_message: String,
    scope: PluginScope,
}

impl RateLimiting {
    pub fn from_config(config: &Map<String, Value>, scope: PluginScope) -> Result<RateLimiting, PluginError> {
        let c = ConfigReader::new(config);
        let mut limits = [None; 6];
        for (at, (period, _)) in PERIODS.iter().enumerate() {
            let limit = c.number(period, f64::NAN)?;
            limits[at] = Some(limit).filter(|l| !l.is_nan());
        }
        if limits.iter().all(Option::is_none) {
            return Err(PluginError::invalid("minute", "at least one limit must be set"));
        }
        let limit_by = match c.string("limit_by")?.as_deref().unwrap_or("consumer") {
            "consumer" => LimitBy::Consumer,
            "credential" => LimitBy::Credential,
            "ip" => LimitBy::Ip,
            "service" => LimitBy::Service,
            "header" => LimitBy::Header,
            "path" => LimitBy::Path,
            other => return Err(PluginError::invalid("limit_by", format!("unknown value '{other}'"))),
        };
        match c.string("policy")?.as_deref().unwrap_or("local") {
            "local" | "" => {}
            other => {
                return Err(PluginError::invalid(
                    "policy",
                    format!("the '{other}' policy is not available in this version of Strait yet; use 'local'"),
                ))
            }
        }
        let error_code = c.number("error_code", 429.0)?;
        if !(100.0..=599.0).contains(&error_code) || error_code.fract() != 0.0 {
            return Err(PluginError::invalid(
                "error_code",
                "expected an HTTP status code (100-599)",
            ));
        }
        Ok(RateLimiting {
            limits,
            limit_values: limits.map(|limit| limit.and_then(number_value)),
            limit_by,
            header_name: c.string("header_name")?.map(|h| h.to_ascii_lowercase()),
            path: c.string("path")?,
            hide_client_headers: c.bool("hide_client_headers", false)?,
            error_code: error_code as u16,
            error_message: c
                .string("error_message")?
                .unwrap_or_else(|| "API rate limit exceeded".to_string()),
            scope,
        })
    }

    /// Kong's `get_identifier`: the configured source, else the client IP.
    /// Ids and addresses are kept as they are, not formatted.
    fn identifier(&self, ctx: &RequestCtx<'_>) -> Identifier {
        let chosen = match self.limit_by {
            LimitBy::Service => ctx.service_id.map(Identifier::Id),
            LimitBy::Consumer => ctx
                .consumer
                .map(|c| c.id)
                .or(ctx.credential.as_ref().map(|c| c.id))
                .map(Identifier::Id),
            LimitBy::Credential => ctx.credential.as_ref().map(|c| Identifier::Id(c.id)),
            LimitBy::Header => self
                .header_name
                .as_deref()
                .and_then(|name| ctx.header(name))
                .map(|value| Identifier::Text(value.into())),
            LimitBy::Path => self
                .path
                .as_deref()
                .filter(|p| *p == ctx.path())
                .map(|p| Identifier::Text(p.into())),
            LimitBy::Ip => None,
        };
        chosen.unwrap_or(Identifier::Ip(ctx.client_ip))
    }
}

/// What a request is counted as (Kong's identifier).
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
enum Identifier {
    Id(Uuid),
    Ip(std::net::IpAddr),
    Text(Box<str>),
}

/// A number as Lua prints it: integers without a fraction.
fn number_text(value: f64) -> String {
    match value.fract() == 0.0 && value.abs() < 1e15 {
        true => format!("{}", value as i64),
        false => format!("{value}"),
    }
}

/// The civil (year, month) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month)
}

/// The start (Unix seconds, UTC) of each period's window holding `now`
/// (Kong's `timestamp.get_timestamps`).
fn window_starts(now: i64) -> [i64; 6] {
    let day = now.div_euclid(86_400);
    let (year, month) = civil_from_days(day);
    [
        now,
        now - now.rem_euclid(60),
        now - now.rem_euclid(3600),
        day * 86_400,
        days_from_civil(year, month, 1) * 86_400,
        days_from_civil(year, 1, 1) * 86_400,
    ]
}

#[derive(Hash, PartialEq, Eq)]
struct CounterKey {
    scope: PluginScope,
    identifier: Identifier,
}

#[derive(Default)]
struct Counter {
    windows: [i64; 6],
    counts: [f64; 6],
    /// When every window this counter holds has ended (Unix seconds).
    expires: i64,
}

struct Shard {
    counters: HashMap<CounterKey, Counter>,
    swept: i64,
}

const SHARDS: usize = 64;

/// Every node-local counter, sharded by key so workers rarely share a lock.
struct Counters {
    shards: Vec<Mutex<Shard>>,
    hasher: std::collections::hash_map::RandomState,
}

static COUNTERS: LazyLock<Counters> = LazyLock::new(|| Counters {
    shards: (0..SHARDS)
        .map(|_| {
            Mutex::new(Shard {
                counters: HashMap::new(),
                swept: 0,
            })
        })
        .collect(),
    hasher: std::collections::hash_map::RandomState::new(),
});

/// What one check-and-count decided, per period: `(limit, remaining)`
/// before this request, and the period that stopped it, if any.
struct Usage {
    periods: [Option<(f64, f64)>; 6],
    stop: Option<usize>,
    /// The window starts the counts were taken in.
    starts: [i64; 6],
}

impl RateLimiting {
    /// Checks every configured period and, when all have room, counts the
    /// request in each, under one lock.
    fn take(&self, identifier: Identifier, now: i64) -> Usage {
        let starts = window_starts(now);
        let key = CounterKey {
            scope: self.scope,
            identifier,
        };
        let shard = &COUNTERS.shards[(COUNTERS.hasher.hash_one(&key) as usize) % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if now - shard.swept >= 60 {
            shard.counters.retain(|_, counter| counter.expires > now);
            shard.swept = now;
        }
        let counter = shard.counters.entry(key).or_default();
        let mut usage = Usage {
            periods: [None; 6],
            stop: None,
            starts,
        };
        for (at, limit) in self.limits.iter().enumerate() {
            let Some(limit) = *limit else { continue };
            if counter.windows[at] != starts[at] {
                counter.windows[at] = starts[at];
                counter.counts[at] = 0.0;
            }
            let remaining = limit - counter.counts[at];
            usage.periods[at] = Some((limit, remaining));
            if remaining <= 0.0 {
                usage.stop = Some(at);
            }
        }
        if usage.stop.is_none() {
            for (at, limit) in self.limits.iter().enumerate() {
                if limit.is_some() {
                    counter.counts[at] += 1.0;
                    counter.expires = counter.expires.max(starts[at] + PERIODS[at].1);
                }
            }
        }
        usage
    }
}

/// Seconds since the Unix epoch.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A count as a header value: integers (the usual case) without a
/// formatted string.
fn number_value(value: f64) -> Option<HeaderValue> {
    match value.fract() == 0.0 && value.abs() < 1e15 {
        true => Some(HeaderValue::from(value as i64)),
        false => HeaderValue::from_str(&number_text(value)).ok(),
    }
}

fn header(name: &'static str, value: Option<HeaderValue>) -> Option<(HeaderName, HeaderValue)> {
    Some((HeaderName::from_static(name), value?))
}

impl Plugin for RateLimiting {
    fn name(&self) -> &'static str {
        "rate-limiting"
    }

    fn priority(&self) -> i32 {
        910
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let now = unix_now();
        let usage = self.take(self.identifier(ctx), now);
        ctx.response_headers.reserve(if self.hide_client_headers {
            0
        } else {
            2 * PERIODS.len() + 4
        });
        let mut reset = 0;
        if !self.hide_client_headers {
            // Kong's choice for the RateLimit-* headers: the period with the
            // least remaining, the longer window on a tie.
            let mut chosen: Option<(usize, f64)> = None;
            for (at, period) in usage.periods.iter().enumerate() {
                let Some((_, remaining)) = *period else { continue };
                let remaining = match usage.stop {
                    None => remaining - 1.0,
                    Some(stop) if stop == at => remaining - 1.0,
                    Some(_) => remaining,
                }
                .max(0.0);
                let window = PERIODS[at].1;
                let better = match chosen {
                    None => true,
                    Some((chosen_at, chosen_remaining)) => {
                        remaining < chosen_remaining || (remaining == chosen_remaining && window > PERIODS[chosen_at].1)
                    }
                };
                if better {
                    chosen = Some((at, remaining));
                    reset = (window - (now - usage.starts[at])).max(1);
                }
                ctx.response_headers
                    .extend(header(X_LIMIT[at], self.limit_values[at].clone()));
                ctx.response_headers
                    .extend(header(X_REMAINING[at], number_value(remaining)));
            }
            if let Some((at, remaining)) = chosen {
                ctx.response_headers
                    .extend(header("ratelimit-limit", self.limit_values[at].clone()));
                ctx.response_headers
                    .extend(header("ratelimit-remaining", number_value(remaining)));
                ctx.response_headers
                    .extend(header("ratelimit-reset", Some(HeaderValue::from(reset))));
            }
        }
        if usage.stop.is_none() {
            return Flow::Continue;
        }
        if !self.hide_client_headers {
            ctx.response_headers
                .extend(header("retry-after", Some(HeaderValue::from(reset))));
        }
        Flow::Respond(PluginResponse::message(self.error_code, &self.error_message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(value: &str) -> Identifier {
        Identifier::Text(value.into())
    }

    #[test]
    fn windows_align_to_utc_calendar_periods() {
        // 2024-02-29T13:45:30Z
        let now = 1_709_214_330;
        let starts = window_starts(now);
        assert_eq!(starts[0], now);
        assert_eq!(starts[1], 1_709_214_300); // 13:45:00
        assert_eq!(starts[2], 1_709_211_600); // 13:00:00
        assert_eq!(starts[3], 1_709_164_800); // 2024-02-29
        assert_eq!(starts[4], 1_706_745_600); // 2024-02-01
        assert_eq!(starts[5], 1_704_067_200); // 2024-01-01
        assert_eq!(window_starts(0)[5], 0);
        assert_eq!(civil_from_days(days_from_civil(2000, 12, 31)), (2000, 12));
    }

    #[test]
    fn numbers_print_as_lua_prints_them() {
        assert_eq!(number_text(5.0), "5");
        assert_eq!(number_text(2.5), "2.5");
        assert_eq!(number_text(0.0), "0");
    }

    #[test]
    fn the_check_and_the_count_are_one_step() {
        let limiter = RateLimiting::from_config(
            serde_json::json!({ "second": 5, "minute": 8 }).as_object().unwrap(),
            PluginScope {
                route: Some(Uuid::new_v4()),
                service: None,
            },
        )
        .unwrap();
        let now = 1_700_000_000;
        let passed = (0..10)
            .filter(|_| limiter.take(text("client"), now).stop.is_none())
            .count();
        assert_eq!(passed, 5, "the second's limit holds");
        // The next second: the minute has 3 left.
        let passed = (0..10)
            .filter(|_| limiter.take(text("client"), now + 1).stop.is_none())
            .count();
        assert_eq!(passed, 3);
        let stopped = limiter.take(text("client"), now + 2);
        assert_eq!(stopped.stop, Some(1));
        assert_eq!(stopped.periods[1], Some((8.0, 0.0)));
        // Another identifier has its own counters.
        assert!(limiter.take(text("other"), now + 2).stop.is_none());
    }

    #[test]
    fn threads_never_admit_more_than_the_limit() {
        let limiter = std::sync::Arc::new(
            RateLimiting::from_config(
                serde_json::json!({ "year": 1000 }).as_object().unwrap(),
                PluginScope {
                    route: Some(Uuid::new_v4()),
                    service: None,
                },
            )
            .unwrap(),
        );
        let now = unix_now();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let limiter = limiter.clone();
                std::thread::spawn(move || {
                    (0..500)
                        .filter(|_| limiter.take(text("shared"), now).stop.is_none())
                        .count()
                })
            })
            .collect();
        let passed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(passed, 1000);
    }

    #[test]
    fn other_policies_are_refused_clearly() {
        let error = RateLimiting::from_config(
            serde_json::json!({ "minute": 1, "policy": "redis" })
                .as_object()
                .unwrap(),
            PluginScope::default(),
        )
        .unwrap_err();
        assert!(error.to_string().contains("'redis' policy is not available"), "{error}");
    }
}
