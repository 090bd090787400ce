//! `rate-limiting` (Kong priority 910): the `local` policy (exact per-node
//! counters, [`local`]) and the `redis` policy (counters shared by every
//! node, decided atomically in Redis, [`redis`]). Windows are aligned as Kong
//! aligns them (UTC second, minute, hour, day, calendar month, calendar
//! year, [`windows`]).

mod schema;

/// `rate-limiting` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "rate-limiting",
    priority: 910,
    schema: schema::schema,
    build: |config, scope| {
        // Counters are keyed by route and service as in Kong, never by the
        // plugin entity's id: a config re-posted with new ids keeps them.
        let counters = PluginScope { plugin: None, ..scope };
        Ok(std::sync::Arc::new(RateLimiting::from_config(config, counters)?))
    },
};

mod cluster;
pub(crate) mod local;
pub(crate) mod redis;
pub(crate) mod windows;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use strait_runtime::counters::{LocalCounters, WindowCounters};
use strait_runtime::redis::{Redis, RedisConfig};
use uuid::Uuid;

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{AccessFuture, Flow, Plugin, PluginResponse};
use crate::{FieldLine, FieldStart};
use crate::PluginError;
use windows::{unix_now, PERIODS};

// Header names checked when compiled: a name made at run time is validated
// byte by byte on every request (seven per request here).
static X_LIMIT: [HeaderName; 6] = [
    HeaderName::from_static("x-ratelimit-limit-second"),
    HeaderName::from_static("x-ratelimit-limit-minute"),
    HeaderName::from_static("x-ratelimit-limit-hour"),
    HeaderName::from_static("x-ratelimit-limit-day"),
    HeaderName::from_static("x-ratelimit-limit-month"),
    HeaderName::from_static("x-ratelimit-limit-year"),
];
static X_REMAINING: [HeaderName; 6] = [
    HeaderName::from_static("x-ratelimit-remaining-second"),
    HeaderName::from_static("x-ratelimit-remaining-minute"),
    HeaderName::from_static("x-ratelimit-remaining-hour"),
    HeaderName::from_static("x-ratelimit-remaining-day"),
    HeaderName::from_static("x-ratelimit-remaining-month"),
    HeaderName::from_static("x-ratelimit-remaining-year"),
];
static RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
static RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
static RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
static RETRY_AFTER: HeaderName = HeaderName::from_static("retry-after");

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
    /// The plugin entity's own id (oauth2 codes remember who issued them).
    pub plugin: Option<Uuid>,
}

#[derive(Debug)]
pub struct RateLimiting {
    /// The limit of each period, `None` when not configured.
    limits: [Option<f64>; 6],
    /// Each configured period's lines up to its remaining count, written
    /// once.
    lines: [Option<PeriodLines>; 6],
    /// `RateLimit-Reset: `, to be finished by the seconds.
    reset: FieldStart,
    limit_by: LimitBy,
    header_name: Option<String>,
    path: Option<String>,
    hide_client_headers: bool,
    error_code: u16,
    error_message: String,
    scope: PluginScope,
    /// `Some` for the `redis` policy.
    redis: Option<redis::RedisPolicy>,
    /// `Some` for the `cluster` policy.
    cluster: Option<cluster::ClusterPolicy>,
    /// The `local` policy's counters (runtime data, shared by every
    /// instance: a rebuilt plugin keeps the counts).
    counters: Arc<dyn WindowCounters<CounterKey>>,
    fault_tolerant: bool,
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
        let (mut redis, mut cluster) = (None, None);
        match c.string("policy")?.as_deref().unwrap_or("local") {
            "local" | "" => {}
            "redis" => redis = Some(redis_policy(&c, scope, &limits)?),
            "cluster" => cluster = Some(cluster_policy(&c, scope, &limits)?),
            other => return Err(PluginError::invalid("policy", format!("unknown value '{other}'"))),
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
            lines: std::array::from_fn(|at| limits[at].map(PeriodLines::new(at))),
            reset: FieldStart::new(None, &RATELIMIT_RESET),
            limit_by,
            header_name: c.string("header_name")?.map(|h| h.to_ascii_lowercase()),
            path: c.string("path")?,
            hide_client_headers: c.bool("hide_client_headers", false)?,
            error_code: error_code as u16,
            error_message: c
                .string("error_message")?
                .unwrap_or_else(|| "API rate limit exceeded".to_string()),
            scope,
            redis,
            cluster,
            fault_tolerant: c.bool("fault_tolerant", true)?,
            counters: strait_runtime::counters::shared::<LocalCounters<CounterKey>>("rate-limiting"),
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

/// A period's client headers up to the counts that change per request:
/// `X-RateLimit-Limit-<period>` and the start of
/// `X-RateLimit-Remaining-<period>`; and, for when the period is the one
/// the `RateLimit-*` headers report, `RateLimit-Limit` and the start of
/// `RateLimit-Remaining`.
#[derive(Debug)]
struct PeriodLines {
    own: FieldStart,
    chosen: FieldStart,
}

impl PeriodLines {
    fn new(at: usize) -> impl Fn(f64) -> PeriodLines {
        move |limit| {
            // A limit no header value can carry has no limit lines.
            let value = number_value(limit);
            let own = value.as_ref().map(|value| FieldLine::new(&X_LIMIT[at], value));
            let chosen = value.as_ref().map(|value| FieldLine::new(&RATELIMIT_LIMIT, value));
            PeriodLines {
                own: FieldStart::new(own.as_ref(), &X_REMAINING[at]),
                chosen: FieldStart::new(chosen.as_ref(), &RATELIMIT_REMAINING),
            }
        }
    }
}

/// What a request is counted as (Kong's identifier).
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(crate) enum Identifier {
    Id(Uuid),
    Ip(std::net::IpAddr),
    Text(Box<str>),
}

/// A number as Lua prints it: integers without a fraction.
pub(crate) fn number_text(value: f64) -> String {
    match value.fract() == 0.0 && value.abs() < 1e15 {
        true => format!("{}", value as i64),
        false => format!("{value}"),
    }
}

/// What a request is counted under: the plugin's scope and the identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CounterKey {
    pub scope: PluginScope,
    pub identifier: Identifier,
}

/// Hashed twice per request (the shard, then the shard's map): ids and
/// addresses as whole 128-bit words, not as a derive's length-prefixed
/// byte slices and tags (half the instructions). Keys that are equal hash
/// alike; an identifier of one kind may hash as one of another, which only
/// makes them share a bucket.
impl std::hash::Hash for CounterKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let id = |id: Option<Uuid>| id.map_or(0, |id| id.as_u128());
        state.write_u128(id(self.scope.route));
        state.write_u128(id(self.scope.service));
        state.write_u128(id(self.scope.plugin));
        match &self.identifier {
            Identifier::Id(id) => state.write_u128(id.as_u128()),
            Identifier::Ip(std::net::IpAddr::V4(ip)) => state.write_u32(ip.to_bits()),
            Identifier::Ip(std::net::IpAddr::V6(ip)) => state.write_u128(ip.to_bits()),
            Identifier::Text(text) => state.write(text.as_bytes()),
        }
    }
}

