//! `statsd` (Kong priority 11): Kong's StatsD metrics for each request, as
//! lines queued off the workers and sent over UDP (a datagram per line, or
//! packed up to `udp_packet_size`) or TCP. Plain names scoped by service
//! (`kong.service.<name>.request.count:1|c`), or with `tag_style` the six
//! plain metrics tagged in DogStatsD, InfluxDB, Librato or SignalFX style.

mod schema;

/// `statsd` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "statsd",
    priority: 11,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Statsd::from_config(config)?)),
};


use std::ops::Range;

use serde_json::{Map, Value};
use strait_runtime::logs::templated::LineTemplate;

use crate::config::ConfigReader;
use crate::context::{LogRecord, SharedStore};
use crate::observability::serialize::DEFAULT_WORKSPACE_ID;
use crate::observability::statsd::{self as lines, ConsumerId, Destination, Seen, Stat};
use crate::phase::Plugin;
use crate::PluginError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Metric {
    Plain(Stat),
    UniqueUsers,
    RequestPerUser,
    StatusCount,
    StatusCountPerUser,
    StatusCountPerWorkspace,
    StatusCountPerUserPerRoute,
    /// Kong's shared dictionaries' use: Strait has none, so nothing is sent.
    ShdictUsage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServiceId {
    Id,
    Name,
    Host,
    NameOrHost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TagStyle {
    Dogstatsd,
    Influxdb,
    Librato,
    Signalfx,
}

#[derive(Debug)]
struct MetricConf {
    metric: Metric,
    letter: &'static str,
    /// `|@<rate>`, or empty.
    rate: String,
    consumer: ConsumerId,
    service: ServiceId,
    /// `workspace_name` (true) or `workspace_id`.
    workspace_name: bool,
}

#[derive(Debug)]
pub struct Statsd {
    /// `prefix`, with `.node.<host>` when `hostname_in_prefix` (no tags).
    prefix: String,
    metrics: Vec<MetricConf>,
    allow_status: Option<Vec<(u16, u16)>>,
    tag_style: Option<TagStyle>,
    /// The host name with `_` for `.` (the `node` tag).
    node: String,
    sink: lines::Sink,
    /// This instance among all built (part of its templates' keys).
    id: u64,
}

fn invalid(path: &str, value: &str) -> PluginError {
    PluginError::invalid(path, format!("expected one of the known values, got '{value}'"))
}

impl Statsd {
    pub fn from_config(config: &Map<String, Value>) -> Result<Statsd, PluginError> {
        let c = ConfigReader::new(config);
        let host = c.string("host")?.unwrap_or_else(|| "localhost".into());
        let port = u16::try_from(c.integer("port", 8125)?)
            .map_err(|_| PluginError::invalid("port", "value should be between 0 and 65535"))?;
        let consumer_default = c.string("consumer_identifier_default")?.unwrap_or_else(|| "custom_id".into());
        let service_default = c
            .string("service_identifier_default")?
            .unwrap_or_else(|| "service_name_or_host".into());
        let workspace_default = c.string("workspace_identifier_default")?.unwrap_or_else(|| "workspace_id".into());
        let mut metrics = Vec::new();
        for m in c.records("metrics")? {
            let name = m.string("name")?.unwrap_or_default();
            let metric = match name.as_str() {
                "unique_users" => Metric::UniqueUsers,
                "request_per_user" => Metric::RequestPerUser,
                "status_count" => Metric::StatusCount,
                "status_count_per_user" => Metric::StatusCountPerUser,
                "status_count_per_workspace" => Metric::StatusCountPerWorkspace,
                "status_count_per_user_per_route" => Metric::StatusCountPerUserPerRoute,
                "shdict_usage" => Metric::ShdictUsage,
                other => Metric::Plain(Stat::of(other).ok_or_else(|| invalid("metrics.name", other))?),
            };
            let stat_type = m.string("stat_type")?.unwrap_or_default();
            let consumer = m.string("consumer_identifier")?.unwrap_or_else(|| consumer_default.clone());
            let service = m.string("service_identifier")?.unwrap_or_else(|| service_default.clone());
            let workspace = m.string("workspace_identifier")?.unwrap_or_else(|| workspace_default.clone());
            metrics.push(MetricConf {
                metric,
                letter: lines::stat_letter(&stat_type).ok_or_else(|| invalid("metrics.stat_type", &stat_type))?,
                rate: lines::rate_suffix(m.number_opt("sample_rate")?),
                consumer: ConsumerId::of(&consumer).ok_or_else(|| invalid("metrics.consumer_identifier", &consumer))?,
                service: match service.as_str() {
                    "service_id" => ServiceId::Id,
                    "service_name" => ServiceId::Name,
                    "service_host" => ServiceId::Host,
                    "service_name_or_host" => ServiceId::NameOrHost,
                    other => return Err(invalid("metrics.service_identifier", other)),
                },
                workspace_name: workspace == "workspace_name",
            });
        }
        let allow_status = match c.strings("allow_status_codes")? {
            ranges if ranges.is_empty() && config.get("allow_status_codes").is_none_or(Value::is_null) => None,
            ranges => Some(
                ranges
                    .iter()
                    .filter_map(|r| r.split_once('-'))
                    .filter_map(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                    .collect(),
            ),
        };
        let tag_style = match c.string("tag_style")?.as_deref() {
            None => None,
            Some("dogstatsd") => Some(TagStyle::Dogstatsd),
            Some("influxdb") => Some(TagStyle::Influxdb),
            Some("librato") => Some(TagStyle::Librato),
            Some("signalfx") => Some(TagStyle::Signalfx),
            Some(other) => return Err(invalid("tag_style", other)),
        };
        let node = strait_runtime::hostname().replace('.', "_");
        let mut prefix = c.string("prefix")?.unwrap_or_else(|| "kong".into());
        if c.bool("hostname_in_prefix", false)? && tag_style.is_none() {
            prefix = format!("{prefix}.node.{node}");
        }
        let packet_size = c.number("udp_packet_size", 0.0)?.clamp(0.0, 65507.0) as usize;
        let params = crate::observability::queue_params_with_deprecated(&c)?;
        let to = Destination {
            host,
            port,
            tcp: c.bool("use_tcp", false)?,
            packet_size,
        };
        Ok(Statsd {
            prefix,
            metrics,
            allow_status,
            tag_style,
            node,
            sink: lines::sink("statsd", to, &params),
            id: lines::instance_id(),
        })
    }

    /// The request's lines, `\n`-separated.
    fn lines(&self, record: &LogRecord<'_>, out: &mut Vec<u8>) {
        let seen = Seen::of(record);
        for metric in &self.metrics {
            let mark = out.len();
            let written = self.line(metric, &seen, record, out, &mut None);
            match written {
                true => out.push(b'\n'),
                false => out.truncate(mark),
            }
        }
        if out.last() == Some(&b'\n') {
            out.pop();
        }
    }

    /// One metric's line (false: the request has none), and where its
    /// value's digits are.
    fn line(
        &self,
        metric: &MetricConf,
        seen: &Seen<'_>,
        record: &LogRecord<'_>,
        out: &mut Vec<u8>,
        span: &mut Option<Range<usize>>,
    ) -> bool {
        match self.tag_style {
            None => self.plain(metric, seen, record, out, span),
            Some(style) => self.tagged(style, metric, seen, record, out, span),
        }
    }

    /// The request's lines as a template ([`MetricLines::push_templated`]):
    /// each line's text around its value, the value named by its place in
    /// [`Stat::values`].
    fn template(&self, record: &LogRecord<'_>) -> LineTemplate {
        let seen = Seen::of(record);
        let mut template = LineTemplate::default();
        let mut out = Vec::with_capacity(128);
        for metric in &self.metrics {
            out.clear();
            let mut span = None;
            if !self.line(metric, &seen, record, &mut out, &mut span) {
                continue;
            }
            let value = match metric.metric {
                Metric::Plain(stat) => Some(stat as usize),
                Metric::UniqueUsers | Metric::ShdictUsage => None,
                _ => Some(lines::ONE),
            };
            match (span, value) {
                (Some(span), Some(value)) => {
                    template.line(&out[..span.start], value, &out[span.end..], metric.letter)
                }
                _ => template.whole(&out),
            }
        }
        template
    }

    /// What the request's lines' text depends on, hashed: the plugin
    /// instance, the status, whether an upstream answered (its latency
    /// line), and the service's, route's and consumer's ids and names.
    /// (Two keys of one window meeting on 64 bits would share a template.)
    fn key(&self, record: &LogRecord<'_>, seen: &Seen<'_>) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut h = foldhash::fast::FixedState::with_seed(0x5374_6174_7364).build_hasher();
        (self.id, record.status, record.upstream_ms.is_some(), record.request.route_id).hash(&mut h);
        seen.hash_into(true, &mut h);
        h.finish()
    }

    fn start(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.prefix.as_bytes());
        out.push(b'.');
    }

    /// `service.<name, dots as _>`, `service.unnamed`, or
    /// `global.unmatched` for a request that matched no service.
    fn scope(metric: &MetricConf, seen: &Seen<'_>, out: &mut Vec<u8>) {
        match seen.service {
            None => out.extend_from_slice(b"global.unmatched"),
            Some(service) => {
                out.extend_from_slice(b"service.");
                if !service_value(metric.service, service, out, true) {
                    out.extend_from_slice(b"unnamed");
                }
            }
        }
    }

    /// A line as Kong's non-tagged metrics write it; false when the
    /// metric has nothing to say for this request.
    fn plain(
        &self,
        metric: &MetricConf,
        seen: &Seen<'_>,
        record: &LogRecord<'_>,
        out: &mut Vec<u8>,
        span: &mut Option<Range<usize>>,
    ) -> bool {
        let consumer = |out: &mut Vec<u8>| metric.consumer.write(seen.consumer, out, b'-');
        self.start(out);
        match metric.metric {
            Metric::Plain(stat) => {
                let value = stat.value(record);
                if value == -1 {
                    return false;
                }
                Self::scope(metric, seen, out);
                out.push(b'.');
                out.extend_from_slice(stat.line_name().as_bytes());
                *span = Some(lines::put_value(out, value, metric.letter, &metric.rate));
            }
            Metric::UniqueUsers => {
                Self::scope(metric, seen, out);
                out.extend_from_slice(b".user.uniques:");
                if !consumer(out) {
                    return false;
                }
                out.extend_from_slice(b"|s");
            }
            Metric::RequestPerUser => {
                Self::scope(metric, seen, out);
                out.extend_from_slice(b".user.");
                if !consumer(out) {
                    return false;
                }
                out.extend_from_slice(b".request.count");
                *span = Some(lines::put_value(out, 1, "c", &metric.rate));
            }
            Metric::StatusCount => {
                Self::scope(metric, seen, out);
                out.extend_from_slice(b".status.");
                lines::put_int(out, record.status.into());
                *span = Some(lines::put_value(out, 1, "c", &metric.rate));
            }
            Metric::StatusCountPerUser => {
                Self::scope(metric, seen, out);
                out.extend_from_slice(b".user.");
                if !consumer(out) {
                    return false;
                }
                out.extend_from_slice(b".status.");
                lines::put_int(out, record.status.into());
                *span = Some(lines::put_value(out, 1, "c", &metric.rate));
            }
            Metric::StatusCountPerWorkspace => {
                Self::scope(metric, seen, out);
                out.extend_from_slice(b".workspace.");
                out.extend_from_slice(workspace(metric.workspace_name).as_bytes());
                out.extend_from_slice(b".status.");
                lines::put_int(out, record.status.into());
                *span = Some(lines::put_value(out, 1, "c", &metric.rate));
            }
            Metric::StatusCountPerUserPerRoute => {
                let Some(route) = record.request.route_id else {
                    return false;
                };
                out.extend_from_slice(b"route.");
                out.extend_from_slice(route.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()).as_bytes());
                out.extend_from_slice(b".user.");
                if !consumer(out) {
                    return false;
                }
                out.extend_from_slice(b".status.");
                lines::put_int(out, record.status.into());
                *span = Some(lines::put_value(out, 1, "c", &metric.rate));
            }
            Metric::ShdictUsage => return false,
        }
        true
    }

    /// A tagged line: only the six plain metrics are sent with tags (as in
    /// Kong); a request with no service gets the line without tags.
    fn tagged(
        &self,
        style: TagStyle,
        metric: &MetricConf,
        seen: &Seen<'_>,
        record: &LogRecord<'_>,
        out: &mut Vec<u8>,
        span: &mut Option<Range<usize>>,
    ) -> bool {
        let Metric::Plain(stat) = metric.metric else {
            return false;
        };
        let value = stat.value(record);
        if value == -1 {
            return false;
        }
        self.start(out);
        out.extend_from_slice(stat.line_name().as_bytes());
        let mut tags = Vec::with_capacity(160);
        let tagged = self.tags(style, metric, seen, record, &mut tags);
        match (tagged, style) {
            (false, _) => *span = Some(lines::put_value(out, value, metric.letter, &metric.rate)),
            (true, TagStyle::Dogstatsd) => {
                *span = Some(lines::put_value(out, value, metric.letter, &metric.rate));
                out.extend_from_slice(b"|#");
                out.extend_from_slice(&tags);
            }
            (true, TagStyle::Influxdb) => {
                out.push(b',');
                out.extend_from_slice(&tags);
                *span = Some(lines::put_value(out, value, metric.letter, &metric.rate));
            }
            (true, TagStyle::Librato) => {
                out.push(b'#');
                out.extend_from_slice(&tags);
                *span = Some(lines::put_value(out, value, metric.letter, &metric.rate));
            }
            (true, TagStyle::Signalfx) => {
                out.push(b'[');
                out.extend_from_slice(&tags);
                out.push(b']');
                *span = Some(lines::put_value(out, value, metric.letter, &metric.rate));
            }
        }
        true
    }

    /// `service`, `route`, `workspace`, `consumer`, `node`, `status`, as
    /// `k:v` (DogStatsD) or `k=v`; false when the request has no service.
    fn tags(
        &self,
        style: TagStyle,
        metric: &MetricConf,
        seen: &Seen<'_>,
        record: &LogRecord<'_>,
        out: &mut Vec<u8>,
    ) -> bool {
        let sep = if style == TagStyle::Dogstatsd { b':' } else { b'=' };
        let tag = |out: &mut Vec<u8>, name: &[u8]| {
            if !out.is_empty() {
                out.push(b',');
            }
            out.extend_from_slice(name);
            out.push(sep);
        };
        tag(out, b"service");
        if !seen.service.is_some_and(|s| service_value(metric.service, s, out, false)) {
            return false;
        }
        if let Some(route) = seen.route {
            tag(out, b"route");
            match &route.name {
                Some(name) => out.extend_from_slice(name.as_bytes()),
                None => out.extend_from_slice(route.id.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()).as_bytes()),
            }
        }
        tag(out, b"workspace");
        out.extend_from_slice(workspace(metric.workspace_name).as_bytes());
        let mark = out.len();
        tag(out, b"consumer");
        if !metric.consumer.write(seen.consumer, out, b'-') {
            out.truncate(mark);
        }
        tag(out, b"node");
        out.extend_from_slice(self.node.as_bytes());
        tag(out, b"status");
        lines::put_int(out, record.status.into());
        true
    }
}

