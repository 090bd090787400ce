//! `ldap-auth` (Kong priority 1200): `Authorization` (or
//! `Proxy-Authorization`) `<header_type> base64(user:password)` checked by
//! an LDAP simple bind as `<attribute>=<user>,<base_dn>` (plain, LDAPS or
//! StartTLS), the verdict cached for `cache_ttl` seconds. A success
//! authenticates a credential without a consumer, as in Kong.

mod schema;

/// `ldap-auth` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "ldap-auth",
    priority: 1200,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(LdapAuth::from_config(config)?)),
};

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use strait_runtime::ldap::{Bind, LdapServer, LdapTls};

use crate::auth::{set_anonymous, set_consumer, unauthorized};
use crate::config::ConfigReader;
use crate::context::{AuthenticatedCredential, RequestCtx};
use crate::phase::{AccessFuture, Flow, Plugin, PluginResponse};
use crate::PluginError;

#[derive(Debug)]
pub struct LdapAuth {
    server: LdapServer,
    base_dn: String,
    attribute: String,
    cache_ttl: Duration,
    /// What the cache key hashes besides the user and password (Kong's).
    key_prefix: String,
    hide_credentials: bool,
    anonymous: Option<String>,
    /// `header_type`, lower case, as credentials are looked for.
    header_type: String,
    www_authenticate: String,
}

/// A bind's verdict as the cache keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accepted,
    Refused,
    /// The server could not be asked: Kong caches this too, and answers 500.
    Failed,
}

type Cache = Mutex<HashMap<[u8; 32], (Verdict, Instant)>>;

/// The verdicts of every ldap-auth instance of the node (Kong's node cache).
fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

const CACHE_ENTRIES: usize = 10_000;

fn cached(key: &[u8; 32]) -> Option<Verdict> {
    let cache = cache().lock().unwrap_or_else(|p| p.into_inner());
    cache
        .get(key)
        .filter(|(_, until)| Instant::now() < *until)
        .map(|(verdict, _)| *verdict)
}

fn remember(key: [u8; 32], verdict: Verdict, ttl: Duration) {
    let mut cache = cache().lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= CACHE_ENTRIES {
        let now = Instant::now();
        cache.retain(|_, (_, until)| now < *until);
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
    }
    cache.insert(key, (verdict, Instant::now() + ttl));
}

fn internal_error() -> PluginResponse {
    PluginResponse::message(500, "An unexpected error occurred")
}

impl LdapAuth {
    pub fn from_config(config: &Map<String, Value>) -> Result<LdapAuth, PluginError> {
        let c = ConfigReader::new(config);
        let required = |field: &str| -> Result<String, PluginError> {
            c.string(field)?
                .ok_or_else(|| PluginError::invalid(field, "required field missing"))
        };
        let host = required("ldap_host")?;
        let port = u16::try_from(c.integer("ldap_port", 389)?)
            .map_err(|_| PluginError::invalid("ldap_port", "value should be between 0 and 65535"))?;
        let tls = match (c.bool("ldaps", false)?, c.bool("start_tls", false)?) {
            (true, true) => {
                return Err(PluginError::invalid(
                    "start_tls",
                    "'ldaps' and 'start_tls' cannot be enabled simultaneously",
                ))
            }
            (true, false) => LdapTls::Ldaps,
            (false, true) => LdapTls::StartTls,
            (false, false) => LdapTls::Plain,
        };
        let base_dn = required("base_dn")?;
        let attribute = required("attribute")?;
        let cache_ttl = c.number("cache_ttl", 60.0)?;
        let header_type = c.string("header_type")?.unwrap_or_else(|| "ldap".into());
        let scheme = match header_type.as_str() {
            "ldap" => "LDAP".to_string(),
            other => other.to_string(),
        };
        let www_authenticate = match c.string("realm")? {
            Some(realm) => format!("{scheme} realm=\"{realm}\""),
            None => scheme,
        };
        let verify = c.bool("verify_ldap_host", false)?;
        Ok(LdapAuth {
            // Kong's key (host, port, base DN, attribute, TTL), and how the
            // server is reached: a verdict over an unverified connection is
            // not taken for a route that verifies.
            key_prefix: format!(
                "{}:{port}:{base_dn}:{attribute}:{}:{tls:?}:{verify}:",
                host.to_ascii_lowercase(),
                cache_ttl.max(0.0) as u64
            ),
            server: LdapServer {
                host,
                port,
                tls,
                verify,
                timeout: crate::observability::millis(c.number("timeout", 10_000.0)?),
                keepalive: crate::observability::millis(c.number("keepalive", 60_000.0)?),
            },
            base_dn,
            attribute,
            cache_ttl: crate::observability::seconds(cache_ttl),
            hide_credentials: c.bool("hide_credentials", false)?,
            anonymous: c.string("anonymous")?.filter(|a| !a.is_empty()),
            header_type: header_type.to_ascii_lowercase(),
            www_authenticate,
        })
    }

    /// The user and password of a header value: `<header_type>`
    /// (any case, after optional spaces), spaces, then base64 of
    /// `user:password` with a non-empty password.
    fn credentials(&self, value: &str) -> Option<(String, String)> {
        let value = value.trim_start();
        let head = value.get(..self.header_type.len())?;
        if !head.eq_ignore_ascii_case(&self.header_type) {
            return None;
        }
        let rest = &value[self.header_type.len()..];
        let encoded = rest.trim_start();
        if encoded.len() == rest.len() {
            return None;
        }
        let decoded = crate::auth::nginx_base64::decode_standard(encoded)?;
        let text = String::from_utf8_lossy(&decoded);
        let (user, password) = text.split_once(':')?;
        (!password.is_empty()).then(|| (user.to_string(), password.to_string()))
    }

