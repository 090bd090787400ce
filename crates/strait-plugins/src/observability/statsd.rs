//! What `statsd` and `datadog` share: the values Kong's log entry gives
//! them (sizes, latencies, the request's service, route and consumer),
//! StatsD lines written straight into the request's entry (no JSON entry
//! is made), and the sink that sends them off the workers: over UDP
//! merged per flush window and sent a datagram per line or packed
//! (`strait_runtime::logs::lines::MetricLines`), over TCP through Kong's
//! queue, a request's lines one entry.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use strait_core::{Consumer, Route, Service};
use strait_runtime::logs::lines::{MetricLines, MetricLinesParams};
use strait_runtime::logs::queue::{Queue, QueueParams};
use strait_runtime::logs::sinks::{TcpSink, TcpTarget};
use strait_runtime::logs::templated::LineTemplate;

use crate::context::LogRecord;

/// Kong's `stat_types`: the letter a line ends with.
pub(crate) fn stat_letter(stat_type: &str) -> Option<&'static str> {
    Some(match stat_type {
        "gauge" => "g",
        "counter" => "c",
        "timer" => "ms",
        "histogram" => "h",
        "meter" => "m",
        "set" => "s",
        "distribution" => "d",
        _ => return None,
    })
}

/// The six values Kong's metrics plugins read from its log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stat {
    RequestCount,
    Latency,
    RequestSize,
    ResponseSize,
    UpstreamLatency,
    KongLatency,
}

impl Stat {
    pub(crate) const ALL: [Stat; 6] = [
        Stat::RequestCount,
        Stat::Latency,
        Stat::RequestSize,
        Stat::ResponseSize,
        Stat::UpstreamLatency,
        Stat::KongLatency,
    ];

    /// The request's values by [`Stat`], and 1 at [`ONE`]: what a line
    /// template's lines take their values from
    /// (`strait_runtime::logs::templated`).
    pub(crate) fn values(record: &LogRecord<'_>) -> [i64; 7] {
        let mut values = [1; 7];
        for stat in Stat::ALL {
            values[stat as usize] = stat.value(record);
        }
        values
    }

    pub(crate) fn of(name: &str) -> Option<Stat> {
        Some(match name {
            "request_count" => Stat::RequestCount,
            "latency" => Stat::Latency,
            "request_size" => Stat::RequestSize,
            "response_size" => Stat::ResponseSize,
            "upstream_latency" => Stat::UpstreamLatency,
            "kong_latency" => Stat::KongLatency,
            _ => return None,
        })
    }

    /// The stat's name in a line.
    pub(crate) fn line_name(self) -> &'static str {
        match self {
            Stat::RequestCount => "request.count",
            Stat::Latency => "latency",
            Stat::RequestSize => "request.size",
            Stat::ResponseSize => "response.size",
            Stat::UpstreamLatency => "upstream_latency",
            Stat::KongLatency => "kong_latency",
        }
    }

    /// The value in Kong's entry: `latencies.proxy` is -1 when no upstream
    /// answered.
    pub(crate) fn value(self, record: &LogRecord<'_>) -> i64 {
        match self {
            Stat::RequestCount => 1,
            Stat::Latency => record.total_ms as i64,
            Stat::RequestSize => record.request_bytes as i64,
            Stat::ResponseSize => record.response_bytes as i64,
            Stat::UpstreamLatency => record.upstream_ms.map_or(-1, |ms| ms as i64),
            Stat::KongLatency => record.total_ms.saturating_sub(record.upstream_ms.unwrap_or(0)) as i64,
        }
    }
}

/// The place of the value 1 among a request's values ([`Stat::values`]).
pub(crate) const ONE: usize = 6;

/// A number for a metrics plugin's instance, never given twice in a
/// process (part of its templates' keys).
pub(crate) fn instance_id() -> u64 {
    static BUILT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    BUILT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Kong's `consumer_identifier`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConsumerId {
    Id,
    CustomId,
    Username,
}

impl ConsumerId {
    pub(crate) fn of(name: &str) -> Option<ConsumerId> {
        Some(match name {
            "consumer_id" => ConsumerId::Id,
            "custom_id" => ConsumerId::CustomId,
            "username" => ConsumerId::Username,
            _ => return None,
        })
    }

