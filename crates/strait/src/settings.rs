//! Node settings: defaults, `strait.conf` (`key = value`, Kong's names), and
//! `STRAIT_<KEY>` environment overrides, validated into typed values.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use strait_core::RouterFlavor;
use strait_proxy::wire::tls_policy::{TlsPolicy, TlsSettings};
use strait_proxy::{parse_listen, ClientLimits, ListenSpec, ProxySettings};

use self::network::{dns_settings, http2_settings};
pub use self::plugins::{external_settings, lua_settings, wasm_settings};

mod admin;
mod cassandra;
mod defaults;
mod network;
mod plugins;

pub use self::cassandra::cassandra_config;
pub use self::defaults::DEFAULTS;

pub use admin::AdminGui;

/// The raw key/value settings after defaults, file and environment.
#[derive(Debug, Clone)]
pub struct RawSettings(pub BTreeMap<String, String>);

/// Typed settings the node runs with.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub prefix: PathBuf,
    /// `database = postgres`: the shared store's connection settings.
    pub postgres: Option<strait_store::pg::PgConfig>,
    /// `pg_ro_host` set: the read-only replica the Admin API's GET
    /// requests read from.
    pub postgres_ro: Option<strait_store::pg::PgConfig>,
    /// `database = cassandra`: the shared store's cluster settings.
    pub cassandra: Option<strait_store::cassandra::CassandraConfig>,
    pub declarative_config: Option<PathBuf>,
    pub log_level: String,
    /// `proxy_error_log`: where the node's own log goes.
    pub error_log: LogTarget,
    /// `log_format = json` (else text).
    pub json_logs: bool,
    /// `syslog_socket`: the local syslog socket of the syslog plugin.
    pub syslog_socket: PathBuf,
    /// `tracing_sampling_rate`: opentelemetry's rate where a plugin sets none.
    pub tracing_sampling_rate: f64,
    pub proxy: ProxySettings,
    pub admin_listen: Vec<ListenSpec>,
    pub status_listen: Vec<ListenSpec>,
    pub admin_token: Option<String>,
    pub router_flavor: RouterFlavor,
    /// Server TLS of the proxy's and the Admin API's `ssl` listeners.
    pub tls: TlsPolicy,
    /// `ssl_verify_client` (`off`, `optional`, `on`) and `ssl_client_ca`,
    /// the CA bundle's path, for the proxy's `ssl` listeners.
    pub client_verify: (String, Option<PathBuf>),
    /// `mem_cache_size`: the most bytes each proxy-cache memory store holds.
    pub mem_cache_size: usize,
    /// `untrusted_lua*` and `lua_max_run_time`: how Lua code runs.
    pub lua: strait_lua::LuaSettings,
    /// `pluginserver_*`: the plugin servers and their bound.
    pub external: strait_external::ExternalSettings,
    /// `wasm*`: proxy-wasm filters and their limits.
    pub wasm: strait_wasm::WasmSettings,
    pub admin_tls: AdminTls,
    pub admin_gui: AdminGui,
    /// `ssl_cert` and `ssl_cert_key`.
    pub ssl_cert: Option<(PathBuf, PathBuf)>,
    /// Defaults of references that name a vault implementation directly.
    pub vaults: strait_snapshot::secrets::VaultDefaults,
    /// How often secret references are read again (zero: never).
    pub vault_refresh_interval: Duration,
    /// `dns_*`: how service and target hosts are resolved.
    pub dns: strait_proxy::upstream::dns::DnsSettings,
    /// Where the oauth2 plugin's tokens live.
    pub oauth2_tokens: TokenStoreSettings,
    /// `role`: traditional, or one side of hybrid mode.
    pub role: Role,
    /// `config_change_log_size`: versions of change log the store keeps
    /// (other nodes and data planes further behind get everything).
    pub change_log_size: usize,
    pub raw: RawSettings,
}

/// `role` and, in hybrid mode, the `cluster_*` settings of its side.
#[derive(Debug, Clone)]
pub enum Role {
    Traditional,
    /// Serves data planes on `cluster_listen`; no proxy listeners.
    ControlPlane {
        listen: std::net::SocketAddr,
        tls: strait_cluster::tls::ClusterTls,
        /// `cluster_data_plane_purge_delay`.
        purge_delay: Duration,
    },
    /// Follows `cluster_control_plane` (`host:port`); no database.
    DataPlane {
        control_plane: String,
        tls: strait_cluster::tls::ClusterTls,
    },
}

