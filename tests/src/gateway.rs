//! The gateway under test: the real `strait` binary in its own prefix directory on free ports,
//! with Admin API and proxy shortcuts; killed and cleaned up on drop.

use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use crate::client::{request, send_h1, Reply};
use crate::process::strait_command;
use crate::{free_port, local, random_token};

/// How long a start may take before the test fails with the log tail.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Options for [`Gateway::start`]. Ports and prefix are chosen by the harness.
#[derive(Clone, Debug, Default)]
pub struct GatewayOptions {
    /// `strait.conf` entries (`key = value`); a key the harness also writes is replaced.
    pub settings: Vec<(String, String)>,
    /// Extra environment variables for the process.
    pub env: Vec<(String, String)>,
    /// Contents of a declarative file loaded at start (`declarative_config`).
    pub declarative_config: Option<String>,
    /// Listeners added to the harness's own `admin_listen` entry (e.g. `127.0.0.1:N ssl`).
    pub extra_admin_listen: Vec<String>,
    /// The TLS proxy listener serves HTTP/3 too (`ssl http2 http3`, UDP on the same port).
    pub http3: bool,
}

impl GatewayOptions {
    pub fn new() -> GatewayOptions {
        GatewayOptions::default()
    }

    pub fn setting(mut self, key: &str, value: &str) -> GatewayOptions {
        self.settings.push((key.to_string(), value.to_string()));
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> GatewayOptions {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Adds an Admin API listener beside the harness's plain one.
    pub fn extra_admin_listen(mut self, entry: &str) -> GatewayOptions {
        self.extra_admin_listen.push(entry.to_string());
        self
    }

    /// HTTP/3 on the TLS proxy listener's port ([`Gateway::proxy_tls_addr`], UDP).
    pub fn http3(mut self) -> GatewayOptions {
        self.http3 = true;
        self
    }

    pub fn declarative(mut self, contents: &str) -> GatewayOptions {
        self.declarative_config = Some(contents.to_string());
        self
    }
}

/// Ports of one gateway, all on 127.0.0.1.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    pub proxy: u16,
    pub proxy_tls: u16,
    pub admin: u16,
    pub status: u16,
}

/// A running `strait start`.
pub struct Gateway {
    /// `STRAIT_E2E_STORE=postgres`: this gateway's own PostgreSQL server.
    postgres: Option<crate::postgres::PgServer>,
    /// `STRAIT_E2E_STORE=cassandra`: this gateway's keyspace (on the run's
    /// shared server, `STRAIT_TEST_CASSANDRA`, or one of its own).
    cassandra: Option<crate::cassandra::CassandraServer>,
    child: Option<Child>,
    dir: PathBuf,
    conf: PathBuf,
    ports: Ports,
    options: GatewayOptions,
    starts: usize,
}

impl Gateway {
    /// Writes `strait.conf` in a fresh prefix, starts the binary, waits until it is ready.
    pub async fn start(options: GatewayOptions) -> Gateway {
        let dir = std::env::temp_dir().join(format!("strait-e2e-{}", random_token()));
        fs::create_dir_all(&dir).expect("create prefix dir");
        let ports = Ports {
            proxy: free_port(),
            proxy_tls: free_port(),
            admin: free_port(),
            status: free_port(),
        };
        let conf = dir.join("strait.conf");
        // One suite, two stores: with STRAIT_E2E_STORE=postgres every
        // gateway that does not choose its own store (nor a declarative
        // file, which is DB-less) runs on a PostgreSQL server of its own.
        let on_postgres = std::env::var("STRAIT_E2E_STORE").as_deref() == Ok("postgres")
            && options.declarative_config.is_none()
            && !options.settings.iter().any(|(key, _)| key == "database");
        let postgres = on_postgres.then(|| {
            let server = crate::postgres::PgServer::start();
            server.bootstrap();
            server
        });
        let on_cassandra = std::env::var("STRAIT_E2E_STORE").as_deref() == Ok("cassandra")
            && options.declarative_config.is_none()
            && !options.settings.iter().any(|(key, _)| key == "database");
        let cassandra = on_cassandra.then(|| {
            let server = crate::cassandra::CassandraServer::start();
            server.bootstrap();
            server
        });
        let mut gateway = Gateway {
            postgres,
            cassandra,
            child: None,
            dir,
            conf,
            ports,
            options,
            starts: 0,
        };
        gateway.write_conf();
        gateway.spawn_and_wait().await;
        gateway
    }