/// The service as `identifier` names it (dots written as `_` in a scope);
/// false when it has no such value.
fn service_value(identifier: ServiceId, service: &strait_core::Service, out: &mut Vec<u8>, dotless: bool) -> bool {
    let text = match identifier {
        ServiceId::Id => {
            out.extend_from_slice(service.id.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()).as_bytes());
            return true;
        }
        ServiceId::Name => match service.name.as_deref() {
            Some(name) => name,
            None => return false,
        },
        ServiceId::Host => service.host.as_str(),
        ServiceId::NameOrHost => service.name.as_deref().unwrap_or(&service.host),
    };
    match dotless {
        true => lines::put_dotless(out, text),
        false => out.extend_from_slice(text.as_bytes()),
    }
    true
}

fn workspace(by_name: bool) -> &'static str {
    match by_name {
        true => "default",
        false => DEFAULT_WORKSPACE_ID,
    }
}

impl Plugin for Statsd {
    fn name(&self) -> &'static str {
        "statsd"
    }

    fn priority(&self) -> i32 {
        11
    }

    fn logs(&self) -> bool {
        true
    }

    fn reads_entities(&self) -> bool {
        true
    }

    fn log(&self, record: &LogRecord, _shared: &SharedStore) {
        if let Some(ranges) = &self.allow_status {
            if !ranges.iter().any(|(low, high)| (*low..=*high).contains(&record.status)) {
                return;
            }
        }
        self.sink.push_request(
            || self.key(record, &Seen::of(record)),
            &Stat::values(record),
            || self.template(record),
            |out| self.lines(record, out),
        );
    }
}

#[cfg(test)]
mod tests;
