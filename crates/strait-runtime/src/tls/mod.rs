//! TLS pieces shared by every connection Strait makes or accepts: one
//! crypto provider, the system's roots, the certificate verifiers
//! ([`verify`]) and outbound client connections (Redis, log servers).

pub mod verify;

use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName};

/// The one crypto provider (ring) every TLS config uses.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// The system's trusted roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` when set),
/// loaded once.
pub fn native_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// A connected byte stream, plain or TLS.
pub trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

/// TLS for an outbound connection.
#[derive(Debug, Clone, Copy)]
pub struct ClientTls<'a> {
    /// Sent as SNI and, when verifying, checked against the certificate.
    pub server_name: &'a str,
    /// Check the chain against the system's roots (`SSL_CERT_FILE`).
    pub verify: bool,
}

/// Connects to `host:port` (no delay), with TLS when asked.
pub async fn connect(host: &str, port: u16, tls: Option<ClientTls<'_>>) -> Result<Box<dyn Stream>, String> {
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    let name = tls.server_name;
    let server_name = ServerName::try_from(name.to_string()).map_err(|e| format!("server name '{name}': {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(client_config(tls.verify)?);
    let stream = connector
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    Ok(Box::new(stream))
}

/// The client config for outbound TLS, verifying or not; built once each.
pub fn client_config(verify: bool) -> Result<Arc<rustls::ClientConfig>, String> {
    type Built = Result<Arc<rustls::ClientConfig>, String>;
    static VERIFIED: OnceLock<Built> = OnceLock::new();
    static UNVERIFIED: OnceLock<Built> = OnceLock::new();
    let cell = if verify { &VERIFIED } else { &UNVERIFIED };
    cell.get_or_init(|| {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let config = if verify {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(native_roots().iter().cloned());
            builder.with_root_certificates(roots).with_no_client_auth()
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verify::AcceptAny))
                .with_no_client_auth()
        };
        Ok(Arc::new(config))
    })
    .clone()
}