fn cluster_tls(raw: &RawSettings, role: &str) -> Result<strait_cluster::tls::ClusterTls> {
    let read = |key: &str| -> Result<String> {
        let path = raw.get(key).trim();
        if path.is_empty() {
            bail!("{key}: required when role = {role}");
        }
        std::fs::read_to_string(path).with_context(|| format!("{key}: reading {path}"))
    };
    let mode = match raw.get("cluster_mtls") {
        "shared" => strait_cluster::tls::Mtls::Shared,
        "pki" if raw.get("cluster_ca_cert").trim().is_empty() => {
            bail!("cluster_ca_cert: required when role = {role} and cluster_mtls = pki")
        }
        "pki" => strait_cluster::tls::Mtls::Pki {
            ca_pem: read("cluster_ca_cert")?,
        },
        other => bail!("cluster_mtls: expected shared or pki (got {other:?})"),
    };
    let server_name = Some(raw.get("cluster_server_name").trim()).filter(|n| !n.is_empty());
    strait_cluster::tls::ClusterTls::new(&read("cluster_cert")?, &read("cluster_cert_key")?, mode, server_name)
        .map_err(|e| anyhow!(e))
}

fn role_settings(raw: &RawSettings) -> Result<Role> {
    match raw.get("role") {
        "traditional" => Ok(Role::Traditional),
        "control_plane" => {
            let text = raw.get("cluster_listen").trim();
            // Kong's form allows flags after the address; none apply here.
            let address = text.split_whitespace().next().unwrap_or("");
            let listen = address
                .parse()
                .map_err(|_| anyhow!("cluster_listen: expected host:port (got {text:?})"))?;
            let delay = parse_number(
                "cluster_data_plane_purge_delay",
                raw.get("cluster_data_plane_purge_delay"),
            )?;
            if delay < 60 {
                bail!("cluster_data_plane_purge_delay: must be at least 60 (seconds), got {delay}");
            }
            Ok(Role::ControlPlane {
                listen,
                tls: cluster_tls(raw, "control_plane")?,
                purge_delay: Duration::from_secs(delay as u64),
            })
        }
        "data_plane" => {
            let control_plane = raw.get("cluster_control_plane").trim().to_string();
            let port = control_plane.rsplit_once(':').map(|(_, port)| port.parse::<u16>());
            if control_plane.is_empty() || !matches!(port, Some(Ok(_))) {
                bail!("cluster_control_plane: expected host:port of the control plane (got {control_plane:?})");
            }
            if matches!(raw.get("database"), "postgres" | "cassandra") {
                bail!("database: a data plane has no database (database = off); its configuration comes from the control plane");
            }
            if !raw.get("declarative_config").trim().is_empty() {
                bail!("declarative_config: a data plane's configuration comes from the control plane");
            }
            Ok(Role::DataPlane {
                control_plane,
                tls: cluster_tls(raw, "data_plane")?,
            })
        }
        other => bail!("role: expected traditional, control_plane or data_plane (got {other:?})"),
    }
}

/// Where a node log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    Off,
    Stderr,
    Stdout,
    File(PathBuf),
}

impl LogTarget {
    /// `off`, `stderr` / `/dev/stderr`, `stdout` / `/dev/stdout`, or a
    /// file (relative paths are under `prefix`, as in Kong).
    fn parse(value: &str, prefix: &std::path::Path) -> LogTarget {
        match value.trim() {
            "off" => LogTarget::Off,
            "stderr" | "/dev/stderr" => LogTarget::Stderr,
            "stdout" | "/dev/stdout" => LogTarget::Stdout,
            path => LogTarget::File(prefix.join(path)),
        }
    }
}

/// Kong's `log_level` values.
pub const LOG_LEVELS: &[&str] = &["debug", "info", "notice", "warn", "error", "crit", "alert", "emerg"];

/// Files of the Admin API's `ssl` listeners (absent: the node's default
/// certificate, no client certificates asked for).
#[derive(Debug, Clone, Default)]
pub struct AdminTls {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub client_ca: Option<PathBuf>,
}

/// A setting Strait reads: one of [`DEFAULTS`], or a plugin server's
/// `pluginserver_<name>_*` (Kong's dynamic keys).
fn known_setting(key: &str) -> bool {
    DEFAULTS.iter().any(|(k, _)| *k == key) || key.starts_with("pluginserver_")
}

/// Parse `strait.conf` text: `key = value`, `#` comments, blank lines.
pub fn parse_conf(text: &str, origin: &str) -> Result<BTreeMap<String, String>> {
    let mut values = BTreeMap::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| anyhow!("{origin}:{}: expected `key = value`, got {line:?}", index + 1))?;
        let key = key.trim().to_ascii_lowercase();
        if !known_setting(&key) {
            bail!("{origin}:{}: unknown setting {key:?}", index + 1);
        }
        values.insert(key, value.trim().to_string());
    }
    Ok(values)
}

