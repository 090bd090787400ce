//! Certificates and rustls configurations for tests: a CA that issues leaf certificates, server
//! configs for TLS upstreams, and client configs that either trust a CA or trust anything.
//!
//! Everything uses the `ring` provider explicitly, so the tests never depend on which provider
//! another crate in the workspace happens to install as the process default.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// The crypto provider every test config uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate authority generated for one test.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A CA certificate's parameters (any path length, may sign certificates and CRLs).
fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// A certificate with its private key, in both PEM (for declarative configs) and DER (for rustls).
pub struct LeafCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: CertificateDer<'static>,
    key_pkcs8: Vec<u8>,
}

impl TestCa {
    pub fn new(common_name: &str) -> TestCa {
        let key = KeyPair::generate().expect("ca key");
        let cert = ca_params(common_name).self_signed(&key).expect("self-sign ca");
        TestCa { cert, key }
    }

    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// An intermediate CA signed by this one.
    pub fn intermediate(&self, common_name: &str) -> TestCa {
        let key = KeyPair::generate().expect("intermediate key");
        let cert = ca_params(common_name)
            .signed_by(&key, &self.cert, &self.key)
            .expect("sign intermediate");
        TestCa { cert, key }
    }

    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// A leaf certificate for `names` (DNS names or IP addresses, or URIs such as
    /// `spiffe://...`) signed by this CA.
    pub fn issue(&self, names: &[&str]) -> LeafCert {
        let (uris, names): (Vec<&str>, Vec<&str>) = names.iter().partition(|n| n.contains("://"));
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("leaf params");
        for uri in uris {
            let uri = rcgen::Ia5String::try_from(uri).expect("an ASCII URI");
            params.subject_alt_names.push(rcgen::SanType::URI(uri));
        }
        params.distinguished_name.push(DnType::CommonName, names[0].clone());
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("sign leaf");
        LeafCert::from_parts(&cert, &key)
    }
}

impl LeafCert {
    /// A self-signed certificate for `names`.
    pub fn self_signed(names: &[&str]) -> LeafCert {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(names)
            .expect("params")
            .self_signed(&key)
            .expect("self-sign");
        LeafCert::from_parts(&cert, &key)
    }

    fn from_parts(cert: &rcgen::Certificate, key: &KeyPair) -> LeafCert {
        LeafCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_pkcs8: key.serialize_der(),
        }
    }

    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_pkcs8.clone()))
    }
}

/// A server config presenting `leaf`, offering `alpn` protocols in order.
pub fn server_config(leaf: &LeafCert, alpn: &[&[u8]]) -> Arc<ServerConfig> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![leaf.cert_der.clone()], leaf.key_der())
        .expect("server cert");
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A server config presenting `leaf` followed by the `chain` certificates.
pub fn chain_server_config(leaf: &LeafCert, chain: &[CertificateDer<'static>], alpn: &[&[u8]]) -> Arc<ServerConfig> {
    let mut certs = vec![leaf.cert_der.clone()];
    certs.extend(chain.iter().cloned());
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, leaf.key_der())
        .expect("server cert");
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// [`server_config`] that also requires a client certificate issued by `client_ca`.
pub fn mutual_server_config(leaf: &LeafCert, client_ca: &TestCa, alpn: &[&[u8]]) -> Arc<ServerConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(client_ca.cert_der()).expect("client CA");
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .expect("client verifier");
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![leaf.cert_der.clone()], leaf.key_der())
        .expect("server cert");
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// What a test client trusts.
#[derive(Clone, Debug)]
pub enum Trust {
    /// Only certificates chaining to these PEM CA certificates (hostname checked against SNI).
    CaPem(String),
    /// Any certificate (signatures of the handshake are still checked).
    Anything,
}

/// A client config with the given trust and ALPN offer.
pub fn client_config(trust: &Trust, alpn: &[Vec<u8>]) -> Arc<ClientConfig> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions");
    let mut config = match trust {
        Trust::CaPem(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in rustls_pemfile::certs(&mut pem.as_bytes()) {
                roots.add(cert.expect("CA PEM")).expect("add CA");
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Anything => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(strait_runtime::tls::verify::AcceptAny))
            .with_no_client_auth(),
    };
    config.alpn_protocols = alpn.to_vec();
    Arc::new(config)
}

/// A client that offers only `versions` and `suites` (in that order), accepts any server
/// certificate, presents `identity` when given, and keeps its sessions (one config used for
/// several connections resumes them).
pub fn custom_client_config(
    versions: &[&'static rustls::SupportedProtocolVersion],
    suites: &[rustls::SupportedCipherSuite],
    identity: Option<&LeafCert>,
    alpn: &[&[u8]],
) -> Arc<ClientConfig> {
    let provider = CryptoProvider {
        cipher_suites: suites.to_vec(),
        ..rustls::crypto::ring::default_provider()
    };
    let builder = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .expect("protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(strait_runtime::tls::verify::AcceptAny));
    let mut config = match identity {
        Some(leaf) => builder
            .with_client_auth_cert(vec![leaf.cert_der.clone()], leaf.key_der())
            .expect("client certificate"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}
