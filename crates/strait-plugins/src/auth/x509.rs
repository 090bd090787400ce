//! Just enough of X.509 (DER) for client-certificate authentication (and,
//! with the DER readers made public, OCSP stapling's reading of
//! certificates and responses, strait-proxy's wire/ocsp.rs): the
//! subject's common name and distinguished name, the subject alternative
//! names, and the raw issuer and subject names (to tell which CA issued a
//! certificate). The listener has already verified the chain; this reads,
//! and returns `None` for anything it cannot read, never panicking.

use base64::Engine as _;

/// A client's certificate as the authentication plugins see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    pub subject_cn: Option<String>,
    /// `CN=alice,O=Example` (most specific first, as Kong prints it).
    pub subject_dn: String,
    /// DNS names, e-mail addresses and URIs of the subject alternative names.
    pub sans: Vec<String>,
    /// The issuer's name, DER, to compare with a CA certificate's subject.
    pub issuer: Vec<u8>,
    /// The first 16 bytes of the certificate's SHA-256: its credential id.
    pub fingerprint: [u8; 16],
}

/// A DER element inside its parent: (tag, content, the whole element).
pub type Child<'a> = (u8, &'a [u8], &'a [u8]);

/// One DER element and what follows it: (tag, content, whole element, rest).
pub type Element<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

/// The first DER element of `input` (definite lengths only), or None.
pub fn element(input: &[u8]) -> Option<Element<'_>> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let length = if first < 0x80 {
        first as usize
    } else {
        let count = (first & 0x7f) as usize;
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let length = rest[..count].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
        rest = &rest[count..];
        length
    };
    if rest.len() < length {
        return None;
    }
    let header = input.len() - rest.len();
    Some((tag, &rest[..length], &input[..header + length], &rest[length..]))
}

/// The elements of a constructed element's content.
pub fn children(mut content: &[u8]) -> Option<Vec<Child<'_>>> {
    let mut out = Vec::new();
    while !content.is_empty() {
        let (tag, inner, whole, rest) = element(content)?;
        out.push((tag, inner, whole));
        content = rest;
    }
    Some(out)
}

const SEQUENCE: u8 = 0x30;
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

/// The fields of TBSCertificate after its version: serial, algorithm,
/// issuer, validity, subject, key, then the optional ones.
pub fn tbs_fields(der: &[u8]) -> Option<Vec<Child<'_>>> {
    let (tag, certificate, _, _) = element(der)?;
    (tag == SEQUENCE).then_some(())?;
    let (tag, tbs, _, _) = element(certificate)?;
    (tag == SEQUENCE).then_some(())?;
    let mut fields = children(tbs)?;
    if fields.first().is_some_and(|(tag, _, _)| *tag == 0xa0) {
        fields.remove(0);
    }
    (fields.len() >= 6).then_some(fields)
}

fn text(tag: u8, value: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, PrintableString, T61String, IA5String
        0x0c | 0x13 | 0x14 | 0x16 => Some(String::from_utf8_lossy(value).into_owned()),
        // BMPString
        0x1e => {
            let units: Vec<u16> = value
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            Some(String::from_utf16_lossy(&units))
        }
        _ => None,
    }
}

/// (short name or dotted OID, value) of each attribute of a Name, in order.
fn attributes(name: &[u8]) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (_, set, _) in children(name)? {
        for (_, pair, _) in children(set)? {
            let items = children(pair)?;
            let [(0x06, oid, _), (tag, value, _)] = items.as_slice() else {
                return None;
            };
            let short = match *oid {
                [0x55, 0x04, 0x03] => "CN".to_string(),
                [0x55, 0x04, 0x06] => "C".to_string(),
                [0x55, 0x04, 0x07] => "L".to_string(),
                [0x55, 0x04, 0x08] => "ST".to_string(),
                [0x55, 0x04, 0x0a] => "O".to_string(),
                [0x55, 0x04, 0x0b] => "OU".to_string(),
                other => base64::engine::general_purpose::STANDARD.encode(other),
            };
            out.push((short, text(*tag, value).unwrap_or_default()));
        }
    }
    Some(out)
}

/// What an Admin API shows of a certificate (acme's `/acme/certificates`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub serial: Vec<u8>,
    pub subject_cn: Option<String>,
    pub issuer_cn: Option<String>,
    /// Seconds since the epoch.
    pub not_before: i64,
    pub not_after: i64,
    /// OpenSSL's short name of the key type: `rsaEncryption`, `id-ecPublicKey`, ...
    pub key_type: String,
}

/// A DER time (UTCTime or GeneralizedTime, `Z`) as seconds since the epoch.
pub fn time(tag: u8, value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(value).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 => {
            let yy: i64 = text.get(..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, text.get(2..)?)
        }
        0x18 => (text.get(..4)?.parse().ok()?, text.get(4..)?),
        _ => return None,
    };
    let field = |at: usize| -> Option<i64> { rest.get(at..at + 2)?.parse().ok() };
    let (month, day, hour, minute, second) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    let days = strait_runtime::clock::days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Reads what [`Summary`] holds of a certificate (DER).
