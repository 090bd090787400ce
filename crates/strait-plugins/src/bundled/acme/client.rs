//! An ACME v2 client (RFC 8555) for the http-01 challenge: directory,
//! nonces, account (ES256 JWS), order, authorization, challenge, finalize
//! with a CSR, certificate download. Each step is one HTTPS request through
//! `strait_runtime::http_client`, the server's chain verified against the
//! system's roots (`SSL_CERT_FILE`).

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use strait_runtime::http_client::{Request, Response, Server};

/// How long the whole order may take before it is given up.
const ORDER_DEADLINE: Duration = Duration::from_secs(120);
const POLL_EVERY: Duration = Duration::from_millis(500);

/// An account key: P-256, PKCS#8.
pub struct AccountKey {
    pair: EcdsaKeyPair,
    pkcs8: Vec<u8>,
}

impl AccountKey {
    pub fn generate() -> Result<AccountKey, String> {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| "could not generate an account key")?;
        AccountKey::from_pkcs8(pkcs8.as_ref())
    }

    pub fn from_pkcs8(der: &[u8]) -> Result<AccountKey, String> {
        let rng = ring::rand::SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .map_err(|_| "the account key is not a P-256 PKCS#8 key")?;
        Ok(AccountKey {
            pair,
            pkcs8: der.to_vec(),
        })
    }

    pub fn from_pem(pem: &str) -> Result<AccountKey, String> {
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.trim())
            .map_err(|_| "the account key is not PEM")?;
        AccountKey::from_pkcs8(&der)
    }

    pub fn to_pem(&self) -> String {
        let text = base64::engine::general_purpose::STANDARD.encode(&self.pkcs8);
        let mut out = String::from("-----BEGIN PRIVATE KEY-----\n");
        for line in text.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END PRIVATE KEY-----\n");
        out
    }

    /// The public key as a JWK, members in the order RFC 7638's
    /// thumbprint hashes them.
    fn jwk(&self) -> Value {
        let point = self.pair.public_key().as_ref();
        json!({
            "crv": "P-256",
            "kty": "EC",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        })
    }

    /// RFC 7638 thumbprint, base64url.
    pub fn thumbprint(&self) -> String {
        let jwk = self.jwk();
        let canonical = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            jwk["x"].as_str().unwrap_or_default(),
            jwk["y"].as_str().unwrap_or_default()
        );
        URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes()))
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, String> {
        let rng = ring::rand::SystemRandom::new();
        self.pair
            .sign(&rng, message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| "signing failed".to_string())
    }
}

/// Where an ACME directory lives.
#[derive(Debug, Clone)]
pub struct Endpoint {
    server: Server,
    path: String,
}

/// `https://host[:port]/path` split for the HTTP client.
pub fn endpoint(url: &str, timeout: Duration) -> Result<Endpoint, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("invalid ACME URL {url}: {e}"))?;
    let tls = match parsed.scheme() {
        "https" => true,
        "http" => false,
        other => return Err(format!("unsupported scheme {other} in {url}")),
    };
    let host = parsed.host_str().ok_or_else(|| format!("no host in {url}"))?.to_string();
    let port = parsed.port_or_known_default().unwrap_or(if tls { 443 } else { 80 });
    let mut path = parsed.path().to_string();
    if let Some(query) = parsed.query() {
        path.push('?');
        path.push_str(query);
    }
    Ok(Endpoint {
        server: Server {
            host,
            port,
            tls,
            verify: true,
            timeout,
            keepalive: Duration::from_secs(30),
        },
        path,
    })
}

/// One ACME conversation (one order), with its account.
pub struct Acme {
    key: AccountKey,
    directory: Value,
    timeout: Duration,
    nonce: Option<String>,
    /// The account URL (`kid`) once registered.
    kid: Option<String>,
}

/// An ACME error document's text.
fn problem(response: &Response) -> String {
    match serde_json::from_slice::<Value>(&response.body) {
        Ok(doc) => format!(
            "{} ({})",
            doc["detail"].as_str().unwrap_or("no detail"),
            doc["type"].as_str().unwrap_or("no type")
        ),
        Err(_) => format!("status {}", response.status),
    }
}

impl Acme {
    /// Fetch the directory at `url`.
    pub async fn connect(url: &str, key: AccountKey, timeout: Duration) -> Result<Acme, String> {
        let response = get(url, timeout).await?;
        if !response.status.is_success() {
            return Err(format!("ACME directory {url}: {}", problem(&response)));
        }
        let directory: Value =
            serde_json::from_slice(&response.body).map_err(|e| format!("ACME directory {url} is not JSON: {e}"))?;
        Ok(Acme {
            key,
            directory,
            timeout,
            nonce: None,
            kid: None,
        })
    }

