//! Kong's AI metrics (`prometheus` with `ai_metrics`): requests, cost,
//! tokens by type and provider latency per provider and model, summed at
//! scrape time.
//!
//! A series is found in the worker's own map (no lock) and added to with
//! relaxed atomics; a new one is published to the scraper's list under a
//! lock taken only then (a handful of series per model). The model label
//! comes from requests when the plugin names none, so the distinct models
//! are bounded: past [`MAX_MODELS`] series, a new model is counted as
//! `other`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Kong's buckets (ms) of `kong_ai_llm_provider_latency_ms`.
pub const AI_LATENCY_BUCKETS: [u64; 14] = [
    250, 500, 1000, 1500, 2000, 2500, 3000, 3500, 4000, 4500, 5000, 10000, 30000, 60000,
];

/// The most series kept; a model past them is labelled [`OTHER_MODEL`].
pub const MAX_MODELS: usize = 500;
pub const OTHER_MODEL: &str = "other";

/// One provider and model.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AiKey {
    pub provider: String,
    pub model: String,
}

/// One series' counters.
#[derive(Debug, Default)]
pub struct AiSeries {
    requests: AtomicU64,
    /// The cost's f64 bits.
    cost: AtomicU64,
    /// Prompt, completion and total tokens.
    tokens: [AtomicU64; 3],
    latency: [AtomicU64; 15],
    latency_sum: AtomicU64,
}

/// One request's AI figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct AiRecord {
    pub cost: f64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub latency_ms: u64,
}

/// A series summed over workers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AiTotals {
    pub requests: u64,
    pub cost: f64,
    pub tokens: [u64; 3],
    /// Counts per bucket (not cumulative; the last is +Inf).
    pub latency: Vec<u64>,
    pub latency_sum: u64,
}

static SERIES: Mutex<Vec<(AiKey, Arc<AiSeries>)>> = Mutex::new(Vec::new());

thread_local! {
    static LOCAL: RefCell<HashMap<AiKey, Arc<AiSeries>>> = RefCell::new(HashMap::new());
}

fn lock() -> std::sync::MutexGuard<'static, Vec<(AiKey, Arc<AiSeries>)>> {
    SERIES.lock().unwrap_or_else(|p| p.into_inner())
}

/// The series of `key`, made and published on its first request.
fn series(key: AiKey) -> Arc<AiSeries> {
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        if let Some(series) = local.get(&key) {
            return series.clone();
        }
        let mut published = lock();
        let asked = key.clone();
        let key = match published.len() >= MAX_MODELS && !published.iter().any(|(k, _)| *k == key) {
            true => AiKey {
                provider: key.provider,
                model: OTHER_MODEL.to_string(),
            },
            false => key,
        };
        let found = published.iter().find(|(k, _)| *k == key).map(|(_, s)| s.clone());
        let series = found.unwrap_or_else(|| {
            let series = Arc::new(AiSeries::default());
            published.push((key.clone(), series.clone()));
            series
        });
        // Kept under the model asked for (an `other` one too), up to a
        // bound: a flood of invented names costs a lock, not memory.
        if local.len() < 2 * MAX_MODELS {
            local.insert(asked, series.clone());
        }
        series
    })
}

/// Counts one request as Kong's exporter does: the request always; cost,
/// latency and each token count when above zero.
pub fn record(key: AiKey, figures: AiRecord) {
    let series = series(key);
    series.requests.fetch_add(1, Ordering::Relaxed);
    if figures.cost > 0.0 {
        let _ = series.cost.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some((f64::from_bits(bits) + figures.cost).to_bits())
        });
    }
    let total = figures.prompt_tokens.saturating_add(figures.completion_tokens);
    for (at, count) in [figures.prompt_tokens, figures.completion_tokens, total]
        .into_iter()
        .enumerate()
    {
        if count > 0 {
            series.tokens[at].fetch_add(count, Ordering::Relaxed);
        }
    }
    if figures.latency_ms > 0 {
        let at = AI_LATENCY_BUCKETS
            .iter()
            .position(|bound| figures.latency_ms <= *bound)
            .unwrap_or(AI_LATENCY_BUCKETS.len());
        series.latency[at].fetch_add(1, Ordering::Relaxed);
        series.latency_sum.fetch_add(figures.latency_ms, Ordering::Relaxed);
    }
}

/// Every series, sorted by provider and model.
pub fn totals() -> Vec<(AiKey, AiTotals)> {
    let published = lock().clone();
    let mut totals: Vec<(AiKey, AiTotals)> = published
        .into_iter()
        .map(|(key, s)| {
            let totals = AiTotals {
                requests: s.requests.load(Ordering::Relaxed),
                cost: f64::from_bits(s.cost.load(Ordering::Relaxed)),
                tokens: std::array::from_fn(|at| s.tokens[at].load(Ordering::Relaxed)),
                latency: s.latency.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
                latency_sum: s.latency_sum.load(Ordering::Relaxed),
            };
            (key, totals)
        })
        .collect();
    totals.sort_by(|a, b| a.0.cmp(&b.0));
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_from_every_thread_add_up_and_zero_figures_are_not_counted() {
        let key = AiKey {
            provider: "openai".into(),
            model: "test-model-a".into(),
        };
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let key = key.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        record(
                            key.clone(),
                            AiRecord {
                                cost: 0.5,
                                prompt_tokens: 3,
                                completion_tokens: 2,
                                latency_ms: 700,
                            },
                        );
                    }
                    record(key.clone(), AiRecord::default());
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let all = totals();
        let (_, t) = all.iter().find(|(k, _)| *k == key).unwrap();
        assert_eq!(t.requests, 404);
        assert!((t.cost - 200.0).abs() < 1e-9);
        assert_eq!(t.tokens, [1200, 800, 2000]);
        assert_eq!(t.latency[2], 400, "700 ms: the 1000 bucket");
        assert_eq!(t.latency_sum, 280_000);
    }
}
