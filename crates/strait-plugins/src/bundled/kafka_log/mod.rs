//! `kafka-log` (Kong priority 5): Kong's log entry (the same JSON as
//! `http-log`'s) published to `topic`, one message per request, through
//! the worker's producer for these settings (`strait_runtime::kafka`). The
//! request never waits for Kafka: entries queue (at most
//! `producer_async_buffering_limits_messages_in_memory`; beyond that they
//! are dropped, counted in `/status` `logs.dropped_total`, and the error log
//! says so once a second) and go out in batches as the broker acknowledges
//! the previous ones; an entry that cannot be delivered after the retries
//! is dropped and counted the same way.

mod schema;

/// `kafka-log` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "kafka-log",
    priority: 5,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(KafkaLog::from_config(config)?)),
};

use std::sync::Arc;

use serde_json::{Map, Value};
use strait_runtime::kafka::{Producer, ProducerConfig};

use crate::config::ConfigReader;
use crate::observability::serialize;
use crate::phase::Plugin;
use crate::{LogRecord, PluginError, SharedStore};

#[derive(Debug)]
pub struct KafkaLog {
    producer: Arc<ProducerConfig>,
    topic: Arc<str>,
}

impl KafkaLog {
    pub fn from_config(config: &Map<String, Value>) -> Result<KafkaLog, PluginError> {
        let topic = ConfigReader::new(config)
            .string("topic")?
            .ok_or_else(|| PluginError::invalid("topic", "required field missing"))?;
        Ok(KafkaLog {
            producer: crate::kafka::producer_config(config)?,
            topic: Arc::from(topic),
        })
    }
}

impl Plugin for KafkaLog {
    fn name(&self) -> &'static str {
        "kafka-log"
    }

    fn priority(&self) -> i32 {
        5
    }

    fn logs(&self) -> bool {
        true
    }

    fn serializes(&self) -> bool {
        true
    }

    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        let Some(entry) = serialize::kong_entry(record, shared) else { return };
        let queued = Producer::for_worker(&self.producer)
            .and_then(|producer| producer.send_detached(&self.topic, serialize::to_bytes(&entry).into()));
        if let Err(error) = queued {
            strait_runtime::logs::queue::count_dropped(1, || format!("kafka-log {}: {error}, entry dropped", self.topic));
        }
    }
}
