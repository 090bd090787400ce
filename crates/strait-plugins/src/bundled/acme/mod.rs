//! `acme` (Kong priority 1705, global only): certificates from an ACME v2
//! server (Let's Encrypt, or any other) by the http-01 challenge. A TLS
//! handshake for an allowed domain without a certificate starts an order
//! in the background and is served the default certificate meanwhile; the
//! next handshakes get the issued one, by SNI, without a restart. The
//! access phase answers the challenge requests on plain HTTP; renewals run
//! daily; the Admin API's `/acme` orders, renews and lists.

mod client;
pub mod issue;
mod schema;

/// `acme` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "acme",
    priority: 1705,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(AcmePlugin::from_config(config)?)),
};

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{AccessFuture, CertificateCtx, CertificateFlow, Flow, Plugin, PluginResponse};
use crate::PluginError;

const CHALLENGE_PATH: &str = "/.well-known/acme-challenge/";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertType {
    Ecc,
    /// RSA with this many bits.
    Rsa(usize),
}

#[derive(Clone)]
pub enum Storage {
    Shm,
    Kong,
    /// The plugin's Redis and the key namespace.
    Redis(strait_runtime::redis::Redis, String),
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Storage::Shm => "shm",
            Storage::Kong => "kong",
            Storage::Redis(..) => "redis",
        })
    }
}

/// One acme instance's configuration, as the work of issuing reads it.
#[derive(Debug)]
pub struct AcmeConfig {
    pub account_email: String,
    /// The directory URL (`/directory` appended to a URL without a path).
    pub api_uri: String,
    /// `api_uri` as configured (it names the stored account, as in Kong).
    pub configured_uri: String,
    pub eab: Option<(String, String)>,
    pub cert_type: CertType,
    pub renew_threshold_days: f64,
    pub fail_backoff_minutes: f64,
    /// Exact names, and suffixes of `*.` names.
    exact: Vec<String>,
    suffixes: Vec<String>,
    prefixes: Vec<String>,
    pub allow_any_domain: bool,
    pub enable_ipv4_common_name: bool,
    pub storage: Storage,
    pub timeout: Duration,
}

impl AcmeConfig {
    /// Kong's `check_domains`: any domain, or one of `domains` (a leading
    /// `*` matches any prefix, a trailing one any suffix).
    pub fn allows(&self, host: &str) -> bool {
        self.allow_any_domain || self.lists(host)
    }

    /// Whether `domains` lists `host` (the Admin API's sanity check does
    /// not honour `allow_any_domain`, as in Kong).
    pub fn lists(&self, host: &str) -> bool {
        self.exact.iter().any(|d| d == host)
            || self.suffixes.iter().any(|s| host.ends_with(s.as_str()))
            || self.prefixes.iter().any(|p| host.starts_with(p.as_str()))
    }
}

/// Read an acme configuration (the Admin API reads the stored plugin's).
pub fn read_config(config: &Map<String, Value>) -> Result<AcmeConfig, PluginError> {
    let c = ConfigReader::new(config);
    let email = c
        .string("account_email")?
        .ok_or_else(|| PluginError::invalid("account_email", "required field missing"))?;
    let mut api_uri = c
        .string("api_uri")?
        .unwrap_or_else(|| "https://acme-v02.api.letsencrypt.org/directory".into());
    let configured_uri = api_uri.clone();
    // Kong appends `/directory` to any URL not ending so; a server whose
    // directory lives elsewhere (Pebble's `/dir`, ZeroSSL's `/v2/DV90`)
    // then fails. Here only a URL without a path gets it.
    let bare = url::Url::parse(&api_uri).is_ok_and(|u| matches!(u.path(), "" | "/"));
    if bare {
        api_uri = format!("{}/directory", api_uri.trim_end_matches('/'));
    }
    let cert_type = match c.string("cert_type")?.as_deref() {
        Some("ecc") => CertType::Ecc,
        _ => CertType::Rsa(c.number("rsa_key_size", 4096.0)? as usize),
    };
    let (mut exact, mut suffixes, mut prefixes) = (Vec::new(), Vec::new(), Vec::new());
    for domain in c.strings("domains")? {
        let domain = domain.to_ascii_lowercase();
        if let Some(suffix) = domain.strip_prefix('*') {
            suffixes.push(suffix.to_string());
        } else if let Some(prefix) = domain.strip_suffix('*') {
            prefixes.push(prefix.to_string());
        } else {
            exact.push(domain);
        }
    }
    let storage = match c.string("storage")?.as_deref().unwrap_or("shm") {
        "kong" => Storage::Kong,
        "redis" => {
            let redis = c.record("storage_config")?.record("redis")?;
            let host = redis
                .string("host")?
                .ok_or_else(|| PluginError::invalid("storage_config.redis.host", "required field missing"))?;
            let namespace = redis.record("extra_options")?.string("namespace")?.unwrap_or_default();
            let config = strait_runtime::redis::RedisConfig {
                host,
                port: redis.integer("port", 6379)? as u16,
                username: redis.string("username")?,
                password: redis.string("password")?,
                database: redis.integer("database", 0)?,
                ssl: redis.bool("ssl", false)?,
                ssl_verify: redis.bool("ssl_verify", false)?,
                server_name: redis.string("server_name")?,
                timeout: Duration::from_millis(redis.integer("timeout", 2000)?.max(1) as u64),
            };
            Storage::Redis(strait_runtime::redis::Redis::new(config), namespace)
        }
        "shm" => Storage::Shm,
        other => {
            return Err(PluginError::invalid(
                "storage",
                format!("storage '{other}' is not implemented by this version of Strait"),
            ))
        }
    };
    let eab = match (c.string("eab_kid")?, c.string("eab_hmac_key")?) {
        (Some(kid), Some(key)) if !kid.is_empty() && !key.is_empty() => Some((kid, key)),
        _ => None,
    };
    Ok(AcmeConfig {
        account_email: email,
        api_uri,
        configured_uri,
        eab,
        cert_type,
        renew_threshold_days: c.number("renew_threshold_days", 14.0)?,
        fail_backoff_minutes: c.number("fail_backoff_minutes", 5.0)?,
        exact,
        suffixes,
        prefixes,
        allow_any_domain: c.bool("allow_any_domain", false)?,
        enable_ipv4_common_name: c.bool("enable_ipv4_common_name", true)?,
        storage,
        timeout: Duration::from_secs(30),
    })
}