    fn url(&self, name: &str) -> Result<String, String> {
        self.directory[name]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("the ACME directory has no {name}"))
    }

    pub fn key_authorization(&self, token: &str) -> String {
        format!("{token}.{}", self.key.thumbprint())
    }

    async fn fresh_nonce(&mut self) -> Result<String, String> {
        if let Some(nonce) = self.nonce.take() {
            return Ok(nonce);
        }
        let url = self.url("newNonce")?;
        let at = endpoint(&url, self.timeout)?;
        let response = at
            .server
            .send(Request {
                method: Method::HEAD,
                path_and_query: at.path.clone(),
                headers: user_agent(),
                body: Bytes::new(),
            })
            .await?;
        header(&response, "replay-nonce").ok_or_else(|| "the ACME server gave no nonce".to_string())
    }

    /// POST a JWS of `payload` (None: POST-as-GET) to `url`; a `badNonce`
    /// answer is retried once with the nonce it carries.
    async fn post(&mut self, url: &str, payload: Option<&Value>) -> Result<Response, String> {
        for attempt in 0..2 {
            let nonce = self.fresh_nonce().await?;
            let mut protected = json!({ "alg": "ES256", "nonce": nonce, "url": url });
            match &self.kid {
                Some(kid) => protected["kid"] = json!(kid),
                None => protected["jwk"] = self.key.jwk(),
            }
            let protected = URL_SAFE_NO_PAD.encode(protected.to_string());
            let payload = payload.map_or_else(String::new, |p| URL_SAFE_NO_PAD.encode(p.to_string()));
            let signature = self.key.sign(format!("{protected}.{payload}").as_bytes())?;
            let body = json!({
                "protected": protected,
                "payload": payload,
                "signature": URL_SAFE_NO_PAD.encode(signature),
            });
            let at = endpoint(url, self.timeout)?;
            let mut headers = user_agent();
            headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/jose+json"));
            let response = at
                .server
                .send(Request {
                    method: Method::POST,
                    path_and_query: at.path.clone(),
                    headers,
                    body: Bytes::from(body.to_string()),
                })
                .await?;
            self.nonce = header(&response, "replay-nonce");
            let bad_nonce = response.status.as_u16() == 400 && problem(&response).contains("badNonce");
            if bad_nonce && attempt == 0 {
                continue;
            }
            return Ok(response);
        }
        Err("the ACME server refused every nonce".into())
    }

    /// Register (or find) the account for `email`.
    pub async fn account(&mut self, email: &str, eab: Option<(&str, &str)>) -> Result<(), String> {
        let url = self.url("newAccount")?;
        let mut payload = json!({ "termsOfServiceAgreed": true, "contact": [format!("mailto:{email}")] });
        if let Some((kid, hmac_key)) = eab {
            payload["externalAccountBinding"] = self.external_binding(&url, kid, hmac_key)?;
        }
        let response = self.post(&url, Some(&payload)).await?;
        if !response.status.is_success() {
            return Err(format!("account registration failed: {}", problem(&response)));
        }
        self.kid = header(&response, "location");
        if self.kid.is_none() {
            return Err("the ACME server gave no account URL".into());
        }
        Ok(())
    }

    /// RFC 8555 7.3.4: the account key signed (HS256) with the EAB key.
    fn external_binding(&self, url: &str, kid: &str, hmac_key: &str) -> Result<Value, String> {
        let secret = URL_SAFE_NO_PAD
            .decode(hmac_key.trim_end_matches('='))
            .map_err(|_| "eab_hmac_key is not base64url")?;
        let protected = URL_SAFE_NO_PAD.encode(json!({ "alg": "HS256", "kid": kid, "url": url }).to_string());
        let payload = URL_SAFE_NO_PAD.encode(self.key.jwk().to_string());
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret);
        let tag = ring::hmac::sign(&key, format!("{protected}.{payload}").as_bytes());
        Ok(json!({ "protected": protected, "payload": payload, "signature": URL_SAFE_NO_PAD.encode(tag) }))
    }

    /// Order a certificate for `host`: `publish` stores each http-01 key
    /// authorization under its token before the server is told to check it.
    /// Returns the certificate chain (PEM).
    pub async fn order<F, Fut>(&mut self, host: &str, csr_der: &[u8], publish: F) -> Result<String, String>
    where
        F: Fn(String, String) -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let deadline = tokio::time::Instant::now() + ORDER_DEADLINE;
        let url = self.url("newOrder")?;
        let identifier = if host.parse::<std::net::IpAddr>().is_ok() { "ip" } else { "dns" };
        let payload = json!({ "identifiers": [{ "type": identifier, "value": host }] });
        let response = self.post(&url, Some(&payload)).await?;
        if response.status.as_u16() != 201 {
            return Err(format!("new order failed: {}", problem(&response)));
        }
        let order_url = header(&response, "location").ok_or("the ACME server gave no order URL")?;
        let order: Value = json_of(&response)?;
        for authz_url in order["authorizations"].as_array().cloned().unwrap_or_default() {
            let authz_url = authz_url.as_str().unwrap_or_default().to_string();
            let authz = json_of(&self.post(&authz_url, None).await?)?;
            if authz["status"] == "valid" {
                continue;
            }
            let challenge = authz["challenges"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "http-01"))
                .cloned()
                .ok_or("the ACME server offered no http-01 challenge")?;
            let token = challenge["token"].as_str().ok_or("a challenge without a token")?.to_string();
            publish(token.clone(), self.key_authorization(&token)).await?;
            let challenge_url = challenge["url"].as_str().ok_or("a challenge without a URL")?.to_string();
            let answer = self.post(&challenge_url, Some(&json!({}))).await?;
            if !answer.status.is_success() {
                return Err(format!("the challenge was refused: {}", problem(&answer)));
            }
            self.wait(&authz_url, &["valid"], deadline).await?;
        }
        let order = self.wait(&order_url, &["ready", "valid"], deadline).await?;
        let order = if order["status"] == "ready" {
            let finalize = order["finalize"].as_str().ok_or("an order without finalize")?.to_string();
            let response = self
                .post(&finalize, Some(&json!({ "csr": URL_SAFE_NO_PAD.encode(csr_der) })))
                .await?;
            if !response.status.is_success() {
                return Err(format!("finalize failed: {}", problem(&response)));
            }
            self.wait(&order_url, &["valid"], deadline).await?
        } else {
            order
        };
        let certificate = order["certificate"].as_str().ok_or("a valid order without a certificate")?;
        let response = self.post(certificate, None).await?;
        if !response.status.is_success() {
            return Err(format!("downloading the certificate failed: {}", problem(&response)));
        }
        Ok(String::from_utf8_lossy(&response.body).into_owned())
    }

    /// POST-as-GET `url` until its status is one of `wanted` (`invalid`
    /// ends it with the server's reason).
    async fn wait(&mut self, url: &str, wanted: &[&str], deadline: tokio::time::Instant) -> Result<Value, String> {
        loop {
            let doc = json_of(&self.post(url, None).await?)?;
            let status = doc["status"].as_str().unwrap_or_default();
            if wanted.contains(&status) {
                return Ok(doc);
            }
            if status == "invalid" {
                let why = doc["challenges"]
                    .as_array()
                    .and_then(|c| c.iter().find_map(|c| c["error"]["detail"].as_str()))
                    .or_else(|| doc["error"]["detail"].as_str())
                    .unwrap_or("no reason given");
                return Err(format!("the ACME server marked {url} invalid: {why}"));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("{url} stayed {status} for {ORDER_DEADLINE:?}"));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }
}

