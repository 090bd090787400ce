//! The `redis` policy: counters every node shares, in Redis, under Kong's
//! key names (`ratelimit:<route>:<service>:<identifier>:<window ms>:<period>`).
//!
//! One Lua script does the whole decision atomically in Redis: it reads the
//! counter of every configured period, grants as many tokens as every period
//! has room for (up to what was asked), and adds the grant to each counter.
//! Nothing reads a count and writes it back later, so N nodes sharing a
//! Redis never admit more than the limit together.
//!
//! - `sync_rate = -1` (Kong's default): each request asks for one token.
//! - `sync_rate > 0`: a node leases tokens in batches and admits locally
//!   from its lease; a lease is used for at most `sync_rate` seconds and
//!   only within the windows it was granted in, and its unused tokens are
//!   given back with the next request for a lease. Every admitted request
//!   still holds a token Redis granted, so the limit holds exactly; the
//!   price is that tokens leased by one node and not yet used are not
//!   available to the others (see docs/plugins.md for the bound).

use std::sync::LazyLock;
use std::time::Duration;

use strait_runtime::redis::{Redis, RedisError, Script, Value};

use strait_runtime::counters::ShardedMap;
use super::windows::{Windows, PERIODS};
use super::{CounterKey, Identifier, PluginScope, Usage};
use crate::phase::Flow;

/// KEYS: each configured period's counter in the current windows.
/// ARGV: tokens wanted, tokens given back, then each period's limit, then
/// each key's expiry (Unix seconds, the window's end).
/// Returns `{granted, count_1, ..., count_k}`: the counts before the grant
/// (after the give-back).
const TAKE: &str = r#"
local k = #KEYS
local grant = tonumber(ARGV[1])
local back = tonumber(ARGV[2])
local counts = {}
for i = 1, k do
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  if back > 0 and count > 0 then
    count = redis.call('DECRBY', KEYS[i], math.min(back, count))
  end
  counts[i] = count
  local room = math.ceil(tonumber(ARGV[2 + i]) - count)
  if room < grant then grant = room end
end
if grant < 0 then grant = 0 end
if grant > 0 then
  for i = 1, k do
    if redis.call('INCRBY', KEYS[i], grant) == grant then
      redis.call('EXPIREAT', KEYS[i], ARGV[2 + k + i])
    end
  end
end
local reply = {grant}
for i = 1, k do reply[i + 1] = counts[i] end
return reply
"#;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TAKE));

/// A lease larger than this is never asked for.
const MAX_LEASE: u64 = 10_000;

#[derive(Debug)]
pub(super) struct RedisPolicy {
    /// This node's leases of tokens (runtime data, shared by every
    /// instance: a rebuilt plugin keeps them).
    leases: std::sync::Arc<ShardedMap<CounterKey, Lease>>,
    redis: Redis,
    /// `None`: every request asks Redis (`sync_rate = -1`).
    sync_rate: Option<Duration>,
    /// `ratelimit:<route>:<service>:`, the plugin's part of every key.
    key_prefix: String,
    /// Each configured limit as the script's argument text.
    limit_args: Vec<String>,
    /// The largest lease ever asked for.
    lease_cap: u64,
}

/// What Redis granted, with the counts it saw before granting.
struct Grant {
    granted: u64,
    counts: [f64; 6],
}

/// A node's lease on one counter key.
#[derive(Default)]
struct Lease {
    /// The windows the lease was granted in.
    starts: [i64; 6],
    /// The last window end, for sweeping.
    expires: i64,
    /// Tokens granted and not yet used.
    tokens: u64,
    /// Each period's count in Redis as of the last grant, the grant included.
    counts: [f64; 6],
    /// When the lease was taken (ms since the epoch).
    taken_ms: i64,
    /// Tokens to ask for next.
    want: u64,
    /// A request is fetching a new lease.
    fetching: bool,
}


fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Kong's text of an identifier in a key.
pub(crate) fn identifier_text(identifier: &Identifier) -> String {
    match identifier {
        Identifier::Id(id) => id.to_string(),
        Identifier::Ip(ip) => ip.to_string(),
        Identifier::Text(text) => text.to_string(),
    }
}

impl RedisPolicy {
    /// The policy of a plugin scoped to `scope` with `limits`: what every
    /// request's keys and arguments share is formatted here, once.
    pub fn new(
        redis: Redis,
        sync_rate: Option<Duration>,
        scope: PluginScope,
        limits: &[Option<f64>; 6],
    ) -> RedisPolicy {
        RedisPolicy {
            redis,
            sync_rate,
            key_prefix: format!(
                "ratelimit:{}:{}:",
                scope.route.unwrap_or_default(),
                scope.service.unwrap_or_default()
            ),
            limit_args: limits
                .iter()
                .flatten()
                .map(|limit| super::number_text(*limit))
                .collect(),
            lease_cap: limits
                .iter()
                .flatten()
                .fold(MAX_LEASE as f64, |cap, limit| cap.min(limit.ceil()))
                .max(1.0) as u64,
            leases: strait_runtime::counters::shared("rate-limiting leases"),
        }
    }