pub fn summary(der: &[u8]) -> Option<Summary> {
    let fields = tbs_fields(der)?;
    let cn = |name: &[u8]| attributes(name)?.into_iter().find(|(n, _)| n == "CN").map(|(_, v)| v);
    let validity = children(fields[3].1)?;
    let [(b_tag, before, _), (a_tag, after, _)] = validity.as_slice() else {
        return None;
    };
    let spki = children(fields[5].1)?;
    let algorithm = children(spki.first()?.1)?;
    let key_type = match algorithm.first()?.1 {
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01] => "rsaEncryption",
        [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01] => "id-ecPublicKey",
        [0x2b, 0x65, 0x70] => "ED25519",
        _ => "unknown",
    };
    Some(Summary {
        serial: fields[0].1.to_vec(),
        subject_cn: cn(fields[4].1),
        issuer_cn: cn(fields[2].1),
        not_before: time(*b_tag, before)?,
        not_after: time(*a_tag, after)?,
        key_type: key_type.to_string(),
    })
}

/// The value (the OCTET STRING's content) of the extension `oid` among a
/// certificate's [`tbs_fields`]: Some(None) when it has no such extension,
/// None when the extensions cannot be read.
pub fn extension<'a>(fields: &[Child<'a>], oid: &[u8]) -> Option<Option<&'a [u8]>> {
    for (tag, content, _) in fields.get(6..).unwrap_or_default() {
        if *tag != 0xa3 {
            continue;
        }
        let (_, extensions, _, _) = element(content)?;
        for (_, extension, _) in children(extensions)? {
            let items = children(extension)?;
            let Some((0x06, found, _)) = items.first() else {
                continue;
            };
            if *found != oid {
                continue;
            }
            let Some((0x04, value, _)) = items.last() else { continue };
            return Some(Some(value));
        }
    }
    Some(None)
}

/// Reads a client certificate (DER).
pub fn parse(der: &[u8]) -> Option<ClientCert> {
    let fields = tbs_fields(der)?;
    let issuer = fields[2].2.to_vec();
    let subject = attributes(fields[4].1)?;
    let subject_cn = subject
        .iter()
        .find(|(name, _)| name == "CN")
        .map(|(_, value)| value.clone());
    let subject_dn = subject
        .iter()
        .rev()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut sans = Vec::new();
    if let Some(value) = extension(&fields, SUBJECT_ALT_NAME)? {
        let (_, names, _, _) = element(value)?;
        for (tag, name, _) in children(names)? {
            match tag {
                0x81 | 0x82 | 0x86 => sans.push(String::from_utf8_lossy(name).into_owned()),
                _ => {}
            }
        }
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let mut fingerprint = [0u8; 16];
    fingerprint.copy_from_slice(&digest.as_ref()[..16]);
    Some(ClientCert {
        subject_cn,
        subject_dn,
        sans,
        issuer,
        fingerprint,
    })
}

/// The subject name (DER) of a certificate, to compare with an issuer.
pub fn subject(der: &[u8]) -> Option<Vec<u8>> {
    Some(tbs_fields(der)?[4].2.to_vec())
}

/// The DER of the first certificate of a PEM text.
pub fn first_pem_der(pem: &str) -> Option<Vec<u8>> {
    let start = pem.find("-----BEGIN CERTIFICATE-----")? + "-----BEGIN CERTIFICATE-----".len();
    let end = start + pem[start..].find("-----END CERTIFICATE-----")?;
    let body: String = pem[start..end].chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_gives_its_names_and_issuer() {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "Test CA");
        let ca = ca.self_signed(&ca_key).expect("ca");
        let mut leaf = rcgen::CertificateParams::new(vec!["alice.example".to_string()]).expect("params");
        leaf.distinguished_name.push(rcgen::DnType::CommonName, "alice");
        leaf.distinguished_name.push(rcgen::DnType::OrganizationName, "Example");
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let leaf = leaf.signed_by(&leaf_key, &ca, &ca_key).expect("leaf");
        let parsed = parse(leaf.der()).expect("parses");
        assert_eq!(parsed.subject_cn.as_deref(), Some("alice"));
        assert_eq!(parsed.subject_dn, "O=Example,CN=alice");
        assert_eq!(parsed.sans, vec!["alice.example".to_string()]);
        assert_eq!(Some(parsed.issuer), subject(ca.der()));
        assert_eq!(first_pem_der(&ca.pem()).as_deref(), Some(&ca.der()[..]));
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        assert_eq!(parse(&[]), None);
        assert_eq!(parse(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(parse(&[0x30, 0x03, 0x30, 0x01, 0x02]), None);
        for cut in 0..40 {
            let bytes: Vec<u8> = (0..cut).map(|i| (i * 37 % 251) as u8).collect();
            let _ = parse(&bytes);
        }
    }
}
