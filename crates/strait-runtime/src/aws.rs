//! AWS request signing (Signature Version 4) and the credentials it uses:
//! a static key pair, the environment's (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), and temporary ones from
//! STS `AssumeRole`, kept until shortly before they expire.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use ring::{digest, hmac};

use crate::clock::UtcTime;
use crate::http_client::{Request, Server};

#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// The environment's key pair (and session token), when set.
    pub fn from_env() -> Option<Credentials> {
        let key = std::env::var("AWS_ACCESS_KEY_ID").ok().filter(|k| !k.is_empty())?;
        let secret = std::env::var("AWS_SECRET_ACCESS_KEY").ok().filter(|s| !s.is_empty())?;
        Some(Credentials {
            access_key: key,
            secret_key: secret,
            session_token: std::env::var("AWS_SESSION_TOKEN").ok().filter(|t| !t.is_empty()),
        })
    }
}

/// RFC 3986 encoding as SigV4 wants it: all but `A-Za-z0-9-._~` (and `/`
/// when `keep_slash`).
pub fn uri_encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        let plain = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') || (keep_slash && b == b'/');
        match plain {
            true => out.push(b as char),
            false => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, data).as_ref())
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
        .as_ref()
        .to_vec()
}

/// `YYYYMMDDTHHMMSSZ` for `secs` since the epoch.
pub fn amz_date(secs: u64) -> String {
    let t = UtcTime::of(secs);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

/// What a signature covers.
pub struct ToSign<'a> {
    pub method: &'a str,
    /// The path as sent (already encoded); non-S3 services sign it encoded again.
    pub path: &'a str,
    /// `(name, value)` pairs, not encoded.
    pub query: &'a [(String, String)],
    pub host: &'a str,
    pub payload: &'a [u8],
    pub region: &'a str,
    pub service: &'a str,
}

/// Signs a request: the headers to add (`X-Amz-Date`,
/// `X-Amz-Security-Token` with temporary credentials, `Authorization`).
/// Signed: `host`, `x-amz-date` and the token.
pub fn sign(request: &ToSign<'_>, credentials: &Credentials, now_secs: u64) -> Vec<(HeaderName, String)> {
    let date_time = amz_date(now_secs);
    let date = &date_time[..8];
    let mut headers: Vec<(&str, String)> = vec![("host", request.host.to_string()), ("x-amz-date", date_time.clone())];
    if let Some(token) = &credentials.session_token {
        headers.push(("x-amz-security-token", token.clone()));
    }
    headers.sort_by(|a, b| a.0.cmp(b.0));
    let signed_headers = headers.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(";");
    let canonical_headers: String = headers.iter().map(|(n, v)| format!("{n}:{}\n", v.trim())).collect();
    let mut query: Vec<(String, String)> = request
        .query
        .iter()
        .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
        .collect();
    query.sort();
    let canonical_query = query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let canonical_request = format!(
        "{}\n{}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{}",
        request.method,
        uri_encode(request.path, true),
        sha256_hex(request.payload)
    );
    let scope = format!("{date}/{}/{}/aws4_request", request.region, request.service);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{date_time}\n{scope}\n{}",
        sha256_hex(canonical_request.as_bytes())
    );
    let key = hmac(format!("AWS4{}", credentials.secret_key).as_bytes(), date);
    let key = hmac(&key, request.region);
    let key = hmac(&key, request.service);
    let key = hmac(&key, "aws4_request");
    let signature = hex(&hmac(&key, &string_to_sign));
    let mut out = vec![(HeaderName::from_static("x-amz-date"), date_time)];
    if let Some(token) = &credentials.session_token {
        out.push((HeaderName::from_static("x-amz-security-token"), token.clone()));
    }
    out.push((
        http::header::AUTHORIZATION,
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            credentials.access_key
        ),
    ));
    out
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Where STS is asked to assume a role.
#[derive(Debug, Clone)]
pub struct AssumeRole {
    pub role_arn: String,
    pub session_name: String,
    pub region: String,
    /// `https://sts.<region>.amazonaws.com` unless configured.
    pub endpoint: Server,
    pub path: String,
}

