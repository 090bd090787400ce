//! `loggly` (Kong priority 6): Kong's entry as one RFC 5424 syslog datagram
//! over UDP to Loggly (`<PRI>1 <time> <host> kong - - [<key>@41058
//! tag="..."] <entry JSON>`), with a severity by status and a `log_level`
//! threshold as `syslog` has; sent off the workers.

mod schema;

/// `loggly` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "loggly",
    priority: 6,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Loggly::from_config(config)?)),
};

use std::sync::Arc;

use serde_json::{Map, Value};
use strait_runtime::clock::UtcTime;
use strait_runtime::logs::queue::Queue;
use strait_runtime::logs::sinks::UdpSink;

use crate::config::ConfigReader;
use crate::context::{LogRecord, SharedStore};
use crate::observability::serialize::{kong_entry, to_bytes};
use crate::observability::{severity, severity_of};
use crate::phase::Plugin;
use crate::PluginError;

#[derive(Debug)]
pub struct Loggly {
    /// ` <host> kong - - [<key>@41058 tag="a" tag="b"] `: what follows the
    /// time in every datagram.
    middle: String,
    threshold: u8,
    successful: u8,
    client_errors: u8,
    server_errors: u8,
    queue: Arc<Queue>,
}

impl Loggly {
    pub fn from_config(config: &Map<String, Value>) -> Result<Loggly, PluginError> {
        let c = ConfigReader::new(config);
        let host = c.string("host")?.unwrap_or_else(|| "logs-01.loggly.com".into());
        let port = u16::try_from(c.integer("port", 514)?)
            .map_err(|_| PluginError::invalid("port", "value should be between 0 and 65535"))?;
        let key = c
            .string("key")?
            .ok_or_else(|| PluginError::invalid("key", "required field missing"))?;
        let tags: Vec<String> = match config.get("tags") {
            None => vec!["kong".into()],
            Some(_) => c.strings("tags")?,
        };
        let tags: Vec<String> = tags.iter().map(|t| format!("tag=\"{t}\"")).collect();
        let middle = format!(" {} kong - - [{key}@41058 {}] ", strait_runtime::hostname(), tags.join(" "));
        let timeout = crate::observability::millis(c.number("timeout", 10_000.0)?);
        let name = format!("loggly:{host}:{port}:{timeout:?}");
        let queue = Queue::shared(name, &crate::observability::socket_queue(), || {
            Box::new(UdpSink::new(&host, port, timeout))
        });
        Ok(Loggly {
            middle,
            threshold: severity(&c, "log_level")?,
            successful: severity(&c, "successful_severity")?,
            client_errors: severity(&c, "client_errors_severity")?,
            server_errors: severity(&c, "server_errors_severity")?,
            queue,
        })
    }

    /// The datagram for an entry of `severity` written at `secs`.
    fn datagram(&self, severity: u8, secs: u64, entry: &[u8]) -> Vec<u8> {
        let t = UtcTime::of(secs);
        let head = format!(
            "<{}>1 {}-{:02}-{:02}T{}Z{}",
            8 + severity,
            t.year,
            t.month,
            t.day,
            t.clock(),
            self.middle
        );
        let mut datagram = Vec::with_capacity(head.len() + entry.len());
        datagram.extend_from_slice(head.as_bytes());
        datagram.extend_from_slice(entry);
        datagram
    }
}

impl Plugin for Loggly {
    fn name(&self) -> &'static str {
        "loggly"
    }

    fn priority(&self) -> i32 {
        6
    }

    fn logs(&self) -> bool {
        true
    }

    fn serializes(&self) -> bool {
        true
    }

    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        let severity = severity_of(record.status, self.successful, self.client_errors, self.server_errors);
        if severity > self.threshold {
            return;
        }
        if let Some(entry) = kong_entry(record, shared) {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            self.queue.push(self.datagram(severity, secs, &to_bytes(&entry)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_datagram_is_kongs_rfc5424_frame() {
        let plugin = Loggly::from_config(
            json!({"key": "TOKEN", "tags": ["kong", "edge"], "host": "127.0.0.1", "port": 9})
                .as_object()
                .expect("object"),
        )
        .expect("valid");
        // 2026-11-23T19:05:09Z, severity 3 (err): PRI 11.
        let datagram = plugin.datagram(3, 1_795_460_709, br#"{"a":1}"#);
        let host = strait_runtime::hostname();
        assert_eq!(
            String::from_utf8(datagram).expect("utf-8"),
            format!(r#"<11>1 2026-11-23T19:05:09Z {host} kong - - [TOKEN@41058 tag="kong" tag="edge"] {{"a":1}}"#)
        );
    }
}