    /// Replaces the options used by the next [`Gateway::restart`] (same prefix and ports).
    pub fn set_options(&mut self, options: GatewayOptions) {
        self.options = options;
        self.write_conf();
    }

    /// Writes `strait.conf`: the harness's keys (prefix, listeners on the chosen ports, log level,
    /// error log on stderr, two workers), then `declarative_config`, with any key in `options.settings` replacing ours.
    fn write_conf(&self) {
        let ports = self.ports;
        let mut entries: Vec<(String, String)> = vec![
            ("prefix".into(), self.dir.display().to_string()),
            (
                "proxy_listen".into(),
                format!(
                    "127.0.0.1:{}, 127.0.0.1:{} http2 ssl{}",
                    ports.proxy,
                    ports.proxy_tls,
                    if self.options.http3 { " http3" } else { "" }
                ),
            ),
            (
                "admin_listen".into(),
                std::iter::once(format!("127.0.0.1:{}", ports.admin))
                    .chain(self.options.extra_admin_listen.iter().cloned())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            ("status_listen".into(), format!("127.0.0.1:{}", ports.status)),
            ("log_level".into(), "info".into()),
            // The node's own log on stderr, which the harness keeps (and
            // shows when a test fails); the access log stays at its default.
            ("proxy_error_log".into(), "stderr".into()),
            ("worker_threads".into(), "2".into()),
            // Kong's default binds 8002 for the admin UI; a test that wants it sets a port.
            ("admin_gui_listen".into(), "off".into()),
        ];
        // A declarative file makes a DB-less node (a restart may switch to one).
        let server = self
            .postgres
            .as_ref()
            .filter(|_| self.options.declarative_config.is_none());
        if let Some(server) = server {
            entries.push(("database".into(), "postgres".into()));
            entries.push(("pg_port".into(), server.port().to_string()));
            entries.push(("pg_user".into(), crate::postgres::USER.into()));
            entries.push(("pg_database".into(), crate::postgres::DATABASE.into()));
        }
        let keyspace = self
            .cassandra
            .as_ref()
            .filter(|_| self.options.declarative_config.is_none());
        if let Some(server) = keyspace {
            for (key, value) in server.env() {
                entries.push((key.trim_start_matches("STRAIT_").to_ascii_lowercase(), value));
            }
        }
        if let Some(contents) = &self.options.declarative_config {
            let path = self.dir.join("kong.yml");
            fs::write(&path, contents).expect("write declarative config");
            entries.push(("declarative_config".into(), path.display().to_string()));
        }
        for (key, value) in &self.options.settings {
            entries.retain(|(existing, _)| existing != key);
            entries.push((key.clone(), value.clone()));
        }
        let mut text = String::from("# written by strait-e2e\n");
        for (key, value) in entries {
            text.push_str(&format!("{key} = {value}\n"));
        }
        fs::write(&self.conf, text).expect("write strait.conf");
    }

    async fn spawn_and_wait(&mut self) {
        self.starts += 1;
        let stdout = File::create(self.dir.join(format!("strait.{}.stdout.log", self.starts))).expect("log");
        let stderr = File::create(self.dir.join(format!("strait.{}.stderr.log", self.starts))).expect("log");
        let mut command = strait_command();
        command
            .arg("start")
            .arg("--conf")
            .arg(&self.conf)
            .arg("--prefix")
            .arg(&self.dir)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .envs(self.options.env.iter().map(|(k, v)| (k, v)));
        self.child = Some(command.spawn().expect("spawn strait"));
        let needs_config = self.options.declarative_config.is_some();
        // With `admin_token` the Admin API answers 401 without it; the status listener does not.
        let guarded = self.options.settings.iter().any(|(key, _)| key == "admin_token");
        let admin = if guarded { self.status_addr() } else { self.admin_addr() };
        let (proxy, proxy_tls) = (self.proxy_addr(), self.proxy_tls_addr());
        // A control plane opens no proxy listener.
        let proxies = !self
            .options
            .settings
            .iter()
            .any(|(key, value)| key == "role" && value == "control_plane");
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.try_exit_status() {
                panic!("strait exited during start with {status}\n{}", self.log_tail());
            }
            if is_ready(admin, proxies.then_some((proxy, proxy_tls)), needs_config).await {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("strait not ready within {START_TIMEOUT:?}\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether this gateway runs on PostgreSQL (`STRAIT_E2E_STORE=postgres`).
    pub fn on_postgres(&self) -> bool {
        self.postgres.is_some()
    }

    /// What this gateway has stored, as bytes to search: the LMDB file; on
    /// PostgreSQL, the database's rows (`pg_dump`) and the node's local cache.
    pub fn stored_bytes(&self) -> Vec<u8> {
        let read = |path: PathBuf| fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if self.cassandra.is_some() {
            // The node's local copy holds every stored entity as written.
            return read(self.dir.join("pg_cache").join("data.mdb"));
        }
        match &self.postgres {
            None => read(self.dir.join("lmdb").join("data.mdb")),
            Some(server) => {
                let mut bytes = server.dump().into_bytes();
                bytes.extend(read(self.dir.join("pg_cache").join("data.mdb")));
                bytes
            }
        }
    }

    pub fn ports(&self) -> Ports {
        self.ports
    }

    pub fn prefix(&self) -> &Path {
        &self.dir
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("strait is running").id()
    }

    pub fn proxy_addr(&self) -> SocketAddr {
        local(self.ports.proxy)
    }

    pub fn proxy_tls_addr(&self) -> SocketAddr {
        local(self.ports.proxy_tls)
    }

    pub fn admin_addr(&self) -> SocketAddr {
        local(self.ports.admin)
    }

    pub fn status_addr(&self) -> SocketAddr {
        local(self.ports.status)
    }

    pub fn proxy_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.proxy)
    }

    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.admin)
    }

