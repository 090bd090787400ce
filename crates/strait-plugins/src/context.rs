//! What a phase sees: the request being proxied ([`RequestCtx`]), the
//! response on its way back ([`ResponseCtx`]), the record handed to the log
//! phase ([`LogRecord`]), and the typed store plugins share across phases of
//! one request ([`SharedStore`], Kong's `kong.ctx.shared`).
//!
//! Contexts borrow from the snapshot the request loaded; nothing here owns
//! configuration. Consumers and credentials are found through
//! [`Directory`], which the snapshot implements with O(1) indexes.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::net::IpAddr;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use strait_core::Consumer;
pub use strait_core::{Protocol, ProtocolSet};
use uuid::Uuid;

use crate::chain::ConsumerPlugin;
use crate::directory::Directory;
use crate::identity::{IdentityField, IdentityFields};

/// A small typed key-value store shared by the plugins of one request and
/// kept across its phases. Empty (no allocation) until a plugin writes.
#[derive(Default)]
pub struct SharedStore {
    entries: Vec<(TypeId, Box<dyn Any + Send>)>,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedStore({} entries)", self.entries.len())
    }
}

impl SharedStore {
    /// Store `value`, replacing any earlier value of the same type.
    pub fn insert<T: Any + Send>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        match self.entries.iter_mut().find(|(t, _)| *t == id) {
            Some(slot) => slot.1 = Box::new(value),
            None => self.entries.push((id, Box::new(value))),
        }
    }

    pub fn get<T: Any + Send>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.entries
            .iter()
            .find(|(t, _)| *t == id)
            .and_then(|(_, v)| v.downcast_ref())
    }

    pub fn get_mut<T: Any + Send>(&mut self) -> Option<&mut T> {
        let id = TypeId::of::<T>();
        self.entries
            .iter_mut()
            .find(|(t, _)| *t == id)
            .and_then(|(_, v)| v.downcast_mut())
    }

    pub fn remove<T: Any + Send>(&mut self) -> Option<T> {
        let id = TypeId::of::<T>();
        let index = self.entries.iter().position(|(t, _)| *t == id)?;
        self.entries.swap_remove(index).1.downcast().ok().map(|b| *b)
    }
}

/// The credential an authentication plugin accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatedCredential {
    pub id: Uuid,
    /// Kong's `X-Credential-Identifier`: the key-auth credential id, the
    /// basic-auth and hmac-auth username, the jwt secret's key (`None`: not
    /// a valid header value, and then not sent).
    pub identifier: Option<HeaderValue>,
    /// The plugin that accepted it (`key-auth`, ...).
    pub plugin: &'static str,
}

impl AuthenticatedCredential {
    /// A credential identified by `identifier` as text.
    pub fn new(id: Uuid, identifier: &str, plugin: &'static str) -> AuthenticatedCredential {
        AuthenticatedCredential {
            id,
            identifier: HeaderValue::from_str(identifier).ok(),
            plugin,
        }
    }

