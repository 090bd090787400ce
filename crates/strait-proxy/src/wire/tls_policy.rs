//! Kong's server TLS settings (`ssl_cipher_suite`, `ssl_protocols`,
//! `ssl_ciphers`, `ssl_prefer_server_ciphers`, `ssl_session_tickets`,
//! `ssl_session_cache_size`) as a rustls policy, validated once at start.
//!
//! As in Kong, a named suite (`modern`, `intermediate`) fixes protocols,
//! ciphers and preference; only `custom` reads `ssl_protocols`, `ssl_ciphers`
//! and `ssl_prefer_server_ciphers`. rustls implements TLS 1.2 and 1.3 with
//! AEAD ciphers only, so what needs more (`old`, TLSv1/TLSv1.1, CBC or DHE
//! only) is refused with an error naming the setting, never silently weakened.

use std::sync::Arc;

use rustls::crypto::ring::cipher_suite as suites;
use rustls::crypto::CryptoProvider;
use rustls::server::ServerSessionMemoryCache;
use rustls::{ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};

/// The TLS 1.2 suites rustls offers, by OpenSSL and IANA name, in Mozilla's
/// intermediate order.
const TLS12_SUITES: [(&str, &str, SupportedCipherSuite); 6] = [
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        suites::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        suites::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        suites::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        suites::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        suites::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// TLS 1.3 suites: always all three (OpenSSL's `ssl_ciphers` does not set
/// them either).
const TLS13_SUITES: [SupportedCipherSuite; 3] = [
    suites::TLS13_AES_128_GCM_SHA256,
    suites::TLS13_AES_256_GCM_SHA384,
    suites::TLS13_CHACHA20_POLY1305_SHA256,
];

/// The settings as written in strait.conf.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub cipher_suite: String,
    pub protocols: String,
    pub ciphers: String,
    pub prefer_server_ciphers: bool,
    pub session_tickets: bool,
    /// Sessions kept for resumption by id.
    pub session_cache_entries: usize,
    /// `ssl_stapling`: OCSP answers stapled to certificates that name a responder (ocsp.rs).
    pub stapling: bool,
}

impl Default for TlsSettings {
    /// Kong's defaults.
    fn default() -> TlsSettings {
        TlsSettings {
            cipher_suite: "intermediate".into(),
            protocols: "TLSv1.2 TLSv1.3".into(),
            ciphers: String::new(),
            prefer_server_ciphers: true,
            session_tickets: true,
            session_cache_entries: 40960,
            stapling: true,
        }
    }
}

/// A validated policy, ready to build server configurations with.
#[derive(Debug, Clone)]
pub struct TlsPolicy {
    versions: Vec<&'static SupportedProtocolVersion>,
    cipher_suites: Vec<SupportedCipherSuite>,
    prefer_server_ciphers: bool,
    session_tickets: bool,
    session_cache_entries: usize,
    stapling: bool,
}

impl TlsPolicy {
    /// Whether OCSP answers are stapled (`ssl_stapling`).
    pub fn stapling(&self) -> bool {
        self.stapling
    }

    pub fn new(settings: &TlsSettings) -> Result<TlsPolicy, String> {
        let (protocols, tls12, prefer) = match settings.cipher_suite.as_str() {
            "modern" => ("TLSv1.3".to_string(), Vec::new(), false),
            "intermediate" => (
                "TLSv1.2 TLSv1.3".to_string(),
                TLS12_SUITES.iter().map(|s| s.2).collect(),
                false,
            ),
            "custom" => (
                settings.protocols.clone(),
                custom_ciphers(&settings.ciphers)?,
                settings.prefer_server_ciphers,
            ),
            "old" => {
                return Err(
                    "ssl_cipher_suite: 'old' needs TLSv1, TLSv1.1 and CBC ciphers, which Strait (rustls) \
                            does not implement; use 'intermediate', or 'custom' with ssl_protocols and ssl_ciphers"
                        .into(),
                )
            }
            other => {
                return Err(format!(
                    "ssl_cipher_suite: expected modern, intermediate, old or custom (got {other:?})"
                ))
            }
        };
        let versions = parse_protocols(&protocols)?;
        let mut cipher_suites = Vec::new();
        if versions.contains(&&rustls::version::TLS13) {
            cipher_suites.extend(TLS13_SUITES);
        }
        if versions.contains(&&rustls::version::TLS12) {
            if tls12.is_empty() {
                return Err("ssl_ciphers: no cipher usable with TLSv1.2 is listed".into());
            }
            cipher_suites.extend(tls12);
        }
        Ok(TlsPolicy {
            versions,
            cipher_suites,
            prefer_server_ciphers: prefer,
            session_tickets: settings.session_tickets,
            session_cache_entries: settings.session_cache_entries,
            stapling: settings.stapling,
        })
    }