    /// One Admin API request on a fresh connection.
    pub async fn admin(&self, method: &str, path: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Reply {
        send_h1(self.admin_addr(), request(method, path, headers, body))
            .await
            .unwrap_or_else(|e| panic!("admin {method} {path} failed: {e:#}\n{}", self.log_tail()))
    }

    pub async fn admin_get(&self, path: &str) -> Reply {
        self.admin("GET", path, &[], "").await
    }

    /// `POST /config` with a JSON (starts with `{`) or YAML body. Returns status and body text.
    pub async fn post_config(&self, config: &str) -> (u16, String) {
        let content_type = if config.trim_start().starts_with('{') {
            "application/json"
        } else {
            "application/x-yaml"
        };
        let reply = self
            .post_config_as("/config", content_type, config.as_bytes().to_vec())
            .await;
        (reply.status.as_u16(), reply.text())
    }

    /// `POST <path>` (e.g. `/config?flatten_errors=1`) with an explicit content type.
    pub async fn post_config_as(&self, path: &str, content_type: &str, body: Vec<u8>) -> Reply {
        self.admin("POST", path, &[("content-type", content_type)], body).await
    }

    /// Posts `config` (a declarative config as JSON) with a marker route added, asserts 201,
    /// and waits until the proxy serves the marker, i.e. until this config is live.
    pub async fn apply(&self, config: &Value) -> Reply {
        let token = random_token();
        let mut config = config.clone();
        let services = config
            .as_object_mut()
            .expect("config is an object")
            .entry("services")
            .or_insert_with(|| json!([]));
        services
            .as_array_mut()
            .expect("services is an array")
            .push(crate::declarative::marker_service(&token));
        let reply = self
            .post_config_as("/config", "application/json", config.to_string().into_bytes())
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "POST /config: {}", reply.text());
        self.wait_marker(&token).await;
        reply
    }

