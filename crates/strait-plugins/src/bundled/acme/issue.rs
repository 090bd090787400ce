//! Where acme keeps what it issues, and the work of issuing: storage keys
//! (Kong's names), the account, one order at a time per host, the node's
//! cache of certificates ready for handshakes, renewals, and what the Admin
//! API's `/acme` endpoints call.
//!
//! Storage (`config.storage`): `shm` is node-local memory, `kong` the
//! node's runtime store (`strait_runtime::kv`, table `acme`: LMDB,
//! PostgreSQL or Redis as `oauth2_token_store` says), `redis` the plugin's
//! own Redis (`storage_config.redis`, keys under its `namespace`). Keys:
//! `kong_acme:cert_key:<host>` (`{key, cert}` PEM), `kong_acme:account:
//! <api_uri>:<base64 email>` (`{key}`), `<token>#http-01` (the key
//! authorization, an hour), `kong_acme:renew_config:<host>` (`{host,
//! expire_at}`), `kong_acme:fail_backoff:<host>` (`fail_backoff_minutes`),
//! `kong_acme:renew_last_run`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use strait_runtime::kv::{self, KvStore, Table};

use super::client::{Acme, AccountKey};
use super::AcmeConfig;

const CERT_KEY: &str = "kong_acme:cert_key:";
const RENEW_CONFIG: &str = "kong_acme:renew_config:";
const RENEW_LAST_RUN: &str = "kong_acme:renew_last_run";
const BACKOFF: &str = "kong_acme:fail_backoff:";
/// How long a challenge answer is kept (Kong's hour).
const CHALLENGE_TTL: i64 = 3600;
/// Kong's renew config records 90 days from the order.
const RENEW_AFTER: i64 = 90 * 86_400;
/// Renewals run once a day on every node (Kong's timer).
pub const RENEW_EVERY: Duration = Duration::from_secs(86_400);

/// The node's acme state, across configuration changes.
#[derive(Default)]
struct State {
    /// Issued certificates ready for handshakes, by host.
    ready: Mutex<HashMap<String, Arc<rustls::sign::CertifiedKey>>>,
    /// Hosts being loaded or ordered on this node.
    busy: Mutex<HashSet<String>>,
    /// The first acme instance's configuration (Kong's `configure`), for
    /// renewals and the Admin API.
    config: Mutex<Option<Arc<AcmeConfig>>>,
}

fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(State::default)
}

/// The runtime acme's work runs on: one thread of its own, never a proxy
/// worker's.
pub fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("strait-acme")
                .enable_all()
                .build();
            match runtime {
                Ok(runtime) => {
                    runtime.spawn(renew_loop());
                    Some(runtime)
                }
                Err(error) => {
                    tracing::error!(%error, "acme: cannot start its runtime");
                    None
                }
            }
        })
        .as_ref()
}

/// Record `config` as the node's (the newest configuration's first acme).
pub fn configure(config: &Arc<AcmeConfig>) {
    *state().config.lock().unwrap_or_else(|p| p.into_inner()) = Some(config.clone());
}

pub fn configured() -> Option<Arc<AcmeConfig>> {
    state().config.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The storage a configuration names.
pub fn storage(config: &AcmeConfig) -> Result<Arc<dyn KvStore>, String> {
    static SHM: OnceLock<Arc<kv::memory::MemoryKv>> = OnceLock::new();
    match &config.storage {
        super::Storage::Shm => Ok(SHM.get_or_init(Default::default).clone()),
        super::Storage::Kong => kv::installed()
            .cloned()
            .ok_or_else(|| "this node has no runtime store".to_string()),
        super::Storage::Redis(redis, _) => Ok(Arc::new(kv::redis::RedisKv::new(redis.clone()))),
    }
}

fn key(config: &AcmeConfig, name: &str) -> String {
    match &config.storage {
        super::Storage::Redis(_, namespace) => format!("{namespace}{name}"),
        _ => name.to_string(),
    }
}

async fn get(config: &AcmeConfig, name: &str) -> Result<Option<Vec<u8>>, String> {
    storage(config)?
        .get(Table::Acme, &key(config, name))
        .await
        .map_err(|e| e.to_string())
}

async fn put(config: &AcmeConfig, name: &str, value: Vec<u8>, ttl: Option<i64>) -> Result<(), String> {
    storage(config)?
        .put(Table::Acme, &key(config, name), value, ttl)
        .await
        .map_err(|e| e.to_string())
}

/// A stored `{key, cert}`.
#[derive(Debug, Clone)]
pub struct CertKey {
    pub key: String,
    pub cert: String,
}

pub async fn load_certkey(config: &AcmeConfig, host: &str) -> Result<Option<CertKey>, String> {
    let Some(bytes) = get(config, &format!("{CERT_KEY}{host}")).await? else {
        return Ok(None);
    };
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| format!("a stored certificate does not decode: {e}"))?;
    Ok(Some(CertKey {
        key: doc["key"].as_str().unwrap_or_default().to_string(),
        cert: doc["cert"].as_str().unwrap_or_default().to_string(),
    }))
}

