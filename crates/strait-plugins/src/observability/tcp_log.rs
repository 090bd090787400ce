//! `tcp-log` (Kong priority 7): Kong's entry as one JSON line (`\n`
//! ended, as Kong sends it) on a kept-alive TCP or TLS connection to
//! `host:port`. Entries wait in a bounded queue on the shipping thread; a
//! connection the peer closed is noticed before it is written to.

use std::sync::Arc;

use serde_json::{Map, Value};
use strait_runtime::logs::queue::Queue;
use strait_runtime::logs::sinks::{TcpSink, TcpTarget};

use super::serialize::{kong_entry, to_bytes};
use crate::config::ConfigReader;
use crate::context::{LogRecord, SharedStore};
use crate::phase::Plugin;
use crate::PluginError;

#[derive(Debug)]
pub struct TcpLog {
    queue: Arc<Queue>,
}

impl TcpLog {
    pub fn from_config(config: &Map<String, Value>) -> Result<TcpLog, PluginError> {
        super::refuse_lua(config)?;
        let c = ConfigReader::new(config);
        let host = c
            .string("host")?
            .ok_or_else(|| PluginError::invalid("host", "required field missing"))?;
        let port = c.integer("port", -1)?;
        let port = u16::try_from(port).map_err(|_| PluginError::invalid("port", "required field missing"))?;
        let tls = c.bool("tls", false)?.then(|| c.string("tls_sni").ok().flatten());
        let target = TcpTarget {
            host,
            port,
            tls,
            timeout: super::millis(c.number("timeout", 10_000.0)?),
            keepalive: super::millis(c.number("keepalive", 60_000.0)?),
        };
        let name = format!("tcp-log:{target:?}");
        let queue = Queue::shared(name, &super::socket_queue(), || Box::new(TcpSink::new(target)));
        Ok(TcpLog { queue })
    }
}

impl Plugin for TcpLog {
    fn name(&self) -> &'static str {
        "tcp-log"
    }

    fn priority(&self) -> i32 {
        7
    }

    fn logs(&self) -> bool {
        true
    }

    fn serializes(&self) -> bool {
        true
    }

    fn log(&self, record: &LogRecord, _shared: &SharedStore) {
        if let Some(entry) = kong_entry(record) {
            self.queue.push(to_bytes(&entry));
        }
    }
}
