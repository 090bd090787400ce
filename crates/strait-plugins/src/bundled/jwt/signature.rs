//! JWT signature algorithms (Kong's `alg_verify` table) and checking a
//! signature with ring: HMAC with the credential's secret, RSA, ECDSA and
//! Ed25519 with the public key PEM of the credential's `rsa_public_key`.
//!
//! Kong reads keys with OpenSSL; here a key is a `PUBLIC KEY`
//! (SubjectPublicKeyInfo) or `RSA PUBLIC KEY` (PKCS#1) PEM block, parsed
//! with the few DER rules those two structures need.

use base64::Engine;
use ring::{hmac, signature};

/// The `alg` values Kong's jwt plugin knows (a token with any other `alg`
/// is "Bad token; invalid alg").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Hs256,
    Hs384,
    Hs512,
    Rs256,
    Rs384,
    Rs512,
    Es256,
    Es384,
    Es512,
    Ps256,
    Ps384,
    Ps512,
    EdDsa,
}

impl Algorithm {
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Some(match name {
            "HS256" => Algorithm::Hs256,
            "HS384" => Algorithm::Hs384,
            "HS512" => Algorithm::Hs512,
            "RS256" => Algorithm::Rs256,
            "RS384" => Algorithm::Rs384,
            "RS512" => Algorithm::Rs512,
            "ES256" => Algorithm::Es256,
            "ES384" => Algorithm::Es384,
            "ES512" => Algorithm::Es512,
            "PS256" => Algorithm::Ps256,
            "PS384" => Algorithm::Ps384,
            "PS512" => Algorithm::Ps512,
            "EdDSA" => Algorithm::EdDsa,
            _ => return None,
        })
    }

    /// HMAC algorithms verify with the secret, the others with the public key.
    pub fn is_symmetric(self) -> bool {
        self.hmac().is_some()
    }

    fn hmac(self) -> Option<hmac::Algorithm> {
        match self {
            Algorithm::Hs256 => Some(hmac::HMAC_SHA256),
            Algorithm::Hs384 => Some(hmac::HMAC_SHA384),
            Algorithm::Hs512 => Some(hmac::HMAC_SHA512),
            _ => None,
        }
    }
}

/// True when `signature` signs `message` for `algorithm` with `key` (the
/// secret for HMAC, a public key PEM otherwise). A key that cannot be read,
/// a key of the wrong kind or a signature of the wrong length never verifies.
pub(crate) fn verify(algorithm: Algorithm, message: &[u8], signature_bytes: &[u8], key: &[u8]) -> bool {
    if let Some(hmac_algorithm) = algorithm.hmac() {
        // ring compares the tags in constant time.
        return hmac::verify(&hmac::Key::new(hmac_algorithm, key), message, signature_bytes).is_ok();
    }
    let Some(public_key) = std::str::from_utf8(key).ok().and_then(PublicKey::from_pem) else {
        tracing::debug!(alg = ?algorithm, "jwt public key cannot be read");
        return false;
    };
    let Some((verification, key_bytes)) = verification_for(algorithm, &public_key) else {
        return false;
    };
    signature::UnparsedPublicKey::new(verification, key_bytes)
        .verify(message, signature_bytes)
        .is_ok()
}