    /// The identifier as text (empty when it is not a header value).
    pub fn identifier_str(&self) -> &str {
        self.identifier.as_ref().and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

/// A cap on the request body and the answer when a body exceeds it.
#[derive(Debug, Clone, PartialEq)]
pub struct BodyLimit {
    pub max_bytes: u64,
    pub exceeded: crate::PluginResponse,
}

/// The request as the `rewrite` and `access` phases see and change it.
pub struct RequestCtx<'a> {
    /// The method sent upstream; plugins may change it.
    pub method: &'a mut Method,
    pub protocol: Protocol,
    /// The HTTP version the client spoke (hmac-auth signs it in `request-line`).
    pub http_version: http::Version,
    pub client_ip: IpAddr,
    /// The client's port, and the port of the listener it reached.
    pub client_port: u16,
    pub server_port: u16,
    /// Host the client addressed, lower case, without port.
    pub host: &'a str,
    pub route_id: Option<Uuid>,
    pub route_name: Option<&'a str>,
    pub service_id: Option<Uuid>,
    /// Named and numbered regex captures of the matched route path.
    pub captures: &'a [(String, String)],
    /// Path and query as forwarded upstream; plugins may replace them.
    pub uri: &'a mut Uri,
    pub headers: &'a mut HeaderMap,
    /// The whole request body, present when a plugin of the chain declared
    /// [`crate::Plugin::reads_request_body`]; a plugin that replaces it
    /// changes what is sent upstream.
    pub body: Option<Bytes>,
    /// The most request body a plugin allows when the client sent no
    /// `Content-Length`: the proxy reads the body before forwarding it and
    /// answers the limit's response past it.
    pub request_body_limit: Option<BodyLimit>,
    /// A `Host` a plugin chose for the upstream request, overriding
    /// `preserve_host` and the target's name.
    pub upstream_host: Option<HeaderValue>,
    pub directory: &'a dyn Directory,
    pub consumer: Option<&'a Consumer>,
    /// The prepared headers and ACL groups of `consumer`, when the
    /// directory has them.
    pub consumer_view: Option<&'a crate::ConsumerView>,
    pub credential: Option<AuthenticatedCredential>,
    /// Groups an authentication plugin established (Kong's `authenticated_groups`).
    pub authenticated_groups: Option<Vec<String>>,
    pub shared: SharedStore,
    /// Headers to add to the response to the client, whatever produces it.
    pub response_headers: crate::AddedHeaders,
    /// The client's TLS certificate, verified by the listener.
    pub client_cert: Option<std::sync::Arc<crate::auth::x509::ClientCert>>,
    /// Send `uri`'s path upstream as it is: no `strip_path`, no service path
    /// (a plugin that chose the upstream's path itself, as gRPC transcoders do).
    pub exact_path: bool,
    /// Kong's identity fields for the upstream request (`X-Consumer-*`,
    /// ...), set with [`RequestCtx::set_identity`]: on the proxy's requests
    /// held beside `headers` until a plugin that reads them runs
    /// (identity.rs); [`IdentityFields::default`] keeps them in `headers`.
    pub identity: IdentityFields,
}

impl std::fmt::Debug for RequestCtx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestCtx")
            .field("method", &self.method)
            .field("uri", &self.uri)
            .field("route_id", &self.route_id)
            .field("consumer", &self.consumer.map(|c| c.id))
            .finish_non_exhaustive()
    }
}

impl<'a> RequestCtx<'a> {
    pub fn path(&self) -> &str {
        self.uri.path()
    }

    /// The request's headers as Kong's `kong.request.get_headers()` gives
    /// them: one value as a string, several as an array.
    pub fn headers_json(&self) -> serde_json::Map<String, serde_json::Value> {
        use serde_json::Value;
        let mut out = serde_json::Map::new();
        for name in self.headers.keys() {
            let mut values: Vec<Value> = self
                .headers
                .get_all(name)
                .iter()
                .map(|v| Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect();
            let value = match values.len() {
                1 => values.pop().unwrap_or(Value::Null),
                _ => Value::Array(values),
            };
            out.insert(name.as_str().to_string(), value);
        }
        out
    }

    pub fn query(&self) -> &str {
        self.uri.query().unwrap_or("")
    }

    /// The first value of header `name` as text (`None` when absent or not
    /// visible ASCII).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The first value of query argument `name`, percent-decoded.
    pub fn query_arg(&self, name: &str) -> Option<Cow<'_, str>> {
        crate::form::pairs(self.query())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    /// Remove every `name` argument from the query string sent upstream
    /// (nothing changes when there is none).
    pub fn remove_query_arg(&mut self, name: &str) {
        let query = self.query();
        if !crate::form::pairs(query).any(|(k, _)| k == name) {
            return;
        }
        let kept: Vec<(String, String)> = crate::form::pairs(query)
            .filter(|(k, _)| k != name)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let query = crate::form::serialize(kept.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let _ = self.set_query(&query);
    }

    /// Replace path and query (`query` empty: none).
    /// Replaces the query string, keeping the path.
    pub fn set_query(&mut self, query: &str) -> Result<(), http::Error> {
        let path = self.uri.path().to_string();
        self.set_path_and_query(&path, query)
    }

    pub fn set_path_and_query(&mut self, path: &str, query: &str) -> Result<(), http::Error> {
        let mut joined = String::with_capacity(path.len() + 1 + query.len());
        joined.push_str(path);
        if !query.is_empty() {
            joined.push('?');
            joined.push_str(query);
        }
        self.set_joined_path_and_query(joined)
    }

    /// Replaces path and query with `joined` (`/path?query`, already
    /// encoded): one allocation for a plugin that builds it in place.
    pub fn set_joined_path_and_query(&mut self, joined: String) -> Result<(), http::Error> {
        let path_and_query = http::uri::PathAndQuery::from_maybe_shared(bytes::Bytes::from(joined))?;
        if self.uri.scheme().is_none() && self.uri.authority().is_none() {
            *self.uri = Uri::from(path_and_query);
            return Ok(());
        }
        let mut parts = self.uri.clone().into_parts();
        parts.path_and_query = Some(path_and_query);
        *self.uri = Uri::from_parts(parts)?;
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) one of Kong's identity fields on
    /// the upstream request, replacing what the client sent under its name.
    #[inline]
    pub fn set_identity(&mut self, field: IdentityField, value: Option<HeaderValue>) {
        self.identity.set(self.headers, field, value);
    }

    /// The consumer's plugins, for consumer-scoped resolution.
    pub(crate) fn consumer_plugins(&self) -> &'a [ConsumerPlugin] {
        match self.consumer {
            Some(consumer) => self.directory.consumer_plugins(consumer.id),
            None => &[],
        }
    }
}

/// Where a response came from (Kong's `kong.response.get_source()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseSource {
    /// The upstream service answered.
    Service,
    /// A plugin answered instead of proxying.
    Exit,
    /// The gateway answered with an error (no upstream, timeout, ...).
    Error,
}

