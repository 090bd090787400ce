//! `hmac-auth` (Kong priority 1030): an `Authorization` or
//! `Proxy-Authorization: hmac username="...", algorithm="...",
//! headers="...", signature="..."` header signs chosen request headers
//! with the secret of the `hmacauth_credentials` entry of that username
//! (found in O(1)). The request must carry a recent `X-Date` or `Date`,
//! and, when configured, a `Digest` of its body.

mod schema;

/// `hmac-auth` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "hmac-auth",
    priority: 1030,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(HmacAuth::from_config(config)?)),
};

mod authorization;
mod http_time;

#[cfg(test)]
mod tests;

use base64::Engine;
use ring::{digest, hmac};
use serde_json::{Map, Value};

use self::authorization::HmacParams;
use crate::auth::{accept_credential, combine, nginx_base64, unauthorized};
use crate::config::ConfigReader;
use crate::context::{AuthenticatedCredential, RequestCtx};
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

const SIGNATURE_NOT_VALID: &str = "HMAC signature cannot be verified";
const SIGNATURE_NOT_SAME: &str = "HMAC signature does not match";
const DATE_REQUIRED: &str =
    "HMAC signature cannot be verified, a valid date or x-date header is required for HMAC Authentication";

/// Kong's `hmac` table: the digests a client may sign with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HmacAlgorithm {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl HmacAlgorithm {
    const ALL: [HmacAlgorithm; 4] = [
        HmacAlgorithm::Sha1,
        HmacAlgorithm::Sha256,
        HmacAlgorithm::Sha384,
        HmacAlgorithm::Sha512,
    ];

    fn from_name(name: &str) -> Option<HmacAlgorithm> {
        HmacAlgorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    fn name(self) -> &'static str {
        match self {
            HmacAlgorithm::Sha1 => "hmac-sha1",
            HmacAlgorithm::Sha256 => "hmac-sha256",
            HmacAlgorithm::Sha384 => "hmac-sha384",
            HmacAlgorithm::Sha512 => "hmac-sha512",
        }
    }

    fn ring(self) -> hmac::Algorithm {
        match self {
            HmacAlgorithm::Sha1 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            HmacAlgorithm::Sha256 => hmac::HMAC_SHA256,
            HmacAlgorithm::Sha384 => hmac::HMAC_SHA384,
            HmacAlgorithm::Sha512 => hmac::HMAC_SHA512,
        }
    }
}

#[derive(Debug)]
pub struct HmacAuth {
    hide_credentials: bool,
    clock_skew: f64,
    anonymous: Option<String>,
    validate_request_body: bool,
    enforce_headers: Vec<String>,
    algorithms: Vec<HmacAlgorithm>,
    www_authenticate: String,
}

/// The first value of header `name` as Kong's `kong.request.get_header`
/// reads it (case-insensitive, `_` standing for `-`).
fn header_text(ctx: &RequestCtx<'_>, name: &str) -> Option<String> {
    let name = name.to_ascii_lowercase().replace('_', "-");
    let value = ctx.headers.get(name.as_str())?;
    Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// `METHOD`'s HTTP version as Lua's `%.01f` writes it.
fn version_text(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "0.9",
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2.0",
        http::Version::HTTP_3 => "3.0",
        _ => "1.1",
    }
}

/// Kong's `create_hash` input: one line per listed header, `name: value`,
/// with `@request-target` and `request-line` computed when no such header
/// was sent, and a bare `name:` for any other absent header.
fn signing_string(ctx: &RequestCtx<'_>, headers: &[String]) -> String {
    let uri = match ctx.uri.query() {
        Some(query) => format!("{}?{query}", ctx.path()),
        None => ctx.path().to_string(),
    };
    let lines: Vec<String> = headers
        .iter()
        .map(|name| match (header_text(ctx, name), name.as_str()) {
            (Some(value), _) => format!("{name}: {value}"),
            (None, "@request-target") => {
                format!("{name}: {} {uri}", ctx.method.as_str().to_ascii_lowercase())
            }
            (None, "request-line") => {
                format!("{} {uri} HTTP/{}", ctx.method, version_text(ctx.http_version))
            }
            (None, _) => format!("{name}:"),
        })
        .collect();
    lines.join("\n")
}

