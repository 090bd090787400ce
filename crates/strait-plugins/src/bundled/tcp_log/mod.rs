//! `tcp-log` (Kong priority 7): Kong's entry as one JSON line (`\n`
//! ended, as Kong sends it) on a kept-alive TCP or TLS connection to
//! `host:port`. Entries wait in a bounded queue on the shipping thread; a
//! connection the peer closed is noticed before it is written to.

mod schema;

/// `tcp-log` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "tcp-log",
    priority: 7,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(TcpLog::from_config(config)?)),
};

use serde_json::{Map, Value};
use strait_runtime::logs::queue::Queue;
use strait_runtime::logs::sinks::{TcpSink, TcpTarget};

use crate::observability::QueuedLog;
use crate::config::ConfigReader;
use crate::PluginError;

/// Builds tcp-log instances.
pub struct TcpLog;

impl TcpLog {
    pub fn from_config(config: &Map<String, Value>) -> Result<QueuedLog, PluginError> {
        let c = ConfigReader::new(config);
        let (host, port) = crate::observability::destination(&c)?;
        let tls = c.bool("tls", false)?.then(|| c.string("tls_sni").ok().flatten());
        let target = TcpTarget {
            host,
            port,
            tls,
            timeout: crate::observability::millis(c.number("timeout", 10_000.0)?),
            keepalive: crate::observability::millis(c.number("keepalive", 60_000.0)?),
        };
        let name = format!("tcp-log:{target:?}");
        let queue = Queue::shared(name, &crate::observability::socket_queue(), || Box::new(TcpSink::new(target)));
        Ok(QueuedLog {
            name: "tcp-log",
            priority: 7,
            queue,
        })
    }
}
