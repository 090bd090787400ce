//! `key-auth` (Kong priority 1250): a key from a header, the query string
//! or the body names a `keyauth_credentials` entry, found in O(1).

mod schema;

/// `key-auth` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "key-auth",
    priority: 1250,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(KeyAuth::from_config(config)?)),
};

use std::borrow::Cow;

use http::Method;
use serde_json::{Map, Value};

use crate::auth::{accept_credential, combine, unauthorized};
use crate::body::{self, ParsedBody};
use crate::config::ConfigReader;
use crate::context::{AuthenticatedCredential, RequestCtx};
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

#[derive(Debug)]
pub struct KeyAuth {
    key_names: Vec<String>,
    /// `key_names` as header names (None: not a valid header name).
    header_names: Vec<Option<http::HeaderName>>,
    hide_credentials: bool,
    anonymous: Option<String>,
    key_in_header: bool,
    key_in_query: bool,
    key_in_body: bool,
    run_on_preflight: bool,
    www_authenticate: String,
    /// A key is looked for in a header named like an identity field.
    reads_identity: bool,
}

/// Where the key was found, to hide it from the upstream.
enum Source {
    Header,
    Query,
    Body(ParsedBody),
}

/// A key found in the request: its value, the key name, where it was.
type FoundKey<'s, 'c> = (Cow<'c, str>, &'s str, Source);

impl KeyAuth {
    pub fn from_config(config: &Map<String, Value>) -> Result<KeyAuth, PluginError> {
        let c = ConfigReader::new(config);
        let realm = c.string("realm")?;
        let mut key_names = c.strings("key_names")?;
        if key_names.is_empty() {
            key_names.push("apikey".into());
        }
        let mut plugin = KeyAuth {
            header_names: key_names
                .iter()
                .map(|k| http::HeaderName::from_bytes(k.as_bytes()).ok())
                .collect(),
            key_names: key_names.into_iter().map(|k| k.to_ascii_lowercase()).collect(),
            hide_credentials: c.bool("hide_credentials", false)?,
            anonymous: c.string("anonymous")?.filter(|a| !a.is_empty()),
            key_in_header: c.bool("key_in_header", true)?,
            key_in_query: c.bool("key_in_query", true)?,
            key_in_body: c.bool("key_in_body", false)?,
            run_on_preflight: c.bool("run_on_preflight", true)?,
            reads_identity: false,
            www_authenticate: match realm {
                Some(realm) => format!("Key realm=\"{realm}\""),
                None => "Key".to_string(),
            },
        };
        plugin.reads_identity = plugin.key_in_header && plugin.key_names.iter().any(|k| crate::is_identity_name(k));
        Ok(plugin)
    }

    fn fail(&self, message: &str) -> PluginResponse {
        unauthorized(401, message, Some(&self.www_authenticate))
    }

    /// The key and where it came from, or Kong's 401 for a duplicate.
    fn find_key<'s, 'c>(&'s self, ctx: &'c RequestCtx<'_>) -> Result<Option<FoundKey<'s, 'c>>, PluginResponse> {
        let mut parsed_body: Option<Option<ParsedBody>> = None;
        for (name, header) in self.key_names.iter().zip(&self.header_names) {
            if let Some(header) = header.as_ref().filter(|_| self.key_in_header) {
                let mut values = ctx.headers.get_all(header).iter();
                match (values.next(), values.next()) {
                    (Some(_), Some(_)) => return Err(self.fail("Duplicate API key found")),
                    (Some(value), None) => {
                        // Keys are ASCII: checked whole first, the lossy walk
                        // (several times dearer) only for a value that is not UTF-8.
                        let key = match std::str::from_utf8(value.as_bytes()) {
                            Ok(text) => Cow::Borrowed(text),
                            Err(_) => String::from_utf8_lossy(value.as_bytes()),
                        };
                        return Ok(Some((key, name, Source::Header)));
                    }
                    _ => {}
                }
            }
            if self.key_in_query {
                let mut values = crate::form::pairs(ctx.query()).filter(|(k, _)| k == name.as_str());
                match (values.next(), values.next()) {
                    (Some(_), Some(_)) => return Err(self.fail("Duplicate API key found")),
                    (Some((_, value)), None) => return Ok(Some((Cow::Owned(value.into_owned()), name, Source::Query))),
                    _ => {}
                }
            }
            if self.key_in_body {
                let parsed = parsed_body.get_or_insert_with(|| {
                    let kind = body::kind_of(ctx.header("content-type"));
                    ctx.body.as_deref().and_then(|b| body::parse(kind, b))
                });
                if let Some(parsed) = parsed {
                    match parsed.get(name) {
                        Err(crate::body::Duplicate) => return Err(self.fail("Duplicate API key found")),
                        Ok(Some(key)) => return Ok(Some((Cow::Owned(key), name, Source::Body(parsed.clone())))),
                        Ok(None) => {}
                    }
                }
            }
        }
        Ok(None)
    }

    fn hide(&self, ctx: &mut RequestCtx<'_>, name: &str, source: Source) {
        ctx.headers.remove(name);
        ctx.remove_query_arg(name);
        if let Source::Body(mut parsed) = source {
            parsed.remove(name);
            ctx.body = Some(parsed.encode());
        }
    }

    fn authenticate<'a>(&self, ctx: &mut RequestCtx<'a>) -> Result<(), PluginResponse> {
        let directory = ctx.directory;
        let (credential, name, source) = match self.find_key(ctx)? {
            Some((key, name, source)) if !key.is_empty() => (directory.keyauth_key(&key), name, source),
            _ => return Err(self.fail("No API key found in request")),
        };
        let credential = credential
            .filter(|c| !expired(c.created_at, c.ttl))
            .ok_or_else(|| self.fail("Unauthorized"))?;
        if self.hide_credentials {
            self.hide(ctx, name, source);
        }
        let consumer = credential.consumer;
        // The identifier's header value comes prepared with the credential.
        let credential = AuthenticatedCredential {
            id: credential.credential,
            identifier: Some(credential.identifier),
            plugin: "key-auth",
        };
        accept_credential(ctx, consumer, credential)
    }
}

/// A credential with a `ttl` lives `ttl` seconds from its creation.
pub(crate) fn expired(created_at: i64, ttl: Option<i64>) -> bool {
    let Some(ttl) = ttl.filter(|t| *t > 0) else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    created_at.saturating_add(ttl) <= now
}

impl Plugin for KeyAuth {
    fn name(&self) -> &'static str {
        "key-auth"
    }

    fn priority(&self) -> i32 {
        1250
    }

    fn reads_request_body(&self) -> bool {
        self.key_in_body
    }

    fn reads_identity_fields(&self) -> bool {
        self.reads_identity
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        if !self.run_on_preflight && *ctx.method == Method::OPTIONS {
            return Flow::Continue;
        }
        combine(ctx, self.anonymous.as_deref(), |ctx| self.authenticate(ctx))
    }
}
