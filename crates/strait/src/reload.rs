//! `strait reload` (SIGHUP) on the node: read the settings again, apply
//! what can change in a running process, and refuse, changing nothing,
//! when a changed setting needs a restart.
//!
//! Applied live: `log_level`; the certificates of `ssl_cert`/`ssl_cert_key`
//! and `admin_ssl_cert`/`admin_ssl_cert_key` (read again even when the
//! paths are the same: a renewed certificate in place); the client limits
//! and timeouts (`client_*`, `worker_connections`, the client `http2_*`
//! settings), which new connections take; `declarative_config` (the file
//! is loaded again, as Kong's `kong reload` does DB-less).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Context, Result};
use arc_swap::ArcSwap;
use strait_admin::AdminState;
use strait_proxy::wire::tls::LiveCert;
use strait_proxy::ClientLimits;

use crate::settings::{NodeSettings, RawSettings};

/// How this node was started, to read its settings the same way again and
/// to start its successor.
#[derive(Debug, Clone)]
pub struct Launch {
    pub conf: Option<PathBuf>,
    /// The command line's settings (`--prefix`, `--declarative-config`).
    pub overrides: Vec<(String, String)>,
    /// The binary's path when this process started (a package upgrade
    /// puts the new binary there) and the arguments after it.
    pub exe: PathBuf,
    pub args: Vec<String>,
}

/// Settings a running node applies without a restart.
const LIVE: &[&str] = &[
    "log_level",
    "ssl_cert",
    "ssl_cert_key",
    "admin_ssl_cert",
    "admin_ssl_cert_key",
    "declarative_config",
    "client_header_timeout",
    "client_max_header_size",
    "client_max_headers",
    "worker_connections",
    "nginx_http_large_client_header_buffers",
];

fn live(key: &str) -> bool {
    // The client connections' HTTP/2 settings are client limits too.
    LIVE.contains(&key) || (key.starts_with("http2_") && !key.starts_with("upstream_"))
}

/// What a reload can change, and the settings it started from.
pub struct Reloader {
    pub launch: Mutex<Launch>,
    pub raw: Mutex<BTreeMap<String, String>>,
    pub log_level: crate::node::LogLevelSetter,
    pub proxy_cert: LiveCert,
    pub admin_cert: Option<LiveCert>,
    pub limits: Arc<ArcSwap<ClientLimits>>,
}

/// A reload's outcome, as `strait reload` prints it.
pub enum Outcome {
    Applied(Vec<String>),
    Refused(Vec<String>),
    Failed(String),
}

impl Reloader {
    /// Read the settings again (from `conf` when given) and apply them.
    pub async fn reload(&self, conf: Option<PathBuf>, admin: Option<&AdminState>) -> Outcome {
        match self.try_reload(conf, admin).await {
            Ok(outcome) => outcome,
            Err(error) => Outcome::Failed(format!("{error:#}")),
        }
    }

    async fn try_reload(&self, conf: Option<PathBuf>, admin: Option<&AdminState>) -> Result<Outcome> {
        let mut launch = self.launch.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if conf.is_some() {
            launch.conf = conf;
        }
        let raw = RawSettings::load(
            launch.conf.as_deref(),
            std::env::vars().chain(launch.overrides.iter().cloned()),
        )?;
        let settings = NodeSettings::from_raw(raw.clone())?;
        let old = self.raw.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let changed: Vec<String> = raw
            .0
            .iter()
            .filter(|(key, value)| old.get(*key) != Some(*value))
            .map(|(key, _)| key.clone())
            .chain(old.keys().filter(|key| !raw.0.contains_key(*key)).cloned())
            .collect();
        let restart: Vec<String> = changed
            .iter()
            .filter(|key| !live(key))
            .map(|key| {
                format!(
                    "{key}: needs a restart (`strait restart` hands the sockets over without dropping a connection)"
                )
            })
            .collect();
        if !restart.is_empty() {
            return Ok(Outcome::Refused(restart));
        }
        // Everything that can fail is read first; then applied.
        let proxy_cert = crate::node::proxy_certificate(&settings)?;
        let admin_cert = match &self.admin_cert {
            Some(_) => crate::node::admin_certificate(&settings)?,
            None => None,
        };
        let mut applied = Vec::new();
        if let (Some(path), Some(admin)) = (&settings.declarative_config, admin) {
            let version = load_declarative(admin, path).await?;
            applied.push(format!(
                "declarative_config: {} loaded (configuration version {version})",
                path.display()
            ));
        }
        if changed.iter().any(|key| key == "log_level") {
            (self.log_level)(&settings.log_level)?;
        }
        self.proxy_cert.store(proxy_cert);
        if let (Some(live), Some(certificate)) = (&self.admin_cert, admin_cert) {
            live.store(certificate);
        }
        self.limits.store(Arc::new(settings.proxy.limits.clone()));
        applied.extend(
            changed
                .iter()
                .filter(|key| key.as_str() != "declarative_config")
                .map(|key| format!("{key}: applied")),
        );
        applied.push("certificates: read again".to_string());
        *self.raw.lock().unwrap_or_else(|e| e.into_inner()) = raw.0;
        *self.launch.lock().unwrap_or_else(|e| e.into_inner()) = launch;
        Ok(Outcome::Applied(applied))
    }
}

async fn load_declarative(admin: &AdminState, path: &Path) -> Result<u64> {
    let bytes = std::fs::read(path).with_context(|| format!("declarative_config: reading {}", path.display()))?;
    let mut memo = admin.declarative.lock().unwrap_or_else(|e| e.into_inner()).take();
    let loaded = strait_admin::load_declarative(
        &admin.publisher,
        &admin.store,
        &mut memo,
        &bytes,
        strait_core::declarative::DeclarativeFormat::Auto,
        admin.router_flavor,
    )
    .await;
    *admin.declarative.lock().unwrap_or_else(|e| e.into_inner()) = memo;
    loaded.map_err(|e| anyhow!("declarative_config {}:\n{e}", path.display()))
}

/// Write a reload's outcome where `strait reload` waits for it.
pub fn report(prefix: &Path, token: &str, outcome: &Outcome) {
    let (verdict, lines) = match outcome {
        Outcome::Applied(lines) => ("applied", lines.clone()),
        Outcome::Refused(lines) => ("refused", lines.clone()),
        Outcome::Failed(error) => ("failed", error.lines().map(str::to_string).collect()),
    };
    let mut text = format!("{token}\n{verdict}\n");
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
    let path = crate::control::reload_result_path(prefix);
    let temporary = path.with_extension("tmp");
    if let Err(error) = std::fs::write(&temporary, text).and_then(|_| std::fs::rename(&temporary, &path)) {
        tracing::warn!(%error, path = %path.display(), "could not write the reload's outcome");
    }
}

/// The request `strait reload` left: its token and the settings file to
/// read (empty: the node's own). A bare SIGHUP leaves none.
pub fn take_request(prefix: &Path) -> (String, Option<PathBuf>) {
    let path = crate::control::reload_request_path(prefix);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    let mut lines = text.lines();
    let token = lines.next().unwrap_or("").to_string();
    let conf = lines.next().filter(|line| !line.is_empty()).map(PathBuf::from);
    (token, conf)
}
