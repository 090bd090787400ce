//! `prometheus` (Kong priority 13): counts each request of the routes it
//! applies to in per-worker series (`strait_runtime::metrics`), summed when
//! `/metrics` is scraped (on the status listener and the Admin API).
//!
//! Kong's switches, all off by default: `status_code_metrics`
//! (`kong_http_requests_total`), `latency_metrics` (`kong_kong_latency_ms`,
//! `kong_upstream_latency_ms`, `kong_request_latency_ms`),
//! `bandwidth_metrics` (`kong_bandwidth_bytes`), `upstream_health_metrics`
//! (`kong_upstream_target_health`, read at scrape time), and `per_consumer`
//! (the consumer label of the request and bandwidth counters), and
//! `ai_metrics` (`kong_ai_llm_*`, from ai-proxy's accounting of requests
//! that log statistics: `strait_runtime::ai_metrics`).

mod schema;

/// `prometheus` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "prometheus",
    priority: 13,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Prometheus::from_config(config)?)),
};

use serde_json::{Map, Value};
use strait_runtime::metrics::{self, Bandwidth, BandwidthKey, Latency, Scope, StatusKey};

use crate::config::ConfigReader;
use crate::context::{LogRecord, ResponseSource, SharedStore};
use crate::phase::Plugin;
use crate::PluginError;

#[derive(Debug)]
pub struct Prometheus {
    per_consumer: bool,
    status_code_metrics: bool,
    latency_metrics: bool,
    bandwidth_metrics: bool,
    ai_metrics: bool,
}

impl Prometheus {
    pub fn from_config(config: &Map<String, Value>) -> Result<Prometheus, PluginError> {
        let c = ConfigReader::new(config);
        // Read so that a wrong type is refused; used at scrape time.
        c.bool("upstream_health_metrics", false)?;
        Ok(Prometheus {
            per_consumer: c.bool("per_consumer", false)?,
            status_code_metrics: c.bool("status_code_metrics", false)?,
            latency_metrics: c.bool("latency_metrics", false)?,
            bandwidth_metrics: c.bool("bandwidth_metrics", false)?,
            ai_metrics: c.bool("ai_metrics", false)?,
        })
    }
}

impl Plugin for Prometheus {
    fn name(&self) -> &'static str {
        "prometheus"
    }

    fn priority(&self) -> i32 {
        13
    }

    /// Reads none of Kong's identity fields (identity.rs).
    fn reads_identity_fields(&self) -> bool {
        false
    }

    fn logs(&self) -> bool {
        self.status_code_metrics || self.latency_metrics || self.bandwidth_metrics || self.ai_metrics
    }

    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        // Kong counts only requests that matched a route.
        let Some(route) = record.request.route_id else {
            return;
        };
        if self.ai_metrics {
            record_ai(shared);
        }
        if !(self.status_code_metrics || self.latency_metrics || self.bandwidth_metrics) {
            return;
        }
        let scope = Scope {
            route: *route.as_bytes(),
            service: *record.request.service_id.unwrap_or_default().as_bytes(),
        };
        let consumer = match self.per_consumer {
            true => record.request.consumer_id.map(|id| *id.as_bytes()),
            false => None,
        };
        let status = self.status_code_metrics.then_some(StatusKey {
            scope,
            code: record.status,
            from_service: record.source == ResponseSource::Service,
            consumer,
        });
        let latency = self.latency_metrics.then(|| Latency {
            scope,
            kong: record.total_ms.saturating_sub(record.upstream_ms.unwrap_or(0)),
            upstream: record.upstream_ms,
            request: record.total_ms,
        });
        let bandwidth = self.bandwidth_metrics.then_some(Bandwidth {
            key: BandwidthKey { scope, consumer },
            ingress: record.request_bytes,
            egress: record.response_bytes,
        });
        metrics::record(status, latency, bandwidth);
    }
}

/// Kong's AI series for the LLM calls of a request that log statistics
/// (ai-proxy's, the transformers'; Kong's exporter reads the log's `ai`
/// fields, one series set per namespace).
fn record_ai(shared: &SharedStore) {
    let proxy = shared.get::<crate::ai::AiRequest>().map(|r| &r.analytics);
    let calls = shared.get::<crate::ai::transformer::TransformerCalls>();
    let transformers = calls.iter().flat_map(|c| c.0.iter()).map(|(_, a)| a);
    for analytics in proxy.into_iter().chain(transformers) {
        if !analytics.log_statistics {
            continue;
        }
        let key = strait_runtime::ai_metrics::AiKey {
            provider: analytics.provider.to_string(),
            model: analytics.request_model.clone(),
        };
        let latency_ms = analytics
            .latency_ms
            .unwrap_or_else(|| analytics.started.elapsed().as_millis() as u64);
        strait_runtime::ai_metrics::record(
            key,
            strait_runtime::ai_metrics::AiRecord {
                cost: analytics.cost(),
                prompt_tokens: analytics.prompt_tokens,
                completion_tokens: analytics.completion(),
                latency_ms,
            },
        );
    }
}
