//! Health of upstream targets: runtime data, never part of a snapshot.
//!
//! Every balancer a snapshot builds asks the [`registry`] for its targets'
//! [`TargetHealth`] by upstream id and target (`host:port`); a rebuilt
//! balancer gets the same objects back, so a configuration change does not
//! forget that a target is down, and reporting health never rebuilds
//! anything. An entry lives as long as some balancer holds it.
//!
//! Counting follows Kong's health checker (lua-resty-healthcheck): a
//! success while healthy and a failure while unhealthy change nothing; a
//! failure counts towards its kind (HTTP status, TCP failure, timeout) and
//! clears the success count; a success clears the failure counts. When a
//! count reaches its threshold (0 turns that kind off) the target flips and
//! every count restarts. All of it is atomics, without locks: workers report
//! from any thread, and two reports racing can at worst count one twice.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// What one request or probe told about a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    Success,
    HttpFailure,
    TcpFailure,
    Timeout,
}

/// How many reports of a kind flip a target; 0 never flips it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Thresholds {
    pub successes: u32,
    pub http_failures: u32,
    pub tcp_failures: u32,
    pub timeouts: u32,
}

/// One target's health, in-flight requests and response latency.
#[derive(Debug, Default)]
pub struct TargetHealth {
    unhealthy: AtomicBool,
    successes: AtomicU32,
    http_failures: AtomicU32,
    tcp_failures: AtomicU32,
    timeouts: AtomicU32,
    in_flight: AtomicU32,
    /// Exponentially weighted mean of response latency in µs (0: none yet).
    latency_us: AtomicU64,
}

impl TargetHealth {
    pub fn is_healthy(&self) -> bool {
        !self.unhealthy.load(Ordering::Relaxed)
    }

    /// Count `report` against `limits`; `Some(healthy)` when the target flipped.
    pub fn report(&self, report: Report, limits: &Thresholds) -> Option<bool> {
        let healthy = self.is_healthy();
        let (counter, limit) = match report {
            Report::Success if healthy => return None,
            Report::Success => (&self.successes, limits.successes),
            _ if !healthy => return None,
            Report::HttpFailure => (&self.http_failures, limits.http_failures),
            Report::TcpFailure => (&self.tcp_failures, limits.tcp_failures),
            Report::Timeout => (&self.timeouts, limits.timeouts),
        };
        if limit == 0 {
            return None;
        }
        if report == Report::Success {
            self.clear_failures();
        } else {
            self.successes.store(0, Ordering::Relaxed);
        }
        let count = counter.fetch_add(1, Ordering::Relaxed) + 1;
        if count < limit {
            return None;
        }
        let becomes_healthy = report == Report::Success;
        self.set(becomes_healthy).then_some(becomes_healthy)
    }

    /// Set the state (the Admin API's `healthy`/`unhealthy`, or a flip);
    /// every count restarts. True when the state changed.
    pub fn set(&self, healthy: bool) -> bool {
        let was_unhealthy = self.unhealthy.swap(!healthy, Ordering::Relaxed);
        self.successes.store(0, Ordering::Relaxed);
        self.clear_failures();
        was_unhealthy == healthy
    }

