//! The node's error log as a file: each event is formatted into a buffer
//! and handed whole to the log file writer thread
//! (strait_runtime::logs::files), so logging never waits on the disk and
//! SIGUSR1 reopens this file with the access log and file-log's files.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use strait_runtime::logs::files;

/// Makes one [`EventBuffer`] per event.
pub struct ErrorLog {
    path: Arc<Path>,
}

impl ErrorLog {
    pub fn new(path: &Path) -> ErrorLog {
        ErrorLog { path: Arc::from(path) }
    }
}

/// One event's text, appended to the file when dropped.
pub struct EventBuffer {
    path: Arc<Path>,
    bytes: Vec<u8>,
}

impl Write for EventBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuffer {
    fn drop(&mut self) {
        if !self.bytes.is_empty() {
            files::append(&self.path, std::mem::take(&mut self.bytes), false);
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for ErrorLog {
    type Writer = EventBuffer;

    fn make_writer(&'a self) -> EventBuffer {
        EventBuffer {
            path: self.path.clone(),
            bytes: Vec::with_capacity(256),
        }
    }
}