/// The hosts with a renew config (Kong's `load_renew_hosts`).
pub async fn renew_hosts(config: &AcmeConfig) -> Result<Vec<String>, String> {
    let store = storage(config)?;
    let prefix = key(config, RENEW_CONFIG);
    let mut hosts = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(Table::Acme, &prefix, cursor.as_deref(), 100)
            .await
            .map_err(|e| e.to_string())?;
        hosts.extend(page.entries.iter().map(|(k, _)| k[prefix.len()..].to_string()));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    hosts.sort();
    Ok(hosts)
}

/// The certificate ready for `host` on this node, if any.
pub fn ready(host: &str) -> Option<Arc<rustls::sign::CertifiedKey>> {
    state().ready.lock().unwrap_or_else(|p| p.into_inner()).get(host).cloned()
}

fn make_ready(host: &str, certkey: &CertKey) -> Result<(), String> {
    let certified = certified_key(&certkey.cert, &certkey.key)?;
    state()
        .ready
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(host.to_string(), certified);
    Ok(())
}

fn certified_key(cert_pem: &str, key_pem: &str) -> Result<Arc<rustls::sign::CertifiedKey>, String> {
    let certs: Vec<_> = rustls_pemfile::certs(&mut cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("invalid certificate PEM: {e}"))?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
        .map_err(|e| format!("invalid key PEM: {e}"))?
        .ok_or("no private key in PEM")?;
    let signing = strait_runtime::tls::provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("unsupported private key: {e}"))?;
    Ok(Arc::new(rustls::sign::CertifiedKey::new(certs, signing)))
}

/// Kong's certificate phase on a miss: load the stored certificate, or
/// order one, in the background (the handshake goes on with the default
/// certificate meanwhile).
pub fn ensure_in_background(config: Arc<AcmeConfig>, host: String) {
    if !state().busy.lock().unwrap_or_else(|p| p.into_inner()).insert(host.clone()) {
        return;
    }
    let Some(runtime) = runtime() else { return };
    runtime.spawn(async move {
        match load_certkey(&config, &host).await {
            Ok(Some(certkey)) => {
                if let Err(error) = make_ready(&host, &certkey) {
                    tracing::warn!(%host, %error, "acme: the stored certificate cannot be used");
                }
            }
            Ok(None) => match update_certificate(&config, &host).await {
                Ok(()) => {
                    if let Err(error) = store_renew_config(&config, &host).await {
                        tracing::error!(%host, %error, "acme: failed to store renew config");
                    }
                }
                Err(error) => tracing::error!(%host, %error, "acme: failed to update certificate"),
            },
            Err(error) => tracing::warn!(%host, %error, "acme: can't load cert and key from storage"),
        }
        state().busy.lock().unwrap_or_else(|p| p.into_inner()).remove(&host);
    });
}

async fn account_key(config: &AcmeConfig) -> Result<AccountKey, String> {
    let email = base64::engine::general_purpose::STANDARD.encode(&config.account_email);
    let name = format!("kong_acme:account:{}:{email}", config.configured_uri);
    if let Some(bytes) = get(config, &name).await? {
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| format!("a stored account does not decode: {e}"))?;
        return AccountKey::from_pem(doc["key"].as_str().unwrap_or_default());
    }
    let key = AccountKey::generate()?;
    put(config, &name, json!({ "key": key.to_pem() }).to_string().into_bytes(), None).await?;
    Ok(key)
}

/// A new private key (PEM) and the CSR (DER) for `host`.
fn key_and_csr(config: &AcmeConfig, host: &str) -> Result<(String, Vec<u8>), String> {
    let pair = match config.cert_type {
        super::CertType::Ecc => {
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())?
        }
        super::CertType::Rsa(bits) => {
            use rsa::pkcs8::EncodePrivateKey as _;
            let key = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, bits).map_err(|e| e.to_string())?;
            let der = key.to_pkcs8_der().map_err(|e| e.to_string())?;
            let der = rustls::pki_types::PrivatePkcs8KeyDer::from(der.as_bytes().to_vec());
            rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_RSA_SHA256).map_err(|e| e.to_string())?
        }
    };
    let mut params = rcgen::CertificateParams::new(vec![host.to_string()]).map_err(|e| e.to_string())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, host);
    let csr = params.serialize_request(&pair).map_err(|e| e.to_string())?;
    Ok((pair.serialize_pem(), csr.der().to_vec()))
}

