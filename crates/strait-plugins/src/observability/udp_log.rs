//! `udp-log` (Kong priority 8): Kong's entry as one JSON datagram to
//! `host:port`, sent from the shipping thread through a bounded queue.

use std::sync::Arc;

use serde_json::{Map, Value};
use strait_runtime::logs::queue::Queue;
use strait_runtime::logs::sinks::UdpSink;

use super::serialize::{kong_entry, to_bytes};
use crate::config::ConfigReader;
use crate::context::{LogRecord, SharedStore};
use crate::phase::Plugin;
use crate::PluginError;

#[derive(Debug)]
pub struct UdpLog {
    queue: Arc<Queue>,
}

impl UdpLog {
    pub fn from_config(config: &Map<String, Value>) -> Result<UdpLog, PluginError> {
        super::refuse_lua(config)?;
        let c = ConfigReader::new(config);
        let host = c
            .string("host")?
            .ok_or_else(|| PluginError::invalid("host", "required field missing"))?;
        let port = c.integer("port", -1)?;
        let port = u16::try_from(port).map_err(|_| PluginError::invalid("port", "required field missing"))?;
        let timeout = super::millis(c.number("timeout", 10_000.0)?);
        let name = format!("udp-log:{host}:{port}:{timeout:?}");
        let queue = Queue::shared(name, &super::socket_queue(), || {
            Box::new(UdpSink::new(&host, port, timeout))
        });
        Ok(UdpLog { queue })
    }
}

impl Plugin for UdpLog {
    fn name(&self) -> &'static str {
        "udp-log"
    }

    fn priority(&self) -> i32 {
        8
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