    /// Polls the proxy for `path` (every 5 ms) until it answers `status`,
    /// at most `limit`; how long that took.
    pub async fn until_proxied(&self, path: &str, status: u16, limit: Duration) -> Duration {
        let started = std::time::Instant::now();
        loop {
            let reply = self.proxy(crate::get(path)).await;
            if reply.status.as_u16() == status {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < limit,
                "{path} never answered {status} within {limit:?} (last {})\n{}",
                reply.status,
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until the proxy's marker route answers `token` (5 s).
    pub async fn wait_marker(&self, token: &str) {
        let proxy = self.proxy_addr();
        let token = token.to_string();
        crate::eventually(
            Duration::from_secs(5),
            "config did not become live on the proxy",
            || {
                let token = token.clone();
                async move {
                    let reply = send_h1(
                        proxy,
                        crate::get_host(crate::declarative::MARKER_PATH, "e2e-marker.invalid"),
                    )
                    .await?;
                    match reply.message() {
                        Some(message) if message == token => Ok(()),
                        _ => anyhow::bail!("marker answered {} {}", reply.status, reply.text()),
                    }
                }
            },
        )
        .await
    }

    /// One request through the plain proxy listener on a fresh HTTP/1.1 connection.
    pub async fn proxy(&self, req: http::Request<http_body_util::Full<Bytes>>) -> Reply {
        send_h1(self.proxy_addr(), req)
            .await
            .unwrap_or_else(|e| panic!("proxy request failed: {e:#}\n{}", self.log_tail()))
    }

    /// `strait_version` from `GET /`.
    pub async fn strait_version(&self) -> String {
        let root = self.admin_get("/").await.json();
        root["strait_version"].as_str().expect("strait_version").to_string()
    }

    fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|child| child.try_wait().ok().flatten())
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status();
        assert!(status.map(|s| s.success()).unwrap_or(false), "kill -{signal} failed");
    }

    /// SIGQUIT: finish what is in flight, then exit (`strait quit`).
    pub fn quit(&self) {
        self.signal("QUIT");
    }

    /// SIGHUP: read the settings again (`strait reload`).
    pub fn hangup(&self) {
        self.signal("HUP");
    }

    /// The pid the node's PID file names (after `strait restart`, the
    /// process that took over, which is not this harness's child).
    pub fn serving_pid(&self) -> Option<u32> {
        fs::read_to_string(self.dir.join("pids").join("strait.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse().ok())
    }

    /// SIGTERM: stop now (`strait stop`).
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// SIGUSR1: reopen the log files.
    pub fn reopen_logs(&self) {
        self.signal("USR1");
    }

    /// SIGINT.
    pub fn interrupt(&self) {
        self.signal("INT");
    }

    /// SIGKILL, and reap the process.
    pub fn kill9(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the process to exit; `None` if it is still running after `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.try_exit_status() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts the binary again with the same prefix, ports and options (kills a running one).
    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn_and_wait().await;
    }

    /// Resident set size from /proc/<pid>/status, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("read /proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS line")
    }

    /// The current run's stdout and stderr so far.
    pub fn log(&self) -> String {
        ["stdout", "stderr"]
            .iter()
            .map(|stream| {
                fs::read_to_string(self.dir.join(format!("strait.{}.{stream}.log", self.starts))).unwrap_or_default()
            })
            .collect()
    }

    /// Waits up to `within` for the node's log to contain `text`.
    pub async fn log_shows(&self, text: &str, within: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if self.log().contains(text) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        false
    }

    /// The last lines of the current run's stdout and stderr, for failure messages.
    pub fn log_tail(&self) -> String {
        let mut out = String::new();
        for stream in ["stdout", "stderr"] {
            let path = self.dir.join(format!("strait.{}.{stream}.log", self.starts));
            let text = fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            out.push_str(&format!("--- {} (last 40 lines) ---\n{tail}\n", path.display()));
        }
        out
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // A process that took over (`strait restart`) is not our child.
        let child = self.child.as_ref().map(|child| child.id());
        if let Some(pid) = self.serving_pid().filter(|pid| Some(*pid) != child) {
            let _ = std::process::Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .status();
        }
        self.kill9();
        if std::env::var_os("STRAIT_E2E_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

async fn is_ready(admin: SocketAddr, proxies: Option<(SocketAddr, SocketAddr)>, needs_config: bool) -> bool {
    let probe = Duration::from_secs(1);
    let Ok(Ok(ready)) = tokio::time::timeout(probe, send_h1(admin, crate::get("/status/ready"))).await else {
        return false;
    };
    // With an empty store Kong answers 503 until a config is posted; that is still "up".
    let up = ready.status == StatusCode::OK || (!needs_config && ready.status == StatusCode::SERVICE_UNAVAILABLE);
    if !up {
        return false;
    }
    for addr in proxies.into_iter().flat_map(|(proxy, tls)| [proxy, tls]) {
        if !matches!(
            tokio::time::timeout(probe, tokio::net::TcpStream::connect(addr)).await,
            Ok(Ok(_))
        ) {
            return false;
        }
    }
    true
}
