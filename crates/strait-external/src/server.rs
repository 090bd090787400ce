//! Plugin servers as Kong 3.9 runs them: each server's plugin found by
//! running its `query_cmd` (once, at start-up), the server started with
//! its `start_cmd` and started again when it ends (one second apart at
//! first, doubling to thirty while it keeps failing within a minute of its
//! start), its output logged line by line as `[<name>:<pid>] <line>`.
//!
//! Unlike Kong, a restart is remembered: each start of a server is a new
//! generation, and plugin instances started on an earlier one are started
//! again before their next event (Kong issue #8370: after a Python server
//! restarted, an instance id it had reused ran another plugin's config).

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

/// One `pluginserver_names` entry with its settings.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub name: String,
    pub socket: PathBuf,
    /// `None`: the server is managed outside Strait (Kong's "assuming
    /// external process management").
    pub start_cmd: Option<String>,
    pub query_cmd: String,
}

/// What a server's query answered: its plugin.
#[derive(Debug, Clone)]
pub struct PluginInfo {
    pub name: String,
    /// `name`, kept for the process's life (a plugin's name in the chain).
    pub name_static: &'static str,
    pub priority: i32,
    pub version: String,
    pub phases: Vec<String>,
    pub schema: Json,
    pub protocol: Protocol,
}

/// The wire protocol a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `MsgPack:1`: the Python and JavaScript PDKs.
    MsgPack,
    /// `ProtoBuf:1`: go-pdk.
    ProtoBuf,
}

/// A running (or restarting) server, as the plugins see it.
#[derive(Debug)]
pub struct Server {
    pub name: String,
    pub socket: PathBuf,
    /// Bumped each time the process is started again: instances of an
    /// older generation are started anew.
    pub generation: AtomicU64,
}

impl Server {
    /// A server Strait does not start (`config validate`, or no `start_cmd`).
    pub fn unmanaged(settings: &ServerSettings) -> Server {
        Server {
            name: settings.name.clone(),
            socket: settings.socket.clone(),
            generation: AtomicU64::new(0),
        }
    }
}

