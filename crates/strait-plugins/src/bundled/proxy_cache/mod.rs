//! `proxy-cache` (Kong priority 100), memory strategy: answers repeated
//! cacheable requests from a shared in-memory store instead of the
//! service.
//!
//! - access: a request with a cacheable method (and, with `cache_control`,
//!   no `no-store`/`no-cache`) gets its key (see [`key`]); a fresh entry is
//!   answered at once (`X-Cache-Status: Hit`, `Age`), a missing or stale
//!   one marks the request (`Miss` / `Refresh`) and goes upstream. With
//!   `cache_control`, `only-if-cached` and nothing cached is 504.
//! - header_filter: a marked response with a cacheable status and content
//!   type (and, with `cache_control`, no `private`/`no-store`/`no-cache`
//!   and a positive `s-maxage`/`max-age`/`Expires`) is followed; otherwise
//!   `X-Cache-Status: Bypass`.
//! - body_filter: the followed body streams to the client unchanged while a
//!   copy is kept; at its end the response is stored for `storage_ttl`
//!   (else the resource's TTL with `cache_control`, else `cache_ttl`).
//!   A body larger than the store is streamed but not kept.
//!
//! Diagnostic headers follow `response_headers`, or all of them when the
//! request has a `Kong-Debug` header.

mod schema;

/// `proxy-cache` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "proxy-cache",
    priority: 100,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(ProxyCache::from_config(config)?)),
};

pub mod http;
pub mod key;

use std::sync::Arc;

use ::http::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE, EXPIRES};
use ::http::Method;
use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value};

use self::http::{resource_ttl, Directives, MediaType};
use self::key::{KeyParts, Vary};
use strait_runtime::cache::{now_secs, CachedResponse, ResponseCache};
use crate::config::ConfigReader;
use crate::context::{BodyChunk, RequestCtx, ResponseCtx, SharedStore};
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

const STATUS: HeaderName = HeaderName::from_static("x-cache-status");
const KEY: HeaderName = HeaderName::from_static("x-cache-key");
const AGE: HeaderName = HeaderName::from_static("age");

/// Headers never replayed from the cache (hop-by-hop ones, the length the
/// proxy sets itself, and rate-limit counters that belong to this request).
fn replayable(name: &str) -> bool {
    !matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailers"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
            | "age"
            | "x-cache-status"
            | "x-cache-key"
    ) && !name.contains("ratelimit-remaining")
}

/// Which diagnostic headers the client sees.
#[derive(Debug, Clone, Copy)]
struct Diagnostics {
    age: bool,
    status: bool,
    key: bool,
}

#[derive(Debug)]
pub struct ProxyCache {
    response_codes: Vec<u16>,
    request_methods: Vec<Method>,
    content_types: Vec<MediaType>,
    cache_ttl: u64,
    cache_control: bool,
    ignore_uri_case: bool,
    storage_ttl: Option<u64>,
    vary: Vary,
    diagnostics: Diagnostics,
    store: Arc<dyn ResponseCache>,
}

/// What a request marked for caching carries from access to body_filter.
struct Pending {
    key: String,
    debug: bool,
    method_is_head: bool,
    /// Set by header_filter once the response proved cacheable.
    response: Option<PendingResponse>,
}

struct PendingResponse {
    status: u16,
    headers: Vec<(String, String)>,
    ttl: u64,
    body: BytesMut,
}