    /// The consumer's identifier, written into `out`; false when it has none.
    pub(crate) fn write(self, consumer: Option<&Consumer>, out: &mut Vec<u8>, id_dashes: u8) -> bool {
        let Some(consumer) = consumer else {
            return false;
        };
        match self {
            ConsumerId::Id => {
                let mut id = uuid::Uuid::encode_buffer();
                let text = consumer.id.hyphenated().encode_lower(&mut id);
                out.extend(text.bytes().map(|b| if b == b'-' { id_dashes } else { b }));
                true
            }
            ConsumerId::CustomId => consumer.custom_id.as_deref().is_some_and(|v| put(out, v)),
            ConsumerId::Username => consumer.username.as_deref().is_some_and(|v| put(out, v)),
        }
    }
}

fn put(out: &mut Vec<u8>, text: &str) -> bool {
    out.extend_from_slice(text.as_bytes());
    true
}

/// The entities of the request a metric line names.
pub(crate) struct Seen<'a> {
    pub service: Option<&'a Service>,
    pub route: Option<&'a Route>,
    pub consumer: Option<&'a Consumer>,
}

impl<'a> Seen<'a> {
    pub(crate) fn of(record: &LogRecord<'a>) -> Seen<'a> {
        let entities = record.entities;
        let request = record.request;
        Seen {
            service: request.service_id.zip(entities).and_then(|(id, e)| e.service(id)),
            route: request.route_id.zip(entities).and_then(|(id, e)| e.route(id)),
            consumer: request.consumer_id.zip(entities).and_then(|(id, e)| e.consumer(id)),
        }
    }
}

impl Seen<'_> {
    /// Hashes what a metric line's text may take from the entities: the
    /// service's id, name and host, the route's id and name (with
    /// `route`), the consumer's id, username and custom id.
    pub(crate) fn hash_into(&self, route: bool, hasher: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        if let Some(service) = self.service {
            (service.id, &service.name, &service.host).hash(hasher);
        }
        if let (true, Some(route)) = (route, self.route) {
            (route.id, &route.name).hash(hasher);
        }
        if let Some(consumer) = self.consumer {
            (consumer.id, &consumer.username, &consumer.custom_id).hash(hasher);
        }
    }
}

/// `text` with each `.` written as `_` (Kong's `gsub(name, "%.", "_")`).
pub(crate) fn put_dotless(out: &mut Vec<u8>, text: &str) {
    out.extend(text.bytes().map(|b| if b == b'.' { b'_' } else { b }));
}

pub(crate) fn put_int(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// `|@<rate>` as Lua writes the number, empty for no rate or 1: made once,
/// when the plugin is built.
pub(crate) fn rate_suffix(rate: Option<f64>) -> String {
    match rate.filter(|r| *r != 1.0) {
        Some(rate) => format!("|@{}", crate::lua_number::format(rate)),
        None => String::new(),
    }
}

/// `:<value>|<letter>[|@<rate>]`: the end of a line but its tags. Returns
/// where the value's digits are in `out`.
pub(crate) fn put_value(out: &mut Vec<u8>, value: i64, letter: &str, rate: &str) -> std::ops::Range<usize> {
    out.push(b':');
    let start = out.len();
    put_int(out, value);
    let digits = start..out.len();
    out.push(b'|');
    out.extend_from_slice(letter.as_bytes());
    out.extend_from_slice(rate.as_bytes());
    digits
}

/// Where the lines go.
pub(crate) struct Destination {
    pub host: String,
    pub port: u16,
    pub tcp: bool,
    /// UDP packing (0: a datagram per line).
    pub packet_size: usize,
}

/// Where a metrics plugin's lines go: over UDP merged per flush window
/// ([`MetricLines`]), over TCP through Kong's queue, a line each.
pub(crate) enum Sink {
    Udp(Arc<MetricLines>),
    Tcp(Arc<Queue>),
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sink::Udp(_) => "Sink::Udp",
            Sink::Tcp(_) => "Sink::Tcp",
        })
    }
}

