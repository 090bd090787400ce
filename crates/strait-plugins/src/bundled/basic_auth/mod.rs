//! `basic-auth` (Kong priority 1100): `Authorization` or
//! `Proxy-Authorization: Basic base64(username:password)` checked against
//! a `basicauth_credentials` entry found by username in O(1); the stored
//! password is Kong's salted SHA-1, compared in constant time.

mod schema;

/// `basic-auth` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "basic-auth",
    priority: 1100,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(BasicAuth::from_config(config)?)),
};

use base64::Engine;
use serde_json::{Map, Value};

use crate::auth::{accept_credential, combine, unauthorized};
use crate::config::ConfigReader;
use crate::context::{AuthenticatedCredential, RequestCtx};
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

#[derive(Debug)]
pub struct BasicAuth {
    anonymous: Option<String>,
    hide_credentials: bool,
    www_authenticate: String,
}

/// `username` and `password` of a `Basic` header value, if it is one.
fn credentials(value: &str) -> Option<(String, String)> {
    let value = value.trim_start();
    let rest = value.strip_prefix("Basic").or_else(|| value.strip_prefix("basic"))?;
    let encoded = rest.trim();
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (username, password) = text.split_once(':')?;
    (!username.is_empty()).then(|| (username.to_string(), password.to_string()))
}

fn equal_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl BasicAuth {
    pub fn from_config(config: &Map<String, Value>) -> Result<BasicAuth, PluginError> {
        let c = ConfigReader::new(config);
        let realm = c.string("realm")?.unwrap_or_else(|| "service".to_string());
        Ok(BasicAuth {
            anonymous: c.string("anonymous")?.filter(|a| !a.is_empty()),
            hide_credentials: c.bool("hide_credentials", false)?,
            www_authenticate: format!("Basic realm=\"{realm}\""),
        })
    }

    fn fail(&self) -> PluginResponse {
        unauthorized(401, "Unauthorized", Some(&self.www_authenticate))
    }

    fn authenticate<'a>(&self, ctx: &mut RequestCtx<'a>) -> Result<(), PluginResponse> {
        let proxy = ctx.header("proxy-authorization").map(str::to_string);
        let plain = ctx.header("authorization").map(str::to_string);
        if proxy.is_none() && plain.is_none() {
            return Err(self.fail());
        }
        if self.hide_credentials {
            ctx.headers.remove("proxy-authorization");
            ctx.headers.remove("authorization");
        }
        let directory = ctx.directory;
        let found = [proxy, plain].into_iter().flatten().find_map(|value| {
            let (username, password) = credentials(&value)?;
            let credential = directory.basicauth_credential(&username)?;
            Some((credential, password))
        });
        let Some((credential, password)) = found else {
            return Err(self.fail());
        };
        let digest = strait_core::schema::basicauth_password_hash(&password, credential.consumer.id);
        if !equal_in_constant_time(digest.as_bytes(), credential.password.as_bytes()) {
            return Err(self.fail());
        }
        let authenticated = AuthenticatedCredential::new(credential.id, &credential.username, "basic-auth");
        accept_credential(ctx, credential.consumer.id, authenticated)
    }
}

impl Plugin for BasicAuth {
    fn name(&self) -> &'static str {
        "basic-auth"
    }

    fn priority(&self) -> i32 {
        1100
    }

    /// Reads none of Kong's identity fields (identity.rs).
    fn reads_identity_fields(&self) -> bool {
        false
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        combine(ctx, self.anonymous.as_deref(), |ctx| self.authenticate(ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_basic_headers() {
        assert_eq!(
            credentials("Basic dXNlcjpwYTpzcw=="),
            Some(("user".to_string(), "pa:ss".to_string()))
        );
        assert_eq!(credentials("basic   dXNlcjo="), Some(("user".into(), "".into())));
        assert_eq!(credentials("Bearer x"), None);
        assert_eq!(credentials("Basic !!!"), None);
        assert_eq!(credentials("Basic Ong="), None, "empty username");
        assert!(equal_in_constant_time(b"abc", b"abc"));
        assert!(!equal_in_constant_time(b"abc", b"abd"));
    }
}
