//! The spans of a sampled request in Zipkin's v2 JSON (what Kong's reporter
//! sends): `traceId`, `id`, `parentId`, `name`, `kind`, microsecond
//! `timestamp` and `duration`, `localEndpoint`, `remoteEndpoint`, string
//! `tags` (empty values left out) and `annotations`.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use super::{Zipkin, ZipkinRequest};
use crate::context::{LogDetails, LogRecord, PhaseTimings, SharedStore, TimedPhase};
use crate::observability::propagation::hex;

/// Monotonic instants as wall-clock microseconds, around one reading.
struct Clock {
    instant: Instant,
    micros: u64,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            instant: Instant::now(),
            micros: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
        }
    }

    fn micros(&self, at: Instant) -> u64 {
        match at <= self.instant {
            true => self.micros.saturating_sub(self.instant.duration_since(at).as_micros() as u64),
            false => self.micros + at.duration_since(self.instant).as_micros() as u64,
        }
    }
}

struct Span {
    id: Vec<u8>,
    parent: Option<Vec<u8>>,
    name: String,
    kind: &'static str,
    start: u64,
    end: u64,
    tags: Vec<(String, String)>,
    annotations: Vec<(&'static str, u64)>,
    /// `remoteEndpoint`: the service's name, the peer's address and port.
    service_name: Option<String>,
    ip: Option<String>,
    port: Option<u16>,
}

impl Span {
    fn tag(&mut self, name: &str, value: impl Into<String>) {
        let value = value.into();
        match self.tags.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.tags.push((name.to_string(), value)),
        }
    }

    fn to_json(&self, zipkin: &Zipkin, trace_id: &str) -> Vec<u8> {
        let mut span = Map::new();
        span.insert("traceId".into(), json!(trace_id));
        span.insert("name".into(), json!(self.name));
        if let Some(parent) = &self.parent {
            span.insert("parentId".into(), json!(hex(parent)));
        }
        span.insert("id".into(), json!(hex(&self.id)));
        span.insert("kind".into(), json!(self.kind));
        span.insert("timestamp".into(), json!(self.start));
        span.insert("duration".into(), json!(self.end.saturating_sub(self.start)));
        span.insert("localEndpoint".into(), json!({ "serviceName": zipkin.local_service_name }));
        let service_name = self.service_name.clone().or_else(|| zipkin.default_service_name.clone());
        if self.port.is_some() || service_name.is_some() {
            let mut remote = Map::new();
            if let Some(name) = service_name {
                remote.insert("serviceName".into(), json!(name));
            }
            if let Some(port) = self.port {
                remote.insert("port".into(), json!(port));
            }
            if let Some(ip) = &self.ip {
                let kind = if ip.contains(':') { "ipv6" } else { "ipv4" };
                remote.insert(kind.into(), json!(ip));
            }
            span.insert("remoteEndpoint".into(), Value::Object(remote));
        }
        let tags: Map<String, Value> = self
            .tags
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        if !tags.is_empty() {
            span.insert("tags".into(), Value::Object(tags));
        }
        if !self.annotations.is_empty() {
            let annotations: Vec<Value> = self
                .annotations
                .iter()
                .map(|(value, at)| json!({ "value": value, "timestamp": at }))
                .collect();
            span.insert("annotations".into(), Value::Array(annotations));
        }
        serde_json::to_vec(&Value::Object(span)).unwrap_or_default()
    }
}

