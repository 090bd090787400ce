//! `file-log` (Kong priority 9): Kong's entry as one JSON line appended to
//! `path`. Lines go through the file writer thread
//! (strait_runtime::logs::files), which keeps the file open and buffered;
//! SIGUSR1 makes it reopen every file (for logrotate), and `reopen: true`
//! closes the file after each line, as Kong does.

mod schema;

/// `file-log` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "file-log",
    priority: 9,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(FileLog::from_config(config)?)),
};

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};
use strait_runtime::logs::files;

use crate::observability::serialize::{kong_entry, to_bytes};
use crate::config::ConfigReader;
use crate::context::{LogRecord, SharedStore};
use crate::phase::Plugin;
use crate::PluginError;

#[derive(Debug)]
pub struct FileLog {
    path: Arc<Path>,
    reopen: bool,
}

impl FileLog {
    pub fn from_config(config: &Map<String, Value>) -> Result<FileLog, PluginError> {
        let c = ConfigReader::new(config);
        let path = c
            .string("path")?
            .ok_or_else(|| PluginError::invalid("path", "required field missing"))?;
        Ok(FileLog {
            path: Arc::from(Path::new(&path)),
            reopen: c.bool("reopen", false)?,
        })
    }
}

impl Plugin for FileLog {
    fn name(&self) -> &'static str {
        "file-log"
    }

    fn priority(&self) -> i32 {
        9
    }

    fn logs(&self) -> bool {
        true
    }

    fn serializes(&self) -> bool {
        true
    }

    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        let Some(entry) = kong_entry(record, shared) else { return };
        let mut line = to_bytes(&entry);
        line.push(b'\n');
        files::append(&self.path, line, self.reopen);
    }
}
