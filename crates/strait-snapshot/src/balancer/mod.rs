//! Load balancing over an upstream entity's targets.
//!
//! A [`Balancer`] is built per upstream when the snapshot is compiled; the
//! health of its targets is runtime data ([`strait_runtime::health`]) that
//! survives rebuilds. Every algorithm picks in time independent of the
//! number of targets while they are healthy:
//!
//! - `round-robin`: a weighted ring, one atomic increment per pick;
//! - `least-connections` and `latency`: two random draws from the weighted
//!   ring, the one with fewer requests in flight per weight (or the lower
//!   mean latency times requests in flight) wins ("power of two choices");
//! - `consistent-hashing`: one index into a table of `slots` entries;
//! - `sticky-sessions`: the target a cookie names, else round-robin.
//!
//! An unhealthy target, or one a retry already tried, is passed over by
//! walking on from where the pick landed.

mod checks;
pub mod hashing;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use strait_core::Upstream;
use strait_runtime::health::{Report, TargetHealth};
use uuid::Uuid;

pub use self::checks::{ActiveChecks, HealthChecks, ProbeKind};
use self::hashing::{hash64, hash_request, HashInput, HashOn, Hashed};

/// Most entries of the weighted ring; weights are scaled down to fit.
const MAX_RING: u64 = 1 << 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetAddress {
    pub host: String,
    pub port: u16,
}

impl TargetAddress {
    /// `host:port` (`[v6]:port`), as Kong names a target in health reports.
    pub fn name(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Parse `host:port`, `[v6]:port`, or a bare host (port 8000, Kong's default).
pub fn parse_target(target: &str) -> Option<TargetAddress> {
    if let Some(rest) = target.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => 8000,
        };
        return Some(TargetAddress {
            host: host.to_string(),
            port,
        });
    }
    match target.rsplit_once(':') {
        Some((host, port)) => Some(TargetAddress {
            host: host.to_string(),
            port: port.parse().ok()?,
        }),
        None => Some(TargetAddress {
            host: target.to_string(),
            port: 8000,
        }),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    RoundRobin,
    LeastConnections,
    ConsistentHashing,
    Latency,
    StickySessions,
}

impl Algorithm {
    fn parse(name: &str) -> Algorithm {
        match name {
            "least-connections" => Algorithm::LeastConnections,
            "consistent-hashing" => Algorithm::ConsistentHashing,
            "latency" => Algorithm::Latency,
            "sticky-sessions" => Algorithm::StickySessions,
            _ => Algorithm::RoundRobin,
        }
    }
}

/// A target's health as Kong reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetState {
    Healthy,
    Unhealthy,
    /// No check runs and nobody marked the target down.
    HealthchecksOff,
}

impl TargetState {
    /// `HEALTHY`, `UNHEALTHY`, `HEALTHCHECKS_OFF` (the Admin API's words).
    pub fn kong_name(self) -> &'static str {
        match self {
            TargetState::Healthy => "HEALTHY",
            TargetState::Unhealthy => "UNHEALTHY",
            TargetState::HealthchecksOff => "HEALTHCHECKS_OFF",
        }
    }

    /// `healthy`, `unhealthy`, `healthchecks_off` (the metric's labels).
    pub fn metric_name(self) -> &'static str {
        match self {
            TargetState::Healthy => "healthy",
            TargetState::Unhealthy => "unhealthy",
            TargetState::HealthchecksOff => "healthchecks_off",
        }
    }
}

/// One target of the balancer.
#[derive(Debug)]
pub struct Peer {
    pub address: TargetAddress,
    /// The target's host, when it is an IP address (read once here, not per request).
    pub ip: Option<std::net::IpAddr>,
    /// `host:port`: the health registry's key and the name in reports.
    pub name: String,
    pub weight: u64,
    pub health: Arc<TargetHealth>,
    /// The sticky-sessions cookie value naming this target.
    sticky_id: String,
}