    /// A server configuration builder with this policy's provider and
    /// versions; finish it with a client verifier and a certificate source,
    /// then call [`TlsPolicy::finish`].
    pub fn builder(&self) -> Result<rustls::ConfigBuilder<ServerConfig, rustls::WantsVerifier>, String> {
        let provider = CryptoProvider {
            cipher_suites: self.cipher_suites.clone(),
            ..rustls::crypto::ring::default_provider()
        };
        ServerConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&self.versions)
            .map_err(|e| format!("TLS settings: {e}"))
    }

    /// Applies preference, the session cache and tickets to `config`.
    pub fn finish(&self, config: &mut ServerConfig) -> Result<(), String> {
        config.ignore_client_order = self.prefer_server_ciphers;
        config.session_storage = ServerSessionMemoryCache::new(self.session_cache_entries.max(1));
        if self.session_tickets {
            config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| format!("session tickets: {e}"))?;
        }
        Ok(())
    }
}

fn parse_protocols(value: &str) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let mut versions = Vec::new();
    for word in value.split_whitespace() {
        match word {
            "TLSv1.3" => versions.push(&rustls::version::TLS13),
            "TLSv1.2" => versions.push(&rustls::version::TLS12),
            "TLSv1" | "TLSv1.1" | "SSLv2" | "SSLv3" => {
                return Err(format!(
                    "ssl_protocols: {word} is not supported (Strait implements TLSv1.2 and TLSv1.3)"
                ))
            }
            other => return Err(format!("ssl_protocols: unknown protocol {other:?}")),
        }
    }
    if versions.is_empty() {
        return Err("ssl_protocols: no protocol given".into());
    }
    Ok(versions)
}

/// `ssl_ciphers` (OpenSSL `:`-separated names, or IANA names): the TLS 1.2
/// suites rustls has, in the order given; empty means all of them. Names it lacks (DHE, CBC) are
/// passed over as OpenSSL passes over unknown names; listing none is an error.
fn custom_ciphers(list: &str) -> Result<Vec<SupportedCipherSuite>, String> {
    if list.trim().is_empty() {
        return Ok(TLS12_SUITES.iter().map(|s| s.2).collect());
    }
    let mut chosen = Vec::new();
    let mut skipped = Vec::new();
    for name in list.split([':', ',', ' ']).filter(|n| !n.is_empty()) {
        match TLS12_SUITES
            .iter()
            .find(|(openssl, iana, _)| *openssl == name || *iana == name)
        {
            Some((_, _, suite)) if !chosen.contains(suite) => chosen.push(*suite),
            Some(_) => {}
            None => skipped.push(name),
        }
    }
    if !skipped.is_empty() {
        tracing::warn!(ciphers = ?skipped, "ssl_ciphers: names Strait does not implement are ignored");
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(suite: &str) -> TlsSettings {
        TlsSettings {
            cipher_suite: suite.into(),
            ..TlsSettings::default()
        }
    }

    #[test]
    fn named_suites_fix_versions_ciphers_and_preference() {
        let modern = TlsPolicy::new(&settings("modern")).expect("modern");
        assert_eq!(modern.versions, vec![&rustls::version::TLS13]);
        assert_eq!(modern.cipher_suites.len(), 3);
        let intermediate = TlsPolicy::new(&settings("intermediate")).expect("intermediate");
        assert_eq!(intermediate.versions.len(), 2);
        assert_eq!(intermediate.cipher_suites.len(), 9);
        assert!(!intermediate.prefer_server_ciphers);
    }

    #[test]
    fn custom_reads_protocols_ciphers_and_preference() {
        let custom = TlsSettings {
            protocols: "TLSv1.2".into(),
            ciphers: "DHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
                .into(),
            ..settings("custom")
        };
        let policy = TlsPolicy::new(&custom).expect("custom");
        assert_eq!(policy.versions, vec![&rustls::version::TLS12]);
        assert_eq!(
            policy.cipher_suites,
            vec![
                suites::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                suites::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
            ]
        );
        assert!(policy.prefer_server_ciphers);
    }

    #[test]
    fn what_rustls_cannot_do_is_an_error_naming_the_setting() {
        let error = |s: TlsSettings| TlsPolicy::new(&s).expect_err("refused");
        assert!(error(settings("old")).starts_with("ssl_cipher_suite: 'old'"));
        assert!(error(settings("paranoid")).starts_with("ssl_cipher_suite: expected"));
        let tls11 = TlsSettings {
            protocols: "TLSv1.1 TLSv1.2".into(),
            ..settings("custom")
        };
        assert!(error(tls11).starts_with("ssl_protocols: TLSv1.1 is not supported"));
        let no_cipher = TlsSettings {
            protocols: "TLSv1.2".into(),
            ciphers: "DHE-RSA-AES128-GCM-SHA256".into(),
            ..settings("custom")
        };
        assert!(error(no_cipher).starts_with("ssl_ciphers:"));
    }
}