impl RawSettings {
    /// Defaults, then the file (if any), then `STRAIT_*` variables from `env`.
    pub fn load(conf: Option<&std::path::Path>, env: impl Iterator<Item = (String, String)>) -> Result<RawSettings> {
        let mut values: BTreeMap<String, String> =
            DEFAULTS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        if let Some(path) = conf {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            values.extend(parse_conf(&text, &path.display().to_string())?);
        }
        for (name, value) in env {
            let Some(key) = name.strip_prefix("STRAIT_") else {
                continue;
            };
            let key = key.to_ascii_lowercase();
            if known_setting(&key) {
                values.insert(key, value);
            }
        }
        Ok(RawSettings(values))
    }

    fn get(&self, key: &str) -> &str {
        self.0.get(key).map(String::as_str).unwrap_or("")
    }
}

/// The `pg_*` settings as the PostgreSQL store's connection settings.
pub fn pg_config(raw: &RawSettings) -> Result<strait_store::pg::PgConfig> {
    let port: u16 = raw
        .get("pg_port")
        .trim()
        .parse()
        .map_err(|_| anyhow!("pg_port: expected a port number, got {:?}", raw.get("pg_port")))?;
    let timeout_ms = parse_number("pg_timeout", raw.get("pg_timeout"))?;
    if timeout_ms == 0 {
        bail!("pg_timeout: must be at least 1 millisecond");
    }
    let max_concurrent_queries = parse_number("pg_max_concurrent_queries", raw.get("pg_max_concurrent_queries"))?;
    let semaphore_timeout_ms = parse_number("pg_semaphore_timeout", raw.get("pg_semaphore_timeout"))?;
    if semaphore_timeout_ms == 0 {
        bail!("pg_semaphore_timeout: must be at least 1 millisecond");
    }
    let pool_size = parse_number("pg_pool_size", raw.get("pg_pool_size"))?;
    let ssl = parse_switch("pg_ssl", raw.get("pg_ssl"))?;
    let verify = parse_switch("pg_ssl_verify", raw.get("pg_ssl_verify"))?;
    // `pg_ssl_verify` checks the chain against the system's roots
    // (`SSL_CERT_FILE` / `SSL_CERT_DIR` name others) and the name against
    // `pg_host`; off, the session is encrypted but the server unchecked.
    let tls = match ssl {
        true => Some(strait_store::pg::PgTls(
            strait_runtime::tls::client_config(verify).map_err(|e| anyhow!("pg_ssl: {e}"))?,
        )),
        false => None,
    };
    let text = |key: &str| Some(raw.get(key).trim().to_string()).filter(|v| !v.is_empty());
    for key in ["pg_host", "pg_user", "pg_database"] {
        if text(key).is_none() {
            bail!("{key}: must not be empty");
        }
    }
    Ok(strait_store::pg::PgConfig {
        host: raw.get("pg_host").trim().to_string(),
        port,
        user: raw.get("pg_user").trim().to_string(),
        password: Some(raw.get("pg_password").to_string()).filter(|v| !v.is_empty()),
        database: raw.get("pg_database").trim().to_string(),
        schema: text("pg_schema"),
        timeout: Duration::from_millis(timeout_ms as u64),
        tls,
        max_concurrent_queries: max_concurrent_queries as usize,
        semaphore_timeout: Duration::from_millis(semaphore_timeout_ms as u64),
        pool_size: pool_size as usize,
    })
}

/// The `pg_ro_*` settings when `pg_ro_host` is set: each empty one takes
/// its `pg_*` counterpart's value. Errors name the `pg_ro_*` key.
pub fn pg_ro_config(raw: &RawSettings) -> Result<Option<strait_store::pg::PgConfig>> {
    if raw.get("pg_ro_host").trim().is_empty() {
        return Ok(None);
    }
    let mut merged = raw.clone();
    let mut overridden = Vec::new();
    for (key, value) in &raw.0 {
        if let Some(name) = key.strip_prefix("pg_ro_") {
            if !value.trim().is_empty() {
                merged.0.insert(format!("pg_{name}"), value.clone());
                overridden.push(format!("pg_{name}"));
            }
        }
    }
    pg_config(&merged).map(Some).map_err(|error| {
        let text = error.to_string();
        match overridden.iter().find(|key| text.starts_with(&format!("{key}:"))) {
            Some(_) => anyhow!("pg_ro_{}", &text["pg_".len()..]),
            None => error,
        }
    })
}