impl Sink {
    /// One request's metrics: over UDP its `values` into the template of
    /// the request's `key` (`template` makes it when the window has none:
    /// the text is written on the shipping thread, once per key and
    /// window), over TCP its lines written by `write`.
    pub(crate) fn push_request(
        &self,
        key: impl FnOnce() -> u64,
        values: &[i64],
        template: impl FnOnce() -> LineTemplate,
        write: impl FnOnce(&mut Vec<u8>),
    ) {
        match self {
            Sink::Udp(sender) => {
                sender.push_templated(key(), values, template);
            }
            Sink::Tcp(_) => self.push_with(write),
        }
    }

    /// One request's lines, written by `write` (`\n`-separated).
    pub(crate) fn push_with(&self, write: impl FnOnce(&mut Vec<u8>)) {
        match self {
            Sink::Udp(lines) => {
                lines.push_with(write);
            }
            Sink::Tcp(queue) => {
                let mut out = Vec::with_capacity(256);
                write(&mut out);
                if !out.is_empty() {
                    queue.push(out);
                }
            }
        }
    }
}

/// The sink of a metrics plugin: shared by every instance with the same
/// destination and queue settings.
pub(crate) fn sink(plugin: &str, to: Destination, params: &QueueParams) -> Sink {
    if !to.tcp {
        return Sink::Udp(MetricLines::shared(
            plugin,
            MetricLinesParams {
                host: to.host,
                port: to.port,
                packet_size: to.packet_size,
                window: params.max_coalescing_delay,
                max_entries: params.max_entries,
                max_bytes: params.max_bytes,
            },
        ));
    }
    let name = format!("{plugin}:{}:{}:tcp:{params:?}", to.host, to.port);
    // Kong's socket timeout for statsd over TCP: one second.
    Sink::Tcp(Queue::shared(name, params, || {
        Box::new(TcpSink::new(TcpTarget {
            host: to.host,
            port: to.port,
            tls: None,
            timeout: Duration::from_secs(1),
            keepalive: Duration::from_secs(60),
        }))
    }))
}

/// A counter or gauge needs its `sample_rate` (Kong's conditional check on
/// each metric; datadog has the same).
pub(crate) fn metrics_need_rates(config: &Map<String, Value>) -> Result<(), String> {
    let metrics = config
        .get("metrics")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (at, metric) in metrics.iter().enumerate() {
        let stat_type = metric.get("stat_type").and_then(Value::as_str);
        let rate = metric.get("sample_rate").filter(|r| !r.is_null());
        if matches!(stat_type, Some("counter" | "gauge")) && rate.is_none() {
            return Err(format!("metrics.{}.sample_rate: required field missing", at + 1));
        }
    }
    Ok(())
}

/// A request's summary and log record for the metrics plugins' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::context::{LogRecord, RequestSummary, ResponseSource};

    /// The lines a request's template filled with `values` writes, and
    /// those `write` (the text path) writes, each sorted.
    pub(crate) fn templated_and_text(
        values: &[i64],
        template: impl FnOnce() -> strait_runtime::logs::templated::LineTemplate,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> (Vec<String>, Vec<String>) {
        let mut templated = strait_runtime::logs::templated::Templated::default();
        templated.add(1, values, template);
        let (mut written, mut each) = (Vec::new(), Vec::new());
        templated.write(&mut written, &mut each);
        written.push(b'\n');
        written.extend_from_slice(&each);
        let mut text = Vec::new();
        write(&mut text);
        let sorted = |text: &[u8]| {
            let mut lines: Vec<String> = String::from_utf8(text.to_vec())
                .expect("utf-8")
                .split('\n')
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            lines.sort();
            lines
        };
        (sorted(&written), sorted(&text))
    }

    pub(crate) fn summary() -> RequestSummary {
        RequestSummary {
            method: http::Method::GET,
            protocol: strait_core::Protocol::Http,
            client_ip: "127.0.0.1".parse().expect("ip"),
            route_id: Some(uuid::Uuid::from_u128(7)),
            service_id: None,
            consumer_id: None,
            credential: None,
            request_headers: None,
            authenticated: None,
        }
    }

    pub(crate) fn record(summary: &RequestSummary, status: u16, upstream_ms: Option<u64>) -> LogRecord<'_> {
        LogRecord {
            request: summary,
            status,
            response_bytes: 120,
            total_ms: 9,
            source: ResponseSource::Service,
            upstream_ms,
            request_bytes: 80,
            details: None,
            entities: None,
        }
    }
}