impl ResponseSource {
    /// Kong's name for it (`kong.response.get_source()`, the log entry's
    /// `source`).
    pub fn name(self) -> &'static str {
        match self {
            ResponseSource::Service => "service",
            ResponseSource::Exit => "exit",
            ResponseSource::Error => "error",
        }
    }
}

/// What the request phases left for the response phases.
#[derive(Debug, Clone)]
pub struct RequestSummary {
    pub method: Method,
    pub protocol: Protocol,
    pub client_ip: IpAddr,
    pub route_id: Option<Uuid>,
    pub service_id: Option<Uuid>,
    pub consumer_id: Option<Uuid>,
    pub credential: Option<AuthenticatedCredential>,
    /// The client's request headers as they arrived, kept only when a
    /// plugin of the chain declared
    /// [`crate::Plugin::reads_request_headers_in_response`].
    pub request_headers: Option<HeaderMap>,
    /// Who the access phase authenticated, kept only when a plugin of the
    /// chain declared [`crate::Plugin::reads_consumer_in_response`].
    pub authenticated: Option<ResponseIdentity>,
}

/// The authenticated consumer as a `header_filter` may need it (the
/// `session` plugin's subject and groups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseIdentity {
    /// Kong's session subject: the username, else the custom id, else the id.
    pub subject: String,
    /// `authenticated_groups`, when a plugin set them.
    pub groups: Option<Vec<String>>,
}

/// The response as `header_filter` sees and changes it.
#[derive(Debug)]
pub struct ResponseCtx<'a> {
    pub status: &'a mut StatusCode,
    pub headers: &'a mut HeaderMap,
    pub source: ResponseSource,
    pub request: &'a RequestSummary,
    pub shared: &'a mut SharedStore,
}

/// One piece of a response body as `body_filter` sees it. When a
/// `header_filter` asked for [`crate::BufferResponseBody`] the whole body
/// comes in one chunk with `end` set.
#[derive(Debug)]
pub struct BodyChunk {
    pub data: Bytes,
    /// This is the last piece.
    pub end: bool,
    /// On the last piece of a streamed body, the upstream's trailers (gRPC's
    /// `grpc-status`). A filter that takes them (leaving `None`) keeps them
    /// from the client; what it puts in `data` goes before any left.
    pub trailers: Option<http::HeaderMap>,
}