/// Kong's `validate_body`: without a `Digest` the body must be empty.
fn body_matches_digest(ctx: &RequestCtx<'_>) -> bool {
    let body = ctx.body.as_deref().unwrap_or_default();
    let Some(received) = header_text(ctx, "digest") else {
        return body.is_empty();
    };
    let sha256 = digest::digest(&digest::SHA256, body);
    let created = format!(
        "SHA-256={}",
        base64::engine::general_purpose::STANDARD.encode(sha256.as_ref())
    );
    created == received
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl HmacAuth {
    pub fn from_config(config: &Map<String, Value>) -> Result<HmacAuth, PluginError> {
        let c = ConfigReader::new(config);
        let algorithms = match config.get("algorithms") {
            None | Some(Value::Null) => HmacAlgorithm::ALL.to_vec(),
            Some(_) => c
                .strings("algorithms")?
                .iter()
                .map(|name| {
                    HmacAlgorithm::from_name(name).ok_or_else(|| {
                        PluginError::invalid(
                            "algorithms",
                            "expected one of: hmac-sha1, hmac-sha256, hmac-sha384, hmac-sha512",
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let clock_skew = c.number("clock_skew", 300.0)?;
        if clock_skew <= 0.0 {
            return Err(PluginError::invalid("clock_skew", "value must be greater than 0"));
        }
        Ok(HmacAuth {
            hide_credentials: c.bool("hide_credentials", false)?,
            clock_skew,
            anonymous: c.string("anonymous")?.filter(|a| !a.is_empty()),
            validate_request_body: c.bool("validate_request_body", false)?,
            enforce_headers: c.strings("enforce_headers")?,
            algorithms,
            www_authenticate: match c.string("realm")? {
                Some(realm) => format!("hmac realm=\"{realm}\""),
                None => "hmac".to_string(),
            },
        })
    }

    fn fail(&self, message: &str) -> PluginResponse {
        unauthorized(401, message, Some(&self.www_authenticate))
    }

    /// Kong's `validate_clock_skew` for one header.
    fn recent(&self, ctx: &RequestCtx<'_>, header: &str) -> bool {
        let Some(sent) = header_text(ctx, header).and_then(|date| http_time::parse(&date)) else {
            return false;
        };
        (unix_now() - sent).unsigned_abs() as f64 <= self.clock_skew
    }

    /// Kong's `validate_params`: the algorithm, once the enforced headers
    /// are all signed and the algorithm is allowed.
    fn check_params(&self, params: &HmacParams) -> Result<HmacAlgorithm, &'static str> {
        if let Some(missing) = self.enforce_headers.iter().find(|h| !params.headers.contains(h)) {
            tracing::debug!(header = %missing, "enforced header not used for signature creation");
            return Err("enforced header not used for signature creation");
        }
        HmacAlgorithm::from_name(&params.algorithm)
            .filter(|a| self.algorithms.contains(a))
            .ok_or("algorithm not supported")
    }

    fn authenticate<'a>(&self, ctx: &mut RequestCtx<'a>) -> Result<(), PluginResponse> {
        let authorization = header_text(ctx, "authorization");
        let proxy_authorization = header_text(ctx, "proxy-authorization");
        if authorization.is_none() && proxy_authorization.is_none() {
            return Err(self.fail("Unauthorized"));
        }
        if !(self.recent(ctx, "x-date") || self.recent(ctx, "date")) {
            return Err(self.fail(DATE_REQUIRED));
        }
        // Proxy-Authorization first; the header used is the one hidden,
        // whether or not authentication then succeeds (as in Kong).
        let (params, used) = match proxy_authorization.as_deref().and_then(authorization::parse) {
            Some(params) => (Some(params), http::header::PROXY_AUTHORIZATION),
            None => (
                authorization.as_deref().and_then(authorization::parse),
                http::header::AUTHORIZATION,
            ),
        };
        if self.hide_credentials {
            ctx.headers.remove(used);
        }
        let params = params.ok_or_else(|| self.fail(SIGNATURE_NOT_VALID))?;
        let algorithm = self.check_params(&params).map_err(|reason| {
            tracing::debug!(%reason, "hmac parameters refused");
            self.fail(SIGNATURE_NOT_VALID)
        })?;
        let directory = ctx.directory;
        let credential = directory
            .hmacauth_credential(&params.username)
            .ok_or_else(|| self.fail(SIGNATURE_NOT_VALID))?;
        let signing_string = signing_string(ctx, &params.headers);
        let key = hmac::Key::new(algorithm.ring(), credential.secret.as_bytes());
        let signature = nginx_base64::decode_standard(&params.signature).unwrap_or_default();
        // ring compares the tags in constant time.
        if hmac::verify(&key, signing_string.as_bytes(), &signature).is_err() {
            return Err(self.fail(SIGNATURE_NOT_SAME));
        }
        if self.validate_request_body && !body_matches_digest(ctx) {
            tracing::debug!("digest validation failed");
            return Err(self.fail(SIGNATURE_NOT_SAME));
        }
        let authenticated = AuthenticatedCredential::new(credential.id, &credential.username, "hmac-auth");
        accept_credential(ctx, credential.consumer.id, authenticated)
    }
}

impl Plugin for HmacAuth {
    fn name(&self) -> &'static str {
        "hmac-auth"
    }

    fn priority(&self) -> i32 {
        1030
    }

    fn reads_request_body(&self) -> bool {
        self.validate_request_body
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        combine(ctx, self.anonymous.as_deref(), |ctx| self.authenticate(ctx))
    }
}
