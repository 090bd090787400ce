//! `udp-log` (Kong priority 8): Kong's entry as one JSON datagram to
//! `host:port`, sent from the shipping thread through a bounded queue.

mod schema;

/// `udp-log` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "udp-log",
    priority: 8,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(UdpLog::from_config(config)?)),
};

use serde_json::{Map, Value};
use strait_runtime::logs::queue::Queue;
use strait_runtime::logs::sinks::UdpSink;

use crate::observability::QueuedLog;
use crate::config::ConfigReader;
use crate::PluginError;

/// Builds udp-log instances.
pub struct UdpLog;

impl UdpLog {
    pub fn from_config(config: &Map<String, Value>) -> Result<QueuedLog, PluginError> {
        let c = ConfigReader::new(config);
        let (host, port) = crate::observability::destination(&c)?;
        let timeout = crate::observability::millis(c.number("timeout", 10_000.0)?);
        let name = format!("udp-log:{host}:{port}:{timeout:?}");
        let queue = Queue::shared(name, &crate::observability::socket_queue(), || {
            Box::new(UdpSink::new(&host, port, timeout))
        });
        Ok(QueuedLog {
            name: "udp-log",
            priority: 8,
            queue,
        })
    }
}
