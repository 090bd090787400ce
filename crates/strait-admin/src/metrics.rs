//! `GET /metrics` (status listener and Admin API): Prometheus text format
//! 0.0.4 with Kong 3.x metric names and labels.
//!
//! The request series come from `strait_runtime::metrics` (per worker,
//! summed here); ids get their labels from the configuration live now. The
//! node-wide gauges come from the proxy's counters and the store. Nothing
//! here takes a lock a request waits on, and the work is proportional to
//! the series that exist (routes that saw traffic), not to the routes
//! configured.

use std::fmt::Write;
use std::io;
use std::sync::Arc;

use http::StatusCode;
use strait_runtime::metrics::{self, HistogramTotals, Scope, KONG_LATENCY_BUCKETS, UPSTREAM_LATENCY_BUCKETS};
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::response::{AdminBody, AdminResponse};
use crate::AdminState;

/// Kong's `workspace` label in the open-source build.
const WORKSPACE: &str = "default";

/// A label value with Prometheus' escapes.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Labels of one scope, resolved against the configuration (ids when an
/// entity is gone or has no name).
struct Labels<'a> {
    snapshot: &'a strait_snapshot::Snapshot,
}

impl Labels<'_> {
    fn service(&self, id: [u8; 16]) -> String {
        let id = Uuid::from_bytes(id);
        if id.is_nil() {
            return String::new();
        }
        escape(&self.snapshot.service_label(id).unwrap_or_else(|| id.to_string()))
    }

    fn route(&self, id: [u8; 16]) -> String {
        let id = Uuid::from_bytes(id);
        escape(&self.snapshot.route_label(id).unwrap_or_else(|| id.to_string()))
    }

    fn consumer(&self, id: Option<[u8; 16]>) -> String {
        match id.map(Uuid::from_bytes) {
            None => String::new(),
            Some(id) => escape(&self.snapshot.consumer_label(id).unwrap_or_else(|| id.to_string())),
        }
    }

    fn scope(&self, scope: &Scope) -> (String, String) {
        (self.service(scope.service), self.route(scope.route))
    }
}

/// Appends `value` in decimal (the scrape writes hundreds of thousands of
/// numbers; `write!` costs several times more).
fn push_u64(out: &mut String, value: u64) {
    out.push_str(itoa::Buffer::new().format(value));
}

/// One histogram's lines; `labels` is the series' label list without braces.
fn histogram(out: &mut String, name: &str, labels: &str, bounds: &[&str], totals: &HistogramTotals) {
    let mut line = |suffix: &str, le: Option<&str>, value: u64| {
        out.push_str(name);
        out.push_str(suffix);
        out.push('{');
        out.push_str(labels);
        if let Some(le) = le {
            out.push_str(",le=\"");
            out.push_str(le);
            out.push('"');
        }
        out.push_str("} ");
        push_u64(out, value);
        out.push('\n');
    };
    let mut cumulative = 0;
    for (at, bound) in bounds.iter().enumerate() {
        cumulative += totals.buckets.get(at).copied().unwrap_or(0);
        line("_bucket", Some(bound), cumulative);
    }
    cumulative += totals.buckets.get(bounds.len()).copied().unwrap_or(0);
    line("_bucket", Some("+Inf"), cumulative);
    line("_count", None, cumulative);
    line("_sum", None, totals.sum);
}