/// ring's algorithm for a JWT `alg` and key, when they fit together.
fn verification_for(
    algorithm: Algorithm,
    key: &PublicKey,
) -> Option<(&'static dyn signature::VerificationAlgorithm, &[u8])> {
    use signature as s;
    let chosen: &'static dyn s::VerificationAlgorithm = match (algorithm, key) {
        (Algorithm::Rs256, PublicKey::Rsa(_)) => &s::RSA_PKCS1_2048_8192_SHA256,
        (Algorithm::Rs384, PublicKey::Rsa(_)) => &s::RSA_PKCS1_2048_8192_SHA384,
        (Algorithm::Rs512, PublicKey::Rsa(_)) => &s::RSA_PKCS1_2048_8192_SHA512,
        (Algorithm::Ps256, PublicKey::Rsa(_)) => &s::RSA_PSS_2048_8192_SHA256,
        (Algorithm::Ps384, PublicKey::Rsa(_)) => &s::RSA_PSS_2048_8192_SHA384,
        (Algorithm::Ps512, PublicKey::Rsa(_)) => &s::RSA_PSS_2048_8192_SHA512,
        // JWS ECDSA signatures are the raw r||s of RFC 7518 §3.4.
        (Algorithm::Es256, PublicKey::Ec(Curve::P256, _)) => &s::ECDSA_P256_SHA256_FIXED,
        (Algorithm::Es384, PublicKey::Ec(Curve::P384, _)) => &s::ECDSA_P384_SHA384_FIXED,
        (Algorithm::EdDsa, PublicKey::Ed25519(_)) => &s::ED25519,
        _ => return None,
    };
    let bytes = match key {
        PublicKey::Rsa(der) => der.as_slice(),
        PublicKey::Ec(_, point) => point.as_slice(),
        PublicKey::Ed25519(raw) => raw.as_slice(),
    };
    Some((chosen, bytes))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
    /// Read, but ring cannot verify P-521 (ES512) signatures.
    P521,
}

/// A public key in the form ring verifies with.
#[derive(Debug, PartialEq, Eq)]
enum PublicKey {
    /// DER `RSAPublicKey` (PKCS#1).
    Rsa(Vec<u8>),
    /// An uncompressed point.
    Ec(Curve, Vec<u8>),
    Ed25519(Vec<u8>),
}

const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const OID_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];

const TAG_SEQUENCE: u8 = 0x30;
const TAG_BIT_STRING: u8 = 0x03;
const TAG_OID: u8 = 0x06;

impl PublicKey {
    fn from_pem(text: &str) -> Option<PublicKey> {
        let (label, der) = pem_block(text)?;
        match label {
            "PUBLIC KEY" => PublicKey::from_spki(&der),
            "RSA PUBLIC KEY" => {
                let mut reader = DerReader(&der);
                reader.read(TAG_SEQUENCE)?;
                reader.0.is_empty().then_some(PublicKey::Rsa(der))
            }
            _ => None,
        }
    }

    /// SubjectPublicKeyInfo: `SEQUENCE { SEQUENCE { OID, params }, BIT STRING }`.
    fn from_spki(der: &[u8]) -> Option<PublicKey> {
        let mut outer = DerReader(der);
        let mut info = DerReader(outer.read(TAG_SEQUENCE)?);
        if !outer.0.is_empty() {
            return None;
        }
        let mut algorithm = DerReader(info.read(TAG_SEQUENCE)?);
        let bits = info.read(TAG_BIT_STRING)?;
        let (&unused_bits, key) = bits.split_first()?;
        if unused_bits != 0 || !info.0.is_empty() {
            return None;
        }
        let oid = algorithm.read(TAG_OID)?;
        let key = key.to_vec();
        if oid == OID_RSA {
            return Some(PublicKey::Rsa(key));
        }
        if oid == OID_ED25519 {
            return (key.len() == 32).then_some(PublicKey::Ed25519(key));
        }
        if oid != OID_EC_PUBLIC_KEY {
            return None;
        }
        let curve = match algorithm.read(TAG_OID)? {
            OID_P256 => Curve::P256,
            OID_P384 => Curve::P384,
            OID_P521 => Curve::P521,
            _ => return None,
        };
        Some(PublicKey::Ec(curve, key))
    }
}

/// The label and decoded body of the first PEM block in `text`.
fn pem_block(text: &str) -> Option<(&str, Vec<u8>)> {
    let start = text.find("-----BEGIN ")?;
    let rest = &text[start + "-----BEGIN ".len()..];
    let (label, rest) = rest.split_once("-----")?;
    let end_marker = format!("-----END {label}-----");
    let body = &rest[..rest.find(&end_marker)?];
    let symbols: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(symbols).ok()?;
    Some((label, der))
}

/// Reads DER elements one after the other.
struct DerReader<'a>(&'a [u8]);

