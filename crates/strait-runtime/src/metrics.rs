//! Request metrics for the `prometheus` plugin, kept per worker and summed
//! at scrape time.
//!
//! The request path touches only its own worker's series: a thread-local
//! map from a series key to the series' atomics (found without a lock,
//! added to with relaxed atomic adds on a cache line no other worker
//! writes). A new series is published to the worker's list for the
//! scraper with `try_lock`: when a scrape holds the list, the series waits
//! in a thread-local queue and is published by a later request, so a
//! request never waits on a scrape. A scrape walks the series that exist,
//! that is, only those of routes that saw traffic, whatever the number of
//! configured routes.
//!
//! Keys hold ids, never names: the scrape gives them their labels from the
//! configuration then live.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Kong's buckets (ms) of `kong_kong_latency_ms`.
pub const KONG_LATENCY_BUCKETS: [u64; 17] = [1, 2, 5, 7, 10, 15, 20, 30, 50, 75, 100, 200, 500, 750, 1000, 3000, 6000];
/// Kong's buckets (ms) of `kong_upstream_latency_ms` and `kong_request_latency_ms`.
pub const UPSTREAM_LATENCY_BUCKETS: [u64; 13] = [25, 50, 80, 100, 250, 400, 700, 1000, 2000, 5000, 10000, 30000, 60000];

/// The route and service a request was counted under (nil ids when none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    pub route: [u8; 16],
    pub service: [u8; 16],
}

/// One `kong_http_requests_total` series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatusKey {
    pub scope: Scope,
    pub code: u16,
    /// The response came from the upstream (`source="service"`), not from
    /// the gateway or a plugin (`"kong"`).
    pub from_service: bool,
    /// With `per_consumer`, the consumer's id.
    pub consumer: Option<[u8; 16]>,
}

/// One `kong_bandwidth_bytes` pair (ingress, egress).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BandwidthKey {
    pub scope: Scope,
    pub consumer: Option<[u8; 16]>,
}

/// A histogram's counts per bucket (not cumulative; the last is +Inf) and
/// its sum.
#[derive(Debug)]
pub struct Histogram<const N: usize> {
    buckets: [AtomicU64; N],
    overflow: AtomicU64,
    sum: AtomicU64,
}

impl<const N: usize> Default for Histogram<N> {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            overflow: AtomicU64::new(0),
            sum: AtomicU64::new(0),
        }
    }
}

impl<const N: usize> Histogram<N> {
    fn observe(&self, bounds: &[u64; N], value: u64) {
        match bounds.iter().position(|bound| value <= *bound) {
            Some(at) => self.buckets[at].fetch_add(1, Ordering::Relaxed),
            None => self.overflow.fetch_add(1, Ordering::Relaxed),
        };
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    fn add_into(&self, totals: &mut HistogramTotals) {
        if totals.buckets.len() < N + 1 {
            totals.buckets.resize(N + 1, 0);
        }
        for (at, bucket) in self.buckets.iter().enumerate() {
            totals.buckets[at] += bucket.load(Ordering::Relaxed);
        }
        totals.buckets[N] += self.overflow.load(Ordering::Relaxed);
        totals.sum += self.sum.load(Ordering::Relaxed);
    }
}

/// The three latency histograms of one scope.
#[derive(Debug, Default)]
pub struct Latencies {
    pub kong: Histogram<17>,
    pub upstream: Histogram<13>,
    pub request: Histogram<13>,
}

/// A histogram summed over workers: counts per bucket (the last +Inf, not
/// cumulative) and the sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramTotals {
    pub buckets: Vec<u64>,
    pub sum: u64,
}

