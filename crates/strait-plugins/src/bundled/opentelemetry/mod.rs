//! `opentelemetry` (Kong priority 14): W3C trace context propagation and
//! spans exported as OTLP/HTTP protobuf to `traces_endpoint`.
//!
//! - `access` reads an incoming `traceparent` (or starts a trace), decides
//!   sampling (the parent's flag when there is one, else `sampling_rate`,
//!   else the node's `tracing_sampling_rate`), and sends `traceparent`
//!   upstream with the id of the span that will stand for the upstream call.
//! - `log` (after the response) builds the spans of a sampled request and
//!   queues them, encoded, on a Kong 3.x queue (`queue.*`, 200 spans-sets a
//!   batch by default) drained on the shipping thread: a full queue drops
//!   and counts.
//!
//! Spans (Kong's names): `kong` (server, the whole request), `kong.router`
//! (arrival to the plugin chain: reading the head and routing),
//! `kong.access.plugin.<name>` and `kong.header_filter.plugin.<name>` for
//! every plugin of the chain, `kong.balancer` (client, one per try; the
//! answering one is the upstream's parent), under it
//! `kong.upstream.connect` (getting a connection: new or pooled) and
//! `kong.upstream.ttfb` (request sent to response head).

mod schema;

/// `opentelemetry` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "opentelemetry",
    priority: 14,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(OpenTelemetry::from_config(config)?)),
};

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use strait_runtime::logs::queue::Queue;
use strait_runtime::logs::sinks::HttpSink;

mod otlp;

use self::otlp::{AttrValue, Span};
use crate::observability::propagation::hex;
use crate::config::ConfigReader;
use crate::context::{LogRecord, PhaseTimings, RequestCtx, SharedStore, TimedPhase};
use crate::phase::{Flow, Plugin};
use crate::PluginError;

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// The node's `tracing_sampling_rate` as parts per 2^64 of 1.0 (Kong's
/// default 0.01), used when a plugin sets no `sampling_rate`.
static NODE_SAMPLING: AtomicU64 = AtomicU64::new((u64::MAX as f64 * 0.01) as u64);

/// Sets the node's `tracing_sampling_rate` (0..=1).
pub fn set_node_sampling_rate(rate: f64) {
    NODE_SAMPLING.store(threshold(rate), Ordering::Relaxed);
}

fn threshold(rate: f64) -> u64 {
    if rate >= 1.0 {
        u64::MAX
    } else {
        (rate.max(0.0) * u64::MAX as f64) as u64
    }
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    let filled = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    match filled {
        Ok(()) => u64::from_le_bytes(bytes) | 1,
        Err(_) => {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        }
    }
}

/// wyrand: fast, well-spread ids (not secrets).
fn random_u64() -> u64 {
    RNG.with(|state| {
        let next = state.get().wrapping_add(0xa076_1d64_78bd_642f);
        state.set(next);
        let product = u128::from(next) * u128::from(next ^ 0xe703_7ed1_a0b4_28db);
        (product >> 64) as u64 ^ product as u64
    })
}

fn span_id() -> [u8; 8] {
    loop {
        let id = random_u64().to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (index, pair) in text.as_bytes().chunks(2).enumerate() {
        let digit = |b: u8| (b as char).to_digit(16).filter(|_| !b.is_ascii_uppercase());
        out[index] = (digit(pair[0])? << 4 | digit(pair[1])?) as u8;
    }
    Some(out)
}

/// A W3C `traceparent`: version 00 (or a later one read the same way),
/// non-zero trace and parent ids.
fn parse_traceparent(value: &str) -> Option<([u8; 16], [u8; 8], bool)> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let trace = unhex::<16>(parts.next()?)?;
    let parent = unhex::<8>(parts.next()?)?;
    let flags = unhex::<1>(parts.next()?)?;
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    if trace == [0; 16] || parent == [0; 8] {
        return None;
    }
    Some((trace, parent, flags[0] & 1 == 1))
}