/// RFC 8555 6.1: every request names its client.
fn user_agent() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(concat!("strait-acme/", env!("CARGO_PKG_VERSION"))),
    );
    headers
}

fn header(response: &Response, name: &str) -> Option<String> {
    response.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

fn json_of(response: &Response) -> Result<Value, String> {
    if !response.status.is_success() {
        return Err(problem(response));
    }
    serde_json::from_slice(&response.body).map_err(|e| format!("the ACME server answered no JSON: {e}"))
}

async fn get(url: &str, timeout: Duration) -> Result<Response, String> {
    let at = endpoint(url, timeout)?;
    at.server
        .send(Request {
            method: Method::GET,
            path_and_query: at.path.clone(),
            headers: user_agent(),
            body: Bytes::new(),
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_pem_and_have_a_stable_thumbprint() {
        let key = AccountKey::generate().expect("key");
        let again = AccountKey::from_pem(&key.to_pem()).expect("pem");
        assert_eq!(key.thumbprint(), again.thumbprint());
        assert_eq!(key.thumbprint().len(), 43);
        assert!(AccountKey::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----").is_err());
    }

    #[test]
    fn endpoints_split_urls() {
        let at = endpoint("https://acme.example:14000/dir?x=1", Duration::from_secs(1)).expect("url");
        assert_eq!((at.server.host.as_str(), at.server.port, at.server.tls), ("acme.example", 14000, true));
        assert_eq!(at.path, "/dir?x=1");
        assert!(endpoint("ftp://x/", Duration::from_secs(1)).is_err());
    }
}
