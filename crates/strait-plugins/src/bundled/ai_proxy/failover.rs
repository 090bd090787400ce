//! ai-proxy's failover (Strait's, beyond Kong; docs/ai.md): after the
//! configured provider, each of `fallbacks` in turn takes a request the
//! one before refused with a status of `failover_statuses` (429 and 5xx by
//! default), could not be reached for, or gave no response head in time,
//! before the client saw anything. Each provider is translated for as if
//! it were the only one. A provider that failed is passed over by later
//! requests for `failover_cooldown` seconds (or its `Retry-After`), unless
//! every one is down; one that answers is healthy again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{Map, Value};

use super::{analytics_for, build, model_for, stream_state};
use crate::ai::config::LlmConfig;
use crate::ai::AiRequest;
use crate::context::SharedStore;
use crate::phase::{FailedTry, FailoverPlan, NextTry};

/// One provider's health, shared by the plugin's requests.
#[derive(Debug, Default)]
pub struct EntryHealth {
    /// Passed over until then (ms since the Unix epoch; 0: healthy).
    down_until_ms: AtomicU64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The providers in the order a request tries them: the healthy ones in
/// configuration order, then the others (every one is tried before a
/// request fails).
pub fn order(health: &[EntryHealth]) -> Vec<usize> {
    let now = now_ms();
    let down = |at: usize| health[at].down_until_ms.load(Ordering::Relaxed) > now;
    let (up, passed): (Vec<usize>, Vec<usize>) = (0..health.len()).partition(|at| !down(*at));
    up.into_iter().chain(passed).collect()
}

/// A provider answered: healthy again.
pub fn answered(health: &[EntryHealth], entry: usize) {
    if let Some(health) = health.get(entry) {
        if health.down_until_ms.load(Ordering::Relaxed) != 0 {
            health.down_until_ms.store(0, Ordering::Relaxed);
        }
    }
}

/// The client's request as ai-proxy received it, for each provider tried.
#[derive(Debug)]
pub(crate) struct ClientRequest {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    /// The checked body (empty on `preserve`, whose body is `raw`).
    pub body: Map<String, Value>,
    pub raw: Bytes,
    pub asked_model: Option<String>,
    pub stream: bool,
    pub include_usage: bool,
}

/// What the plan needs of the plugin instance.
#[derive(Debug)]
pub struct ProxyView {
    pub health: Arc<Vec<EntryHealth>>,
    pub statuses: Vec<u16>,
    pub cooldown_ms: u64,
    pub plugin_id: Option<uuid::Uuid>,
}

/// One request's failover: the providers not tried yet.
#[derive(Debug)]
pub struct Plan {
    pub proxy: ProxyView,
    /// Every provider's configuration, resolved for this request.
    pub configs: Vec<LlmConfig>,
    pub client: ClientRequest,
    pub remaining: Vec<usize>,
    pub current: usize,
}

impl FailoverPlan for Plan {
    fn fails_over_on(&self, status: u16) -> bool {
        self.proxy.statuses.contains(&status)
    }

    fn next(&mut self, failed: FailedTry, shared: &mut SharedStore) -> Option<NextTry> {
        // A provider's Retry-After, up to an hour.
        let cooldown = match failed {
            FailedTry::Status(_, Some(seconds)) => seconds.min(3600) * 1000,
            _ => self.proxy.cooldown_ms,
        };
        if let Some(health) = self.proxy.health.get(self.current) {
            health
                .down_until_ms
                .store(now_ms().saturating_add(cooldown), Ordering::Relaxed);
        }
        tracing::info!(plugin = "ai-proxy", provider = self.configs[self.current].provider.name(),
            failure = ?failed, "failing over to the next provider");
        while !self.remaining.is_empty() {
            let at = self.remaining.remove(0);
            let config = &self.configs[at];
            let model = model_for(config, &self.client, "");
            let mut headers = self.client.headers.clone();
            let mut fields = self.client.body.clone();
            let Ok(built) = build(config, &self.client, &model, &mut fields, &mut headers) else {
                continue;
            };
            self.current = at;
            if let Some(request) = shared.get_mut::<AiRequest>() {
                let mut analytics = analytics_for(config, &model, self.proxy.plugin_id);
                analytics.started = request.analytics.started;
                analytics.request_payload = built.payload;
                request.analytics = analytics;
                request.entry = at;
                request.stream = self
                    .client
                    .stream
                    .then(|| stream_state(config, &model, self.client.include_usage, built.hide_usage));
            }
            let path_and_query = match built.query.is_empty() {
                true => built.path,
                false => format!("{}?{}", built.path, built.query),
            };
            return Some(NextTry {
                target: built.target,
                method: self.client.method.clone(),
                path_and_query,
                headers,
                body: built.body,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_that_failed_are_tried_last_until_they_answer() {
        let health: Vec<EntryHealth> = (0..3).map(|_| EntryHealth::default()).collect();
        assert_eq!(order(&health), vec![0, 1, 2]);
        health[0].down_until_ms.store(now_ms() + 60_000, Ordering::Relaxed);
        assert_eq!(order(&health), vec![1, 2, 0]);
        health[2].down_until_ms.store(now_ms() - 1, Ordering::Relaxed);
        assert_eq!(order(&health), vec![1, 2, 0], "a cool-down that ended");
        answered(&health, 0);
        assert_eq!(order(&health), vec![0, 1, 2]);
    }
}
