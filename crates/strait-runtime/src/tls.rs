//! TLS client pieces shared by every outbound connection (upstreams,
//! Redis): one crypto provider, the system's roots, and Kong's "encrypt
//! without verifying" verifier.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

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

/// Kong's default where verification is off: encrypt, don't verify.
#[derive(Debug)]
pub struct AcceptAnyServerCert(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
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
                .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider())))
                .with_no_client_auth()
        };
        Ok(Arc::new(config))
    })
    .clone()
}
