//! A Kafka producer for `kafka-upstream` and `kafka-log` (and the gRPC
//! ingestion route): Strait's own client of Kafka's wire protocol
//! ([`wire`]), with PLAIN and SCRAM authentication ([`sasl`]) and TLS.
//!
//! Each worker thread holds one producer per configuration, driven by a task
//! on the worker's own runtime (as the Redis client does), with one
//! connection per broker ([`conn`]). What it promises:
//! - a message is reported delivered only when the partition's leader
//!   answered the `Produce` request without error at the configured `acks`
//!   (with `acks = -1`, once every in-sync replica has it); every other
//!   outcome is an error to the caller, never a silent loss;
//! - messages queued while a request is in flight go out together in the
//!   next one (up to `messages_per_request` / `bytes_per_request`), so
//!   batches grow with load and an idle producer adds no delay;
//! - failures that Kafka marks retriable (leader moved, broker down, not
//!   enough replicas) are retried with fresh metadata after `backoff`, at
//!   most `max_attempts` times; a retried message may be written twice
//!   (at least once), never reported written when it is not;
//! - the queue of a producer is bounded (`buffer_messages`): a full queue is
//!   an error at once, not a wait.

mod conn;
mod producer;
pub mod sasl;
pub mod wire;

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

pub use sasl::{Mechanism, Sasl};
pub use wire::Record;

/// Where and how to reach a Kafka cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cluster {
    /// `host:port` pairs asked for metadata first.
    pub bootstrap: Vec<(String, u16)>,
    pub ssl: bool,
    pub sasl: Option<Sasl>,
    /// Connecting, and each answer, must come within this (Kong's
    /// `timeout`).
    pub timeout: Duration,
    /// An unused connection closes after this (Kong's `keepalive`).
    pub keepalive: Duration,
}

/// A producer's settings (Kong's `producer_*` fields).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProducerConfig {
    pub cluster: Arc<Cluster>,
    /// -1 (all in-sync replicas), 0 (none) or 1 (the leader).
    pub acks: i16,
    /// How long the broker may wait for replicas (`producer_request_timeout`).
    pub request_timeout: Duration,
    pub messages_per_request: usize,
    pub bytes_per_request: usize,
    /// Retries of a failed request (`producer_request_retries_max_attempts`).
    pub max_attempts: u32,
    pub backoff: Duration,
    /// Messages queued (not yet acknowledged) at most.
    pub buffer_messages: usize,
}

impl ProducerConfig {
    fn key(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
    }
}

/// Where a delivered message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub partition: i32,
    /// Its offset; -1 with `acks = 0` (the broker says nothing).
    pub offset: i64,
}

/// Why a message was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KafkaError {
    #[error("Kafka is unreachable: {0}")]
    Unavailable(String),
    #[error("Kafka refused the message: {0}")]
    Refused(String),
    #[error("the Kafka producer's queue is full ({0} messages)")]
    QueueFull(usize),
    #[error("no async runtime to run the Kafka producer on")]
    NoRuntime,
}

struct Message {
    topic: Arc<str>,
    record: Record,
    reply: Option<oneshot::Sender<Result<Delivered, KafkaError>>>,
    retries: u32,
}

/// A handle to this worker's producer for one configuration.
#[derive(Clone)]
pub struct Producer {
    queue: mpsc::Sender<Message>,
    limit: usize,
}

thread_local! {
    /// The configurations (by pointer) this worker asked for lately.
    static LAST: RefCell<Vec<(Arc<ProducerConfig>, Producer)>> = const { RefCell::new(Vec::new()) };
    static PRODUCERS: RefCell<HashMap<u64, (Arc<ProducerConfig>, Producer)>> = RefCell::new(HashMap::new());
}

impl Producer {
    /// This worker's producer for `config`, started on first use on the
    /// current runtime.
    pub fn for_worker(config: &Arc<ProducerConfig>) -> Result<Producer, KafkaError> {
        // The common case, a plugin instance asking again: found by its
        // pointer, without hashing the settings on every request.
        let known = LAST.with(|last| {
            last.borrow()
                .iter()
                .find(|(c, p)| Arc::ptr_eq(c, config) && !p.queue.is_closed())
                .map(|(_, p)| p.clone())
        });
        if let Some(producer) = known {
            return Ok(producer);
        }
        let key = config.key();
        let producer = PRODUCERS.with(|producers| {
            let mut producers = producers.borrow_mut();
            if let Some((known, producer)) = producers.get(&key) {
                if known == config && !producer.queue.is_closed() {
                    return Ok(producer.clone());
                }
            }
            let runtime = tokio::runtime::Handle::try_current().map_err(|_| KafkaError::NoRuntime)?;
            let (queue, messages) = mpsc::channel(config.buffer_messages.max(1));
            runtime.spawn(producer::run(config.clone(), messages));
            let producer = Producer {
                queue,
                limit: config.buffer_messages,
            };
            producers.insert(key, (config.clone(), producer.clone()));
            Ok::<_, KafkaError>(producer)
        })?;
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            last.retain(|(c, p)| !Arc::ptr_eq(c, config) && !p.queue.is_closed());
            // Instances of configurations since replaced drop out in turn.
            if last.len() >= 64 {
                last.remove(0);
            }
            last.push((config.clone(), producer.clone()));
        });
        Ok(producer)
    }

    /// Sends `value` to `topic`; resolves once the broker acknowledged it
    /// at the configured `acks`, or with why it was not delivered.
    pub async fn send(&self, topic: &Arc<str>, key: Option<Bytes>, value: Bytes) -> Result<Delivered, KafkaError> {
        let (reply, delivered) = oneshot::channel();
        self.enqueue(topic, key, value, Some(reply))?;
        delivered
            .await
            .unwrap_or_else(|_| Err(KafkaError::Unavailable("the producer stopped".into())))
    }

    /// Queues `value` for `topic` without waiting (log entries).
    pub fn send_detached(&self, topic: &Arc<str>, value: Bytes) -> Result<(), KafkaError> {
        self.enqueue(topic, None, value, None)
    }

    fn enqueue(
        &self,
        topic: &Arc<str>,
        key: Option<Bytes>,
        value: Bytes,
        reply: Option<oneshot::Sender<Result<Delivered, KafkaError>>>,
    ) -> Result<(), KafkaError> {
        let message = Message {
            topic: topic.clone(),
            record: Record { key, value },
            reply,
            retries: 0,
        };
        self.queue.try_send(message).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => KafkaError::QueueFull(self.limit),
            mpsc::error::TrySendError::Closed(_) => KafkaError::Unavailable("the producer stopped".into()),
        })
    }
}