impl HistogramTotals {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// One worker's series, as the scraper sees them.
#[derive(Default)]
struct Published {
    status: Vec<(StatusKey, Arc<AtomicU64>)>,
    latencies: Vec<(Scope, Arc<Latencies>)>,
    bandwidth: Vec<(BandwidthKey, Arc<[AtomicU64; 2]>)>,
}

/// A new series not yet in the worker's published list.
enum Pending {
    Status(StatusKey, Arc<AtomicU64>),
    Latencies(Scope, Arc<Latencies>),
    Bandwidth(BandwidthKey, Arc<[AtomicU64; 2]>),
}

/// Keys are ids and status codes the gateway chose, never client text:
/// a fast hash is safe here.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

struct Local {
    published: Arc<Mutex<Published>>,
    pending: Vec<Pending>,
    status: FastMap<StatusKey, Arc<AtomicU64>>,
    latencies: FastMap<Scope, Arc<Latencies>>,
    bandwidth: FastMap<BandwidthKey, Arc<[AtomicU64; 2]>>,
}

/// Every worker's published series.
static WORKERS: Mutex<Vec<Arc<Mutex<Published>>>> = Mutex::new(Vec::new());

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Local {
    fn new() -> Local {
        let published = Arc::new(Mutex::new(Published::default()));
        lock(&WORKERS).push(published.clone());
        Local {
            published,
            pending: Vec::new(),
            status: FastMap::default(),
            latencies: FastMap::default(),
            bandwidth: FastMap::default(),
        }
    }

    /// Publish a new series, unless a scrape holds the list (then later).
    fn publish(&mut self, new: Pending) {
        self.pending.push(new);
        self.publish_pending();
    }
}

fn with_local<R>(f: impl FnOnce(&mut Local) -> R) -> R {
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        let local = local.get_or_insert_with(Local::new);
        if !local.pending.is_empty() {
            local.publish_pending();
        }
        f(local)
    })
}

impl Local {
    fn publish_pending(&mut self) {
        if let Ok(mut published) = self.published.try_lock() {
            for pending in self.pending.drain(..) {
                match pending {
                    Pending::Status(key, series) => published.status.push((key, series)),
                    Pending::Latencies(key, series) => published.latencies.push((key, series)),
                    Pending::Bandwidth(key, series) => published.bandwidth.push((key, series)),
                }
            }
        }
    }
}

/// One request's latencies (ms): Kong's own, the upstream's (when there
/// was one) and the whole request's.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub scope: Scope,
    pub kong: u64,
    pub upstream: Option<u64>,
    pub request: u64,
}

/// One request's bytes in (request) and out (response).
#[derive(Debug, Clone, Copy)]
pub struct Bandwidth {
    pub key: BandwidthKey,
    pub ingress: u64,
    pub egress: u64,
}

/// Record what one request's switches ask for, with one visit to the
/// worker's series.
pub fn record(status: Option<StatusKey>, latency: Option<Latency>, bandwidth: Option<Bandwidth>) {
    with_local(|local| {
        if let Some(key) = status {
            local.count_status(key);
        }
        if let Some(l) = latency {
            local.observe_latencies(l.scope, l.kong, l.upstream, l.request);
        }
        if let Some(b) = bandwidth {
            local.add_bandwidth(b.key, b.ingress, b.egress);
        }
    })
}

