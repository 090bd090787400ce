//! What the plugins that watch traffic share: metrics (`prometheus`),
//! logs (`file-log`, `http-log`, `tcp-log`, `udp-log`, `syslog`, all
//! sending Kong's serialized entry, [`serialize`]) and traces.
//!
//! Every log plugin does its I/O off the proxy workers: `log` serializes
//! the entry and hands it to a bounded queue (strait_runtime::logs); a full
//! queue drops the entry and counts it.

pub(crate) mod propagation;
pub mod serialize;
pub(crate) mod statsd;

use std::sync::Arc;
use std::time::Duration;

use strait_runtime::logs::queue::{Queue, QueueParams};

use crate::config::ConfigReader;
use crate::context::{LogRecord, SharedStore};
use crate::phase::Plugin;
use crate::PluginError;

/// A log plugin that queues Kong's entry, as JSON, for its sink
/// (http-log, tcp-log, udp-log).
#[derive(Debug)]
pub struct QueuedLog {
    pub(crate) name: &'static str,
    pub(crate) priority: i32,
    pub(crate) queue: Arc<Queue>,
}

impl Plugin for QueuedLog {
    fn name(&self) -> &'static str {
        self.name
    }

    fn priority(&self) -> i32 {
        self.priority
    }

    fn logs(&self) -> bool {
        true
    }

    fn serializes(&self) -> bool {
        true
    }

    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        if let Some(entry) = serialize::kong_entry(record, shared) {
            self.queue.push(serialize::to_bytes(&entry));
        }
    }
}

/// Syslog's severities, from 0 (`emerg`) to 7 (`debug`).
pub(crate) const SEVERITIES: [&str; 8] = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"];

/// The severity number `field` names (syslog, loggly; default `info`).
pub(crate) fn severity(c: &ConfigReader<'_>, field: &str) -> Result<u8, PluginError> {
    let name = c.string(field)?.unwrap_or_else(|| "info".into());
    SEVERITIES
        .iter()
        .position(|s| *s == name)
        .map(|at| at as u8)
        .ok_or_else(|| PluginError::invalid(field, format!("expected one of: {}", SEVERITIES.join(", "))))
}

/// The severity of a response by its status: 5xx, 4xx, or the rest.
pub(crate) fn severity_of(status: u16, successful: u8, client_errors: u8, server_errors: u8) -> u8 {
    match status {
        500.. => server_errors,
        400..=499 => client_errors,
        _ => successful,
    }
}

/// The `host` and `port` a socket logger sends to.
pub(crate) fn destination(c: &ConfigReader<'_>) -> Result<(String, u16), PluginError> {
    let host = c
        .string("host")?
        .ok_or_else(|| PluginError::invalid("host", "required field missing"))?;
    let port =
        u16::try_from(c.integer("port", -1)?).map_err(|_| PluginError::invalid("port", "required field missing"))?;
    Ok((host, port))
}

pub(crate) fn seconds(value: f64) -> Duration {
    Duration::from_secs_f64(value.max(0.0))
}

pub(crate) fn millis(value: f64) -> Duration {
    Duration::from_secs_f64(value.max(0.0) / 1000.0)
}

/// Kong's `queue` record, as the queue runs it.
pub(crate) fn queue_params(config: &ConfigReader<'_>) -> Result<QueueParams, PluginError> {
    let queue = config.record("queue")?;
    let max_bytes = queue.integer("max_bytes", -1)?;
    Ok(QueueParams {
        max_batch_size: queue.integer("max_batch_size", 1)?.max(1) as usize,
        max_coalescing_delay: seconds(queue.number("max_coalescing_delay", 1.0)?),
        max_entries: queue.integer("max_entries", 10_000)?.max(1) as usize,
        max_bytes: (max_bytes > 0).then_some(max_bytes as usize),
        max_retry_time: seconds(queue.number("max_retry_time", 60.0)?),
        initial_retry_delay: seconds(queue.number("initial_retry_delay", 0.01)?),
        max_retry_delay: seconds(queue.number("max_retry_delay", 60.0)?),
    })
}

/// [`queue_params`], with Kong 3.x's deprecated `queue_size` and
/// `flush_timeout` applied where `queue` says nothing (http-log, statsd,
/// datadog).
pub(crate) fn queue_params_with_deprecated(config: &ConfigReader<'_>) -> Result<QueueParams, PluginError> {
    let mut params = queue_params(config)?;
    if let (Some(size), 1) = (config.integer_opt("queue_size")?, params.max_batch_size) {
        params.max_batch_size = size.max(1) as usize;
    }
    if let Some(delay) = config.number_opt("flush_timeout")? {
        if params.max_coalescing_delay == Duration::from_secs(1) {
            params.max_coalescing_delay = seconds(delay);
        }
    }
    Ok(params)
}

/// The queue of the socket loggers (tcp-log, udp-log, syslog), which have
/// no `queue` record in Kong: entries already waiting leave together, a
/// failed send is tried again for a second, and at most 10,000 wait.
pub(crate) fn socket_queue() -> QueueParams {
    QueueParams {
        max_batch_size: 100,
        max_coalescing_delay: Duration::ZERO,
        max_entries: 10_000,
        max_bytes: None,
        max_retry_time: Duration::from_secs(1),
        initial_retry_delay: Duration::from_millis(50),
        max_retry_delay: Duration::from_millis(400),
    }
}
