//! OCSP stapling (`ssl_stapling`, on by default) for the proxy's TLS
//! certificates: the node's `ssl_cert` and every `certificates` entity.
//!
//! A certificate is stapled when its Authority Information Access names an
//! `http://` OCSP responder and its chain holds the issuer (the second
//! certificate of the PEM), which the request's CertID needs. The node asks
//! the responder itself (RFC 6960, POST) in the background: at start, when
//! a certificate appears (checked every [`SCAN`]), and again halfway between
//! the answer's `thisUpdate` and `nextUpdate` (an hour later when it gives
//! no `nextUpdate`); a failed attempt is retried after a minute, doubling to
//! an hour. Only a `good` answer for this very certificate is stapled, and it
//! is dropped at its `nextUpdate`: a client then gets no staple rather than a
//! stale one. Handshakes never wait for a responder. Like nginx's default
//! (`ssl_stapling_verify off`), the answer's signature is left to the client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::sign::CertifiedKey;
use strait_plugins::auth::x509::{children, element, extension, tbs_fields, time};

/// How often the certificates served are looked over for one to staple.
pub const SCAN: Duration = Duration::from_secs(10);
const RETRY_FIRST: Duration = Duration::from_secs(60);
const RETRY_MOST: Duration = Duration::from_secs(3600);
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// id-pe-authorityInfoAccess (1.3.6.1.5.5.7.1.1).
const AIA: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x01];
/// id-ad-ocsp (1.3.6.1.5.5.7.48.1).
const AD_OCSP: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01];
/// id-pkix-ocsp-basic (1.3.6.1.5.5.7.48.1.1).
const OCSP_BASIC: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01, 0x01];
/// SHA-1 (1.3.14.3.2.26) with NULL parameters: the CertID hash every responder takes.
const SHA1_ALGORITHM: &[u8] = &[0x30, 0x09, 0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00];

struct Staple {
    /// The certificate with the answer attached, handed to handshakes.
    stapled: Arc<CertifiedKey>,
    expires: SystemTime,
}

struct Schedule {
    /// When to ask again, and the wait after a failure.
    due: SystemTime,
    backoff: Duration,
}

/// The staples, by the leaf certificate's DER.
#[derive(Default)]
pub struct Stapler {
    staples: RwLock<HashMap<Vec<u8>, Staple>>,
    schedule: Mutex<HashMap<Vec<u8>, Schedule>>,
    any: AtomicBool,
}

impl std::fmt::Debug for Stapler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stapler")
            .field("any", &self.any.load(Ordering::Relaxed))
            .finish()
    }
}

impl Stapler {
    pub fn new() -> Arc<Stapler> {
        Arc::new(Stapler::default())
    }

    /// `chosen` with its OCSP answer attached when one is held and fresh.
    pub fn staple(&self, chosen: Arc<CertifiedKey>) -> Arc<CertifiedKey> {
        if !self.any.load(Ordering::Acquire) {
            return chosen;
        }
        let Some(leaf) = chosen.cert.first() else {
            return chosen;
        };
        let staples = self.staples.read().unwrap_or_else(|e| e.into_inner());
        match staples.get(leaf.as_ref()) {
            Some(staple) if Arc::ptr_eq(&staple.stapled.key, &chosen.key) && SystemTime::now() < staple.expires => {
                staple.stapled.clone()
            }
            _ => chosen,
        }
    }

