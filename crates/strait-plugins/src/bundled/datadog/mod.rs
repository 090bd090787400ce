//! `datadog` (Kong priority 10): Kong's six request metrics as DogStatsD
//! lines (`kong.request.count:1|c|#name:<service>,status:200,...`), one UDP
//! datagram each, queued off the workers.

mod schema;

/// `datadog` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "datadog",
    priority: 10,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Datadog::from_config(config)?)),
};


use std::ops::Range;

use serde_json::{Map, Value};
use strait_runtime::logs::templated::LineTemplate;

use crate::config::ConfigReader;
use crate::context::{LogRecord, SharedStore};
use crate::observability::statsd::{self as lines, ConsumerId, Destination, Seen, Stat};
use crate::phase::Plugin;
use crate::PluginError;

#[derive(Debug)]
struct MetricConf {
    stat: Stat,
    letter: &'static str,
    /// `|@<rate>`, or empty.
    rate: String,
    /// `None`: no consumer tag.
    consumer: Option<ConsumerId>,
    /// The metric's own tags, each followed by nothing (joined with `,`).
    tags: Vec<String>,
}

#[derive(Debug)]
pub struct Datadog {
    prefix: String,
    service_tag: String,
    status_tag: String,
    consumer_tag: String,
    metrics: Vec<MetricConf>,
    sink: lines::Sink,
    /// This instance among all built (part of its templates' keys).
    id: u64,
}

impl Datadog {
    pub fn from_config(config: &Map<String, Value>) -> Result<Datadog, PluginError> {
        let c = ConfigReader::new(config);
        // A null host or port falls back to Kong's environment variables.
        let host = match c.string("host")? {
            Some(host) => host,
            None => std::env::var("KONG_DATADOG_AGENT_HOST")
                .map_err(|_| PluginError::invalid("host", "no host, and KONG_DATADOG_AGENT_HOST is not set"))?,
        };
        let port = match c.integer_opt("port")? {
            Some(port) => port,
            None => std::env::var("KONG_DATADOG_AGENT_PORT")
                .ok()
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| PluginError::invalid("port", "no port, and KONG_DATADOG_AGENT_PORT is not set"))?,
        };
        let port = u16::try_from(port).map_err(|_| PluginError::invalid("port", "value should be between 0 and 65535"))?;
        let mut metrics = Vec::new();
        for m in c.records("metrics")? {
            let name = m.string("name")?.unwrap_or_default();
            let stat_type = m.string("stat_type")?.unwrap_or_default();
            let consumer = m.string("consumer_identifier")?;
            metrics.push(MetricConf {
                stat: Stat::of(&name).ok_or_else(|| PluginError::invalid("metrics.name", format!("unknown metric '{name}'")))?,
                letter: lines::stat_letter(&stat_type)
                    .ok_or_else(|| PluginError::invalid("metrics.stat_type", format!("unknown type '{stat_type}'")))?,
                rate: lines::rate_suffix(m.number_opt("sample_rate")?),
                consumer: consumer.as_deref().and_then(ConsumerId::of),
                tags: m.strings("tags")?,
            });
        }
        let params = crate::observability::queue_params_with_deprecated(&c)?;
        let to = Destination {
            host,
            port,
            tcp: false,
            packet_size: 0,
        };
        Ok(Datadog {
            prefix: c.string("prefix")?.unwrap_or_else(|| "kong".into()),
            service_tag: c.string("service_name_tag")?.unwrap_or_else(|| "name".into()),
            status_tag: c.string("status_tag")?.unwrap_or_else(|| "status".into()),
            consumer_tag: c.string("consumer_tag")?.unwrap_or_else(|| "consumer".into()),
            metrics,
            sink: lines::sink("datadog", to, &params),
            id: lines::instance_id(),
        })
    }

    /// The request's lines, `\n`-separated:
    /// `<prefix>.<stat>:<value>|<type>[|@rate]|#<name>:<service>,<status>:<code>[,<consumer>:<id>][,<tags>]`.
    fn lines(&self, record: &LogRecord<'_>, out: &mut Vec<u8>) {
        let seen = Seen::of(record);
        let start = out.len();
        for metric in &self.metrics {
            if out.len() > start {
                out.push(b'\n');
            }
            self.line(metric, &seen, record, out);
        }
    }

    /// One metric's line; returns where its value's digits are.
    fn line(&self, metric: &MetricConf, seen: &Seen<'_>, record: &LogRecord<'_>, out: &mut Vec<u8>) -> Range<usize> {
        {
            out.extend_from_slice(self.prefix.as_bytes());
            out.push(b'.');
            out.extend_from_slice(metric.stat.line_name().as_bytes());
            // -1 (no upstream latency) is sent as it is, as Kong does.
            let digits = lines::put_value(out, metric.stat.value(record), metric.letter, &metric.rate);
            out.extend_from_slice(b"|#");
            out.extend_from_slice(self.service_tag.as_bytes());
            out.push(b':');
            if let Some(service) = seen.service {
                lines::put_dotless(out, service.name.as_deref().unwrap_or(&service.host));
            }
            out.push(b',');
            out.extend_from_slice(self.status_tag.as_bytes());
            out.push(b':');
            lines::put_int(out, record.status.into());
            if let Some(consumer) = metric.consumer {
                let mark = out.len();
                out.push(b',');
                out.extend_from_slice(self.consumer_tag.as_bytes());
                out.push(b':');
                // Kong writes the consumer id with `_` for `-`.
                if !consumer.write(seen.consumer, out, b'_') {
                    out.truncate(mark);
                }
            }
            for tag in &metric.tags {
                out.push(b',');
                out.extend_from_slice(tag.as_bytes());
            }
            digits
        }
    }

    /// The request's lines as a template (statsd's, `bundled/statsd`).
    fn template(&self, record: &LogRecord<'_>) -> LineTemplate {
        let seen = Seen::of(record);
        let mut template = LineTemplate::default();
        let mut out = Vec::with_capacity(160);
        for metric in &self.metrics {
            out.clear();
            let digits = self.line(metric, &seen, record, &mut out);
            template.line(&out[..digits.start], metric.stat as usize, &out[digits.end..], metric.letter);
        }
        template
    }

    /// What the request's lines' text depends on, hashed: the instance,
    /// the status, and the service's and consumer's ids and names.
    fn key(&self, record: &LogRecord<'_>, seen: &Seen<'_>) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut h = foldhash::fast::FixedState::with_seed(0x0064_6174_6164_6f67).build_hasher();
        (self.id, record.status).hash(&mut h);
        seen.hash_into(false, &mut h);
        h.finish()
    }
}