impl<'a> DerReader<'a> {
    /// The contents of the next element, which must carry `tag`.
    fn read(&mut self, tag: u8) -> Option<&'a [u8]> {
        let (&found, rest) = self.0.split_first()?;
        if found != tag {
            return None;
        }
        let (&first, mut rest) = rest.split_first()?;
        let length = if first < 0x80 {
            usize::from(first)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let (digits, after) = rest.split_at(count);
            rest = after;
            digits.iter().fold(0usize, |n, d| (n << 8) | usize::from(*d))
        };
        if rest.len() < length {
            return None;
        }
        let (contents, after) = rest.split_at(length);
        self.0 = after;
        Some(contents)
    }
}

#[cfg(test)]
pub(crate) mod test_keys {
    //! Keys for unit tests: a 2048-bit RSA key generated once with openssl,
    //! and helpers that wrap ring-generated EC and Ed25519 keys in PEM.

    use base64::Engine;

    pub const RSA_PRIVATE_PKCS8: &str = include_str!("testdata/rsa_private.pem");
    pub const RSA_PUBLIC_SPKI: &str = include_str!("testdata/rsa_public.pem");
    pub const RSA_PUBLIC_PKCS1: &str = include_str!("testdata/rsa_public_pkcs1.pem");

    /// The DER of the first PEM block.
    pub fn pem_der(pem: &str) -> Vec<u8> {
        super::pem_block(pem).expect("pem").1
    }

    pub fn pem(label: &str, der: &[u8]) -> String {
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).expect("ascii"))
            .collect();
        format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
    }

    /// A SubjectPublicKeyInfo PEM for a P-256 (`p384` false) or P-384 point.
    pub fn ec_public_pem(point: &[u8], p384: bool) -> String {
        let prefix: &[u8] = if p384 {
            &[
                0x30, 0x76, 0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81,
                0x04, 0x00, 0x22, 0x03, 0x62, 0x00,
            ]
        } else {
            &[
                0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86,
                0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
            ]
        };
        pem("PUBLIC KEY", &[prefix, point].concat())
    }

    pub fn ed25519_public_pem(raw: &[u8]) -> String {
        let prefix: &[u8] = &[0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];
        pem("PUBLIC KEY", &[prefix, raw].concat())
    }
}

#[cfg(test)]
mod tests {
    use super::test_keys::*;
    use super::*;

    #[test]
    fn reads_rsa_keys_in_both_pem_forms() {
        let spki = PublicKey::from_pem(RSA_PUBLIC_SPKI).expect("spki");
        let pkcs1 = PublicKey::from_pem(RSA_PUBLIC_PKCS1).expect("pkcs1");
        assert_eq!(spki, pkcs1, "the same RSAPublicKey either way");
        assert!(
            PublicKey::from_pem(RSA_PRIVATE_PKCS8).is_none(),
            "private keys are not public keys"
        );
    }

    #[test]
    fn refuses_broken_pem_and_der() {
        for text in [
            "",
            "-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----",
            "-----BEGIN PUBLIC KEY-----\nnot base64!\n-----END PUBLIC KEY-----",
            "-----BEGIN PUBLIC KEY-----\nMAA=\n",
            "-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----",
        ] {
            assert!(PublicKey::from_pem(text).is_none(), "{text:?}");
        }
        // A length that claims more than there is, and a huge long form.
        assert!(DerReader(&[0x30, 0x05, 0x00]).read(TAG_SEQUENCE).is_none());
        assert!(DerReader(&[0x30, 0x89, 1, 2, 3, 4, 5, 6, 7, 8, 9])
            .read(TAG_SEQUENCE)
            .is_none());
        assert!(DerReader(&[0x30, 0x80]).read(TAG_SEQUENCE).is_none());
    }

    #[test]
    fn algorithm_names_are_kongs() {
        for name in [
            "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512",
            "EdDSA",
        ] {
            assert!(Algorithm::from_name(name).is_some(), "{name}");
        }
        assert!(Algorithm::from_name("none").is_none());
        assert!(Algorithm::from_name("hs256").is_none());
        assert!(Algorithm::Hs384.is_symmetric());
        assert!(!Algorithm::Es256.is_symmetric());
    }
}
