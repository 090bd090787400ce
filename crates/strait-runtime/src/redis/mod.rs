//! A Redis client for counters shared by every node.
//!
//! Each worker thread holds one connection per Redis configuration, driven
//! by a task on the worker's own runtime. Commands from every request on the
//! worker are pipelined on it: whatever is queued when the socket is free
//! goes out in one write, and replies are matched to callers in order.
//!
//! Nothing here can stall a request:
//! - every call has the configured timeout, and a connection whose oldest
//!   reply is overdue is dropped (its callers get an error);
//! - the queue to a connection is bounded; a full queue is an error, not a
//!   wait;
//! - while Redis cannot be reached, calls fail at once; the connection is
//!   retried with exponential backoff (50 ms doubling to 2 s).
//!
//! Errors are counted ([`errors_total`]) and logged at most once a second
//! per connection.

mod conn;
pub mod resp;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

pub use resp::Value;

/// Where and how to reach one Redis server (Kong's `redis` record).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RedisConfig {
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    pub password: Option<String>,
    pub database: i64,
    pub ssl: bool,
    pub ssl_verify: bool,
    /// The SNI (and verified name) for TLS; the host when unset.
    pub server_name: Option<String>,
    /// Connect, and every call, must finish within this.
    pub timeout: Duration,
}

impl RedisConfig {
    /// `host:port/database`, for logs and errors (never the credentials).
    pub fn label(&self) -> String {
        format!("{}:{}/{}", self.host, self.port, self.database)
    }
}

/// Why a call got no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedisError {
    #[error("Redis at {0} is unreachable: {1}")]
    Unavailable(String, String),
    #[error("Redis at {0} did not answer within {1} ms")]
    Timeout(String, u128),
    #[error("the queue to Redis at {0} is full")]
    QueueFull(String),
    #[error("Redis at {0} answered with an error: {1}")]
    Reply(String, String),
    #[error("no async runtime to run the Redis connection on")]
    NoRuntime,
}

static ERRORS: AtomicU64 = AtomicU64::new(0);

/// Calls that failed (unreachable, timed out, queue full, error reply) since
/// the process started.
pub fn errors_total() -> u64 {
    ERRORS.load(Ordering::Relaxed)
}

/// Log a failed call for `what` (the feature that made it), at most one
/// line a second for the whole process, with the running error count.
pub fn log_failure(what: &str, error: &RedisError) {
    static LAST: AtomicU64 = AtomicU64::new(u64::MAX);
    if crate::once_a_second(&LAST) {
        tracing::error!(%error, errors_total = errors_total(), "{what}: Redis call failed");
    }
}

/// Commands one connection may have queued and unanswered.
const QUEUE: usize = 8192;

struct Request {
    frame: Vec<u8>,
    reply: oneshot::Sender<Result<Value, RedisError>>,
}

thread_local! {
    /// This worker's connection to each Redis configuration.
    static CONNECTIONS: RefCell<HashMap<Arc<RedisConfig>, mpsc::Sender<Request>>> =
        RefCell::new(HashMap::new());
}

/// A Lua script run with `EVALSHA` (loaded with `EVAL` when Redis does not
/// know it yet, after a restart or a `SCRIPT FLUSH`).
#[derive(Debug)]
pub struct Script {
    source: &'static str,
    sha1: String,
}

impl Script {
    pub fn new(source: &'static str) -> Script {
        let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, source.as_bytes());
        let sha1 = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        Script { source, sha1 }
    }
}

/// A handle on one Redis configuration; cheap to clone, usable from any
/// worker.
#[derive(Debug, Clone)]
pub struct Redis {
    config: Arc<RedisConfig>,
}

impl Redis {
    pub fn new(config: RedisConfig) -> Redis {
        Redis {
            config: Arc::new(config),
        }
    }

    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// An error reply as an error, and every error counted.
    fn counted(&self, result: Result<Value, RedisError>) -> Result<Value, RedisError> {
        let result = result.and_then(|value| match value {
            Value::Error(message) => Err(RedisError::Reply(self.config.label(), message)),
            value => Ok(value),
        });
        if result.is_err() {
            ERRORS.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Run a script with `EVALSHA`, sending its source once when Redis
    /// answers `NOSCRIPT`.
    pub async fn eval(&self, script: &Script, keys: &[&[u8]], args: &[&[u8]]) -> Result<Value, RedisError> {
        let count = keys.len().to_string();
        let mut command: Vec<&[u8]> = Vec::with_capacity(3 + keys.len() + args.len());
        command.extend([b"EVALSHA".as_slice(), script.sha1.as_bytes(), count.as_bytes()]);
        command.extend_from_slice(keys);
        command.extend_from_slice(args);
        let mut frame = Vec::with_capacity(128);
        resp::encode(&mut frame, &command);
        let mut result = self.send(frame).await;
        if matches!(&result, Ok(Value::Error(message)) if message.starts_with("NOSCRIPT")) {
            command[0] = b"EVAL";
            command[1] = script.source.as_bytes();
            let mut frame = Vec::with_capacity(script.source.len() + 128);
            resp::encode(&mut frame, &command);
            result = self.send(frame).await;
        }
        self.counted(result)
    }

    /// Run a script without waiting for it (work after the response, such
    /// as response-ratelimiting's increments); a failure is counted and
    /// logged. False when there is no runtime to run it on.
    pub fn spawn_eval(
        &self,
        script: &'static Script,
        keys: Vec<String>,
        args: Vec<String>,
        what: &'static str,
    ) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            ERRORS.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        let redis = self.clone();
        runtime.spawn(async move {
            let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            if let Err(error) = redis.eval(script, &keys, &args).await {
                log_failure(what, &error);
            }
        });
        true
    }

    async fn send(&self, frame: Vec<u8>) -> Result<Value, RedisError> {
        let (reply, answer) = oneshot::channel();
        let mut request = Request { frame, reply };
        // A connection whose task ended (idle, or its runtime went away)
        // is replaced once.
        for _ in 0..2 {
            let sender = self.connection()?;
            match sender.try_send(request) {
                Ok(()) => {
                    return match tokio::time::timeout(self.config.timeout, answer).await {
                        Ok(Ok(result)) => result,
                        Ok(Err(_)) => Err(RedisError::Unavailable(
                            self.config.label(),
                            "the connection closed".into(),
                        )),
                        Err(_) => Err(RedisError::Timeout(
                            self.config.label(),
                            self.config.timeout.as_millis(),
                        )),
                    };
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(RedisError::QueueFull(self.config.label()));
                }
                Err(mpsc::error::TrySendError::Closed(back)) => {
                    CONNECTIONS.with(|c| c.borrow_mut().remove(&self.config));
                    request = back;
                }
            }
        }
        Err(RedisError::Unavailable(
            self.config.label(),
            "the connection task ended".into(),
        ))
    }

    /// This worker's connection, started on first use.
    fn connection(&self) -> Result<mpsc::Sender<Request>, RedisError> {
        CONNECTIONS.with(|connections| {
            let mut connections = connections.borrow_mut();
            if let Some(sender) = connections.get(&self.config).filter(|s| !s.is_closed()) {
                return Ok(sender.clone());
            }
            let runtime = tokio::runtime::Handle::try_current().map_err(|_| RedisError::NoRuntime)?;
            let (sender, receiver) = mpsc::channel(QUEUE);
            runtime.spawn(conn::run(self.config.clone(), receiver));
            connections.insert(self.config.clone(), sender.clone());
            Ok(sender)
        })
    }
}