/// `500ms`, `2s`, `1m`, or a bare number of seconds.
pub fn parse_duration(key: &str, value: &str) -> Result<Duration> {
    let value = value.trim();
    let (number, unit) = match value.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => value.split_at(at),
        None => (value, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| anyhow!("{key}: invalid duration {value:?}"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => bail!("{key}: invalid duration unit in {value:?} (use ms, s or m)"),
    };
    if duration > MAX_DURATION {
        bail!("{key}: duration {value:?} is longer than the most allowed, 3650 days");
    }
    Ok(duration)
}

/// The longest duration a setting takes: ten years. Anything longer is a
/// typo, and an instant that far out no longer fits the clock's range.
const MAX_DURATION: Duration = Duration::from_secs(3650 * 24 * 3600);

/// Kong's switches: `on`/`off` (also `true`/`false`).
fn parse_switch(key: &str, value: &str) -> Result<bool> {
    match value.trim() {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        other => bail!("{key}: expected on or off, got {other:?}"),
    }
}

/// nginx sizes: `10m`, `512k`, or bytes.
pub(crate) fn parse_size(key: &str, value: &str) -> Result<usize> {
    let value = value.trim();
    let (number, unit) = value.split_at(value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len()));
    let n: usize = number.parse().map_err(|_| anyhow!("{key}: invalid size {value:?}"))?;
    let scale = match unit {
        "" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        _ => bail!("{key}: invalid size unit in {value:?} (use k or m)"),
    };
    Ok(n.saturating_mul(scale))
}

fn tls_policy(raw: &RawSettings) -> Result<TlsPolicy> {
    let settings = TlsSettings {
        cipher_suite: raw.get("ssl_cipher_suite").to_string(),
        protocols: raw.get("ssl_protocols").to_string(),
        ciphers: raw.get("ssl_ciphers").to_string(),
        prefer_server_ciphers: parse_switch("ssl_prefer_server_ciphers", raw.get("ssl_prefer_server_ciphers"))?,
        session_tickets: parse_switch("ssl_session_tickets", raw.get("ssl_session_tickets"))?,
        // nginx keeps about 4,000 sessions per megabyte of cache.
        session_cache_entries: parse_size("ssl_session_cache_size", raw.get("ssl_session_cache_size"))? / 256,
        stapling: parse_switch("ssl_stapling", raw.get("ssl_stapling"))?,
    };
    TlsPolicy::new(&settings).map_err(|e| anyhow!(e))
}

fn parse_number(key: &str, value: &str) -> Result<usize> {
    value
        .trim()
        .parse()
        .map_err(|_| anyhow!("{key}: expected a number, got {value:?}"))
}