/// The trace a request belongs to, kept in the shared store from `access`
/// to `log` (log serializers report its id as `trace_id`).
#[derive(Debug, Clone)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    /// The `kong` span.
    pub root_span: [u8; 8],
    /// The caller's span, from `traceparent`.
    pub parent: Option<[u8; 8]>,
    /// The span sent upstream as parent (the answering `kong.balancer`).
    pub upstream_span: [u8; 8],
    pub sampled: bool,
}

impl TraceContext {
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }
}

#[derive(Debug)]
pub struct OpenTelemetry {
    queue: Arc<Queue>,
    /// `None`: the node's rate.
    sampling: Option<u64>,
    /// `header_type: ignore`: start a new trace whatever the request says.
    ignore_incoming: bool,
    trace_id_header: Option<HeaderName>,
}

impl OpenTelemetry {
    pub fn from_config(config: &Map<String, Value>) -> Result<OpenTelemetry, PluginError> {
        let c = ConfigReader::new(config);
        let endpoint = c
            .string("traces_endpoint")?
            .or(c.string("endpoint")?)
            .ok_or_else(|| PluginError::invalid("traces_endpoint", "required field missing"))?;
        let (mut target, _) = crate::bundled::http_log::endpoint("traces_endpoint", &endpoint)?;
        let connect = c.integer("connect_timeout", 1000)?;
        let send = c.integer("send_timeout", 5000)?;
        let read = c.integer("read_timeout", 5000)?;
        target.timeout = Duration::from_millis((connect + send + read).max(1) as u64);
        target.headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        if let Some(Value::Object(headers)) = config.get("headers") {
            for (name, value) in headers {
                let at = format!("headers.{name}");
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| PluginError::invalid(&at, "invalid header name"))?;
                let value = HeaderValue::from_str(value.as_str().unwrap_or(""))
                    .map_err(|_| PluginError::invalid(&at, "invalid header value"))?;
                target.headers.insert(name, value);
            }
        }
        let mut resource: Vec<(String, String)> = vec![
            ("service.name".into(), "kong".into()),
            ("service.version".into(), env!("CARGO_PKG_VERSION").into()),
        ];
        if let Some(Value::Object(attributes)) = config.get("resource_attributes") {
            for (key, value) in attributes {
                let value = value.as_str().unwrap_or("").to_string();
                match resource.iter_mut().find(|(k, _)| k == key) {
                    Some(slot) => slot.1 = value,
                    None => resource.push((key.clone(), value)),
                }
            }
        }
        let mut params = crate::observability::queue_params(&c)?;
        if config.get("queue").is_none() {
            params.max_batch_size = 200;
        }
        let name = format!("opentelemetry:{endpoint}:{:?}:{resource:?}:{params:?}", target.headers);
        let queue = Queue::shared(name, &params, move || {
            let encode = move |batch: &[Vec<u8>]| otlp::export_request(&resource, batch);
            Box::new(HttpSink::encoded(target, Box::new(encode)))
        });
        let sampling = match config.get("sampling_rate").and_then(Value::as_f64) {
            Some(rate) if !(0.0..=1.0).contains(&rate) => {
                return Err(PluginError::invalid("sampling_rate", "value should be between 0 and 1"))
            }
            Some(rate) => Some(threshold(rate)),
            None => None,
        };
        let trace_id_header = match c.string("http_response_header_for_traceid")? {
            Some(name) => Some(
                HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| PluginError::invalid("http_response_header_for_traceid", "invalid header name"))?,
            ),
            None => None,
        };
        Ok(OpenTelemetry {
            queue,
            sampling,
            ignore_incoming: c.string("header_type")?.as_deref() == Some("ignore"),
            trace_id_header,
        })
    }

    fn sample(&self, trace_id: &[u8; 16]) -> bool {
        let threshold = self.sampling.unwrap_or_else(|| NODE_SAMPLING.load(Ordering::Relaxed));
        if threshold == u64::MAX {
            return true;
        }
        // The trace id's low half decides, so every node agrees.
        let mut low = [0u8; 8];
        low.copy_from_slice(&trace_id[8..]);
        u64::from_be_bytes(low) < threshold
    }
}