    fn clear_failures(&self) {
        for counter in [&self.http_failures, &self.tcp_failures, &self.timeouts] {
            if counter.load(Ordering::Relaxed) != 0 {
                counter.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Requests sent to this target and not finished.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Count a request as in flight until the guard drops.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// Fold one response latency into the mean (weight 1/8 per sample,
    /// TCP's smoothing of round-trip times).
    pub fn record_latency(&self, latency: Duration) {
        let sample = (latency.as_micros() as u64).max(1);
        let old = self.latency_us.load(Ordering::Relaxed);
        let new = if old == 0 { sample } else { old - old / 8 + sample / 8 };
        self.latency_us.store(new.max(1), Ordering::Relaxed);
    }

    /// The latency mean in µs; 0 before the first response.
    pub fn latency_us(&self) -> u64 {
        self.latency_us.load(Ordering::Relaxed)
    }
}

/// A request in flight to a target; dropping it ends the request.
#[derive(Debug)]
pub struct InFlight(Arc<TargetHealth>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

type Key = (u128, String);

/// Every live target's health, by upstream id and target.
#[derive(Debug, Default)]
pub struct HealthRegistry {
    targets: Mutex<HashMap<Key, Weak<TargetHealth>>>,
}

impl HealthRegistry {
    /// The health of `target` in `upstream`: the one a balancer already
    /// holds, else a new, healthy one. Entries no balancer holds are
    /// dropped on the way.
    pub fn target(&self, upstream: u128, target: &str) -> Arc<TargetHealth> {
        let mut map = self.targets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = (upstream, target.to_string());
        if let Some(live) = map.get(&key).and_then(Weak::upgrade) {
            return live;
        }
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, weak| weak.strong_count() > 0);
        }
        let health = Arc::new(TargetHealth::default());
        map.insert(key, Arc::downgrade(&health));
        health
    }

    /// Entries still held by some balancer (diagnostics and tests).
    pub fn live(&self) -> usize {
        let map = self.targets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        map.values().filter(|weak| weak.strong_count() > 0).count()
    }
}

/// The process's registry.
pub fn registry() -> &'static HealthRegistry {
    static REGISTRY: OnceLock<HealthRegistry> = OnceLock::new();
    REGISTRY.get_or_init(HealthRegistry::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Thresholds = Thresholds {
        successes: 2,
        http_failures: 3,
        tcp_failures: 1,
        timeouts: 0,
    };

    #[test]
    fn failures_of_one_kind_flip_and_a_success_clears_them() {
        let t = TargetHealth::default();
        assert_eq!(t.report(Report::HttpFailure, &LIMITS), None);
        assert_eq!(t.report(Report::HttpFailure, &LIMITS), None);
        assert_eq!(
            t.report(Report::Success, &LIMITS),
            None,
            "healthy: successes are not counted"
        );
        // The success while healthy did not clear anything; a third failure flips.
        assert_eq!(t.report(Report::HttpFailure, &LIMITS), Some(false));
        assert!(!t.is_healthy());
        assert_eq!(t.report(Report::Success, &LIMITS), None);
        assert_eq!(
            t.report(Report::HttpFailure, &LIMITS),
            None,
            "unhealthy: failures are not counted"
        );
        assert_eq!(t.report(Report::Success, &LIMITS), Some(true));
        assert!(t.is_healthy());
    }

    #[test]
    fn a_zero_threshold_never_flips() {
        let t = TargetHealth::default();
        for _ in 0..100 {
            assert_eq!(t.report(Report::Timeout, &LIMITS), None);
        }
        assert!(t.is_healthy());
        assert_eq!(t.report(Report::TcpFailure, &LIMITS), Some(false));
        for _ in 0..100 {
            assert_eq!(t.report(Report::Success, &Thresholds::default()), None);
        }
        assert!(!t.is_healthy(), "passive checks with successes 0 never re-admit");
    }

    #[test]
    fn the_registry_hands_back_live_entries_and_forgets_dropped_ones() {
        let registry = HealthRegistry::default();
        let a = registry.target(7, "10.0.0.1:80");
        a.set(false);
        assert!(!registry.target(7, "10.0.0.1:80").is_healthy());
        assert!(registry.target(8, "10.0.0.1:80").is_healthy(), "keyed by upstream too");
        drop(a);
        assert!(
            registry.target(7, "10.0.0.1:80").is_healthy(),
            "a dropped entry starts over"
        );
    }

    #[test]
    fn in_flight_counts_until_the_guard_drops() {
        let t = Arc::new(TargetHealth::default());
        let one = t.begin();
        let two = t.begin();
        assert_eq!(t.in_flight(), 2);
        drop(one);
        drop(two);
        assert_eq!(t.in_flight(), 0);
        t.record_latency(Duration::from_millis(8));
        assert_eq!(t.latency_us(), 8000);
        t.record_latency(Duration::from_millis(16));
        assert_eq!(t.latency_us(), 9000);
    }
}
