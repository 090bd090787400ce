//! `jwt` (Kong priority 1450): a JSON Web Token from the query string, a
//! cookie or a `Bearer` header names a `jwt_secrets` entry by its key
//! claim (found in O(1)); the token must be signed with that credential's
//! algorithm and secret or public key, and may have to be unexpired.

mod schema;

/// `jwt` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "jwt",
    priority: 1450,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Jwt::from_config(config)?)),
};

mod signature;
mod token;

#[cfg(test)]
mod tests;

use std::borrow::Cow;

use http::Method;
use serde_json::{json, Map, Value};

use self::signature::Algorithm;
use self::token::{Found, KeyClaim, Sources};
use crate::auth::{combine, nginx_base64, set_consumer, unauthorized};
use crate::config::ConfigReader;
use crate::context::{AuthenticatedCredential, RequestCtx};
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

/// The token an authenticated request carried (Kong's
/// `kong.ctx.shared.authenticated_jwt_token`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatedJwtToken(pub String);

/// A registered claim Kong can verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    Exp,
    Nbf,
}

impl Claim {
    fn name(self) -> &'static str {
        match self {
            Claim::Exp => "exp",
            Claim::Nbf => "nbf",
        }
    }
}

#[derive(Debug)]
pub struct Jwt {
    uri_param_names: Vec<String>,
    cookie_names: Vec<String>,
    header_names: Vec<String>,
    key_claim_name: String,
    secret_is_base64: bool,
    claims_to_verify: Vec<Claim>,
    anonymous: Option<String>,
    run_on_preflight: bool,
    maximum_expiration: f64,
    /// `WWW-Authenticate` when no token was found.
    www_authenticate: String,
    /// `WWW-Authenticate` for a token that was refused.
    www_authenticate_error: String,
}

/// A list setting: Kong's default when absent, the given list otherwise
/// (an empty list turns that source off).
fn list_or(
    c: &ConfigReader<'_>,
    config: &Map<String, Value>,
    field: &str,
    default: &[&str],
) -> Result<Vec<String>, PluginError> {
    match config.get(field) {
        None | Some(Value::Null) => Ok(default.iter().map(|s| s.to_string()).collect()),
        Some(_) => c.strings(field),
    }
}