impl ProxyCache {
    pub fn from_config(config: &Map<String, Value>) -> Result<ProxyCache, PluginError> {
        let c = ConfigReader::new(config);
        let response_codes = match config.get("response_code") {
            None | Some(Value::Null) => vec![200, 301, 404],
            Some(Value::Array(codes)) => codes
                .iter()
                .map(|code| {
                    code.as_u64()
                        .and_then(|c| u16::try_from(c).ok())
                        .ok_or_else(|| PluginError::invalid("response_code", "expected an array of integers"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(PluginError::invalid("response_code", "expected an array")),
        };
        let mut request_methods = c.strings("request_method")?;
        if config.get("request_method").is_none_or(Value::is_null) {
            request_methods = vec!["GET".into(), "HEAD".into()];
        }
        let request_methods = request_methods
            .iter()
            .map(|m| Method::from_bytes(m.as_bytes()).map_err(|_| PluginError::invalid("request_method", "bad method")))
            .collect::<Result<_, _>>()?;
        let mut content_types = c.strings("content_type")?;
        if config.get("content_type").is_none_or(Value::is_null) {
            content_types = vec!["text/plain".into(), "application/json".into()];
        }
        // A value that is not a media type can never match (as in Kong).
        let content_types = content_types.iter().filter_map(|t| MediaType::parse(t)).collect();
        let positive = |field: &str, value: i64| {
            u64::try_from(value).map_err(|_| PluginError::invalid(field, "value must be greater than 0"))
        };
        let cache_ttl = positive("cache_ttl", c.integer("cache_ttl", 300)?)?;
        let storage_ttl = match config.get("storage_ttl") {
            None | Some(Value::Null) => None,
            Some(_) => Some(positive("storage_ttl", c.integer("storage_ttl", 0)?)?),
        };
        let strategy = c.string("strategy")?.unwrap_or_else(|| "memory".into());
        if strategy != "memory" {
            return Err(PluginError::invalid("strategy", "expected one of: memory"));
        }
        let dictionary = c
            .record("memory")?
            .string("dictionary_name")?
            .unwrap_or_else(|| "kong_db_cache".into());
        let headers = c.record("response_headers")?;
        let vary_query_params = match config.get("vary_query_params") {
            Some(Value::Array(items)) if !items.is_empty() => Some(c.strings("vary_query_params")?),
            _ => None,
        };
        Ok(ProxyCache {
            response_codes,
            request_methods,
            content_types,
            cache_ttl,
            cache_control: c.bool("cache_control", false)?,
            ignore_uri_case: c.bool("ignore_uri_case", false)?,
            storage_ttl,
            vary: Vary {
                query_params: vary_query_params,
                headers: c
                    .strings("vary_headers")?
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect(),
            },
            diagnostics: Diagnostics {
                age: headers.bool("age", true)?,
                status: headers.bool("X-Cache-Status", true)?,
                key: headers.bool("X-Cache-Key", true)?,
            },
            store: strait_runtime::cache::dictionary(&dictionary),
        })
    }

    fn shows(&self, debug: bool, header: &HeaderName) -> bool {
        debug
            || match header.as_str() {
                "age" => self.diagnostics.age,
                "x-cache-status" => self.diagnostics.status,
                _ => self.diagnostics.key,
            }
    }

    /// Adds a diagnostic header to the client's response.
    fn note(&self, ctx: &mut RequestCtx<'_>, debug: bool, header: HeaderName, value: &str) {
        if self.shows(debug, &header) {
            if let Ok(value) = HeaderValue::from_str(value) {
                ctx.response_headers.push(&header, &value);
            }
        }
    }

    fn mark(&self, ctx: &mut RequestCtx<'_>, key: String, debug: bool, status: &str) -> Flow {
        self.note(ctx, debug, STATUS, status);
        let method_is_head = *ctx.method == Method::HEAD;
        ctx.shared.insert(Pending {
            key,
            debug,
            method_is_head,
            response: None,
        });
        Flow::Continue
    }

    fn cacheable_response(&self, ctx: &ResponseCtx<'_>, cc: &Directives, ttl: u64) -> bool {
        if !self.response_codes.contains(&ctx.status.as_u16()) {
            return false;
        }
        let content_type = ctx.headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let Some(actual) = content_type.and_then(MediaType::parse) else {
            return false;
        };
        if !self.content_types.iter().any(|t| t.accepts(&actual)) {
            return false;
        }
        !(self.cache_control && (cc.has("private") || cc.has("no-store") || cc.has("no-cache") || ttl == 0))
    }

    fn store_response(&self, key: &str, response: PendingResponse) {
        let ttl = response.ttl;
        let cached = CachedResponse {
            status: response.status,
            headers: response.headers,
            body: response.body.freeze(),
            timestamp: now_secs(),
            ttl,
            request_body: None,
        };
        let keep_for = self.storage_ttl.unwrap_or(ttl);
        if !self.store.store(key, cached, keep_for) {
            tracing::debug!(key, "proxy-cache: response larger than the cache, not stored");
        }
    }
}

impl Plugin for ProxyCache {
    fn name(&self) -> &'static str {
        "proxy-cache"
    }

    fn priority(&self) -> i32 {
        100
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let debug = ctx.headers.contains_key("kong-debug");
        let cc = Directives::parse(ctx.headers.get_all(CACHE_CONTROL).iter());
        let cacheable = self.request_methods.contains(ctx.method)
            && !(self.cache_control && (cc.has("no-store") || cc.has("no-cache")));
        if !cacheable {
            self.note(ctx, debug, STATUS, "Bypass");
            return Flow::Continue;
        }
        let path = match self.ignore_uri_case {
            true => ctx.path().to_lowercase(),
            false => ctx.path().to_string(),
        };
        let key = key::build(
            &KeyParts {
                consumer: ctx.consumer.map(|c| c.id),
                route: ctx.route_id,
                method: ctx.method.as_str(),
                path: &path,
                query: ctx.query(),
                headers: ctx.headers,
            },
            &self.vary,
        );
        self.note(ctx, debug, KEY, &key);
        let Some(cached) = self.store.fetch(&key) else {
            if self.cache_control && cc.has("only-if-cached") {
                return Flow::Respond(PluginResponse {
                    status: 504,
                    headers: Vec::new(),
                    body: Bytes::new(),
                });
            }
            return self.mark(ctx, key, debug, "Miss");
        };
        let age = now_secs().saturating_sub(cached.timestamp) as i64;
        let ttl = cached.ttl as i64;
        let stale = match self.cache_control {
            true => {
                cc.seconds("max-age").is_some_and(|max| age > max)
                    || cc.seconds("max-stale").is_some_and(|max| age - ttl > max)
                    || cc.seconds("min-fresh").is_some_and(|min| ttl - age < min)
            }
            false => age > self.cache_ttl as i64,
        };
        if stale {
            return self.mark(ctx, key, debug, "Refresh");
        }
        let mut headers: Vec<(String, String)> = cached
            .headers
            .iter()
            .filter(|(name, _)| replayable(name))
            .cloned()
            .collect();
        if self.shows(debug, &AGE) {
            headers.push(("age".into(), age.to_string()));
        }
        if self.shows(debug, &STATUS) {
            headers.push(("x-cache-status".into(), "Hit".into()));
        }
        if self.shows(debug, &KEY) {
            headers.push(("x-cache-key".into(), key));
        }
        // The key header was noted for a miss; the hit carries its own.
        ctx.response_headers.retain(|name| name != KEY.as_str());
        Flow::Respond(PluginResponse {
            status: cached.status,
            headers,
            body: cached.body.clone(),
        })
    }

    fn filters_headers(&self) -> bool {
        true
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        let Some(pending) = ctx.shared.get::<Pending>() else {
            return;
        };
        let debug = pending.debug;
        let cc = Directives::parse(ctx.headers.get_all(CACHE_CONTROL).iter());
        let ttl = match self.cache_control {
            true => resource_ttl(&cc, ctx.headers.get(EXPIRES), now_secs()),
            false => self.cache_ttl,
        };
        let headers: Option<Vec<(String, String)>> = ctx
            .headers
            .iter()
            .map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        match headers.filter(|_| self.cacheable_response(ctx, &cc, ttl)) {
            Some(headers) => {
                let response = PendingResponse {
                    status: ctx.status.as_u16(),
                    headers,
                    ttl,
                    body: BytesMut::new(),
                };
                let Some(pending) = ctx.shared.remove::<Pending>() else {
                    return;
                };
                if pending.method_is_head {
                    // A HEAD response has no body to follow.
                    self.store_response(&pending.key, response);
                } else {
                    ctx.shared.insert(Pending {
                        response: Some(response),
                        ..pending
                    });
                }
            }
            None => {
                ctx.shared.remove::<Pending>();
                if self.shows(debug, &STATUS) {
                    ctx.headers.insert(STATUS, HeaderValue::from_static("Bypass"));
                }
            }
        }
    }

    fn filters_body(&self) -> bool {
        true
    }

    fn body_filter(&self, shared: &mut SharedStore, chunk: &mut BodyChunk) {
        let Some(pending) = shared.get_mut::<Pending>() else {
            return;
        };
        let Some(response) = pending.response.as_mut() else {
            return;
        };
        if response.body.len() + chunk.data.len() > self.store.max_body() {
            shared.remove::<Pending>();
            return;
        }
        response.body.extend_from_slice(&chunk.data);
        if chunk.end {
            if let Some(Pending {
                key,
                response: Some(response),
                ..
            }) = shared.remove::<Pending>()
            {
                self.store_response(&key, response);
            }
        }
    }
}