#[derive(Debug)]
pub struct AcmePlugin {
    config: Arc<AcmeConfig>,
}

impl AcmePlugin {
    pub fn from_config(config: &Map<String, Value>) -> Result<AcmePlugin, PluginError> {
        let config = Arc::new(read_config(config)?);
        issue::configure(&config);
        Ok(AcmePlugin { config })
    }

    async fn serve_challenge(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        if ctx.protocol != crate::Protocol::Http {
            return Flow::Continue;
        }
        let host = ctx.host.split(':').next().unwrap_or_default().to_ascii_lowercase();
        if !self.config.allows(&host) {
            return Flow::Continue;
        }
        let Some(token) = ctx.path().strip_prefix(CHALLENGE_PATH).filter(|t| !t.is_empty()) else {
            return Flow::Continue;
        };
        if token == "x" {
            return Flow::Respond(text(404, "Not found\n"));
        }
        match issue::challenge(&self.config, token).await {
            Ok(Some(authorization)) => Flow::Respond(text(200, &format!("{authorization}\n"))),
            Ok(None) => Flow::Respond(PluginResponse::message(404, "Not found")),
            Err(error) => {
                tracing::error!(%error, "acme: cannot read the challenge");
                Flow::Respond(PluginResponse::message(500, "An unexpected error occurred"))
            }
        }
    }
}

fn text(status: u16, body: &str) -> PluginResponse {
    PluginResponse {
        status,
        headers: vec![("content-type".into(), "text/plain".into())],
        body: bytes::Bytes::from(body.to_string()),
    }
}

impl Plugin for AcmePlugin {
    fn name(&self) -> &'static str {
        "acme"
    }

    fn priority(&self) -> i32 {
        1705
    }

    fn handles_certificate(&self) -> bool {
        true
    }

    fn certificate(&self, ctx: &CertificateCtx<'_>) -> CertificateFlow {
        let Some(name) = ctx.server_name else {
            return CertificateFlow::Continue;
        };
        let host = name.to_ascii_lowercase();
        if !self.config.enable_ipv4_common_name && host.parse::<std::net::Ipv4Addr>().is_ok() {
            return CertificateFlow::Continue;
        }
        if !self.config.allows(&host) || ctx.has_sni_certificate {
            return CertificateFlow::Continue;
        }
        match issue::ready(&host) {
            Some(key) => CertificateFlow::UseKey(key),
            None => {
                issue::ensure_in_background(self.config.clone(), host);
                CertificateFlow::Continue
            }
        }
    }

    fn waits(&self) -> bool {
        true
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(self.serve_challenge(ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(extra: Value) -> AcmeConfig {
        let mut config = json!({ "account_email": "ops@example.com" });
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        read_config(config.as_object().expect("object")).expect("valid")
    }

    #[test]
    fn domains_match_exactly_or_by_wildcard() {
        let c = config(json!({ "domains": ["example.com", "*.apps.example.com", "edge.*"] }));
        assert!(c.allows("example.com"));
        assert!(c.allows("a.apps.example.com"));
        assert!(c.allows("edge.example.org"));
        assert!(!c.allows("www.example.com"));
        assert!(config(json!({ "allow_any_domain": true })).allows("anything.test"));
        assert!(!config(json!({ "allow_any_domain": true })).lists("anything.test"));
    }

    #[test]
    fn the_directory_path_is_appended_when_missing() {
        assert_eq!(
            config(json!({ "api_uri": "https://acme.test:14000" })).api_uri,
            "https://acme.test:14000/directory"
        );
        assert_eq!(
            config(json!({ "api_uri": "https://acme.test/directory" })).api_uri,
            "https://acme.test/directory"
        );
        assert_eq!(config(json!({ "api_uri": "https://pebble.test:14000/dir" })).api_uri, "https://pebble.test:14000/dir");
        assert_eq!(config(json!({})).cert_type, CertType::Rsa(4096));
        assert_eq!(config(json!({ "cert_type": "ecc" })).cert_type, CertType::Ecc);
    }
}