/// Kong's AI families (`ai_metrics`), when any request was counted.
fn ai_families(out: &mut String) {
    let series = strait_runtime::ai_metrics::totals();
    if series.is_empty() {
        return;
    }
    let labels: Vec<String> = series
        .iter()
        .map(|(key, _)| {
            format!(
                "ai_provider=\"{}\",ai_model=\"{}\",cache_status=\"\",vector_db=\"\",embeddings_provider=\"\",embeddings_model=\"\"",
                escape(&key.provider),
                escape(&key.model)
            )
        })
        .collect();
    family(
        out,
        "kong_ai_llm_cost_total",
        "counter",
        "AI requests cost per ai_provider/cache in Kong",
    );
    for ((_, totals), labels) in series.iter().zip(&labels) {
        if totals.cost > 0.0 {
            let _ = writeln!(
                out,
                "kong_ai_llm_cost_total{{{labels},workspace=\"{WORKSPACE}\"}} {}",
                totals.cost
            );
        }
    }
    family(
        out,
        "kong_ai_llm_provider_latency_ms",
        "histogram",
        "LLM response Latency for each AI plugins per ai_provider in Kong",
    );
    let bounds: Vec<String> = strait_runtime::ai_metrics::AI_LATENCY_BUCKETS
        .iter()
        .map(|b| format!("{b}.0"))
        .collect();
    let bounds: Vec<&str> = bounds.iter().map(String::as_str).collect();
    for ((_, totals), labels) in series.iter().zip(&labels) {
        let histogram_totals = HistogramTotals {
            buckets: totals.latency.clone(),
            sum: totals.latency_sum,
        };
        if histogram_totals.count() > 0 {
            histogram(
                out,
                "kong_ai_llm_provider_latency_ms",
                &format!("{labels},workspace=\"{WORKSPACE}\""),
                &bounds,
                &histogram_totals,
            );
        }
    }
    family(
        out,
        "kong_ai_llm_requests_total",
        "counter",
        "AI requests total per ai_provider in Kong",
    );
    for ((_, totals), labels) in series.iter().zip(&labels) {
        let _ = writeln!(
            out,
            "kong_ai_llm_requests_total{{{labels},workspace=\"{WORKSPACE}\"}} {}",
            totals.requests
        );
    }
    family(
        out,
        "kong_ai_llm_tokens_total",
        "counter",
        "AI requests cost per ai_provider/cache in Kong",
    );
    for ((_, totals), labels) in series.iter().zip(&labels) {
        for (at, token_type) in ["prompt_tokens", "completion_tokens", "total_tokens"]
            .iter()
            .enumerate()
        {
            if totals.tokens[at] > 0 {
                let _ = writeln!(
                    out,
                    "kong_ai_llm_tokens_total{{{labels},token_type=\"{token_type}\",workspace=\"{WORKSPACE}\"}} {}",
                    totals.tokens[at]
                );
            }
        }
    }
}

/// What a scrape reads, owned: the render runs on a blocking thread.
struct Sources {
    snapshot: Arc<strait_snapshot::Snapshot>,
    store: Arc<dyn strait_store::Store>,
    stats: Arc<strait_runtime::stats::ProxyStats>,
    node_id: String,
}

impl Sources {
    fn of(state: &AdminState) -> Sources {
        Sources {
            snapshot: state.publisher.current().load_full(),
            store: state.store.clone(),
            stats: state.stats.clone(),
            node_id: state.node_id.clone(),
        }
    }
}

/// Text gathered before it is handed on: the lines are built with string
/// pushes (cheap), then written out a block at a time.
const BLOCK: usize = 16 * 1024;

/// Hands `out` to `sink` once it holds a block.
fn spill(out: &mut String, sink: &mut impl io::Write) -> io::Result<()> {
    if out.len() >= BLOCK {
        sink.write_all(out.as_bytes())?;
        out.clear();
    }
    Ok(())
}