/// What a pick decided, and the cookie to set on the response, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub index: usize,
    pub set_cookie: Option<String>,
}

/// Per-request balancing state: the request's hash (computed once) and the
/// targets already tried, which a retry avoids.
#[derive(Debug, Default)]
pub struct Attempts {
    hashed: Option<Option<Hashed>>,
    sticky: Option<Option<usize>>,
    tried: Vec<usize>,
}

impl Attempts {
    pub fn tried(&mut self, index: usize) {
        if !self.tried.contains(&index) {
            self.tried.push(index);
        }
    }
}

#[derive(Debug)]
pub struct Balancer {
    pub upstream_id: Uuid,
    pub upstream_name: String,
    pub host_header: Option<String>,
    pub algorithm: Algorithm,
    pub checks: HealthChecks,
    peers: Vec<Peer>,
    /// Indexes into `peers`, each repeated in proportion to its weight and spread out.
    ring: Vec<u32>,
    next: AtomicUsize,
    /// Consistent hashing: `slots` entries, each an index into `peers`.
    table: Vec<u32>,
    hash_on: HashOn,
    hash_fallback: HashOn,
    sticky_cookie: Option<(String, String)>,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Balancer {
    /// A balancer for `upstream` over `targets` (address and weight);
    /// weight 0 leaves a target out.
    pub fn new(upstream: &Upstream, targets: Vec<(TargetAddress, u64)>) -> Balancer {
        let algorithm = Algorithm::parse(&upstream.algorithm);
        let peers: Vec<Peer> = targets
            .into_iter()
            .filter(|(_, weight)| *weight > 0)
            .map(|(address, weight)| {
                let name = address.name();
                Peer {
                    health: strait_runtime::health::registry().target(upstream.id.as_u128(), &name),
                    ip: address.host.parse().ok(),
                    sticky_id: format!("{:016x}", hash64(name.as_bytes())),
                    address,
                    name,
                    weight,
                }
            })
            .collect();
        let ring = weighted_ring(&peers);
        let table = if algorithm == Algorithm::ConsistentHashing {
            let named: Vec<(&str, u64)> = peers.iter().map(|p| (p.name.as_str(), p.weight)).collect();
            hashing::build_table(&named, upstream.slots.clamp(10, 65536) as usize)
        } else {
            Vec::new()
        };
        let hash_on = HashOn::from_fields(
            &upstream.hash_on,
            upstream.hash_on_header.as_deref(),
            upstream.hash_on_cookie.as_deref(),
            &upstream.hash_on_cookie_path,
            upstream.hash_on_query_arg.as_deref(),
            upstream.hash_on_uri_capture.as_deref(),
        );
        let hash_fallback = HashOn::from_fields(
            &upstream.hash_fallback,
            upstream.hash_fallback_header.as_deref(),
            upstream.hash_on_cookie.as_deref(),
            &upstream.hash_on_cookie_path,
            upstream.hash_fallback_query_arg.as_deref(),
            upstream.hash_fallback_uri_capture.as_deref(),
        );
        let sticky_cookie = (algorithm == Algorithm::StickySessions).then(|| {
            (
                upstream
                    .sticky_sessions_cookie
                    .clone()
                    .unwrap_or_else(|| "KONG_STICKY".to_string()),
                upstream
                    .sticky_sessions_cookie_path
                    .clone()
                    .unwrap_or_else(|| "/".to_string()),
            )
        });
        Balancer {
            upstream_id: upstream.id,
            upstream_name: upstream.name.clone(),
            host_header: upstream.host_header.clone(),
            algorithm,
            checks: HealthChecks::from_value(&upstream.healthchecks),
            peers,
            ring,
            next: AtomicUsize::new(0),
            table,
            hash_on,
            hash_fallback,
            sticky_cookie,
        }
    }

    pub fn peers(&self) -> &[Peer] {
        &self.peers
    }

    pub fn peer(&self, index: usize) -> &Peer {
        &self.peers[index]
    }

    /// The peer for a target as configured (`host`, `host:port`, `[v6]:port`).
    pub fn peer_for(&self, target: &str) -> Option<(usize, &Peer)> {
        let name = parse_target(target)?.name();
        self.peers.iter().enumerate().find(|(_, p)| p.name == name)
    }

    /// A peer's state as the Admin API and metrics report it.
    pub fn state(&self, peer: &Peer) -> TargetState {
        match (peer.health.is_healthy(), self.checks.enabled()) {
            (false, _) => TargetState::Unhealthy,
            (true, true) => TargetState::Healthy,
            (true, false) => TargetState::HealthchecksOff,
        }
    }

    pub fn target_count(&self) -> usize {
        self.peers.len()
    }

    /// Whether picks read requests in flight (so the proxy must count them).
    pub fn counts_in_flight(&self) -> bool {
        matches!(self.algorithm, Algorithm::LeastConnections | Algorithm::Latency)
    }

    /// Kong's balancer health: the share of weight on healthy targets is at
    /// least `threshold` percent.
    pub fn healthy_weight(&self) -> (u64, u64) {
        let total = self.peers.iter().map(|p| p.weight).sum();
        let available = self
            .peers
            .iter()
            .filter(|p| p.health.is_healthy())
            .map(|p| p.weight)
            .sum();
        (total, available)
    }

    fn below_threshold(&self) -> bool {
        if self.checks.threshold <= 0.0 {
            return false;
        }
        let (total, available) = self.healthy_weight();
        total == 0 || (available as f64) * 100.0 / (total as f64) < self.checks.threshold
    }

    /// The next target for a request; `None` when no healthy target is
    /// left (503 `failure to get a peer from the ring-balancer`). Targets
    /// in `attempts` are avoided while another healthy one exists.
    pub fn pick(&self, input: &HashInput<'_>, attempts: &mut Attempts) -> Option<Pick> {
        if self.ring.is_empty() || self.below_threshold() {
            return None;
        }
        let usable = |i: usize, attempts: &Attempts| self.peers[i].health.is_healthy() && !attempts.tried.contains(&i);
        let mut set_cookie = None;
        let chosen = match self.algorithm {
            Algorithm::RoundRobin => None,
            Algorithm::LeastConnections => self.two_choices(attempts, |p| {
                // (in flight + 1) / weight, compared without division.
                (u128::from(p.health.in_flight()) + 1, u128::from(p.weight))
            }),
            Algorithm::Latency => self.two_choices(attempts, |p| {
                let latency = u128::from(p.health.latency_us());
                (latency * (u128::from(p.health.in_flight()) + 1), 1)
            }),
            Algorithm::ConsistentHashing => {
                let hashed = attempts
                    .hashed
                    .get_or_insert_with(|| hash_request(&self.hash_on, &self.hash_fallback, input))
                    .as_mut()
                    .map(|hashed| (hashed.hash, hashed.set_cookie.take()));
                match hashed {
                    Some((hash, cookie)) => {
                        set_cookie = cookie;
                        let start = (hash % self.table.len() as u64) as usize;
                        (0..self.table.len())
                            .map(|step| self.table[(start + step) % self.table.len()] as usize)
                            .find(|&i| usable(i, attempts))
                    }
                    None => None,
                }
            }
            Algorithm::StickySessions => {
                let named = *attempts.sticky.get_or_insert_with(|| self.sticky_target(input));
                named.filter(|&i| usable(i, attempts))
            }
        };
        let index = match chosen {
            Some(index) => index,
            None => self.round_robin(attempts)?,
        };
        if let Some((name, path)) = &self.sticky_cookie {
            let stays = attempts.sticky.flatten() == Some(index);
            if !stays {
                let id = &self.peers[index].sticky_id;
                set_cookie = Some(format!("{name}={id}; Path={path}; Same-Site=Lax; HttpOnly"));
            }
        }
        attempts.tried(index);
        Some(Pick { index, set_cookie })
    }

    /// The next ring entry that is healthy and untried; a tried one when
    /// every healthy target was tried already.
    fn round_robin(&self, attempts: &Attempts) -> Option<usize> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let len = self.ring.len();
        let mut healthy_tried = None;
        for step in 0..len {
            let index = self.ring[(start + step) % len] as usize;
            if self.peers[index].health.is_healthy() {
                if !attempts.tried.contains(&index) {
                    return Some(index);
                }
                healthy_tried.get_or_insert(index);
            }
        }
        healthy_tried
    }

