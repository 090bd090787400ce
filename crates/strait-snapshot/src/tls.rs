//! TLS material compiled into a snapshot: the certificate index by SNI, the
//! node's default self-signed certificate, and upstream client
//! configurations (verification through `strait_runtime::tls::verify`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore};
use strait_core::{Service, TlsSans};
use uuid::Uuid;

use crate::snapshot::{CompileProblem, EntityState};

pub use strait_runtime::tls::provider;
use strait_runtime::tls::verify;

/// The certificates of a PEM chain.
pub fn parse_certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("invalid certificate PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no certificate found in PEM".to_string());
    }
    Ok(certs)
}

fn parse_key(pem: &str) -> Result<PrivateKeyDer<'static>, String> {
    rustls_pemfile::private_key(&mut pem.as_bytes())
        .map_err(|e| format!("invalid key PEM: {e}"))?
        .ok_or_else(|| "no private key found in PEM".to_string())
}

/// Pair a PEM chain and key into a key usable for handshakes.
pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>, String> {
    let certs = parse_certs(cert_pem)?;
    let key = parse_key(key_pem)?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("unsupported private key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(certs, signing)))
}

/// A certificate with its vault references resolved (borrowed when it has none).
fn resolved_certificate<'a>(
    cert: &'a strait_core::Certificate,
    state: &EntityState,
) -> Result<std::borrow::Cow<'a, strait_core::Certificate>, String> {
    if !crate::secrets::certificate_has_reference(cert) {
        return Ok(std::borrow::Cow::Borrowed(cert));
    }
    match crate::secrets::resolved(&strait_core::Entity::Certificate(cert.clone()), &state.vaults)? {
        Some(strait_core::Entity::Certificate(resolved)) => Ok(std::borrow::Cow::Owned(resolved)),
        _ => Ok(std::borrow::Cow::Borrowed(cert)),
    }
}

/// Certificates by server name, from the `certificates` and `snis` entities.
#[derive(Debug, Default)]
pub struct CertificateIndex {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// `*.example.com` stored as `.example.com`.
    wildcard_suffix: Vec<(String, Arc<CertifiedKey>)>,
    by_id: HashMap<Uuid, Arc<CertifiedKey>>,
}

impl CertificateIndex {
    pub(crate) fn build_from(state: &EntityState, problems: &mut Vec<CompileProblem>) -> CertificateIndex {
        let mut index = CertificateIndex::default();
        for cert in state.certificates.values() {
            let resolved = match resolved_certificate(cert, state) {
                Ok(resolved) => resolved,
                Err(message) => {
                    problems.push(CompileProblem {
                        entity: format!("certificates[{}]", cert.id),
                        message,
                    });
                    continue;
                }
            };
            let cert = resolved.as_ref();
            match certified_key(&cert.cert, &cert.key) {
                Ok(key) => {
                    index.by_id.insert(cert.id, key);
                }
                Err(message) => problems.push(CompileProblem {
                    entity: format!("certificates[{}]", cert.id),
                    message,
                }),
            }
        }
        for sni in state.snis.values() {
            let Some(key) = index.by_id.get(&sni.certificate.id).cloned() else {
                continue;
            };
            let name = sni.name.to_ascii_lowercase();
            match name.strip_prefix('*') {
                Some(suffix) => index.wildcard_suffix.push((suffix.to_string(), key)),
                None => {
                    index.exact.insert(name, key);
                }
            }
        }
        index
            .wildcard_suffix
            .sort_by_key(|(suffix, _)| std::cmp::Reverse(suffix.len()));
        index
    }

    pub fn resolve(&self, server_name: &str) -> Option<Arc<CertifiedKey>> {
        let name = server_name.to_ascii_lowercase();
        if let Some(key) = self.exact.get(&name) {
            return Some(key.clone());
        }
        self.wildcard_suffix
            .iter()
            .find(|(suffix, _)| name.ends_with(suffix.as_str()) && name.len() > suffix.len())
            .map(|(_, key)| key.clone())
    }

    /// Every certificate entity's key, once each.
    pub fn all(&self) -> impl Iterator<Item = &Arc<CertifiedKey>> {
        self.by_id.values()
    }

    pub fn by_id(&self, id: Uuid) -> Option<Arc<CertifiedKey>> {
        self.by_id.get(&id).cloned()
    }
}

/// Load the node's default certificate from `prefix/ssl`, generating a
/// self-signed one for `localhost` on first start (as Kong does).
pub fn load_or_create_default_certificate(prefix: &Path) -> Result<Arc<CertifiedKey>, String> {
    let dir = prefix.join("ssl");
    let cert_path = dir.join("strait-default.crt");
    let key_path = dir.join("strait-default.key");
    if !cert_path.exists() || !key_path.exists() {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .map_err(|e| format!("generating default certificate: {e}"))?;
        std::fs::write(&key_path, generated.key_pair.serialize_pem())
            .map_err(|e| format!("{}: {e}", key_path.display()))?;
        std::fs::write(&cert_path, generated.cert.pem()).map_err(|e| format!("{}: {e}", cert_path.display()))?;
    }
    let cert = std::fs::read_to_string(&cert_path).map_err(|e| format!("{}: {e}", cert_path.display()))?;
    let key = std::fs::read_to_string(&key_path).map_err(|e| format!("{}: {e}", key_path.display()))?;
    certified_key(&cert, &key)
}

