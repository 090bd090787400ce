//! TLS on the proxy's and the Admin API's listeners: the certificate for
//! each handshake chosen from the live snapshot, and client certificates.
//! The material itself is compiled into the snapshot (`strait_snapshot::tls`).

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use strait_runtime::tls::provider;
use strait_snapshot::tls::parse_certs;
use strait_snapshot::Snapshot;

use crate::wire::ocsp::Stapler;
use crate::wire::tls_policy::TlsPolicy;

/// A certificate `strait reload` can replace (`ssl_cert`,
/// `admin_ssl_cert`): new handshakes take the new one.
pub type LiveCert = Arc<ArcSwap<CertifiedKey>>;

/// Chooses the certificate for each handshake from the live snapshot.
#[derive(Debug)]
pub struct SnapshotCertResolver {
    snapshot: Arc<ArcSwap<Snapshot>>,
    default: LiveCert,
    /// OCSP answers to staple (`ssl_stapling`).
    stapler: Option<Arc<Stapler>>,
}

impl ResolvesServerCert for SnapshotCertResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let chosen = self
            .snapshot
            .load()
            .choose_certificate(hello.server_name(), &self.default.load_full())?;
        Some(match &self.stapler {
            Some(stapler) => stapler.staple(chosen),
            None => chosen,
        })
    }
}

/// `ssl_verify_client` on the proxy's `ssl` listeners, with the CA bundle
/// (PEM, `ssl_client_ca`) a client certificate must chain to.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ClientVerify {
    /// No certificate asked for.
    #[default]
    Off,
    /// Asked for; a client without one is served (an auth plugin decides),
    /// one with a certificate that does not verify is refused.
    Optional(String),
    /// Required of every client.
    On(String),
}

/// The server TLS configuration for `ssl` proxy listeners, under `policy`:
/// certificates by SNI from the snapshot, ALPN h2 then http/1.1, and client
/// certificates as `client_verify` says; OCSP answers from `stapler`.
pub fn server_config(
    snapshot: Arc<ArcSwap<Snapshot>>,
    default: LiveCert,
    policy: &TlsPolicy,
    client_verify: &ClientVerify,
    stapler: Option<Arc<Stapler>>,
) -> Result<Arc<ServerConfig>, String> {
    let builder = policy.builder()?;
    let builder = match client_verify {
        ClientVerify::Off => builder.with_no_client_auth(),
        ClientVerify::Optional(pem) => builder.with_client_cert_verifier(client_verifier(pem, "ssl_client_ca", true)?),
        ClientVerify::On(pem) => builder.with_client_cert_verifier(client_verifier(pem, "ssl_client_ca", false)?),
    };
    let mut config = builder.with_cert_resolver(Arc::new(SnapshotCertResolver {
        snapshot,
        default,
        stapler,
    }));
    policy.finish(&mut config)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The Admin API's certificate, whatever the client asks for.
#[derive(Debug)]
struct FixedCert(LiveCert);

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// A verifier of client certificates chaining to the CA bundle `pem` (the
/// setting `setting`, named in errors); with `optional`, clients without a
/// certificate pass the handshake.
fn client_verifier(
    pem: &str,
    setting: &str,
    optional: bool,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let mut roots = RootCertStore::empty();
    for cert in parse_certs(pem).map_err(|e| format!("{setting}: {e}"))? {
        roots.add(cert).map_err(|e| format!("{setting}: {e}"))?;
    }
    let builder = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    let builder = if optional {
        builder.allow_unauthenticated()
    } else {
        builder
    };
    builder.build().map_err(|e| format!("{setting}: {e}"))
}

/// The server TLS configuration for `ssl` Admin API listeners: `certificate`,
/// HTTP/1.1, and with `client_ca` (PEM) a client certificate signed by it
/// required of every client.
pub fn admin_server_config(
    certificate: LiveCert,
    client_ca: Option<&str>,
    policy: &TlsPolicy,
) -> Result<Arc<ServerConfig>, String> {
    let builder = policy.builder()?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(pem) => builder.with_client_cert_verifier(client_verifier(pem, "admin_ssl_client_ca", false)?),
    };
    let mut config = builder.with_cert_resolver(Arc::new(FixedCert(certificate)));
    policy.finish(&mut config)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