    /// Power of two choices over the weighted ring: of two random draws of
    /// different targets (where the ring offers two within a few steps),
    /// the one with the lower `cost` (a fraction numerator / denominator).
    fn two_choices(&self, attempts: &Attempts, cost: impl Fn(&Peer) -> (u128, u128)) -> Option<usize> {
        let len = self.ring.len();
        let first = (strait_runtime::random::next_u64() % len as u64) as usize;
        let a = self.ring[first] as usize;
        let mut second =
            (first + 1 + (strait_runtime::random::next_u64() % (len as u64).max(2).saturating_sub(1)) as usize) % len;
        for _ in 0..16 {
            if self.ring[second] as usize != a {
                break;
            }
            second = (second + 1) % len;
        }
        let b = self.ring[second] as usize;
        let usable = |i: usize| self.peers[i].health.is_healthy() && !attempts.tried.contains(&i);
        match (usable(a), usable(b)) {
            (true, true) => {
                let (na, da) = cost(&self.peers[a]);
                let (nb, db) = cost(&self.peers[b]);
                Some(if na * db <= nb * da { a } else { b })
            }
            (true, false) => Some(a),
            (false, true) => Some(b),
            (false, false) => None,
        }
    }

    fn sticky_target(&self, input: &HashInput<'_>) -> Option<usize> {
        let (name, _) = self.sticky_cookie.as_ref()?;
        let id = hashing::cookie(input.headers, name)?;
        self.peers.iter().position(|p| p.sticky_id == id)
    }

