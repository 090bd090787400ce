//! Kong 3.x's plugin queue (`kong/tools/queue.lua`) for log shippers:
//! entries wait in a bounded queue, leave in batches, and a failed batch is
//! retried with exponential backoff until `max_retry_time`, then dropped.
//!
//! - `max_entries` bounds the queue: a full queue drops the new entry and
//!   counts it ([`Queue::dropped`]); nothing ever waits on it.
//! - A batch leaves when it holds `max_batch_size` entries or
//!   `max_coalescing_delay` after its first entry arrived.
//! - Retries wait `initial_retry_delay`, doubling up to `max_retry_delay`.
//! - `max_bytes` bounds the bytes waiting (entries are bytes here).
//!
//! Queues are shared by name (Kong's rule: plugin instances with the same
//! sink settings share one), and live as long as an instance holds one.
//! When the last holder drops, the consumer sends what is left and stops.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

/// Kong's `queue` record.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueParams {
    pub max_batch_size: usize,
    pub max_coalescing_delay: Duration,
    pub max_entries: usize,
    pub max_bytes: Option<usize>,
    /// Kong's -1 (no retries) is zero.
    pub max_retry_time: Duration,
    pub initial_retry_delay: Duration,
    pub max_retry_delay: Duration,
}

impl Default for QueueParams {
    fn default() -> QueueParams {
        QueueParams {
            max_batch_size: 1,
            max_coalescing_delay: Duration::from_secs(1),
            max_entries: 10_000,
            max_bytes: None,
            max_retry_time: Duration::from_secs(60),
            initial_retry_delay: Duration::from_millis(10),
            max_retry_delay: Duration::from_secs(60),
        }
    }
}

/// Sends one batch; an `Err` is retried.
pub type SendFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// What a queue hands its batches to.
pub trait Handler: Send + 'static {
    fn send(&mut self, batch: Vec<Vec<u8>>) -> SendFuture;
}

/// A producer's end of a named queue.
#[derive(Debug)]
pub struct Queue {
    name: String,
    sender: mpsc::Sender<Vec<u8>>,
    max_bytes: Option<usize>,
    /// Bytes of the entries waiting (shared with the consumer).
    waiting: Arc<AtomicUsize>,
}

type Registry = Mutex<HashMap<String, Weak<Queue>>>;

fn registry() -> &'static Registry {
    static QUEUES: OnceLock<Registry> = OnceLock::new();
    QUEUES.get_or_init(|| Mutex::new(HashMap::new()))
}

static DROPPED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Entries dropped by every queue of the process (full queue or given up).
pub fn dropped_total() -> u64 {
    DROPPED_TOTAL.load(Ordering::Relaxed)
}

impl Queue {
    /// The live queue named `name`, or a new one whose consumer sends
    /// batches through the handler `make` builds.
    pub fn shared(name: String, params: &QueueParams, make: impl FnOnce() -> Box<dyn Handler>) -> Arc<Queue> {
        let mut queues = registry().lock().unwrap_or_else(|p| p.into_inner());
        queues.retain(|_, queue| queue.strong_count() > 0);
        if let Some(queue) = queues.get(&name).and_then(Weak::upgrade) {
            return queue;
        }
        let (sender, receiver) = mpsc::channel(params.max_entries.max(1));
        let waiting = Arc::new(AtomicUsize::new(0));
        let queue = Arc::new(Queue {
            name: name.clone(),
            sender,
            max_bytes: params.max_bytes,
            waiting: waiting.clone(),
        });
        crate::logs::background::spawn(consume(name.clone(), receiver, params.clone(), make(), waiting));
        queues.insert(name, Arc::downgrade(&queue));
        queue
    }

    /// Queue one entry; false (and counted) when the queue is full.
    pub fn push(&self, entry: Vec<u8>) -> bool {
        let size = entry.len();
        if let Some(max) = self.max_bytes {
            if self.waiting.load(Ordering::Relaxed) + size > max {
                self.drop_entry("max_bytes reached");
                return false;
            }
        }
        self.waiting.fetch_add(size, Ordering::Relaxed);
        match self.sender.try_send(entry) {
            Ok(()) => true,
            Err(_) => {
                self.waiting.fetch_sub(size, Ordering::Relaxed);
                self.drop_entry("max_entries reached");
                false
            }
        }
    }

    fn drop_entry(&self, why: &str) {
        count_dropped(1, || format!("queue {}: {why}, entry dropped", self.name));
    }
}

/// Counts `entries` dropped and logs `message()` (one line a second at most
/// for all queues together; nothing is formatted otherwise). Also used by
/// senders outside these queues (kafka-log's producer).
pub fn count_dropped(entries: u64, message: impl FnOnce() -> String) {
    static LAST: AtomicU64 = AtomicU64::new(u64::MAX);
    DROPPED_TOTAL.fetch_add(entries, Ordering::Relaxed);
    if crate::once_a_second(&LAST) {
        tracing::error!(dropped_total = dropped_total(), "{}", message());
    }
}

async fn consume(
    name: String,
    mut receiver: mpsc::Receiver<Vec<u8>>,
    params: QueueParams,
    mut handler: Box<dyn Handler>,
    waiting: Arc<AtomicUsize>,
) {
    while let Some(first) = receiver.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + params.max_coalescing_delay;
        while batch.len() < params.max_batch_size {
            match tokio::time::timeout_at(deadline, receiver.recv()).await {
                Ok(Some(entry)) => batch.push(entry),
                // Closed: send what we hold, then stop at the outer recv.
                Ok(None) | Err(_) => break,
            }
        }
        let size: usize = batch.iter().map(Vec::len).sum();
        let entries = batch.len() as u64;
        let started = Instant::now();
        let mut delay = params.initial_retry_delay;
        loop {
            match handler.send(batch.clone()).await {
                Ok(()) => break,
                Err(error) => {
                    if started.elapsed() + delay > params.max_retry_time {
                        count_dropped(entries, || {
                            format!(
                                "queue {name}: could not send a batch of {entries} after {:?}, dropped: {error}",
                                started.elapsed()
                            )
                        });
                        break;
                    }
                    tracing::debug!(queue = %name, %error, "sending a batch failed; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(params.max_retry_delay);
                }
            }
        }
        waiting.fetch_sub(size, Ordering::Relaxed);
    }
}