    /// One pass over `served`: ask the responder of each certificate that is
    /// due, and forget the staples of certificates no longer served.
    pub async fn refresh(&self, served: &[Arc<CertifiedKey>]) {
        let now = SystemTime::now();
        let mut wanted = Vec::new();
        for key in served {
            let Some(leaf) = key.cert.first() else { continue };
            let Some(issuer) = key.cert.get(1) else { continue };
            let Some(url) = responder_url(leaf.as_ref()) else {
                continue;
            };
            wanted.push(leaf.as_ref().to_vec());
            let due = {
                let schedule = self.schedule.lock().unwrap_or_else(|e| e.into_inner());
                schedule.get(leaf.as_ref()).is_none_or(|s| s.due <= now)
            };
            if !due {
                continue;
            }
            let outcome = match request(leaf.as_ref(), issuer.as_ref()) {
                Some((body, cert_id)) => ask(&url, body, &cert_id).await,
                None => Err("the certificate or its issuer could not be read".to_string()),
            };
            let mut schedule = self.schedule.lock().unwrap_or_else(|e| e.into_inner());
            let entry = schedule.entry(leaf.as_ref().to_vec()).or_insert(Schedule {
                due: now,
                backoff: Duration::ZERO,
            });
            match outcome {
                Ok((response, answer)) => {
                    tracing::info!(responder = %url, next_update = ?answer.next_update, "OCSP response stapled");
                    entry.backoff = Duration::ZERO;
                    entry.due = answer.refresh_at(now);
                    let mut stapled = CertifiedKey::new(key.cert.clone(), key.key.clone());
                    stapled.ocsp = Some(response);
                    let expires = answer.next_update.map_or(now + RETRY_MOST * 2, at);
                    self.staples.write().unwrap_or_else(|e| e.into_inner()).insert(
                        leaf.as_ref().to_vec(),
                        Staple {
                            stapled: Arc::new(stapled),
                            expires,
                        },
                    );
                    self.any.store(true, Ordering::Release);
                }
                Err(error) => {
                    entry.backoff = (entry.backoff * 2).clamp(RETRY_FIRST, RETRY_MOST);
                    entry.due = now + entry.backoff;
                    tracing::warn!(responder = %url, %error, retry_in = ?entry.backoff, "OCSP response not stapled");
                }
            }
        }
        self.schedule
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|leaf, _| wanted.contains(leaf));
        let mut staples = self.staples.write().unwrap_or_else(|e| e.into_inner());
        staples.retain(|leaf, staple| wanted.contains(leaf) && staple.expires > now);
        self.any.store(!staples.is_empty(), Ordering::Release);
    }
}

fn at(seconds: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds.max(0) as u64)
}

/// What a responder said of the certificate.
#[derive(Debug, PartialEq)]
pub struct Answer {
    pub this_update: i64,
    pub next_update: Option<i64>,
}

impl Answer {
    /// Halfway to `nextUpdate` (at least a minute away); an hour without one.
    fn refresh_at(&self, now: SystemTime) -> SystemTime {
        match self.next_update {
            Some(next) => {
                let half = at(self.this_update + (next - self.this_update) / 2);
                half.max(now + RETRY_FIRST)
            }
            None => now + RETRY_MOST,
        }
    }
}

/// The `http://` OCSP responder of a certificate (DER), from its Authority
/// Information Access extension.
pub fn responder_url(leaf: &[u8]) -> Option<String> {
    let fields = tbs_fields(leaf)?;
    let value = extension(&fields, AIA)??;
    let (_, descriptions, _, _) = element(value)?;
    for (_, description, _) in children(descriptions)? {
        let parts = children(description)?;
        if let [(0x06, method, _), (0x86, location, _)] = parts.as_slice() {
            let url = std::str::from_utf8(location).ok()?;
            if *method == AD_OCSP && url.starts_with("http://") {
                return Some(url.to_string());
            }
        }
    }
    None
}

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let length = content.len();
    if length < 0x80 {
        out.push(length as u8);
    } else {
        let bytes = length.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// The OCSP request (DER) for `leaf` issued by `issuer`, and its CertID.
pub fn request(leaf: &[u8], issuer: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let leaf_fields = tbs_fields(leaf)?;
    let issuer_fields = tbs_fields(issuer)?;
    let serial = leaf_fields[0];
    (serial.0 == 0x02).then_some(())?;
    let sha1 = |data: &[u8]| ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, data);
    // The issuer's name as the leaf carries it, and the issuer's public key bits.
    let name_hash = sha1(leaf_fields[2].2);
    let key_info = children(issuer_fields[5].1)?;
    let (0x03, bits, _) = *key_info.get(1)? else {
        return None;
    };
    let key_hash = sha1(bits.get(1..)?);
    let mut cert_id = SHA1_ALGORITHM.to_vec();
    cert_id.extend(der(0x04, name_hash.as_ref()));
    cert_id.extend(der(0x04, key_hash.as_ref()));
    cert_id.extend_from_slice(serial.2);
    let cert_id = der(0x30, &cert_id);
    let one = der(0x30, &cert_id);
    let list = der(0x30, &one);
    let tbs = der(0x30, &list);
    Some((der(0x30, &tbs), cert_id))
}