impl Local {
    fn count_status(&mut self, key: StatusKey) {
        if let Some(series) = self.status.get(&key) {
            series.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let series = Arc::new(AtomicU64::new(1));
        self.status.insert(key, series.clone());
        self.publish(Pending::Status(key, series));
    }

    fn observe_latencies(&mut self, scope: Scope, kong: u64, upstream: Option<u64>, request: u64) {
        let observe = |series: &Latencies| {
            series.kong.observe(&KONG_LATENCY_BUCKETS, kong);
            if let Some(upstream) = upstream {
                series.upstream.observe(&UPSTREAM_LATENCY_BUCKETS, upstream);
            }
            series.request.observe(&UPSTREAM_LATENCY_BUCKETS, request);
        };
        if let Some(series) = self.latencies.get(&scope) {
            observe(series);
            return;
        }
        let series = Arc::new(Latencies::default());
        observe(&series);
        self.latencies.insert(scope, series.clone());
        self.publish(Pending::Latencies(scope, series));
    }

    fn add_bandwidth(&mut self, key: BandwidthKey, ingress: u64, egress: u64) {
        let add = |series: &[AtomicU64; 2]| {
            series[0].fetch_add(ingress, Ordering::Relaxed);
            series[1].fetch_add(egress, Ordering::Relaxed);
        };
        if let Some(series) = self.bandwidth.get(&key) {
            add(series);
            return;
        }
        let series = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        add(&series);
        self.bandwidth.insert(key, series.clone());
        self.publish(Pending::Bandwidth(key, series));
    }
}

/// Every series summed over the workers, sorted by key.
#[derive(Debug, Default)]
pub struct Totals {
    pub status: Vec<(StatusKey, u64)>,
    pub latencies: Vec<(Scope, [HistogramTotals; 3])>,
    /// `(ingress, egress)` bytes.
    pub bandwidth: Vec<(BandwidthKey, (u64, u64))>,
}

/// Sum every worker's series. Each worker's list is locked only while it
/// is read; a request that adds a series meanwhile queues it instead of
/// waiting.
pub fn totals() -> Totals {
    let workers: Vec<Arc<Mutex<Published>>> = lock(&WORKERS).clone();
    let mut status: HashMap<StatusKey, u64> = HashMap::new();
    let mut latencies: HashMap<Scope, [HistogramTotals; 3]> = HashMap::new();
    let mut bandwidth: HashMap<BandwidthKey, (u64, u64)> = HashMap::new();
    let mut pacer = crate::pace::Pacer::new();
    for worker in workers {
        let published = lock(&worker);
        for (key, series) in &published.status {
            pacer.tick();
            *status.entry(*key).or_default() += series.load(Ordering::Relaxed);
        }
        for (key, series) in &published.latencies {
            pacer.tick();
            let totals = latencies.entry(*key).or_default();
            series.kong.add_into(&mut totals[0]);
            series.upstream.add_into(&mut totals[1]);
            series.request.add_into(&mut totals[2]);
        }
        for (key, series) in &published.bandwidth {
            pacer.tick();
            let totals = bandwidth.entry(*key).or_default();
            totals.0 += series[0].load(Ordering::Relaxed);
            totals.1 += series[1].load(Ordering::Relaxed);
        }
    }
    let mut totals = Totals {
        status: status.into_iter().collect(),
        latencies: latencies.into_iter().collect(),
        bandwidth: bandwidth.into_iter().collect(),
    };
    totals.status.sort_unstable_by_key(|(key, _)| *key);
    totals.latencies.sort_unstable_by_key(|(key, _)| *key);
    totals.bandwidth.sort_unstable_by_key(|(key, _)| *key);
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Count one response in `kong_http_requests_total`.
    fn count_status(key: StatusKey) {
        record(Some(key), None, None)
    }

    /// Observe one request's latencies (ms).
    fn observe_latencies(scope: Scope, kong: u64, upstream: Option<u64>, request: u64) {
        let latency = Latency {
            scope,
            kong,
            upstream,
            request,
        };
        record(None, Some(latency), None)
    }

    /// Add one request's bytes in (request) and out (response).
    fn add_bandwidth(key: BandwidthKey, ingress: u64, egress: u64) {
        record(None, None, Some(Bandwidth { key, ingress, egress }))
    }

    fn scope(n: u8) -> Scope {
        Scope {
            route: [n; 16],
            service: [0; 16],
        }
    }

    #[test]
    fn series_from_every_thread_add_up() {
        let key = StatusKey {
            scope: scope(200),
            code: 200,
            from_service: true,
            consumer: None,
        };
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        count_status(key);
                        observe_latencies(scope(200), 3, Some(40), 44);
                        add_bandwidth(
                            BandwidthKey {
                                scope: scope(200),
                                consumer: None,
                            },
                            10,
                            100,
                        );
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let totals = totals();
        let count = totals.status.iter().find(|(k, _)| *k == key).map(|(_, n)| *n);
        assert_eq!(count, Some(4000));
        let (_, histograms) = totals.latencies.iter().find(|(k, _)| *k == scope(200)).unwrap();
        assert_eq!(histograms[0].count(), 4000);
        assert_eq!(histograms[0].sum, 12_000);
        // 3 ms lands in the "5" bucket (index 2) of Kong's latency buckets.
        assert_eq!(histograms[0].buckets[2], 4000);
        assert_eq!(histograms[1].buckets[0], 0);
        assert_eq!(histograms[1].buckets[1], 4000, "40 ms: the 50 bucket");
        let (_, bytes) = totals.bandwidth.iter().find(|(k, _)| k.scope == scope(200)).unwrap();
        assert_eq!(*bytes, (40_000, 400_000));
    }

    #[test]
    fn a_series_added_while_a_scrape_holds_the_list_is_published_later() {
        let key = StatusKey {
            scope: scope(201),
            code: 503,
            from_service: false,
            consumer: None,
        };
        // This thread's list, held as a scrape would hold it.
        count_status(StatusKey { code: 204, ..key });
        let published = LOCAL.with(|l| l.borrow().as_ref().unwrap().published.clone());
        let guard = published.lock().unwrap();
        count_status(key);
        count_status(key);
        drop(guard);
        let seen = |totals: &Totals| totals.status.iter().any(|(k, _)| *k == key);
        assert!(!seen(&totals()), "still queued");
        count_status(StatusKey { code: 204, ..key });
        let totals = totals();
        assert!(seen(&totals));
        assert_eq!(totals.status.iter().find(|(k, _)| *k == key).unwrap().1, 2);
    }
}
