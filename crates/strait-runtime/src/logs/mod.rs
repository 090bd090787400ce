//! Shipping log entries and traces off the proxy workers: files through one
//! writer thread ([`files`]), everything networked through Kong-style
//! bounded queues ([`queue`]) drained on one shipping thread
//! ([`background`]) into sinks ([`sinks`]).

pub mod aggregate;
pub mod background;
pub mod files;
pub mod lines;
pub mod queue;
mod send_many;
pub mod sinks;
pub mod templated;

use std::path::PathBuf;
use std::sync::OnceLock;

static SYSLOG_SOCKET: OnceLock<PathBuf> = OnceLock::new();

/// Sets the local syslog socket (the node's `syslog_socket`); only the
/// first call counts.
pub fn set_syslog_socket(path: PathBuf) {
    let _ = SYSLOG_SOCKET.set(path);
}

/// The local syslog socket: `/dev/log` unless the node set another.
pub fn syslog_socket() -> PathBuf {
    SYSLOG_SOCKET
        .get()
        .cloned()
        .unwrap_or_else(|| PathBuf::from("/dev/log"))
}