/// What one check-and-count decided, per period: `(limit, remaining)`
/// before this request, and the period that stopped it, if any.
struct Usage {
    periods: [Option<(f64, f64)>; 6],
    stop: Option<usize>,
    /// The window starts the counts were taken in.
    starts: [i64; 6],
}

impl Usage {
    /// The decision from each period's count before this request: every
    /// configured period's `(limit, remaining)`, and when `refused`, the
    /// period that stopped it (the shortest one when only a fractional
    /// limit's room below one token did).
    fn from_counts(limits: &[Option<f64>; 6], windows: &windows::Windows, counts: &[f64; 6], refused: bool) -> Usage {
        let mut usage = Usage {
            periods: [None; 6],
            stop: None,
            starts: windows.starts,
        };
        for (at, limit) in limits.iter().enumerate() {
            let Some(limit) = *limit else { continue };
            let remaining = limit - counts[at];
            usage.periods[at] = Some((limit, remaining));
            if refused && remaining <= 0.0 {
                usage.stop = Some(at);
            }
        }
        if refused && usage.stop.is_none() {
            usage.stop = limits.iter().position(Option::is_some);
        }
        usage
    }
}

/// The `redis` policy's settings from the `redis` record and `sync_rate`.
fn redis_policy(
    c: &ConfigReader<'_>,
    scope: PluginScope,
    limits: &[Option<f64>; 6],
) -> Result<redis::RedisPolicy, PluginError> {
    let sync_rate = c.number("sync_rate", -1.0)?;
    let sync_rate = (sync_rate > 0.0).then(|| Duration::from_secs_f64(sync_rate));
    Ok(redis::RedisPolicy::new(redis_client(c)?, sync_rate, scope, limits))
}

/// The `cluster` policy: on a node whose database keeps cluster counters
/// (`database = cassandra`), refused elsewhere.
fn cluster_policy(
    c: &ConfigReader<'_>,
    scope: PluginScope,
    limits: &[Option<f64>; 6],
) -> Result<cluster::ClusterPolicy, PluginError> {
    let Some(store) = strait_runtime::cluster_counters::installed() else {
        return Err(PluginError::invalid(
            "policy",
            "the 'cluster' policy needs database = cassandra (its counters live in the keyspace); \
             on PostgreSQL or without a database, use 'redis' to share counters between nodes, or 'local'",
        ));
    };
    let sync_rate = c.number("sync_rate", -1.0)?;
    let sync_rate = (sync_rate > 0.0).then(|| Duration::from_secs_f64(sync_rate));
    Ok(cluster::ClusterPolicy::new(store.clone(), sync_rate, scope, limits))
}