impl Plugin for OpenTelemetry {
    fn name(&self) -> &'static str {
        "opentelemetry"
    }

    fn priority(&self) -> i32 {
        14
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let incoming = match self.ignore_incoming {
            true => None,
            false => ctx
                .headers
                .get(&TRACEPARENT)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_traceparent),
        };
        let (trace_id, parent, sampled) = match incoming {
            Some((trace, parent, sampled)) => (trace, Some(parent), sampled),
            None => {
                let mut trace = [0u8; 16];
                trace[..8].copy_from_slice(&random_u64().to_be_bytes());
                trace[8..].copy_from_slice(&random_u64().to_be_bytes());
                let sampled = self.sample(&trace);
                (trace, None, sampled)
            }
        };
        let trace = TraceContext {
            trace_id,
            root_span: span_id(),
            parent,
            upstream_span: span_id(),
            sampled,
        };
        let value = format!(
            "00-{}-{}-{}",
            hex(&trace.trace_id),
            hex(&trace.upstream_span),
            if sampled { "01" } else { "00" }
        );
        if let Ok(value) = HeaderValue::from_str(&value) {
            ctx.headers.insert(TRACEPARENT, value);
        }
        if let Some(name) = &self.trace_id_header {
            if let Ok(value) = HeaderValue::from_str(&trace.trace_id_hex()) {
                ctx.response_headers.push(name, &value);
            }
        }
        ctx.shared.insert(trace);
        Flow::Continue
    }

    fn logs(&self) -> bool {
        true
    }

    fn serializes(&self) -> bool {
        true
    }

    fn traces(&self) -> bool {
        true
    }

    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        let Some(trace) = shared.get::<TraceContext>().filter(|t| t.sampled) else {
            return;
        };
        let Some(details) = record.details.as_deref() else {
            return;
        };
        let clock = Clock::now();
        let mut spans = Vec::with_capacity(8);
        let span = |name: String, id: [u8; 8], parent: Option<[u8; 8]>, kind: u32, start: Instant, end: Instant| Span {
            trace_id: trace.trace_id,
            span_id: id,
            parent_span_id: parent,
            name,
            kind,
            start_unix_nano: clock.unix_nanos(start),
            end_unix_nano: clock.unix_nanos(end),
            attributes: Vec::new(),
            status_code: 0,
        };
        let mut root = span(
            "kong".into(),
            trace.root_span,
            trace.parent,
            otlp::KIND_SERVER,
            details.started,
            clock.instant,
        );
        let flavor = match details.http_version {
            http::Version::HTTP_2 => "2",
            http::Version::HTTP_3 => "3",
            http::Version::HTTP_10 => "1.0",
            _ => "1.1",
        };
        root.attributes = vec![
            ("http.method", AttrValue::Str(record.request.method.to_string())),
            (
                "http.url",
                AttrValue::Str(format!(
                    "{}://{}:{}{}",
                    details.scheme, details.host, details.port, details.request_uri
                )),
            ),
            ("http.host", AttrValue::Str(details.host.clone())),
            ("http.scheme", AttrValue::Str(details.scheme.to_string())),
            ("http.flavor", AttrValue::Str(flavor.to_string())),
            ("net.peer.ip", AttrValue::Str(record.request.client_ip.to_string())),
            ("http.status_code", AttrValue::Int(i64::from(record.status))),
            ("kong.request.id", AttrValue::Str(details.request_id.clone())),
        ];
        if let Some(route) = record.request.route_id {
            root.attributes
                .push(("kong.route.id", AttrValue::Str(route.to_string())));
        }
        if let Some(service) = record.request.service_id {
            root.attributes
                .push(("kong.service.id", AttrValue::Str(service.to_string())));
        }
        if record.status >= 500 {
            root.status_code = otlp::STATUS_ERROR;
        }
        spans.push(root);
        if let Some(timings) = shared.get::<PhaseTimings>() {
            spans.push(span(
                "kong.router".into(),
                span_id(),
                Some(trace.root_span),
                otlp::KIND_INTERNAL,
                details.started,
                timings.chain_started,
            ));
            for timed in &timings.phases {
                let phase = match timed.phase {
                    TimedPhase::Access => "access",
                    TimedPhase::HeaderFilter => "header_filter",
                };
                spans.push(span(
                    format!("kong.{phase}.plugin.{}", timed.plugin),
                    span_id(),
                    Some(trace.root_span),
                    otlp::KIND_INTERNAL,
                    timed.start,
                    timed.end,
                ));
            }
        }
        let tries = details.tries.len();
        for (index, attempt) in details.tries.iter().enumerate() {
            let answering = index + 1 == tries && attempt.failure.is_none();
            let timing = details.upstream_timing.filter(|_| answering);
            let (start, end) = match timing {
                Some(t) => (t.connect_start, t.head),
                None => {
                    let start = clock.instant_of_unix_ms(attempt.balancer_start);
                    (start, start + Duration::from_millis(attempt.balancer_latency))
                }
            };
            let id = if answering { trace.upstream_span } else { span_id() };
            let mut balancer = span(
                "kong.balancer".into(),
                id,
                Some(trace.root_span),
                otlp::KIND_CLIENT,
                start,
                end,
            );
            balancer.attributes = vec![
                ("net.peer.ip", AttrValue::Str(attempt.ip.clone())),
                ("net.peer.port", AttrValue::Int(i64::from(attempt.port))),
                ("try_count", AttrValue::Int(index as i64 + 1)),
            ];
            if let Some(failure) = &attempt.failure {
                balancer.status_code = otlp::STATUS_ERROR;
                balancer
                    .attributes
                    .push(("error.message", AttrValue::Str(failure.clone())));
            }
            spans.push(balancer);
            if let Some(timing) = timing {
                let mut connect = span(
                    "kong.upstream.connect".into(),
                    span_id(),
                    Some(id),
                    otlp::KIND_INTERNAL,
                    timing.connect_start,
                    timing.connect_end,
                );
                connect
                    .attributes
                    .push(("kong.upstream.reused", AttrValue::Bool(timing.reused)));
                spans.push(connect);
                spans.push(span(
                    "kong.upstream.ttfb".into(),
                    span_id(),
                    Some(id),
                    otlp::KIND_INTERNAL,
                    timing.sent,
                    timing.head,
                ));
            }
        }
        let mut encoded = Vec::with_capacity(spans.len() * 160);
        for span in &spans {
            otlp::encode_span_field(&mut encoded, span);
        }
        self.queue.push(encoded);
    }
}

