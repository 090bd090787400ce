//! Mutual TLS between control and data planes, TLS 1.3 only, in Kong's two
//! modes (`cluster_mtls`):
//! - `shared`: every node holds the same certificate and key
//!   (`cluster_cert`, `cluster_cert_key`); each side accepts exactly that
//!   certificate from the other, and nothing else.
//! - `pki`: each node has its own certificate issued by `cluster_ca_cert`;
//!   the control plane accepts any client certificate that chains to it, a
//!   data plane checks the control plane's chain and its name
//!   (`cluster_server_name`).

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::danger::ClientCertVerifier;
use strait_runtime::tls::provider;
use strait_runtime::tls::verify::SameCertificate;

/// The name a data plane sends (and, in `pki` mode, checks) when
/// `cluster_server_name` is not set: Kong's.
pub const DEFAULT_SERVER_NAME: &str = "kong_clustering";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mtls {
    Shared,
    /// `ca_pem`: the CA bundle every node's certificate chains to.
    Pki {
        ca_pem: String,
    },
}

/// A node's cluster certificate, key and trust.
#[derive(Clone)]
pub struct ClusterTls {
    chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
    mode: Mtls,
    server_name: String,
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterTls({:?}, {})", self.mode, self.server_name)
    }
}

fn certs(pem: &str, setting: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{setting}: invalid PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{setting}: no certificate found"));
    }
    Ok(certs)
}

impl ClusterTls {
    /// From PEM texts; every error names its setting.
    pub fn new(cert_pem: &str, key_pem: &str, mode: Mtls, server_name: Option<&str>) -> Result<ClusterTls, String> {
        let chain = certs(cert_pem, "cluster_cert")?;
        let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
            .map_err(|e| format!("cluster_cert_key: invalid PEM: {e}"))?
            .ok_or_else(|| "cluster_cert_key: no private key found".to_string())?;
        provider()
            .key_provider
            .load_private_key(key.clone_key())
            .map_err(|e| format!("cluster_cert_key: unsupported key: {e}"))?;
        if let Mtls::Pki { ca_pem } = &mode {
            certs(ca_pem, "cluster_ca_cert")?;
        }
        let server_name = server_name.unwrap_or(DEFAULT_SERVER_NAME).to_string();
        ServerName::try_from(server_name.clone()).map_err(|e| format!("cluster_server_name: {e}"))?;
        Ok(ClusterTls {
            chain,
            key: Arc::new(key),
            mode,
            server_name,
        })
    }

    fn roots(&self) -> Result<rustls::RootCertStore, String> {
        let mut roots = rustls::RootCertStore::empty();
        if let Mtls::Pki { ca_pem } = &self.mode {
            for cert in certs(ca_pem, "cluster_ca_cert")? {
                roots.add(cert).map_err(|e| format!("cluster_ca_cert: {e}"))?;
            }
        }
        Ok(roots)
    }

    /// The control plane's listener configuration: a client certificate is
    /// required.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let verifier: Arc<dyn ClientCertVerifier> = match &self.mode {
            Mtls::Shared => Arc::new(SameCertificate(self.chain[0].clone())),
            Mtls::Pki { .. } => {
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(self.roots()?), provider())
                    .build()
                    .map_err(|e| format!("cluster_ca_cert: {e}"))?
            }
        };
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| format!("cluster_cert: {e}"))?;
        Ok(Arc::new(config))
    }

    /// A data plane's configuration: its certificate, and the control
    /// plane's checked as the mode says.
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?;
        let builder = match &self.mode {
            Mtls::Shared => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(SameCertificate(self.chain[0].clone()))),
            Mtls::Pki { .. } => builder.with_root_certificates(self.roots()?),
        };
        let config = builder
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| format!("cluster_cert: {e}"))?;
        Ok(Arc::new(config))
    }

    /// The name a data plane sends as SNI (and checks in `pki` mode).
    pub fn server_name(&self) -> ServerName<'static> {
        ServerName::try_from(self.server_name.clone())
            .unwrap_or_else(|_| ServerName::try_from(DEFAULT_SERVER_NAME).expect("a valid DNS name"))
    }
}