/// What the `log` phase receives after the response was sent.
#[derive(Debug, Clone)]
pub struct LogRecord<'a> {
    pub request: &'a RequestSummary,
    pub status: u16,
    pub response_bytes: u64,
    /// From the request's arrival to the last body byte, in milliseconds.
    pub total_ms: u64,
    /// Where the response came from.
    pub source: ResponseSource,
    /// From sending the request upstream to the upstream's response head,
    /// in milliseconds (Kong's `latencies.proxy`); `None` without an
    /// upstream response.
    pub upstream_ms: Option<u64>,
    /// The request's size as it arrived: request line, headers, and the
    /// body's declared length (Kong's `request.size`, approximately).
    pub request_bytes: u64,
    /// What Kong's log serializer needs beyond the counters, kept only when
    /// a plugin of the chain declared [`crate::Plugin::serializes`].
    pub details: Option<Box<LogDetails>>,
    /// The route, service and consumer entities of the snapshot the request
    /// loaded, kept only when a plugin of the chain declared
    /// [`crate::Plugin::reads_entities`] or [`crate::Plugin::serializes`].
    pub entities: Option<&'a dyn crate::Directory>,
}

/// One attempt to reach the upstream (Kong's `tries` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTry {
    /// The target's host as configured (an address or a name).
    pub ip: String,
    pub port: u16,
    /// Milliseconds since the Unix epoch when the target was chosen.
    pub balancer_start: u64,
    /// Milliseconds spent choosing the target.
    pub balancer_latency: u64,
    /// `None` for the attempt that answered; the failure otherwise.
    pub failure: Option<String>,
}

/// The phases the chain timed for a tracing plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimedPhase {
    Access,
    HeaderFilter,
}

/// One plugin phase as timed by the chain.
#[derive(Debug, Clone, Copy)]
pub struct PhaseTiming {
    pub plugin: &'static str,
    pub phase: TimedPhase,
    pub start: std::time::Instant,
    pub end: std::time::Instant,
}

/// Kept in the [`SharedStore`] when a plugin of the chain traces: when the
/// chain started (routing is done by then) and each plugin phase.
#[derive(Debug, Clone)]
pub struct PhaseTimings {
    pub chain_started: std::time::Instant,
    pub phases: Vec<PhaseTiming>,
}

/// When the upstream exchange that answered happened.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamTiming {
    /// Asking the pool for a connection (a new one is connected here).
    pub connect_start: std::time::Instant,
    pub connect_end: std::time::Instant,
    /// The request head went out / the response head came back.
    pub sent: std::time::Instant,
    pub head: std::time::Instant,
    /// A kept-alive connection was reused.
    pub reused: bool,
}

/// What `kong.log.serialize()` reports beyond [`LogRecord`]'s counters.
#[derive(Clone)]
pub struct LogDetails {
    /// Kong's request id (`X-Kong-Request-Id`).
    pub request_id: String,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The host the client addressed and the port it reached.
    pub host: String,
    pub port: u16,
    /// Path and query as the client sent them.
    pub request_uri: String,
    /// The client's headers as they arrived.
    pub request_headers: HeaderMap,
    /// The response headers as sent to the client.
    pub response_headers: HeaderMap,
    /// Path and query sent upstream (`None`: nothing was sent).
    pub upstream_uri: Option<String>,
    /// The status the upstream answered with.
    pub upstream_status: Option<u16>,
    pub tries: Vec<UpstreamTry>,
    /// Milliseconds since the Unix epoch when the request arrived.
    pub started_at: u64,
    /// When the request arrived (for span times).
    pub started: std::time::Instant,
    /// The HTTP version the client spoke.
    pub http_version: http::Version,
    /// The upstream exchange that answered, when one did.
    pub upstream_timing: Option<UpstreamTiming>,
    /// Time spent in Strait before the request went upstream, in
    /// milliseconds (Kong's `latencies.kong` for a proxied request).
    pub kong_ms: Option<u64>,
    /// The request arrived over TLS with this protocol version.
    pub tls_version: Option<&'static str>,
    /// The route, service and consumer entities, from the snapshot the
    /// request loaded.
    pub entities: std::sync::Arc<dyn crate::Directory + Send>,
    /// The W3C trace id of the request when a tracing plugin ran.
    pub trace_id: Option<String>,
}

impl std::fmt::Debug for LogDetails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogDetails")
            .field("request_id", &self.request_id)
            .field("request_uri", &self.request_uri)
            .field("upstream_uri", &self.upstream_uri)
            .finish_non_exhaustive()
    }
}