/// Kong's `update_certificate`: order a certificate for `host` and store
/// it; a failure starts the host's backoff.
pub async fn update_certificate(config: &AcmeConfig, host: &str) -> Result<(), String> {
    let backoff = format!("{BACKOFF}{host}");
    if get(config, &backoff).await?.is_some() {
        return Err(format!(
            "please try again in {} minutes for host {host} because of previous failure in creating certificate",
            config.fail_backoff_minutes
        ));
    }
    let result = order(config, host).await;
    if result.is_err() && config.fail_backoff_minutes > 0.0 {
        let ttl = (config.fail_backoff_minutes * 60.0) as i64;
        put(config, &backoff, b"true".to_vec(), Some(ttl.max(1))).await?;
    }
    result
}

async fn order(config: &AcmeConfig, host: &str) -> Result<(), String> {
    let key = account_key(config).await?;
    let mut acme = Acme::connect(&config.api_uri, key, config.timeout).await?;
    let eab = config.eab.as_ref().map(|(kid, hmac)| (kid.as_str(), hmac.as_str()));
    acme.account(&config.account_email, eab).await?;
    let (key_pem, csr) = key_and_csr(config, host)?;
    let chain = acme
        .order(host, &csr, |token, authorization| async move {
            put(
                config,
                &format!("{token}#http-01"),
                authorization.into_bytes(),
                Some(CHALLENGE_TTL),
            )
            .await
        })
        .await?;
    let certkey = CertKey {
        key: key_pem,
        cert: chain,
    };
    let doc = json!({ "key": certkey.key, "cert": certkey.cert }).to_string();
    put(config, &format!("{CERT_KEY}{host}"), doc.into_bytes(), None).await?;
    make_ready(host, &certkey)?;
    tracing::info!(%host, "acme: certificate issued");
    Ok(())
}

pub async fn store_renew_config(config: &AcmeConfig, host: &str) -> Result<(), String> {
    let doc = json!({ "host": host, "expire_at": kv::now() + RENEW_AFTER });
    put(config, &format!("{RENEW_CONFIG}{host}"), doc.to_string().into_bytes(), None).await
}

/// The key authorization stored for a challenge token.
pub async fn challenge(config: &AcmeConfig, token: &str) -> Result<Option<String>, String> {
    Ok(get(config, &format!("{token}#http-01"))
        .await?
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
}

/// Kong's `renew_certificate`: every renew-config host whose certificate
/// expires within `renew_threshold_days` is ordered again.
pub async fn renew(config: &AcmeConfig) {
    let _ = put(config, RENEW_LAST_RUN, kv::now().to_string().into_bytes(), None).await;
    let hosts = match renew_hosts(config).await {
        Ok(hosts) => hosts,
        Err(error) => {
            tracing::error!(%error, "acme: cannot list the hosts to renew");
            return;
        }
    };
    let threshold = (config.renew_threshold_days * 86_400.0) as i64;
    for host in hosts {
        let expires = match load_certkey(config, &host).await {
            Ok(Some(certkey)) => not_after(&certkey.cert),
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(%host, %error, "acme: cannot load the certificate to renew");
                continue;
            }
        };
        if expires.is_some_and(|at| at - kv::now() > threshold) {
            continue;
        }
        tracing::info!(%host, "acme: renewing certificate");
        match update_certificate(config, &host).await {
            Ok(()) => {
                let _ = store_renew_config(config, &host).await;
            }
            Err(error) => tracing::error!(%host, %error, "acme: renewal failed"),
        }
    }
}

fn not_after(cert_pem: &str) -> Option<i64> {
    let der = crate::auth::x509::first_pem_der(cert_pem)?;
    crate::auth::x509::summary(&der).map(|s| s.not_after)
}

/// Start a renewal now (`PATCH /acme`).
pub fn renew_in_background() {
    let (Some(runtime), Some(config)) = (runtime(), configured()) else { return };
    runtime.spawn(async move { renew(&config).await });
}

async fn renew_loop() {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        if let Some(config) = configured() {
            renew(&config).await;
        }
    }
}