    fn cache_key(&self, user: &str, password: &str) -> [u8; 32] {
        let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
        hash.update(self.key_prefix.as_bytes());
        hash.update(user.as_bytes());
        hash.update(b":");
        hash.update(password.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(hash.finish().as_ref());
        key
    }

    /// The verdict for `user` and `password`: cached, or a bind.
    async fn verdict(&self, key: [u8; 32], user: &str, password: &str) -> Verdict {
        if let Some(verdict) = cached(&key) {
            return verdict;
        }
        let dn = format!("{}={user},{}", self.attribute, self.base_dn);
        let verdict = match self.server.bind(&dn, password).await {
            Bind::Accepted => Verdict::Accepted,
            Bind::Refused(why) => {
                tracing::info!(server = %self.server.host, %why, "ldap-auth: credentials refused");
                Verdict::Refused
            }
            Bind::Failed(why) => {
                tracing::error!(server = %self.server.host, %why, "ldap-auth: the directory could not be asked");
                Verdict::Failed
            }
        };
        remember(key, verdict, self.cache_ttl);
        verdict
    }

    /// Kong's `do_authentication`: `Proxy-Authorization` first, then
    /// `Authorization`.
    async fn authenticate(&self, ctx: &mut RequestCtx<'_>) -> Result<(), PluginResponse> {
        let fail = || unauthorized(401, "Unauthorized", Some(&self.www_authenticate));
        let proxy = ctx.header("proxy-authorization").map(str::to_string);
        let plain = ctx.header("authorization").map(str::to_string);
        if proxy.is_none() && plain.is_none() {
            return Err(fail());
        }
        let mut accepted = None;
        for value in [proxy, plain].into_iter().flatten() {
            let Some((user, password)) = self.credentials(&value) else {
                continue;
            };
            let key = self.cache_key(&user, &password);
            match self.verdict(key, &user, &password).await {
                Verdict::Accepted => {
                    accepted = Some((key, user));
                    break;
                }
                Verdict::Refused => {}
                Verdict::Failed => return Err(internal_error()),
            }
        }
        let Some((key, user)) = accepted else {
            return Err(fail());
        };
        if self.hide_credentials {
            ctx.headers.remove("authorization");
            ctx.headers.remove("proxy-authorization");
        }
        // Kong's credential: the cache key as id, the user as identifier.
        let mut id = [0u8; 16];
        id.copy_from_slice(&key[..16]);
        let credential = AuthenticatedCredential::new(uuid::Uuid::from_bytes(id), &user, "ldap-auth");
        set_consumer(ctx, None, Some(credential));
        Ok(())
    }

    async fn run(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        match &self.anonymous {
            // "Logical OR": a request another plugin authenticated passes.
            Some(anonymous) => {
                if ctx.credential.is_some() {
                    return Flow::Continue;
                }
                match self.authenticate(ctx).await {
                    Ok(()) => Flow::Continue,
                    Err(_) => set_anonymous(ctx, anonymous),
                }
            }
            None => match self.authenticate(ctx).await {
                Ok(()) => Flow::Continue,
                Err(response) => Flow::Respond(response),
            },
        }
    }
}

impl Plugin for LdapAuth {
    fn name(&self) -> &'static str {
        "ldap-auth"
    }

    fn priority(&self) -> i32 {
        1200
    }

    fn waits(&self) -> bool {
        true
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(self.run(ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plugin(extra: Value) -> LdapAuth {
        let mut config = json!({"ldap_host": "ldap.example", "base_dn": "dc=example,dc=com", "attribute": "cn"});
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        LdapAuth::from_config(config.as_object().expect("object")).expect("valid")
    }

    #[test]
    fn credentials_follow_the_header_type_and_need_a_password() {
        let ldap = plugin(json!({}));
        // "alice:wonder:land", "bob:", ":secret"
        assert_eq!(
            ldap.credentials("  LDAP YWxpY2U6d29uZGVyOmxhbmQ="),
            Some(("alice".into(), "wonder:land".into()))
        );
        assert_eq!(ldap.credentials("ldap Ym9iOg=="), None);
        assert_eq!(ldap.credentials("ldap OnNlY3JldA=="), Some((String::new(), "secret".into())));
        assert_eq!(ldap.credentials("Basic YWxpY2U6d29uZGVyOmxhbmQ="), None);
        assert_eq!(ldap.credentials("ldapYWxpY2U6d29uZGVyOmxhbmQ="), None);
        let basic = plugin(json!({"header_type": "Basic", "realm": "corp"}));
        assert!(basic.credentials("basic YWxpY2U6d29uZGVyOmxhbmQ=").is_some());
        assert_eq!(basic.www_authenticate, "Basic realm=\"corp\"");
        assert_eq!(plugin(json!({})).www_authenticate, "LDAP");
    }

    #[test]
    fn the_cache_key_covers_the_server_and_the_credentials() {
        let ldap = plugin(json!({}));
        let other = plugin(json!({"ldap_port": 636}));
        assert_ne!(ldap.cache_key("a", "b"), ldap.cache_key("a", "c"));
        assert_ne!(ldap.cache_key("a", "b"), other.cache_key("a", "b"));
        let verified = plugin(json!({"ldaps": true, "verify_ldap_host": true}));
        assert_ne!(plugin(json!({"ldaps": true})).cache_key("a", "b"), verified.cache_key("a", "b"));
        assert_eq!(ldap.cache_key("a", "b"), plugin(json!({})).cache_key("a", "b"));
    }
}