impl Plugin for Datadog {
    fn name(&self) -> &'static str {
        "datadog"
    }

    fn priority(&self) -> i32 {
        10
    }

    fn logs(&self) -> bool {
        true
    }

    fn reads_entities(&self) -> bool {
        true
    }

    fn log(&self, record: &LogRecord, _shared: &SharedStore) {
        self.sink.push_request(
            || self.key(record, &Seen::of(record)),
            &Stat::values(record),
            || self.template(record),
            |out| self.lines(record, out),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's template filled with its values writes the lines the
    /// text path writes (Kong's default metrics, with and without an
    /// upstream: -1 is sent as it is).
    #[test]
    fn a_template_with_the_requests_values_writes_its_lines() {
        let metrics: Vec<Value> = [
            ("request_count", "counter"),
            ("latency", "timer"),
            ("request_size", "distribution"),
            ("response_size", "distribution"),
            ("upstream_latency", "timer"),
            ("kong_latency", "timer"),
        ]
        .iter()
        .map(|(name, stat_type)| serde_json::json!({"name": name, "stat_type": stat_type, "sample_rate": 1, "tags": ["app:x"]}))
        .collect();
        let config = serde_json::json!({"host": "127.0.0.1", "port": 8125, "metrics": metrics});
        let plugin = Datadog::from_config(config.as_object().unwrap()).unwrap();
        let summary = crate::observability::statsd::test_support::summary();
        for upstream_ms in [Some(4), None] {
            let record = crate::observability::statsd::test_support::record(&summary, 200, upstream_ms);
            let (written, text) = crate::observability::statsd::test_support::templated_and_text(
                &Stat::values(&record),
                || plugin.template(&record),
                |out| plugin.lines(&record, out),
            );
            assert_eq!(written, text, "{upstream_ms:?}");
            assert_eq!(text.len(), 6);
        }
    }
}