/// Each span of the request, as JSON.
pub(super) fn spans(
    zipkin: &Zipkin,
    request: &ZipkinRequest,
    record: &LogRecord<'_>,
    details: &LogDetails,
    shared: &SharedStore,
) -> Vec<Vec<u8>> {
    let clock = Clock::now();
    let now = clock.micros;
    let started = clock.micros(details.started);
    // The plugins' own phase times when another plugin traces them; else
    // this plugin's access (the chain's first) and the upstream exchange.
    let timings = shared.get::<PhaseTimings>();
    let phase = |phase: TimedPhase| timings.map(|t| t.phases.iter().filter(move |p| p.phase == phase));
    let access_start = timings.map_or(clock.micros(request.access_started), |t| clock.micros(t.chain_started));
    let access_end = phase(TimedPhase::Access)
        .and_then(|mut p| p.next_back())
        .map(|p| clock.micros(p.end))
        .or_else(|| details.upstream_timing.map(|t| clock.micros(t.connect_start)))
        .unwrap_or(access_start);
    let head = details.upstream_timing.map(|t| clock.micros(t.head));
    let header_start = phase(TimedPhase::HeaderFilter)
        .and_then(|mut p| p.next())
        .map(|p| clock.micros(p.start))
        .or(head)
        .unwrap_or(now);
    let header_end = phase(TimedPhase::HeaderFilter)
        .and_then(|mut p| p.next_back())
        .map_or(header_start, |p| clock.micros(p.end));

    let entities = record.entities;
    let service = record.request.service_id.zip(entities).and_then(|(id, e)| e.service(id));
    let route = record.request.route_id.zip(entities).and_then(|(id, e)| e.route(id));
    let service_tags = |span: &mut Span| {
        if let Some(service) = service {
            span.tag("kong.service", service.id.to_string());
            if let Some(name) = &service.name {
                span.service_name = Some(name.clone());
                span.tag("kong.service_name", name.clone());
            }
        }
        if let Some(route) = route {
            span.tag("kong.route", route.id.to_string());
            if let Some(name) = &route.name {
                span.tag("kong.route_name", name.clone());
            }
        }
    };

    let mut server = Span {
        id: request.span_id.to_vec(),
        parent: request.parent_id.clone(),
        name: request.name.clone(),
        kind: "SERVER",
        start: started,
        end: now,
        tags: request.tags.clone(),
        annotations: Vec::new(),
        service_name: None,
        ip: Some(record.request.client_ip.to_string()),
        port: Some(request.client_port),
    };
    let mut proxy = Span {
        id: request.proxy_id.to_vec(),
        parent: Some(request.span_id.to_vec()),
        name: format!("{} (proxy)", request.name),
        kind: "CLIENT",
        start: access_start,
        end: now,
        tags: Vec::new(),
        annotations: Vec::new(),
        service_name: None,
        ip: None,
        port: None,
    };
    if zipkin.annotations {
        server.annotations.push(("krs", started));
        proxy.annotations.extend([
            ("kas", access_start),
            ("kaf", access_end),
            ("khs", header_start),
            ("khf", header_end),
            ("kbs", header_end),
            ("kbf", now),
        ]);
    } else {
        let ms = |from: u64, to: u64| (to.saturating_sub(from) / 1000).to_string();
        server.tag("kong.rewrite.duration_ms", "0");
        proxy.tag("kong.access.duration_ms", ms(access_start, access_end));
        proxy.tag("kong.header_filter.duration_ms", ms(header_start, header_end));
        proxy.tag("kong.body_filter.duration_ms", ms(header_end, now));
    }

    let mut out = Vec::new();
    let trace_id = hex(&request.trace_id);
    let tries = details.tries.len();
    for (index, attempt) in details.tries.iter().enumerate() {
        let start = attempt.balancer_start * 1000;
        let answering = index + 1 == tries;
        let end = match (answering, details.upstream_timing) {
            (true, Some(timing)) => clock.micros(timing.connect_end),
            _ => start + attempt.balancer_latency * 1000,
        };
        let mut span = Span {
            id: super::random_id().to_vec(),
            parent: Some(request.span_id.to_vec()),
            name: format!("{} (balancer try {})", request.name, index + 1),
            kind: "CLIENT",
            start,
            end,
            tags: vec![("kong.balancer.try".into(), (index + 1).to_string())],
            annotations: Vec::new(),
            service_name: None,
            ip: Some(attempt.ip.clone()),
            port: Some(attempt.port),
        };
        if attempt.failure.is_some() {
            span.tag("error", "true");
            span.tag("kong.balancer.state", "failed");
        }
        service_tags(&mut span);
        out.push(span.to_json(zipkin, &trace_id));
        if answering {
            proxy.tag("peer.hostname", attempt.ip.clone());
            proxy.ip = Some(attempt.ip.clone());
            proxy.port = Some(attempt.port);
        }
    }
    server.tag("http.status_code", record.status.to_string());
    if let Some(consumer) = record.request.consumer_id {
        server.tag("kong.consumer", consumer.to_string());
    }
    if zipkin.include_credential {
        if let Some(credential) = &record.request.credential {
            server.tag("kong.credential", credential.id.to_string());
        }
    }
    if let Some(node) = strait_runtime::node_id() {
        server.tag("kong.node.id", node);
    }
    service_tags(&mut proxy);
    out.push(proxy.to_json(zipkin, &trace_id));
    out.push(server.to_json(zipkin, &trace_id));
    out
}