/// The whole exposition, into `sink` a block at a time (never whole in
/// memory: 57 MB with 10,000 routes that saw traffic).
fn render(sources: &Sources, sink: &mut impl io::Write) -> io::Result<()> {
    let snapshot = &sources.snapshot;
    let labels = Labels { snapshot };
    let node = escape(&sources.node_id);
    let totals = metrics::totals();
    // The render runs on a thread of the Admin API, on the workers' cores.
    let mut pacer = strait_runtime::pace::Pacer::new();
    let mut out = String::with_capacity(BLOCK + BLOCK / 2);

    ai_families(&mut out);

    family(
        &mut out,
        "kong_bandwidth_bytes",
        "counter",
        "Total bandwidth (ingress/egress) throughput in bytes",
    );
    for (key, (ingress, egress)) in &totals.bandwidth {
        pacer.tick();
        spill(&mut out, sink)?;
        let (service, route) = labels.scope(&key.scope);
        let consumer = labels.consumer(key.consumer);
        for (direction, bytes) in [("egress", egress), ("ingress", ingress)] {
            let _ = writeln!(
                out,
                "kong_bandwidth_bytes{{service=\"{service}\",route=\"{route}\",direction=\"{direction}\",workspace=\"{WORKSPACE}\",consumer=\"{consumer}\"}} {bytes}"
            );
        }
    }

    family(
        &mut out,
        "kong_datastore_reachable",
        "gauge",
        "Datastore reachable from Kong, 0 is unreachable",
    );
    let reachable = u8::from(sources.store.version().is_ok());
    let _ = writeln!(out, "kong_datastore_reachable {reachable}");

    family(
        &mut out,
        "kong_http_requests_total",
        "counter",
        "HTTP status codes per consumer/service/route in Kong",
    );
    for (key, count) in &totals.status {
        pacer.tick();
        spill(&mut out, sink)?;
        let (service, route) = labels.scope(&key.scope);
        let source = if key.from_service { "service" } else { "kong" };
        let consumer = labels.consumer(key.consumer);
        let _ = writeln!(
            out,
            "kong_http_requests_total{{service=\"{service}\",route=\"{route}\",code=\"{}\",source=\"{source}\",workspace=\"{WORKSPACE}\",consumer=\"{consumer}\"}} {count}",
            key.code
        );
    }

    let latency_families = [
        (
            "kong_kong_latency_ms",
            "Latency added by Kong and enabled plugins for each service/route in Kong",
            &KONG_LATENCY_BUCKETS[..],
        ),
        (
            "kong_request_latency_ms",
            "Total latency incurred during requests for each service/route in Kong",
            &UPSTREAM_LATENCY_BUCKETS[..],
        ),
        (
            "kong_upstream_latency_ms",
            "Latency added by upstream response for each service/route in Kong",
            &UPSTREAM_LATENCY_BUCKETS[..],
        ),
    ];
    // Each scope's label list, resolved once for the three families.
    let series: Vec<String> = totals
        .latencies
        .iter()
        .map(|(scope, _)| {
            pacer.tick();
            let (service, route) = labels.scope(scope);
            format!("service=\"{service}\",route=\"{route}\",workspace=\"{WORKSPACE}\"")
        })
        .collect();
    for (name, help, bounds) in latency_families {
        family(&mut out, name, "histogram", help);
        let bounds: Vec<String> = bounds.iter().map(|b| format!("{b}.0")).collect();
        let bounds: Vec<&str> = bounds.iter().map(String::as_str).collect();
        for ((_, histograms), labels) in totals.latencies.iter().zip(&series) {
            pacer.tick();
            spill(&mut out, sink)?;
            let which = match name {
                "kong_kong_latency_ms" => &histograms[0],
                "kong_upstream_latency_ms" => &histograms[1],
                _ => &histograms[2],
            };
            if which.count() == 0 {
                continue;
            }
            histogram(&mut out, name, labels, &bounds, which);
        }
    }

    let connections = sources.stats.to_json();
    let get = |name: &str| connections.get(name).and_then(serde_json::Value::as_u64).unwrap_or(0);
    family(
        &mut out,
        "kong_nginx_connections_total",
        "gauge",
        "Number of connections by subsystem",
    );
    for (state_name, field) in [
        ("accepted", "connections_accepted"),
        ("active", "connections_active"),
        ("handled", "connections_handled"),
    ] {
        let _ = writeln!(
            out,
            "kong_nginx_connections_total{{node_id=\"{node}\",subsystem=\"http\",state=\"{state_name}\"}} {}",
            get(field)
        );
    }
    family(
        &mut out,
        "kong_nginx_requests_total",
        "gauge",
        "Number of requests total",
    );
    let _ = writeln!(
        out,
        "kong_nginx_requests_total{{node_id=\"{node}\",subsystem=\"http\"}} {}",
        get("total_requests")
    );

    family(
        &mut out,
        "strait_http2_buffered_bytes",
        "gauge",
        "Bytes of HTTP/2 request bodies received from clients and not yet taken on upstream (bounded by the stream and connection windows)",
    );
    let _ = writeln!(
        out,
        "strait_http2_buffered_bytes{{node_id=\"{node}\"}} {}",
        strait_runtime::stats::HTTP2_BUFFERED_BYTES.load(std::sync::atomic::Ordering::Relaxed)
    );

    family(&mut out, "kong_node_info", "gauge", "Kong Node metadata information");
    let _ = writeln!(
        out,
        "kong_node_info{{node_id=\"{node}\",version=\"{}\"}} 1",
        crate::KONG_COMPATIBLE_VERSION
    );

    let health = snapshot.plugin_configs("prometheus").any(|config| {
        config
            .get("upstream_health_metrics")
            .and_then(serde_json::Value::as_bool)
            == Some(true)
    });
    if health {
        family(
            &mut out,
            "kong_upstream_target_health",
            "gauge",
            "Health status of targets of upstream. States = healthchecks_off|healthy|unhealthy|dns_error, value is 1 when state is populated.",
        );
        for (upstream, target, state) in snapshot.target_states() {
            let (upstream, target) = (escape(&upstream), escape(&target));
            for state_name in ["healthchecks_off", "healthy", "unhealthy", "dns_error"] {
                let value = u8::from(state_name == state);
                let _ = writeln!(
                    out,
                    "kong_upstream_target_health{{upstream=\"{upstream}\",target=\"{target}\",address=\"{target}\",state=\"{state_name}\",subsystem=\"http\"}} {value}"
                );
            }
        }
    }

    family(
        &mut out,
        "strait_memory_resident_bytes",
        "gauge",
        "Resident memory of the Strait process (Kong's kong_memory_* gauges have no Lua VM or shared dict to report here)",
    );
    let _ = writeln!(
        out,
        "strait_memory_resident_bytes{{node_id=\"{node}\"}} {}",
        crate::root::rss_bytes().unwrap_or(0)
    );
    family(
        &mut out,
        "strait_redis_errors_total",
        "counter",
        "Calls to Redis that failed (rate-limiting plugins' redis policy)",
    );
    let _ = writeln!(
        out,
        "strait_redis_errors_total {}",
        strait_runtime::redis::errors_total()
    );
    family(
        &mut out,
        "strait_log_entries_dropped_total",
        "counter",
        "Log entries dropped: a log plugin's queue was full or gave up retrying, or the file writer was behind",
    );
    let _ = writeln!(
        out,
        "strait_log_entries_dropped_total {}",
        strait_runtime::logs::queue::dropped_total() + strait_runtime::logs::files::dropped_total()
    );
    family(
        &mut out,
        "strait_log_write_failures_total",
        "counter",
        "Log lines lost because a log file could not be opened or written",
    );
    let _ = writeln!(
        out,
        "strait_log_write_failures_total {}",
        strait_runtime::logs::files::failed_total()
    );
    sink.write_all(out.as_bytes())
}

/// Scrapes rendered at once (a Prometheus pair, and some to spare); past
/// it a scrape is answered 503.
const SCRAPES_AT_ONCE: usize = 16;
static SCRAPES: Semaphore = Semaphore::const_new(SCRAPES_AT_ONCE);

/// `GET /metrics`: rendered on a blocking thread while it is sent
/// ([`crate::body::written_within`]).
pub async fn metrics(state: &AdminState) -> AdminResponse {
    let sources = Sources::of(state);
    crate::body::written_within(
        &SCRAPES,
        || {
            crate::response::message(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("{SCRAPES_AT_ONCE} /metrics scrapes are being sent; try again"),
            )
        },
        move |out| render(&sources, out),
        |body: AdminBody| {
            let mut response = http::Response::new(body);
            *response.status_mut() = StatusCode::OK;
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        },
    )
    .await
}