    /// Passive health checks: what a proxied exchange with a target reported.
    pub fn report(&self, index: usize, report: Report) {
        let limits = &self.checks.passive_limits;
        if let Some(healthy) = self.peers[index].health.report(report, limits) {
            let peer = &self.peers[index];
            tracing::warn!(
                upstream = %self.upstream_name,
                target = %peer.name,
                healthy,
                ?report,
                "passive health check changed the target's health"
            );
        }
    }

    /// Passive health checks on a response status.
    pub fn report_status(&self, index: usize, status: u16) {
        if let Some(report) = self.checks.judge_response(status) {
            self.report(index, report);
        }
    }
}

/// The ring: each peer repeated in proportion to its weight, ordered so
/// that each peer's entries are evenly spaced (stride scheduling: entry k
/// of a peer with n entries sits at (k + 1/2) / n).
fn weighted_ring(peers: &[Peer]) -> Vec<u32> {
    let divisor = peers.iter().fold(0, |acc, p| gcd(acc, p.weight)).max(1);
    let total: u64 = peers.iter().map(|p| p.weight / divisor).sum();
    let scale = total.div_ceil(MAX_RING).max(1);
    let mut entries: Vec<(u64, u64, u32)> = Vec::new();
    for (index, peer) in peers.iter().enumerate() {
        let count = ((peer.weight / divisor) / scale).max(1);
        for k in 0..count {
            // (2k + 1) / 2n as a fraction, compared exactly below.
            entries.push((2 * k + 1, 2 * count, index as u32));
        }
    }
    entries.sort_by(|a, b| {
        (u128::from(a.0) * u128::from(b.1))
            .cmp(&(u128::from(b.0) * u128::from(a.1)))
            .then(a.2.cmp(&b.2))
    });
    entries.into_iter().map(|(_, _, index)| index).collect()
}

#[cfg(test)]
mod tests;