/// Converts monotonic instants to wall-clock nanoseconds around one reading.
struct Clock {
    instant: Instant,
    unix_nanos: u64,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            instant: Instant::now(),
            unix_nanos: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        }
    }

    fn unix_nanos(&self, at: Instant) -> u64 {
        match self.instant.checked_duration_since(at) {
            Some(before) => self.unix_nanos.saturating_sub(before.as_nanos() as u64),
            None => self.unix_nanos + at.duration_since(self.instant).as_nanos() as u64,
        }
    }

    fn instant_of_unix_ms(&self, ms: u64) -> Instant {
        let nanos = ms.saturating_mul(1_000_000);
        let before = Duration::from_nanos(self.unix_nanos.saturating_sub(nanos));
        self.instant.checked_sub(before).unwrap_or(self.instant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_parses_like_the_w3c_spec() {
        let (trace, parent, sampled) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").expect("valid");
        assert_eq!(hex(&trace), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&parent), "00f067aa0ba902b7");
        assert!(sampled);
        assert!(parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none());
        assert!(parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01").is_none());
        assert!(parse_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").is_none());
        assert!(parse_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_none());
        assert!(parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_none());
        let (_, _, sampled) =
            parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-later").expect("future");
        assert!(!sampled);
    }

    #[test]
    fn sampling_thresholds_cover_the_range() {
        assert_eq!(threshold(1.0), u64::MAX);
        assert_eq!(threshold(0.0), 0);
        assert!(threshold(0.5) > u64::MAX / 2 - 1000 && threshold(0.5) < u64::MAX / 2 + 1000);
    }
}