    /// Decide one request. `Err` when Redis gave no answer.
    pub async fn take(&self, limits: &[Option<f64>; 6], key: CounterKey, now: i64) -> Result<Usage, RedisError> {
        let windows = Windows::at(now);
        let Some(sync_rate) = self.sync_rate else {
            let grant = self.ask(limits, &key, &windows, 1, 0).await?;
            return Ok(Usage::from_counts(limits, &windows, &grant.counts, grant.granted == 0));
        };
        let now_ms = unix_ms();
        let cap = self.lease_cap;
        // From the lease when it can; else decide what to ask for.
        let (want, back, renewing) = {
            let mut shard = self.leases.shard(&key, now, |lease| lease.expires <= now);
            let lease = shard.entries.entry(key.clone()).or_default();
            let current = same_windows(limits, &lease.starts, &windows.starts);
            let fresh = now_ms - lease.taken_ms < sync_rate.as_millis() as i64;
            if current && fresh && lease.tokens > 0 {
                // The counts as of the grant, less what the lease still holds.
                let mut seen = lease.counts;
                for count in &mut seen {
                    *count -= lease.tokens as f64;
                }
                lease.tokens -= 1;
                return Ok(Usage::from_counts(limits, &windows, &seen, false));
            }
            if lease.fetching {
                // Another request is renewing the lease: ask for this one.
                (1, 0, false)
            } else {
                let back = if current { lease.tokens } else { 0 };
                lease.want = if current && fresh {
                    // Used up within sync_rate: ask for more.
                    lease.want.saturating_mul(2)
                } else {
                    // Lapsed with tokens left: ask for what was used.
                    lease.want.saturating_sub(back)
                }
                .clamp(1, cap);
                lease.tokens = 0;
                lease.fetching = true;
                (lease.want, back, true)
            }
        };
        // Should this request be dropped while it waits (its client went
        // away), the renewal is released all the same.
        let guard = RenewalGuard {
            key: renewing.then(|| key.clone()),
            now,
            leases: &self.leases,
        };
        let result = self.ask(limits, &key, &windows, want, back).await;
        drop(guard);
        let mut shard = self.leases.shard(&key, now, |lease| lease.expires <= now);
        let lease = shard.entries.entry(key).or_default();
        let grant = result?;
        if grant.granted > 0 {
            // This request takes one token; the rest join the lease, when
            // the lease is of these windows (or of older ones, replaced).
            let shortest = limits.iter().position(Option::is_some).unwrap_or(0);
            if !same_windows(limits, &lease.starts, &windows.starts)
                && lease.starts[shortest] < windows.starts[shortest]
            {
                lease.starts = windows.starts;
                lease.tokens = 0;
                lease.counts = [0.0; 6];
            }
            if same_windows(limits, &lease.starts, &windows.starts) {
                lease.tokens += grant.granted - 1;
                for (at, count) in grant.counts.iter().enumerate() {
                    lease.counts[at] = lease.counts[at].max(count + grant.granted as f64);
                }
                if renewing {
                    lease.taken_ms = now_ms;
                }
                lease.expires = windows.ends.iter().copied().max().unwrap_or(now);
            }
        } else if grant.granted == 0 && renewing {
            // Less room than the lease asked for: start small again.
            lease.want = 1;
        }
        Ok(Usage::from_counts(limits, &windows, &grant.counts, grant.granted == 0))
    }

    async fn ask(
        &self,
        limits: &[Option<f64>; 6],
        key: &CounterKey,
        windows: &Windows,
        want: u64,
        back: u64,
    ) -> Result<Grant, RedisError> {
        let identifier = identifier_text(&key.identifier);
        let mut keys = Vec::with_capacity(6);
        let mut expiry_args = Vec::with_capacity(6);
        for (at, limit) in limits.iter().enumerate() {
            if limit.is_some() {
                keys.push(format!(
                    "{}{identifier}:{}:{}",
                    self.key_prefix,
                    windows.starts[at] * 1000,
                    PERIODS[at].0
                ));
                expiry_args.push(windows.ends[at].to_string());
            }
        }
        let (want, back) = (want.to_string(), back.to_string());
        let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let mut args: Vec<&[u8]> = vec![want.as_bytes(), back.as_bytes()];
        args.extend(self.limit_args.iter().map(|a| a.as_bytes()));
        args.extend(expiry_args.iter().map(|a| a.as_bytes()));
        let reply = self.redis.eval(&SCRIPT, &key_refs, &args).await?;
        let malformed = || RedisError::Reply(self.redis.config().label(), format!("unexpected reply {reply:?}"));
        let Value::Array(items) = &reply else {
            return Err(malformed());
        };
        let granted = items.first().and_then(Value::as_int).ok_or_else(malformed)?;
        let mut counts = [0.0; 6];
        let mut next = items[1..].iter();
        for (at, limit) in limits.iter().enumerate() {
            if limit.is_some() {
                counts[at] = next.next().and_then(Value::as_int).ok_or_else(malformed)? as f64;
            }
        }
        Ok(Grant {
            granted: granted.max(0) as u64,
            counts,
        })
    }
}

/// Clears a lease's `fetching` mark when the renewing request is done or
/// dropped.
struct RenewalGuard<'a> {
    key: Option<CounterKey>,
    now: i64,
    leases: &'a ShardedMap<CounterKey, Lease>,
}

impl Drop for RenewalGuard<'_> {
    fn drop(&mut self) {
        if let Some(key) = &self.key {
            let mut shard = self.leases.shard(key, self.now, |_| false);
            if let Some(lease) = shard.entries.get_mut(key) {
                lease.fetching = false;
            }
        }
    }
}

/// True when every configured period's window is the same in both.
fn same_windows(limits: &[Option<f64>; 6], a: &[i64; 6], b: &[i64; 6]) -> bool {
    limits
        .iter()
        .enumerate()
        .all(|(at, limit)| limit.is_none() || a[at] == b[at])
}

/// What a rate-limiting plugin does when Redis gave no answer: log it (at
/// most a line a second for the process), then Kong's `fault_tolerant`:
/// proxy without usage headers, or answer 500.
pub(crate) fn unanswered(error: &RedisError, fault_tolerant: bool) -> Flow {
    strait_runtime::redis::log_failure("rate-limiting: failed to get usage from Redis", error);
    super::unanswered(fault_tolerant)
}