/// Client TLS configurations for one service: HTTP/1.1 and HTTP/2 ALPN.
#[derive(Debug)]
pub struct UpstreamTls {
    pub http1: Arc<ClientConfig>,
    pub http2: Arc<ClientConfig>,
}

/// Shares client configurations between services with the same TLS settings.
#[derive(Default)]
pub struct UpstreamTlsCache {
    built: HashMap<TlsKey, Arc<UpstreamTls>>,
}

impl UpstreamTlsCache {
    /// The configurations for `service`; `upstream_client_cert` is the
    /// `client_certificate` of the upstream its host names, used when the
    /// service has none (Kong's order).
    pub(crate) fn get(
        &mut self,
        service: &Service,
        upstream_client_cert: Option<Uuid>,
        state: &EntityState,
    ) -> Result<Arc<UpstreamTls>, String> {
        let verify = service.tls_verify.unwrap_or(false);
        let cas = service.ca_certificates.clone().unwrap_or_default();
        let client_cert = service.client_certificate.map(|c| c.id).or(upstream_client_cert);
        let sans = service.tls_sans.clone().filter(|_| verify);
        let depth = service.tls_verify_depth.filter(|_| verify).map(|d| d.max(0) as usize);
        let key = (verify, cas.clone(), client_cert, sans.clone(), depth);
        if let Some(existing) = self.built.get(&key) {
            return Ok(existing.clone());
        }
        let base = client_config(verify, &cas, client_cert, sans.as_ref(), depth, state)?;
        let mut http1 = base.clone();
        http1.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut http2 = base;
        http2.alpn_protocols = vec![b"h2".to_vec()];
        let built = Arc::new(UpstreamTls {
            http1: Arc::new(http1),
            http2: Arc::new(http2),
        });
        self.built.insert(key, built.clone());
        Ok(built)
    }
}

/// The client configurations for a target a plugin chose
/// ([`strait_plugins::UpstreamTarget`]) behind a service that is not
/// `https`: verified against the system's roots when `verify` (the
/// service's `tls_verify`), else not (Kong's default), made once.
pub fn plugin_target_tls(verify: bool) -> Arc<UpstreamTls> {
    static BUILT: [std::sync::OnceLock<Arc<UpstreamTls>>; 2] = [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    BUILT[verify as usize]
        .get_or_init(|| {
            let state = EntityState::default();
            let base = client_config(verify, &[], None, None, None, &state)
                .expect("a client configuration without certificates always builds");
            let mut http1 = base.clone();
            http1.alpn_protocols = vec![b"http/1.1".to_vec()];
            let mut http2 = base;
            http2.alpn_protocols = vec![b"h2".to_vec()];
            Arc::new(UpstreamTls {
                http1: Arc::new(http1),
                http2: Arc::new(http2),
            })
        })
        .clone()
}

fn client_config(
    verify: bool,
    cas: &[Uuid],
    client_cert: Option<Uuid>,
    sans: Option<&TlsSans>,
    depth: Option<usize>,
    state: &EntityState,
) -> Result<ClientConfig, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if verify {
        let mut roots = RootCertStore::empty();
        let mut anchors: Vec<CertificateDer<'static>> = Vec::new();
        if cas.is_empty() {
            anchors.extend(strait_runtime::tls::native_roots().iter().cloned());
            roots.add_parsable_certificates(anchors.iter().cloned());
        }
        for id in cas {
            let ca = state
                .ca_certificate(*id)
                .ok_or_else(|| format!("ca_certificates: {id} not found"))?;
            for cert in parse_certs(&ca.cert)? {
                anchors.push(cert.clone());
                roots.add(cert).map_err(|e| format!("ca_certificates: {id}: {e}"))?;
            }
        }
        let verifier: Arc<dyn ServerCertVerifier> = match sans {
            None => verify::chain_to(roots).map_err(|e| format!("ca_certificates: {e}"))?,
            Some(sans) => Arc::new(
                verify::SubjectAltNames::new(
                    roots,
                    sans.dnsnames.as_deref().unwrap_or_default(),
                    sans.uris.as_deref().unwrap_or_default(),
                )
                .map_err(|e| format!("tls_sans: {e}"))?,
            ),
        };
        let verifier = match depth {
            None => verifier,
            Some(depth) => Arc::new(verify::DepthLimit::new(verifier, depth, &anchors)),
        };
        builder.dangerous().with_custom_certificate_verifier(verifier)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verify::AcceptAny))
    };
    match client_cert {
        None => Ok(builder.with_no_client_auth()),
        Some(id) => {
            let cert = state
                .certificate(id)
                .ok_or_else(|| format!("client_certificate: {id} not found"))?;
            let cert = resolved_certificate(cert, state).map_err(|e| format!("client_certificate: {e}"))?;
            builder
                .with_client_auth_cert(parse_certs(&cert.cert)?, parse_key(&cert.key)?)
                .map_err(|e| format!("client_certificate: {e}"))
        }
    }
}

/// What an upstream TLS config is built from: `tls_verify`, the CA
/// certificates, the client certificate, `tls_sans`.
type TlsKey = (bool, Vec<Uuid>, Option<Uuid>, Option<TlsSans>, Option<usize>);
