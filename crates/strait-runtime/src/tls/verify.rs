//! Every certificate verifier Strait uses, in one place: the listeners',
//! the upstreams', the cluster's and the outbound clients' (Redis, logs).
//!
//! | Verifier | Used for |
//! |---|---|
//! | [`AcceptAny`] | Kong's default where verification is off (`tls_verify = false`, Redis `ssl_verify = false`): encrypt, don't check |
//! | [`SameCertificate`] | hybrid mode's `cluster_mtls = shared`, both ways: exactly this certificate |
//! | [`SubjectAltNames`] | a service's `tls_sans`: a trusted chain valid for the host or one of the listed names or URIs |
//! | [`DepthLimit`] | a service's `tls_verify_depth`: at most that many intermediates, then the inner check |
//!
//! Each checks the handshake's signatures with the one crypto provider
//! ([`super::provider`]) or through the verifier it wraps.

use std::collections::HashSet;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use super::provider;

/// The handshake-signature checks of a verifier that trusts the provider's
/// algorithms itself.
macro_rules! signatures_by_provider {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &provider().signature_verification_algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &provider().signature_verification_algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            provider().signature_verification_algorithms.supported_schemes()
        }
    };
}

/// The handshake-signature checks of a verifier that wraps `self.inner`:
/// the wrapper only adds to the certificate check.
macro_rules! signatures_by_inner {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.inner.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.inner.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.inner.supported_verify_schemes()
        }
    };
}

/// Kong's default where verification is off: encrypt, don't verify.
#[derive(Debug)]
pub struct AcceptAny;

impl ServerCertVerifier for AcceptAny {
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

    signatures_by_provider!();
}

/// The peer presents exactly this certificate (and proves it holds the key
/// through the handshake): hybrid mode's `shared`, as client and server.
#[derive(Debug)]
pub struct SameCertificate(pub CertificateDer<'static>);

impl SameCertificate {
    fn check(&self, presented: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        match presented.as_ref() == self.0.as_ref() {
            true => Ok(()),
            false => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            )),
        }
    }
}

impl ServerCertVerifier for SameCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity).map(|_| ServerCertVerified::assertion())
    }

    signatures_by_provider!();
}

impl ClientCertVerifier for SameCertificate {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity).map(|_| ClientCertVerified::assertion())
    }

    signatures_by_provider!();
}

/// `tls_verify_depth` (nginx's `proxy_ssl_verify_depth`): at most `depth`
/// intermediate certificates between the upstream's certificate and a
/// trusted CA. Counted over the certificates the upstream presents, less
/// any that is itself a trusted CA; then the inner verification runs.
#[derive(Debug)]
pub struct DepthLimit {
    inner: Arc<dyn ServerCertVerifier>,
    depth: usize,
    anchors: HashSet<Vec<u8>>,
}

impl DepthLimit {
    /// `anchors`: the trusted CAs (a presented one is not counted).
    pub fn new(inner: Arc<dyn ServerCertVerifier>, depth: usize, anchors: &[CertificateDer<'_>]) -> DepthLimit {
        DepthLimit {
            inner,
            depth,
            anchors: anchors.iter().map(|c| c.as_ref().to_vec()).collect(),
        }
    }
}

impl ServerCertVerifier for DepthLimit {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let counted = intermediates
            .iter()
            .filter(|cert| !self.anchors.contains(cert.as_ref()))
            .count();
        if counted > self.depth {
            return Err(rustls::Error::General(format!(
                "the certificate chain has {counted} intermediate certificates, more than tls_verify_depth {}",
                self.depth
            )));
        }
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    signatures_by_inner!();
}

/// A chain trusted by `roots`, valid for the name connected to, as rustls
/// checks it.
pub fn chain_to(roots: RootCertStore) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| e.to_string())?;
    Ok(verifier)
}

/// A service's `tls_sans` (Kong 3.10): the chain must be trusted as usual;
/// the certificate must be valid for the service's host, or for one of
/// `dnsnames` (wildcards as in certificates), or carry one of `uris` as a
/// URI subject alternative name (a SPIFFE id, say).
#[derive(Debug)]
pub struct SubjectAltNames {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    /// Plain names, checked as a host name is.
    dnsnames: Vec<ServerName<'static>>,
    /// Wildcard names (`*.example.com`), which the certificate must list as such.
    wildcards: Vec<String>,
    uris: Vec<String>,
}

impl SubjectAltNames {
    pub fn new(roots: RootCertStore, dnsnames: &[String], uris: &[String]) -> Result<SubjectAltNames, String> {
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| e.to_string())?;
        let (wildcards, plain): (Vec<&String>, Vec<&String>) = dnsnames.iter().partition(|name| name.starts_with("*."));
        Ok(SubjectAltNames {
            inner,
            dnsnames: plain
                .into_iter()
                .filter_map(|name| ServerName::try_from(name.clone()).ok())
                .collect(),
            wildcards: wildcards.into_iter().map(|w| w.to_ascii_lowercase()).collect(),
            uris: uris.to_vec(),
        })
    }
}

impl ServerCertVerifier for SubjectAltNames {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The chain is checked before the name: a name error means the
        // chain is trusted.
        let error = match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
            )) => rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName),
            other => return other,
        };
        for name in &self.dnsnames {
            let verified = self
                .inner
                .verify_server_cert(end_entity, intermediates, name, ocsp_response, now);
            if verified.is_ok() {
                return verified;
            }
        }
        if self.uris.is_empty() && self.wildcards.is_empty() {
            return Err(error);
        }
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| error.clone())?;
        let wildcard = cert
            .valid_dns_names()
            .any(|name| self.wildcards.iter().any(|w| w.eq_ignore_ascii_case(name)));
        let uri = cert.valid_uri_names().any(|uri| self.uris.iter().any(|u| u == uri));
        match wildcard || uri {
            true => Ok(ServerCertVerified::assertion()),
            false => Err(error),
        }
    }

    signatures_by_inner!();
}