/// Reads a responder's answer (an OCSPResponse, DER) about `cert_id`: Ok
/// when it says `good` and has not expired.
pub fn read_response(response: &[u8], cert_id: &[u8], now: i64) -> Result<Answer, String> {
    let malformed = || "malformed OCSP response".to_string();
    let (_, outer, _, _) = element(response).ok_or_else(malformed)?;
    let parts = children(outer).ok_or_else(malformed)?;
    match parts.first() {
        Some((0x0a, [0], _)) => {}
        Some((0x0a, [status], _)) => return Err(format!("the responder answered status {status}")),
        _ => return Err(malformed()),
    }
    let (0xa0, bytes, _) = *parts.get(1).ok_or_else(malformed)? else {
        return Err(malformed());
    };
    let (_, bytes, _, _) = element(bytes).ok_or_else(malformed)?;
    let bytes = children(bytes).ok_or_else(malformed)?;
    let [(0x06, kind, _), (0x04, basic, _)] = bytes.as_slice() else {
        return Err(malformed());
    };
    if *kind != OCSP_BASIC {
        return Err("not a basic OCSP response".to_string());
    }
    let (_, basic, _, _) = element(basic).ok_or_else(malformed)?;
    let (_, data, _, _) = element(basic).ok_or_else(malformed)?;
    let fields = children(data).ok_or_else(malformed)?;
    let responses = fields.iter().find(|(tag, _, _)| *tag == 0x30).ok_or_else(malformed)?;
    for (_, single, _) in children(responses.1).ok_or_else(malformed)? {
        let items = children(single).ok_or_else(malformed)?;
        let Some((0x30, _, id)) = items.first() else { continue };
        if *id != cert_id {
            continue;
        }
        match items.get(1) {
            Some((0x80, _, _)) => {}
            Some((0xa1, _, _)) => return Err("the certificate is revoked".to_string()),
            _ => return Err("the responder does not know the certificate".to_string()),
        }
        let (tag, value, _) = *items.get(2).ok_or_else(malformed)?;
        let this_update = time(tag, value).ok_or_else(malformed)?;
        let next_update = match items.get(3) {
            Some((0xa0, inner, _)) => {
                let (tag, value, _, _) = element(inner).ok_or_else(malformed)?;
                Some(time(tag, value).ok_or_else(malformed)?)
            }
            _ => None,
        };
        if next_update.is_some_and(|next| next <= now) {
            return Err("the response has expired".to_string());
        }
        return Ok(Answer {
            this_update,
            next_update,
        });
    }
    Err("the response is about another certificate".to_string())
}

async fn ask(url: &str, body: Vec<u8>, cert_id: &[u8]) -> Result<(Vec<u8>, Answer), String> {
    let response = post(url, body).await?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let answer = read_response(&response, cert_id, now)?;
    Ok((response, answer))
}

/// POST `body` to the responder (the node's HTTP client, one connection, [`FETCH_TIMEOUT`]).
async fn post(url: &str, body: Vec<u8>) -> Result<Vec<u8>, String> {
    use strait_runtime::http_client::{Request, Server};
    let uri: http::Uri = url.parse().map_err(|e| format!("responder URL {url:?}: {e}"))?;
    let host = uri.host().ok_or_else(|| format!("responder URL {url:?} has no host"))?;
    let server = Server {
        host: host.to_string(),
        port: uri.port_u16().unwrap_or(80),
        tls: false,
        verify: false,
        timeout: FETCH_TIMEOUT,
        keepalive: Duration::ZERO,
    };
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/ocsp-request"),
    );
    let response = server
        .send(Request {
            method: http::Method::POST,
            path_and_query: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
            headers,
            body: body.into(),
        })
        .await?;
    if response.status != http::StatusCode::OK {
        return Err(format!("the responder answered HTTP {}", response.status));
    }
    Ok(response.body.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_encoded_short_and_long() {
        assert_eq!(der(0x04, &[1, 2]), vec![0x04, 2, 1, 2]);
        let long = der(0x04, &[0; 300]);
        assert_eq!(&long[..4], &[0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(long.len(), 304);
    }

    #[test]
    fn unreadable_input_is_an_error_not_a_panic() {
        for bytes in [
            &[][..],
            &[0x30],
            &[0x30, 0x03, 0x0a, 0x01, 0x00],
            &[0x30, 0x03, 0x0a, 0x01, 0x06],
        ] {
            assert!(read_response(bytes, &[], 0).is_err());
        }
        assert_eq!(
            read_response(&[0x30, 0x03, 0x0a, 0x01, 0x06], &[], 0),
            Err("the responder answered status 6".to_string())
        );
        assert!(responder_url(&[0x30, 0x00]).is_none());
        assert!(request(&[0x30], &[0x30]).is_none());
    }

    #[test]
    fn refresh_is_halfway_to_next_update() {
        let now = at(1_000);
        let answer = Answer {
            this_update: 1_000,
            next_update: Some(1_000 + 7_200),
        };
        assert_eq!(answer.refresh_at(now), at(1_000 + 3_600));
        let soon = Answer {
            this_update: 1_000,
            next_update: Some(1_010),
        };
        assert_eq!(soon.refresh_at(now), now + RETRY_FIRST);
    }
}