impl NodeSettings {
    pub fn from_raw(raw: RawSettings) -> Result<NodeSettings> {
        let role = role_settings(&raw)?;
        let postgres = match raw.get("database") {
            "embedded" => None,
            // Kong's DB-less word, for a data plane (its cache is LMDB).
            "off" if matches!(role, Role::DataPlane { .. }) => None,
            "postgres" => {
                if !raw.get("declarative_config").trim().is_empty() {
                    bail!(
                        "declarative_config: only with database = embedded (with postgres the database holds \
                         the configuration every node serves)"
                    );
                }
                Some(pg_config(&raw)?)
            }
            "cassandra" => None,
            other => bail!("database: expected embedded, postgres or cassandra (got {other:?})"),
        };
        let cassandra = match raw.get("database") {
            "cassandra" => {
                if !raw.get("declarative_config").trim().is_empty() {
                    bail!(
                        "declarative_config: only with database = embedded (with cassandra the cluster holds \
                         the configuration every node serves)"
                    );
                }
                Some(cassandra_config(&raw)?)
            }
            _ => None,
        };
        let postgres_ro = match postgres {
            Some(_) => pg_ro_config(&raw)?,
            None => None,
        };
        // One indexed router serves every flavor; the flavor decides which
        // route fields writes may use (docs/admin-api.md#router-flavors).
        let router_flavor = RouterFlavor::parse(raw.get("router_flavor")).ok_or_else(|| {
            let names: Vec<&str> = RouterFlavor::ALL.iter().map(|f| f.as_str()).collect();
            anyhow!(
                "router_flavor: expected one of {} (got {:?})",
                names.join(", "),
                raw.get("router_flavor")
            )
        })?;
        let listen = |key: &str| parse_listen(raw.get(key)).map_err(|e| anyhow!("{key}: {e}"));
        let worker_threads = match raw.get("worker_threads") {
            "auto" => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            other => parse_number("worker_threads", other)?.max(1),
        };
        let prefix = PathBuf::from(raw.get("prefix"));
        if !LOG_LEVELS.contains(&raw.get("log_level")) {
            bail!(
                "log_level: expected one of {} (got {:?})",
                LOG_LEVELS.join(", "),
                raw.get("log_level")
            );
        }
        let json_logs = match raw.get("log_format") {
            "text" => false,
            "json" => true,
            other => bail!("log_format: expected text or json (got {other:?})"),
        };
        let access_log = match LogTarget::parse(raw.get("proxy_access_log"), &prefix) {
            LogTarget::Off => None,
            LogTarget::Stdout => Some(PathBuf::from("/dev/stdout")),
            LogTarget::Stderr => Some(PathBuf::from("/dev/stderr")),
            LogTarget::File(path) => Some(path),
        }
        .map(|path| strait_proxy::pipeline::access_log::AccessLog {
            path: std::sync::Arc::from(path.as_path()),
            json: json_logs,
        });
        let proxy = ProxySettings {
            access_log,
            listeners: listen("proxy_listen")?,
            limits: ClientLimits {
                header_timeout: parse_duration("client_header_timeout", raw.get("client_header_timeout"))?,
                max_header_bytes: parse_number("client_max_header_size", raw.get("client_max_header_size"))?,
                max_line_bytes: network::large_header_buffer(raw.get("nginx_http_large_client_header_buffers"))?,
                max_headers: parse_number("client_max_headers", raw.get("client_max_headers"))?,
                max_connections_per_worker: parse_number("worker_connections", raw.get("worker_connections"))?.max(1),
                http2_max_concurrent_streams: u32::try_from(parse_number(
                    "http2_max_concurrent_streams",
                    raw.get("http2_max_concurrent_streams"),
                )?)
                .map_err(|_| anyhow!("http2_max_concurrent_streams: too large"))?
                .max(1),
                max_connection_age: Some(parse_duration(
                    "http2_max_connection_age",
                    raw.get("http2_max_connection_age"),
                )?)
                .filter(|age| !age.is_zero()),
                max_connection_age_grace: parse_duration(
                    "http2_max_connection_age_grace",
                    raw.get("http2_max_connection_age_grace"),
                )?,
                max_requests_per_connection: parse_number(
                    "http2_max_requests_per_connection",
                    raw.get("http2_max_requests_per_connection"),
                )? as u64,
                http2: http2_settings(&raw, "http2_")?,
                http3: network::http3_settings(&raw)?,
            },
            worker_model: raw
                .get("worker_model")
                .parse()
                .map_err(|e: String| anyhow!("worker_model: {e}"))?,
            worker_threads,
            graceful_shutdown_timeout: parse_duration(
                "graceful_shutdown_timeout",
                raw.get("graceful_shutdown_timeout"),
            )?,
            headers: strait_proxy::pipeline::kong_headers::HeaderSwitches::parse(
                raw.get("headers"),
                raw.get("headers_upstream"),
            )
            .map_err(|e| anyhow!(e))?,
            upstream_http2: http2_settings(&raw, "upstream_http2_")?,
            keepalive: strait_proxy::upstream::Keepalive {
                pool_size: parse_number("upstream_keepalive_pool_size", raw.get("upstream_keepalive_pool_size"))?,
                max_requests: u32::try_from(parse_number(
                    "upstream_keepalive_max_requests",
                    raw.get("upstream_keepalive_max_requests"),
                )?)
                .map_err(|_| anyhow!("upstream_keepalive_max_requests: too large"))?,
                idle_timeout: parse_duration(
                    "upstream_keepalive_idle_timeout",
                    raw.get("upstream_keepalive_idle_timeout"),
                )?,
            },
        };
        let optional = |key: &str| Some(raw.get(key).to_string()).filter(|v| !v.is_empty());
        if optional("admin_ssl_cert").is_some() != optional("admin_ssl_cert_key").is_some() {
            bail!("admin_ssl_cert and admin_ssl_cert_key: set both or neither");
        }
        let ssl_cert = match (optional("ssl_cert"), optional("ssl_cert_key")) {
            (Some(cert), Some(key)) if cert.contains(',') || key.contains(',') => {
                bail!("ssl_cert: one certificate and key (Strait takes no list here; add more as certificate entities)")
            }
            (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
            (None, None) => None,
            _ => bail!("ssl_cert and ssl_cert_key: set both or neither"),
        };
        let admin_gui = admin::admin_gui(&raw)?;
        let status_listen = listen("status_listen")?;
        if status_listen.iter().any(|spec| spec.ssl) {
            bail!("status_listen: ssl is not supported on the status listener");
        }
        Ok(NodeSettings {
            postgres,
            postgres_ro,
            cassandra,
            error_log: LogTarget::parse(raw.get("proxy_error_log"), &prefix),
            json_logs,
            syslog_socket: PathBuf::from(raw.get("syslog_socket")),
            tracing_sampling_rate: match raw.get("tracing_sampling_rate").trim().parse::<f64>() {
                Ok(rate) if (0.0..=1.0).contains(&rate) => rate,
                _ => bail!(
                    "tracing_sampling_rate: expected a number between 0 and 1 (got {:?})",
                    raw.get("tracing_sampling_rate")
                ),
            },
            prefix,
            declarative_config: optional("declarative_config").map(PathBuf::from),
            log_level: raw.get("log_level").to_string(),
            admin_listen: listen("admin_listen")?,
            status_listen,
            admin_token: optional("admin_token"),
            router_flavor,
            tls: tls_policy(&raw)?,
            client_verify: {
                let mode = raw.get("ssl_verify_client").to_string();
                let ca = optional("ssl_client_ca").map(PathBuf::from);
                match (mode.as_str(), &ca) {
                    ("off", _) => {}
                    ("optional" | "on", Some(_)) => {}
                    ("optional" | "on", None) => bail!("ssl_verify_client = {mode} needs ssl_client_ca (a CA bundle)"),
                    (other, _) => bail!("ssl_verify_client: expected off, optional or on, got {other:?}"),
                }
                (mode, ca)
            },
            mem_cache_size: parse_size("mem_cache_size", raw.get("mem_cache_size"))?,
            lua: lua_settings(&raw)?,
            external: external_settings(&raw)?,
            wasm: wasm_settings(&raw)?,
            ssl_cert,
            admin_gui,
            admin_tls: AdminTls {
                cert: optional("admin_ssl_cert").map(PathBuf::from),
                key: optional("admin_ssl_cert_key").map(PathBuf::from),
                client_ca: optional("admin_ssl_client_ca").map(PathBuf::from),
            },
            vaults: strait_snapshot::secrets::VaultDefaults {
                env_prefix: optional("vault_env_prefix"),
                file_base_path: match optional("vault_file_base_path").map(PathBuf::from) {
                    Some(path) if !path.is_absolute() => bail!("vault_file_base_path: must be an absolute path"),
                    path => path,
                },
            },
            vault_refresh_interval: parse_duration("vault_refresh_interval", raw.get("vault_refresh_interval"))?,
            dns: dns_settings(&raw)?,
            oauth2_tokens: token_store_settings(&raw)?,
            role,
            change_log_size: match parse_number("config_change_log_size", raw.get("config_change_log_size"))? {
                0 => bail!("config_change_log_size: must be at least 1"),
                n => n,
            },
            proxy,
            raw,
        })
    }
}

/// `oauth2_token_store`: the embedded LMDB store under the prefix, or a
/// server the nodes of a cluster share (PostgreSQL, Cassandra, Redis).
/// Unset: the configuration's database (`postgres` or `cassandra` with
/// that `database`, as Kong keeps tokens in its database; `embedded`
/// otherwise).
#[derive(Debug, Clone)]
pub enum TokenStoreSettings {
    /// `map_size`: the most bytes the store's LMDB file may grow to.
    Embedded {
        map_size: usize,
    },
    Redis(strait_runtime::redis::RedisConfig),
    /// The `pg_*` database's `oauth2_tokens` tables.
    Postgres(strait_store::pg::PgConfig),
    /// The `cassandra_*` keyspace's `oauth2_*` and `runtime_kv` tables.
    Cassandra(strait_store::cassandra::CassandraConfig),
}

fn on_off(key: &str, value: &str) -> Result<bool> {
    match value {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        other => bail!("{key}: expected on or off (got {other:?})"),
    }
}

fn token_store_settings(raw: &RawSettings) -> Result<TokenStoreSettings> {
    let optional = |key: &str| Some(raw.get(key).to_string()).filter(|v| !v.is_empty());
    let store = match raw.get("oauth2_token_store") {
        "" if raw.get("database") == "postgres" => "postgres",
        "" if raw.get("database") == "cassandra" => "cassandra",
        "" => "embedded",
        other => other,
    };
    match store {
        "postgres" => Ok(TokenStoreSettings::Postgres(pg_config(raw)?)),
        "cassandra" => Ok(TokenStoreSettings::Cassandra(cassandra_config(raw)?)),
        "embedded" => Ok(TokenStoreSettings::Embedded {
            map_size: parse_size("oauth2_token_store_size", raw.get("oauth2_token_store_size"))?,
        }),
        "redis" => {
            let host = optional("oauth2_redis_host")
                .ok_or_else(|| anyhow!("oauth2_redis_host: required when oauth2_token_store = redis"))?;
            let port: u16 = raw.get("oauth2_redis_port").trim().parse().map_err(|_| {
                anyhow!(
                    "oauth2_redis_port: expected a port (got {:?})",
                    raw.get("oauth2_redis_port")
                )
            })?;
            let database: i64 = raw.get("oauth2_redis_database").trim().parse().map_err(|_| {
                anyhow!(
                    "oauth2_redis_database: expected a number (got {:?})",
                    raw.get("oauth2_redis_database")
                )
            })?;
            let timeout_ms: u64 = raw.get("oauth2_redis_timeout").trim().parse().map_err(|_| {
                anyhow!(
                    "oauth2_redis_timeout: expected milliseconds (got {:?})",
                    raw.get("oauth2_redis_timeout")
                )
            })?;
            Ok(TokenStoreSettings::Redis(strait_runtime::redis::RedisConfig {
                host,
                port,
                username: optional("oauth2_redis_username"),
                password: optional("oauth2_redis_password"),
                database,
                ssl: on_off("oauth2_redis_ssl", raw.get("oauth2_redis_ssl"))?,
                ssl_verify: on_off("oauth2_redis_ssl_verify", raw.get("oauth2_redis_ssl_verify"))?,
                server_name: optional("oauth2_redis_server_name"),
                timeout: Duration::from_millis(timeout_ms.max(1)),
            }))
        }
        other => bail!("oauth2_token_store: expected embedded, postgres, cassandra or redis (got {other:?})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_then_env_override_defaults() {
        let dir = std::env::temp_dir().join(format!("strait-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let conf = dir.join("strait.conf");
        std::fs::write(&conf, "# comment\nprefix = /tmp/x\nclient_header_timeout = 500ms\n").expect("write");
        let env = vec![
            ("STRAIT_PREFIX".to_string(), "/tmp/y".to_string()),
            ("OTHER".to_string(), "1".to_string()),
        ];
        let raw = RawSettings::load(Some(&conf), env.into_iter()).expect("load");
        let settings = NodeSettings::from_raw(raw).expect("valid");
        assert_eq!(settings.prefix, PathBuf::from("/tmp/y"));
        assert_eq!(settings.proxy.limits.header_timeout, Duration::from_millis(500));
        assert_eq!(settings.proxy.listeners.len(), 2);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn bad_settings_name_the_key_and_line() {
        let err = parse_conf("prefix = a\nnope = 1\n", "strait.conf").expect_err("unknown key");
        assert_eq!(err.to_string(), "strait.conf:2: unknown setting \"nope\"");
        assert!(parse_duration("t", "5 parsecs").is_err());
        let huge = parse_duration("client_header_timeout", "18446744073709551615m").unwrap_err();
        assert!(huge.to_string().contains("client_header_timeout"), "{huge}");
        assert!(parse_duration("t", "3650m").is_ok());
        let mut raw = RawSettings::load(None, std::iter::empty()).expect("defaults");
        raw.0.insert("proxy_listen".into(), "nonsense".into());
        assert!(NodeSettings::from_raw(raw)
            .expect_err("bad listen")
            .to_string()
            .starts_with("proxy_listen:"));
        for (key, value) in [
            ("http2_max_frame_size", "1k"),
            ("http2_initial_stream_window_size", "0"),
            ("http2_adaptive_window", "maybe"),
            ("dns_order", "SRV,MX"),
            ("upstream_keepalive_max_requests", "lots"),
        ] {
            let mut raw = RawSettings::load(None, std::iter::empty()).expect("defaults");
            raw.0.insert(key.into(), value.into());
            let error = NodeSettings::from_raw(raw).expect_err(key).to_string();
            assert!(error.starts_with(&format!("{key}:")), "{key}: {error}");
        }
    }

    #[test]
    fn hybrid_roles_need_their_settings_and_say_which() {
        let role = |pairs: &[(&str, &str)]| {
            let mut raw = RawSettings::load(None, std::iter::empty()).expect("defaults");
            for (key, value) in pairs {
                raw.0.insert((*key).into(), (*value).into());
            }
            role_settings(&raw).map_err(|e| e.to_string())
        };
        assert!(matches!(role(&[]), Ok(Role::Traditional)));
        let error = |pairs: &[(&str, &str)]| role(pairs).expect_err("refused");
        assert_eq!(
            error(&[("role", "edge")]),
            "role: expected traditional, control_plane or data_plane (got \"edge\")"
        );
        assert_eq!(
            error(&[("role", "control_plane")]),
            "cluster_cert: required when role = control_plane"
        );
        assert!(error(&[("role", "data_plane")]).starts_with("cluster_control_plane: expected host:port"));
        assert!(error(&[
            ("role", "data_plane"),
            ("cluster_control_plane", "cp:8005"),
            ("database", "postgres")
        ])
        .starts_with("database: a data plane has no database"));
        assert_eq!(
            error(&[
                ("role", "control_plane"),
                ("cluster_mtls", "pki"),
                ("cluster_cert", "/nonexistent.crt")
            ]),
            "cluster_ca_cert: required when role = control_plane and cluster_mtls = pki"
        );
        assert!(error(&[("role", "control_plane"), ("cluster_listen", "everywhere")]).starts_with("cluster_listen:"));
        assert!(
            error(&[("role", "control_plane"), ("cluster_cert", "/nonexistent.crt")])
                .starts_with("cluster_cert: reading")
        );
    }

    #[test]
    fn oauth2_tokens_follow_the_database_unless_told() {
        let store = |pairs: &[(&str, &str)]| {
            let mut raw = RawSettings::load(None, std::iter::empty()).expect("defaults");
            for (key, value) in pairs {
                raw.0.insert((*key).into(), (*value).into());
            }
            token_store_settings(&raw)
        };
        assert!(matches!(store(&[]), Ok(TokenStoreSettings::Embedded { .. })));
        let on_pg = store(&[("database", "postgres"), ("pg_port", "5433")]);
        assert!(
            matches!(&on_pg, Ok(TokenStoreSettings::Postgres(c)) if c.port == 5433),
            "{on_pg:?}"
        );
        let told = store(&[("database", "postgres"), ("oauth2_token_store", "embedded")]);
        assert!(matches!(told, Ok(TokenStoreSettings::Embedded { .. })));
        let shared = store(&[("oauth2_token_store", "postgres")]);
        assert!(matches!(shared, Ok(TokenStoreSettings::Postgres(_))));
        let on_cassandra = store(&[("database", "cassandra"), ("cassandra_keyspace", "tokens_here")]);
        assert!(
            matches!(&on_cassandra, Ok(TokenStoreSettings::Cassandra(c)) if c.keyspace == "tokens_here"),
            "{on_cassandra:?}"
        );
        let error = store(&[("oauth2_token_store", "mongodb")]).expect_err("unknown store");
        assert_eq!(
            error.to_string(),
            "oauth2_token_store: expected embedded, postgres, cassandra or redis (got \"mongodb\")"
        );
    }

    #[test]
    fn pg_ro_settings_take_the_primarys_values_unless_set() {
        let mut raw = RawSettings::load(None, std::iter::empty()).expect("defaults");
        assert_eq!(pg_ro_config(&raw).expect("no replica"), None);
        raw.0.insert("pg_port".into(), "5433".into());
        raw.0.insert("pg_user".into(), "writer".into());
        raw.0.insert("pg_ro_host".into(), "replica.internal".into());
        raw.0.insert("pg_ro_user".into(), "reader".into());
        let ro = pg_ro_config(&raw).expect("valid").expect("a replica");
        assert_eq!(ro.label(), "reader@replica.internal:5433/kong");
        raw.0.insert("pg_ro_port".into(), "nope".into());
        let error = pg_ro_config(&raw).expect_err("bad port").to_string();
        assert!(error.starts_with("pg_ro_port:"), "{error}");
    }

    #[test]
    fn pg_settings_default_to_kongs_and_bad_ones_name_the_key() {
        let raw = RawSettings::load(None, std::iter::empty()).expect("defaults");
        let config = pg_config(&raw).expect("defaults are valid");
        assert_eq!(config.label(), "kong@127.0.0.1:5432/kong");
        assert_eq!(config.timeout, Duration::from_millis(5000));
        assert_eq!((config.password, config.schema), (None, None));
        assert_eq!((config.max_concurrent_queries, config.pool_size), (0, 256));
        assert_eq!(config.semaphore_timeout, Duration::from_millis(60000));
        assert!(config.tls.is_none());
        for (key, value) in [
            ("pg_port", "99999"),
            ("pg_timeout", "0"),
            ("pg_timeout", "soon"),
            ("pg_ssl", "maybe"),
            ("pg_ssl_verify", "yes please"),
            ("pg_host", " "),
            ("pg_max_concurrent_queries", "-1"),
            ("pg_semaphore_timeout", "0"),
            ("pg_pool_size", "many"),
        ] {
            let mut raw = RawSettings::load(None, std::iter::empty()).expect("defaults");
            raw.0.insert(key.into(), value.into());
            let error = pg_config(&raw).expect_err(key).to_string();
            assert!(error.starts_with(&format!("{key}:")), "{key}={value}: {error}");
        }
    }
}
