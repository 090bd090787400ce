//! `syslog` (Kong priority 4): Kong's entry as a JSON message to the local
//! syslog socket (the node's `syslog_socket`, `/dev/log` by default), with
//! ident `kong`, the configured `facility`, and a severity by status:
//! `successful_severity` below 400, `client_errors_severity` for 4xx,
//! `server_errors_severity` for 5xx. As in Kong, a message is sent only
//! when its severity is at or above `log_level`.

mod schema;

/// `syslog` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "syslog",
    priority: 4,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Syslog::from_config(config)?)),
};

use std::sync::Arc;

use serde_json::{Map, Value};
use strait_runtime::logs::queue::Queue;
use strait_runtime::logs::sinks::{syslog_entry, SyslogSink};

use crate::observability::serialize::{kong_entry, to_bytes};
use crate::config::ConfigReader;
use crate::context::{LogRecord, SharedStore};
use crate::phase::Plugin;
use crate::PluginError;

const FACILITIES: [(&str, u8); 20] = [
    ("kern", 0),
    ("user", 1),
    ("mail", 2),
    ("daemon", 3),
    ("auth", 4),
    ("syslog", 5),
    ("lpr", 6),
    ("news", 7),
    ("uucp", 8),
    ("cron", 9),
    ("authpriv", 10),
    ("ftp", 11),
    ("local0", 16),
    ("local1", 17),
    ("local2", 18),
    ("local3", 19),
    ("local4", 20),
    ("local5", 21),
    ("local6", 22),
    ("local7", 23),
];

#[derive(Debug)]
pub struct Syslog {
    queue: Arc<Queue>,
    /// Severity numbers (0 emerg .. 7 debug).
    threshold: u8,
    successful: u8,
    client_errors: u8,
    server_errors: u8,
    facility: u8,
}

impl Syslog {
    pub fn from_config(config: &Map<String, Value>) -> Result<Syslog, PluginError> {
        let c = ConfigReader::new(config);
        let facility_name = c.string("facility")?.unwrap_or_else(|| "user".into());
        let facility = FACILITIES
            .iter()
            .find(|(name, _)| *name == facility_name)
            .map(|(_, code)| *code)
            .ok_or_else(|| PluginError::invalid("facility", "unknown facility"))?;
        let socket = strait_runtime::logs::syslog_socket();
        let name = format!("syslog:{}", socket.display());
        let queue = Queue::shared(name, &crate::observability::socket_queue(), || Box::new(SyslogSink::new(socket)));
        Ok(Syslog {
            queue,
            threshold: crate::observability::severity(&c, "log_level")?,
            successful: crate::observability::severity(&c, "successful_severity")?,
            client_errors: crate::observability::severity(&c, "client_errors_severity")?,
            server_errors: crate::observability::severity(&c, "server_errors_severity")?,
            facility,
        })
    }
}

impl Plugin for Syslog {
    fn name(&self) -> &'static str {
        "syslog"
    }

    fn priority(&self) -> i32 {
        4
    }

    fn logs(&self) -> bool {
        true
    }

    fn serializes(&self) -> bool {
        true
    }

    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        let severity =
            crate::observability::severity_of(record.status, self.successful, self.client_errors, self.server_errors);
        if severity > self.threshold {
            return;
        }
        if let Some(entry) = kong_entry(record, shared) {
            let priority = self.facility * 8 + severity;
            self.queue.push(syslog_entry(priority, &to_bytes(&entry)));
        }
    }
}