/// A client for the plugin's `redis` record (Kong's shared record).
pub(crate) fn redis_client(c: &ConfigReader<'_>) -> Result<Redis, PluginError> {
    let r = c.record("redis")?;
    let host = r
        .string("host")?
        .filter(|h| !h.is_empty())
        .ok_or_else(|| PluginError::invalid("redis.host", "required field missing (policy is redis)"))?;
    let port = r.integer("port", 6379)?;
    let port = u16::try_from(port).map_err(|_| PluginError::invalid("redis.port", "expected a port (0-65535)"))?;
    let timeout = r.integer("timeout", 2000)?.max(1) as u64;
    Ok(Redis::new(RedisConfig {
        host,
        port,
        username: r.string("username")?,
        password: r.string("password")?,
        database: r.integer("database", 0)?,
        ssl: r.bool("ssl", false)?,
        ssl_verify: r.bool("ssl_verify", false)?,
        server_name: r.string("server_name")?,
        timeout: Duration::from_millis(timeout),
    }))
}

/// Kong's `fault_tolerant` when the shared counters gave no answer: proxy
/// without usage headers, or answer 500.
pub(crate) fn unanswered(fault_tolerant: bool) -> Flow {
    match fault_tolerant {
        true => Flow::Continue,
        false => Flow::Respond(PluginResponse::message(500, "An unexpected error occurred")),
    }
}

/// A count as a header value: integers (the usual case) without a
/// formatted string.
pub(crate) fn number_value(value: f64) -> Option<HeaderValue> {
    match value.fract() == 0.0 && value.abs() < 1e15 {
        true => Some(int_value(value as i64)),
        false => HeaderValue::from_str(&number_text(value)).ok(),
    }
}

/// An integer as a header value; the small ones (resets, nearly used-up
/// limits) from a table built once, without an allocation per request.
fn int_value(value: i64) -> HeaderValue {
    static SMALL: LazyLock<Vec<HeaderValue>> = LazyLock::new(|| {
        (0..SMALL_VALUES)
            .map(|n| HeaderValue::from_static(Box::leak(n.to_string().into_boxed_str())))
            .collect()
    });
    match usize::try_from(value) {
        Ok(small) if small < SMALL.len() => SMALL[small].clone(),
        _ => HeaderValue::from(value),
    }
}

const SMALL_VALUES: i64 = 64;

/// A count finishing `start` as [`number_value`] writes it: an integer
/// straight into the lines, anything else through its text.
fn push_number(headers: &mut crate::AddedHeaders, start: &FieldStart, value: f64) {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        headers.push_int_after(start, value as i64);
    } else if let Ok(text) = HeaderValue::from_str(&number_text(value)) {
        headers.push_after(start, &text);
    }
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
        let key = CounterKey {
            scope: self.scope,
            identifier: self.identifier(ctx),
        };
        let usage = local::take(self.counters.as_ref(), &self.limits, key, now);
        self.answer(ctx, &usage, now)
    }

    fn waits(&self) -> bool {
        self.redis.is_some() || self.cluster.is_some()
    }

    /// Only when counting by a header named like an identity field.
    fn reads_identity_fields(&self) -> bool {
        self.limit_by == LimitBy::Header && self.header_name.as_deref().is_some_and(crate::is_identity_name)
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(async move {
            let now = unix_now();
            let key = CounterKey {
                scope: self.scope,
                identifier: self.identifier(ctx),
            };
            if let Some(policy) = &self.cluster {
                return match policy.take(key, now).await {
                    Ok(usage) => self.answer(ctx, &usage, now),
                    Err(error) => {
                        strait_runtime::cluster_counters::log_failure(&error);
                        unanswered(self.fault_tolerant)
                    }
                };
            }
            let Some(policy) = &self.redis else {
                return self.access(ctx);
            };
            match policy.take(&self.limits, key, now).await {
                Ok(usage) => self.answer(ctx, &usage, now),
                Err(error) => redis::unanswered(&error, self.fault_tolerant),
            }
        })
    }
}

impl RateLimiting {
    /// Kong's headers for a decision, and the refusal when a limit is hit.
    fn answer(&self, ctx: &mut RequestCtx<'_>, usage: &Usage, now: i64) -> Flow {
        let mut reset = 0;
        if !self.hide_client_headers {
            let headers = &mut ctx.response_headers;
            headers.reserve(2 * usage.periods.iter().flatten().count() + 4);
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
                if let Some(lines) = &self.lines[at] {
                    push_number(headers, &lines.own, remaining);
                }
            }
            if let Some(lines) = chosen.and_then(|(at, remaining)| Some((self.lines[at].as_ref()?, remaining))) {
                push_number(headers, &lines.0.chosen, lines.1);
                headers.push_int_after(&self.reset, reset);
            }
        }
        if usage.stop.is_none() {
            return Flow::Continue;
        }
        if !self.hide_client_headers {
            ctx.response_headers.push_int(&RETRY_AFTER, reset);
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

    impl RateLimiting {
        fn take(&self, identifier: Identifier, now: i64) -> Usage {
            let key = CounterKey {
                scope: self.scope,
                identifier,
            };
            local::take(self.counters.as_ref(), &self.limits, key, now)
        }
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
                plugin: None,
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
                    plugin: None,
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
    fn the_cluster_policy_is_refused_without_cluster_counters() {
        let error = RateLimiting::from_config(
            serde_json::json!({ "minute": 1, "policy": "cluster" })
                .as_object()
                .unwrap(),
            PluginScope::default(),
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("'cluster' policy needs database = cassandra"),
            "{error}"
        );
    }
}