/// How long a query command may take: Strait does not start while one runs.
const QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `query_cmd` through the shell and reads its plugin (Kong reads the
/// first entry of `Plugins`, or of the bare array). A command still running
/// after a minute is killed and the start fails, rather than hangs.
pub fn query(settings: &ServerSettings) -> Result<PluginInfo, String> {
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(&settings.query_cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running its query_cmd: {e}"))?;
    let read = |stream: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut stream) = stream {
                let _ = stream.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let stderr = read(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let started = Instant::now();
    let status = loop {
        match child
            .try_wait()
            .map_err(|e| format!("waiting for its query_cmd: {e}"))?
        {
            Some(status) => break status,
            None if started.elapsed() > QUERY_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "its query_cmd did not finish within {} s",
                    QUERY_TIMEOUT.as_secs()
                ));
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    if !status.success() {
        return Err(format!(
            "its query_cmd exited with {status}: {}",
            String::from_utf8_lossy(&stderr).trim()
        ));
    }
    let dump: Json = serde_json::from_slice(&stdout).map_err(|e| format!("its query_cmd's output is not JSON: {e}"))?;
    info_of(&dump)
}

/// The plugin info of a query's output.
pub fn info_of(dump: &Json) -> Result<PluginInfo, String> {
    let protocol = match dump.get("Protocol").and_then(Json::as_str) {
        None | Some("MsgPack:1") => Protocol::MsgPack,
        Some("ProtoBuf:1") => Protocol::ProtoBuf,
        Some(other) => return Err(format!("unknown protocol implementation: {other}")),
    };
    let plugins = dump.get("Plugins").unwrap_or(dump);
    let info = plugins
        .as_array()
        .and_then(|plugins| plugins.first())
        .ok_or_else(|| "its query_cmd listed no plugin".to_string())?;
    let name = info
        .get("Name")
        .and_then(Json::as_str)
        .ok_or_else(|| "the plugin info has no Name".to_string())?;
    let priority = info
        .get("Priority")
        .and_then(Json::as_i64)
        .and_then(|p| i32::try_from(p).ok())
        .unwrap_or(0);
    let phases = info
        .get("Phases")
        .and_then(Json::as_array)
        .map(|phases| phases.iter().filter_map(Json::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let name = name.to_ascii_lowercase();
    Ok(PluginInfo {
        name_static: Box::leak(name.clone().into_boxed_str()),
        name,
        priority,
        version: info.get("Version").and_then(Json::as_str).unwrap_or("").to_string(),
        phases,
        schema: info.get("Schema").cloned().unwrap_or(Json::Null),
        protocol,
    })
}

/// Starts `settings`' server (when it has a `start_cmd`) and keeps it
/// running on a thread of its own for the process's life.
pub fn supervise(settings: &ServerSettings) -> Arc<Server> {
    let server = Arc::new(Server::unmanaged(settings));
    let Some(command) = settings.start_cmd.clone() else {
        tracing::warn!(
            "start_command undefined for pluginserver {}; assuming external process management",
            settings.name
        );
        return server;
    };
    let watched = server.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("pluginserver-{}", settings.name))
        .spawn(move || keep_running(&watched, &command));
    if let Err(error) = spawned {
        tracing::error!("[pluginserver] could not start a thread for {}: {error}", settings.name);
    }
    server
}

fn keep_running(server: &Server, command: &str) {
    let mut backoff = Duration::from_secs(1);
    loop {
        tracing::info!("[pluginserver] starting pluginserver process for {}", server.name);
        let started = Instant::now();
        match start(command) {
            Ok(mut child) => {
                let pid = child.id();
                tracing::info!("[pluginserver] started, pid {pid}");
                for stream in [
                    child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
                    child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
                ]
                .into_iter()
                .flatten()
                {
                    let name = server.name.clone();
                    let _ = std::thread::Builder::new()
                        .name(format!("pluginserver-{}-out", server.name))
                        .spawn(move || log_lines(&name, pid, stream));
                }
                let status = child.wait();
                match status {
                    Ok(status) if status.code() == Some(127) => tracing::error!(
                        "external pluginserver '{}' start command {command} exited with \"command not found\"",
                        server.name
                    ),
                    Ok(status) => tracing::error!("external pluginserver '{}' terminated: {status}", server.name),
                    Err(error) => tracing::error!(
                        "external pluginserver '{}' could not be waited for: {error}",
                        server.name
                    ),
                }
            }
            Err(error) => tracing::error!("[pluginserver] could not start {}: {error}", server.name),
        }
        // Instances on the old process are gone with it.
        server.generation.fetch_add(1, Ordering::Release);
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_secs(1);
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

fn start(command: &str) -> std::io::Result<std::process::Child> {
    let mut shell = Command::new("/bin/sh");
    shell
        .arg("-c")
        .arg(format!("exec {command}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::child::end_with_parent(&mut shell);
    shell.spawn()
}

fn log_lines(name: &str, pid: u32, stream: Box<dyn Read + Send>) {
    for line in BufReader::new(stream).lines() {
        match line {
            Ok(line) => tracing::info!("[{name}:{pid}] {line}"),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn settings(query_cmd: &str) -> ServerSettings {
        ServerSettings {
            name: "t".into(),
            socket: PathBuf::from("/nonexistent.sock"),
            start_cmd: None,
            query_cmd: query_cmd.into(),
        }
    }

    #[test]
    fn a_query_that_fails_or_does_not_answer_json_says_so() {
        let failed = query(&settings("echo broken >&2; exit 3")).unwrap_err();
        assert!(
            failed.starts_with("its query_cmd exited with exit status: 3: broken"),
            "{failed}"
        );
        let not_json = query(&settings("echo nope")).unwrap_err();
        assert!(not_json.starts_with("its query_cmd's output is not JSON"), "{not_json}");
        let info = query(&settings(
            r#"echo '[{"Name": "x", "Priority": 5, "Phases": ["access"], "Schema": {"fields": []}}]'"#,
        ))
        .unwrap();
        assert_eq!((info.name.as_str(), info.priority), ("x", 5));
    }

    #[test]
    fn both_dump_shapes_read_as_kong_reads_them() {
        let go = info_of(
            &json!({"Protocol": "ProtoBuf:1", "SocketPath": "/usr/local/kong/go-hello.socket",
            "Plugins": [{"Name": "go-hello", "Phases": ["access"], "Version": "0.1", "Priority": 1,
                "Schema": {"name": "go-hello", "fields": []}}]}),
        )
        .unwrap();
        assert_eq!(
            (go.name.as_str(), go.priority, go.protocol),
            ("go-hello", 1, Protocol::ProtoBuf)
        );
        let python = info_of(&json!([{"Name": "Py-Hello", "Phases": ["access"], "Priority": 100,
            "Version": "0.1.0", "Schema": {"name": "py-hello", "fields": []}}]))
        .unwrap();
        assert_eq!(
            (
                python.name.as_str(),
                python.priority,
                python.protocol,
                python.phases.clone()
            ),
            ("py-hello", 100, Protocol::MsgPack, vec!["access".to_string()])
        );
        assert_eq!(
            info_of(&json!({"Protocol": "Thrift:1", "Plugins": []})).unwrap_err(),
            "unknown protocol implementation: Thrift:1"
        );
        assert_eq!(info_of(&json!([])).unwrap_err(), "its query_cmd listed no plugin");
    }
}