type RoleCache = Mutex<HashMap<String, (Credentials, Instant)>>;

fn roles() -> &'static RoleCache {
    static ROLES: OnceLock<RoleCache> = OnceLock::new();
    ROLES.get_or_init(Default::default)
}

/// The text of the first `<name>` element of an XML document.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(xml[start..end].trim())
}

impl AssumeRole {
    /// Temporary credentials for the role, signed with `base`: cached
    /// until five minutes before they expire (at most an hour).
    pub async fn credentials(&self, base: &Credentials) -> Result<Credentials, String> {
        let key = format!(
            "{}|{}|{}|{}",
            self.role_arn, self.session_name, base.access_key, self.endpoint.host
        );
        if let Some((credentials, until)) = roles().lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            if Instant::now() < *until {
                return Ok(credentials.clone());
            }
        }
        let body = format!(
            "Action=AssumeRole&Version=2011-06-15&RoleArn={}&RoleSessionName={}",
            uri_encode(&self.role_arn, false),
            uri_encode(&self.session_name, false)
        );
        let host = match self.endpoint.port {
            443 | 80 => self.endpoint.host.clone(),
            port => format!("{}:{port}", self.endpoint.host),
        };
        let signed = sign(
            &ToSign {
                method: "POST",
                path: &self.path,
                query: &[],
                host: &host,
                payload: body.as_bytes(),
                region: &self.region,
                service: "sts",
            },
            base,
            now_secs(),
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8"),
        );
        for (name, value) in signed {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
        let answer = self
            .endpoint
            .send(Request {
                method: Method::POST,
                path_and_query: self.path.clone(),
                headers,
                body: Bytes::from(body),
            })
            .await?;
        let text = String::from_utf8_lossy(&answer.body);
        if !answer.status.is_success() {
            let message = element(&text, "Message").unwrap_or(&text);
            return Err(format!("STS AssumeRole answered {}: {message}", answer.status.as_u16()));
        }
        let credentials = Credentials {
            access_key: element(&text, "AccessKeyId")
                .ok_or("no AccessKeyId in STS's answer")?
                .to_string(),
            secret_key: element(&text, "SecretAccessKey")
                .ok_or("no SecretAccessKey in STS's answer")?
                .to_string(),
            session_token: element(&text, "SessionToken").map(str::to_string),
        };
        // Expiration is ISO 8601; keep them at most 55 minutes (an hour is
        // STS's default duration) without parsing it.
        let until = Instant::now() + Duration::from_secs(55 * 60);
        roles()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (credentials.clone(), until));
        Ok(credentials)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's published example (sig-v4 test suite, `get-vanilla`):
    /// `GET / host:example.amazonaws.com`, 2015-08-30T12:36:00Z, us-east-1,
    /// service `service`.
    #[test]
    fn the_signature_is_the_test_suites() {
        let credentials = Credentials {
            access_key: "AKIDEXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        };
        let signed = sign(
            &ToSign {
                method: "GET",
                path: "/",
                query: &[],
                host: "example.amazonaws.com",
                payload: b"",
                region: "us-east-1",
                service: "service",
            },
            &credentials,
            1_440_938_160,
        );
        assert_eq!(signed[0].1, "20150830T123600Z");
        assert_eq!(
            signed[1].1,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn paths_are_encoded_again_and_xml_is_read() {
        assert_eq!(
            uri_encode("/functions/arn%3Aaws/x y", true),
            "/functions/arn%253Aaws/x%20y"
        );
        assert_eq!(
            element("<a><AccessKeyId> K </AccessKeyId></a>", "AccessKeyId"),
            Some("K")
        );
    }
}