impl Jwt {
    pub fn from_config(config: &Map<String, Value>) -> Result<Jwt, PluginError> {
        let c = ConfigReader::new(config);
        let claims_to_verify = c
            .strings("claims_to_verify")?
            .iter()
            .map(|claim| match claim.as_str() {
                "exp" => Ok(Claim::Exp),
                "nbf" => Ok(Claim::Nbf),
                _ => Err(PluginError::invalid("claims_to_verify", "expected one of: exp, nbf")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let realm = c.string("realm")?;
        let www_authenticate = match &realm {
            Some(realm) => format!("Bearer realm=\"{realm}\""),
            None => "Bearer".to_string(),
        };
        let www_authenticate_error = match &realm {
            Some(_) => format!("{www_authenticate}, error=\"invalid_token\""),
            None => "Bearer error=\"invalid_token\"".to_string(),
        };
        let header_names = list_or(&c, config, "header_names", &["authorization"])?
            .iter()
            .map(|name| name.to_ascii_lowercase().replace('_', "-"))
            .collect();
        Ok(Jwt {
            uri_param_names: list_or(&c, config, "uri_param_names", &["jwt"])?,
            cookie_names: list_or(&c, config, "cookie_names", &[])?,
            header_names,
            key_claim_name: c.string("key_claim_name")?.unwrap_or_else(|| "iss".to_string()),
            secret_is_base64: c.bool("secret_is_base64", false)?,
            claims_to_verify,
            anonymous: c.string("anonymous")?.filter(|a| !a.is_empty()),
            run_on_preflight: c.bool("run_on_preflight", true)?,
            maximum_expiration: c.number("maximum_expiration", 0.0)?,
            www_authenticate,
            www_authenticate_error,
        })
    }

    fn fail(&self, message: &str) -> PluginResponse {
        unauthorized(401, message, Some(&self.www_authenticate_error))
    }

    /// Kong answers claim errors with the errors themselves as the body
    /// (`{"exp":"token expired"}`), not a `message`.
    fn fail_claims(&self, errors: Map<String, Value>) -> PluginResponse {
        PluginResponse {
            status: 401,
            headers: vec![("content-type".into(), "application/json; charset=utf-8".into())],
            body: Value::Object(errors).to_string().into(),
        }
        .with_header("www-authenticate", self.www_authenticate_error.clone())
    }

    /// Kong's `verify_registered_claims` then `check_maximum_expiration`.
    fn check_claims(&self, claims: Option<&Map<String, Value>>, now: f64) -> Result<(), PluginResponse> {
        let mut errors = Map::new();
        for claim in &self.claims_to_verify {
            let value = claims.and_then(|c| c.get(claim.name())).and_then(Value::as_f64);
            let problem = match (claim, value) {
                (_, None) => Some("must be a number"),
                (Claim::Exp, Some(exp)) if exp <= now => Some("token expired"),
                (Claim::Nbf, Some(nbf)) if nbf > now => Some("token not valid yet"),
                _ => None,
            };
            if let Some(problem) = problem {
                errors.insert(claim.name().into(), json!(problem));
            }
        }
        if !errors.is_empty() {
            return Err(self.fail_claims(errors));
        }
        if self.maximum_expiration > 0.0 {
            let exp = claims.and_then(|c| c.get("exp")).and_then(Value::as_f64);
            if exp.is_none_or(|exp| exp - now > self.maximum_expiration) {
                errors.insert("exp".into(), json!("exceeds maximum allowed expiration"));
                return Err(self.fail_claims(errors));
            }
        }
        Ok(())
    }

    fn authenticate<'a>(&self, ctx: &mut RequestCtx<'a>) -> Result<(), PluginResponse> {
        let sources = Sources {
            uri_param_names: &self.uri_param_names,
            cookie_names: &self.cookie_names,
            header_names: &self.header_names,
        };
        let token = match token::retrieve(ctx, &sources) {
            Found::None => return Err(unauthorized(401, "Unauthorized", Some(&self.www_authenticate))),
            Found::Many => return Err(self.fail("Multiple tokens provided")),
            Found::Unrecognizable => return Err(self.fail("Unrecognizable token")),
            Found::One(token) => token,
        };
        let jwt = token::decode(&token).map_err(|error| self.fail(&format!("Bad token; {error}")))?;
        let claim = &self.key_claim_name;
        let key = match jwt.key_claim(claim) {
            KeyClaim::Key(key) => key,
            KeyClaim::Missing => return Err(self.fail(&format!("No mandatory '{claim}' in claims"))),
            KeyClaim::Empty => return Err(self.fail(&format!("Invalid '{claim}' in claims"))),
            KeyClaim::Unusable => return Err(self.fail(&format!("No credentials found for given '{claim}'"))),
        };
        let directory = ctx.directory;
        let secret = directory
            .jwt_secret(&key)
            .ok_or_else(|| self.fail(&format!("No credentials found for given '{claim}'")))?;
        if Algorithm::from_name(&secret.algorithm) != Some(jwt.algorithm) {
            return Err(self.fail("Invalid algorithm"));
        }
        let verifying_key: Option<Cow<'_, [u8]>> = match (jwt.algorithm.is_symmetric(), self.secret_is_base64) {
            (true, true) => nginx_base64::decode_url(&secret.secret).map(Cow::Owned),
            (true, false) => Some(Cow::Borrowed(secret.secret.as_bytes())),
            (false, _) => secret
                .rsa_public_key
                .as_deref()
                .map(|pem| Cow::Borrowed(pem.as_bytes())),
        };
        let verifying_key = verifying_key.ok_or_else(|| self.fail("Invalid key/secret"))?;
        if !signature::verify(
            jwt.algorithm,
            jwt.signing_input.as_bytes(),
            &jwt.signature,
            &verifying_key,
        ) {
            return Err(self.fail("Invalid signature"));
        }
        self.check_claims(jwt.claims(), unix_now())?;
        let consumer = directory
            .consumer(secret.consumer.id)
            .ok_or_else(|| PluginResponse::message(401, &format!("Could not find consumer for '{claim}={key}'")))?;
        let credential = AuthenticatedCredential::new(secret.id, &secret.key, "jwt");
        set_consumer(ctx, Some(consumer), Some(credential));
        ctx.shared.insert(AuthenticatedJwtToken(token));
        Ok(())
    }
}

/// Seconds since the epoch (Kong's `ngx.time()`).
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as f64)
        .unwrap_or(0.0)
}

impl Plugin for Jwt {
    fn name(&self) -> &'static str {
        "jwt"
    }

    fn priority(&self) -> i32 {
        1450
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        if !self.run_on_preflight && *ctx.method == Method::OPTIONS {
            return Flow::Continue;
        }
        combine(ctx, self.anonymous.as_deref(), |ctx| self.authenticate(ctx))
    }
}
