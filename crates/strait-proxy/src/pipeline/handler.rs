//! The request pipeline: load the snapshot once, route, run plugins, send
//! upstream with retries, stream the response back. See
//! docs/life-of-a-request.md for the phases.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri, Version};
use strait_core::ProtocolSet;
use strait_router::{normalize_path, upstream_path, HeaderLookup, InvalidPath, RequestFacts, RouteMatch};
use strait_runtime::health::{InFlight, Report};

use crate::pipeline::body::{boxed, buffer_up_to, full, BlockBody, Buffered, IdleTimeoutBody, ProxyBody};
use crate::pipeline::error::{error_response, ErrorKind, ProxyError};
use crate::pipeline::forwarding::Forwarding;
use crate::pipeline::kong_headers::{HeaderSwitches, KongFields, RequestId};
use crate::upstream::Endpoint;
use crate::{Shared, SERVER_HEADER};
use strait_snapshot::balancer::hashing::HashInput;
use strait_snapshot::balancer::{Algorithm, Attempts};
use strait_snapshot::snapshot::{ServiceRuntime, Snapshot};

mod hop_by_hop;
pub use hop_by_hop::strip_hop_by_hop;
use hop_by_hop::strip_hop_by_hop_keeping;
pub(crate) use hop_by_hop::{is_hop_by_hop, lists_token};

/// What the connection knows about where a request came from.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub client: SocketAddr,
    /// The client's address as a header value (`X-Real-IP`,
    /// `X-Forwarded-For`), formatted once per connection.
    pub client_ip: HeaderValue,
    pub local: SocketAddr,
    /// The listener's port as a header value (`X-Forwarded-Port` when the
    /// request names no other), formatted once per connection.
    pub local_port: HeaderValue,
    pub tls: bool,
    pub sni: Option<String>,
    /// The client's certificate, when the listener asked for one
    /// (`ssl_verify_client`) and it verified.
    pub client_cert: Option<std::sync::Arc<strait_plugins::auth::x509::ClientCert>>,
}

#[derive(Debug)]
struct Headers<'a>(&'a HeaderMap);

impl HeaderLookup for Headers<'_> {
    fn values(&self, name: &str) -> Vec<&str> {
        self.0.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect()
    }
}

/// Marks a response that came from the upstream (not from Strait or a
/// plugin): Kong's headers differ between the two. Holds the time from
/// sending the request upstream to the response head, in milliseconds.
#[derive(Debug, Clone)]
pub(crate) struct Proxied {
    pub upstream_ms: u64,
    /// From the request's arrival to sending it upstream, in milliseconds.
    pub kong_ms: u64,
    /// Kept for log serializers only (see [`Exchange::forward`]).
    pub detail: Option<Box<ProxiedDetail>>,
}

/// What a log serializer reports of the upstream exchange.
#[derive(Debug, Clone)]
pub(crate) struct ProxiedDetail {
    pub upstream_uri: String,
    pub tries: Vec<strait_plugins::UpstreamTry>,
    pub timing: Option<strait_plugins::UpstreamTiming>,
}

pub(crate) fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A request on its way through the proxy. Boxed once, where it is made
/// (h1_server.rs parses into its box): `handle`, `proxy`, `forward`, the
/// pool and the HTTP/1.1 client each took the request by value, and each
/// such move copied its 240 bytes into the next future's state, about 15
/// copies a request with a cache line or three of new memory written by
/// each. The box is freed and made again per request, so it is memory the
/// last request warmed.
pub(crate) type BoxedRequest = Box<Request<ProxyBody>>;

/// `Box::pin(make())`, with the future written into its box rather than
/// moved there. A request's future is kilobytes, nearly all of it room for
/// later states: `Box::pin(future)` makes the future first and copies all
/// of it into the box once that is allocated; with the box allocated first,
/// the compiler has the future written where it stays.
pub(crate) fn pin_in_place<F: std::future::Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// Handle one request end to end; never fails (errors become responses).
///
/// A response straight from the upstream comes with Kong's fields beside
/// it, for the caller to write with it (`KongFields::encode`, or
/// `KongFields::insert` into its map); any other has them in its map.
pub(crate) async fn handle(
    request: BoxedRequest,
    conn: &ConnInfo,
    shared: &Shared,
) -> (Response<ProxyBody>, Option<KongFields>) {
    let started = Instant::now();
    shared.stats.request_started();
    let request_id = RequestId::new();
    let snapshot = shared.snapshot.load_full();
    let access = shared
        .access_log
        .as_ref()
        .map(|log| crate::pipeline::access_log::Pending::new(log, &request, conn.client.ip(), started));
    let http1 = request.version() < Version::HTTP_2;
    let grpc = crate::pipeline::grpc::is_grpc(request.headers());
    // HTTP/1.1 framing was settled by the HTTP/1.1 codec (h1_server.rs); only HTTP/2 can still
    // carry lengths that would be forwarded ambiguously.
    let framing = if http1 {
        None
    } else {
        ambiguous_framing(request.headers())
    };
    let outcome = match framing {
        Some(problem) => Err(ProxyError::new(ErrorKind::BadRequest, problem)),
        None => proxy(request, conn, shared, &snapshot, started, &request_id).await,
    };
    let (mut response, mut fields) = match outcome {
        Ok(answer) => answer,
        Err(error) => (error_to_response(error, http1, conn, &request_id), None),
    };
    match fields.as_mut() {
        Some(fields) => {
            fields.server = shared.headers.server;
            if shared.headers.request_id {
                fields.set_request_id(&request_id);
            }
        }
        None => {
            // Through plugins, a proxied response is marked in its extensions.
            let proxied = response.extensions().get::<Proxied>().is_some();
            // What Strait or a plugin answered a gRPC client goes as a gRPC status.
            if grpc && !proxied && !crate::pipeline::grpc::is_grpc(response.headers()) {
                response = crate::pipeline::grpc::to_grpc(response).await;
            }
            add_kong_headers(&mut response, proxied, &shared.headers, &request_id, started);
        }
    }
    let response = match access {
        Some(pending) => pending.follow(response, request_id),
        None => response,
    };
    (response, fields)
}

/// Kong's headers on every response, as `headers` switches them: on one
/// Strait or a plugin produced, `X-Kong-Response-Latency` and `Server`
/// (set by the producer; removed when off); on a proxied one, `Server` only
/// when the upstream sent none. `X-Kong-Request-Id` on both, replacing any.
fn add_kong_headers(
    response: &mut Response<ProxyBody>,
    proxied: bool,
    switches: &HeaderSwitches,
    request_id: &RequestId,
    started: Instant,
) {
    let headers = response.headers_mut();
    if proxied {
        if switches.server && !headers.contains_key(header::SERVER) {
            headers.insert(header::SERVER, HeaderValue::from_static(SERVER_HEADER));
        }
    } else {
        if !switches.server {
            headers.remove(header::SERVER);
        }
        if switches.response_latency {
            let latency = started.elapsed().as_millis() as u64;
            headers.insert(X_KONG_RESPONSE_LATENCY, crate::pipeline::kong_headers::number(latency));
        }
    }
    if switches.request_id {
        headers.insert(X_KONG_REQUEST_ID, request_id.header_value());
    }
}

pub(crate) const X_KONG_REQUEST_ID: HeaderName = HeaderName::from_static("x-kong-request-id");
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

/// Most of a request body `request_buffering` holds in memory; past it the
/// rest streams (Strait does not spill bodies to disk as nginx does).
pub const REQUEST_BUFFER: usize = 1024 * 1024;

/// The response for a failed request: the error kind's Kong response, and
/// on HTTP/1.1 a closed connection when the request's framing is suspect.
pub(crate) fn error_to_response(
    error: ProxyError,
    http1: bool,
    conn: &ConnInfo,
    request_id: &RequestId,
) -> Response<ProxyBody> {
    tracing::debug!(kind = ?error.kind, cause = %error.cause, client = %conn.client, "request failed");
    let mut response = error_response(error.kind, request_id);
    if http1 && error.kind == ErrorKind::BadRequest {
        // The request's framing can no longer be trusted: nothing
        // after it on this connection is read as another request.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if let ErrorKind::HttpsRequired(_) = error.kind {
        response.headers_mut().remove(header::SERVER);
        response
            .headers_mut()
            .insert(header::SERVER, HeaderValue::from_static(SERVER_HEADER));
    }
    response
}

/// A request whose body length two parsers could read differently (the
/// ground of request smuggling): `Content-Length` beside
/// `Transfer-Encoding`, or more than one `Content-Length`, even with equal
/// values. The codecs settle most of this first (the HTTP/1.1 server codec
/// refuses conflicting lengths, follows `chunked` over a length and closes
/// after; h2 resets a stream whose lengths disagree), so this is the last
/// guard before such headers would be forwarded upstream, e.g. identical
/// duplicate lengths arriving over HTTP/2.
fn ambiguous_framing(headers: &HeaderMap) -> Option<&'static str> {
    let lengths = headers.get_all(header::CONTENT_LENGTH).iter().count();
    if lengths > 1 {
        return Some("more than one content-length");
    }
    if lengths == 1 && headers.contains_key(header::TRANSFER_ENCODING) {
        return Some("content-length with transfer-encoding");
    }
    None
}

/// Host (lower case, without port) and port the client addressed.
fn requested_host(request: &Request<ProxyBody>, conn: &ConnInfo) -> (String, u16) {
    let raw = request
        .uri()
        .authority()
        .map(|a| a.as_str())
        .or_else(|| request.headers().get(header::HOST).and_then(|h| h.to_str().ok()))
        .unwrap_or_default();
    // Searched byte by byte: a host is a few bytes, shorter than the
    // setup of the word-at-a-time search `rsplit_once` does.
    let last = |text: &str, byte: u8| text.bytes().rposition(|b| b == byte);
    let raw = last(raw, b'@').map_or(raw, |at| &raw[at + 1..]);
    let (host, port) = match last(raw, b':').map(|at| (&raw[..at], &raw[at + 1..])) {
        Some((h, p)) if !h.ends_with(']') || raw.starts_with('[') => match p.parse::<u16>() {
            Ok(port) => (h, Some(port)),
            Err(_) => (raw, None),
        },
        _ => (raw, None),
    };
    (host.to_ascii_lowercase(), port.unwrap_or(conn.local.port()))
}

/// Replaces the request's path by its normal form (strait_router::normalize_path)
/// when that differs, so routing, plugins and the upstream all see the path
/// the route was chosen for. A malformed percent-escape is a 400.
fn normalize_request_path(request: &mut Request<ProxyBody>) -> Result<(), ProxyError> {
    let normalized = match normalize_path(request.uri().path()) {
        Ok(Cow::Borrowed(_)) => return Ok(()),
        Ok(Cow::Owned(path)) => path,
        Err(InvalidPath) => {
            return Err(ProxyError::new(
                ErrorKind::BadRequest,
                "malformed percent-escape in the path",
            ));
        }
    };
    let path_and_query = match request.uri().query() {
        Some(query) => format!("{normalized}?{query}"),
        None => normalized,
    };
    let invalid = |e: &dyn std::fmt::Display| ProxyError::new(ErrorKind::BadRequest, e.to_string());
    let mut parts = request.uri().clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(path_and_query).map_err(|e| invalid(&e))?);
    *request.uri_mut() = Uri::from_parts(parts).map_err(|e| invalid(&e))?;
    Ok(())
}

async fn proxy(
    mut request: BoxedRequest,
    conn: &ConnInfo,
    shared: &Shared,
    snapshot: &Arc<Snapshot>,
    started: Instant,
    request_id: &RequestId,
) -> Result<(Response<ProxyBody>, Option<KongFields>), ProxyError> {
    normalize_request_path(&mut request)?;
    let (host, port) = requested_host(&request, conn);
    let matched = {
        let headers = Headers(request.headers());
        let facts = RequestFacts {
            protocol: if conn.tls { "https" } else { "http" },
            method: request.method().as_str(),
            host: &host,
            port,
            path: request.uri().path(),
            query: request.uri().query().unwrap_or(""),
            sni: conn.sni.as_deref(),
            headers: &headers,
            source: Some(conn.client),
            destination: Some(conn.local),
        };
        snapshot.router().find(&facts)
    }
    .ok_or_else(|| ProxyError::new(ErrorKind::NoRoute, "no route"))?;
    let facts = matched.facts;
    let connection = if conn.tls { ProtocolSet::TLS } else { ProtocolSet::PLAIN };
    if !matched.protocols.intersects(connection) {
        if !conn.tls && matched.protocols.intersects(ProtocolSet::TLS) {
            return Err(ProxyError::new(
                ErrorKind::HttpsRequired(facts.https_redirect_status_code),
                "route requires https",
            ));
        }
        return Err(ProxyError::new(ErrorKind::NoRoute, "protocol not accepted by route"));
    }
    let chain = snapshot
        .route_runtime(facts.id)
        .map(|runtime| &runtime.plugins)
        .filter(|chain| !chain.is_empty());
    let exchange = Exchange {
        conn,
        shared,
        snapshot,
        matched: &matched,
        host: &host,
        port,
        started,
        request_id,
    };
    if let Some(chain) = chain {
        let http1 = request.version() < Version::HTTP_2;
        // Boxed: the plugin phases are a future of kilobytes, and inline they
        // would make every request's future (boxed per request by
        // h1_server.rs and h2_server.rs) that large, plugins or not.
        return Ok(pin_in_place(|| crate::pipeline::phases::run(*request, chain, exchange, http1)).await);
    }
    let service = facts
        .service
        .and_then(|id| snapshot.service(id))
        .ok_or_else(|| ProxyError::new(ErrorKind::NoService, "route has no service"))?
        .clone();
    // Kong's fields travel beside the response (no plugin will look for
    // them in its map), and so does the mark that it was proxied (in its
    // extensions it cost three allocations).
    // Only this path's responses go out as the upstream wrote them, and only
    // to an HTTP/1.1 client (relay.rs): plugins and HTTP/2 read the map.
    let options = ForwardOptions {
        relay: request.version() == Version::HTTP_11,
        ..ForwardOptions::default()
    };
    exchange
        .send(request, &service, options)
        .await
        .map(|(response, _, fields)| (response, Some(fields)))
}

/// What the plugin phases ask of forwarding beyond the request itself.
#[derive(Debug, Default)]
pub(crate) struct ForwardOptions {
    /// `Host` as a plugin set it (`ctx.upstream_host`).
    pub host_override: Option<HeaderValue>,
    /// Keep the upstream URI, the tries and their timing for a log
    /// serializer or tracer.
    pub detailed: bool,
    /// Who the request is (consistent-hashing on the consumer).
    pub consumer: Option<uuid::Uuid>,
    /// Pass an HTTP/1.1 upstream's head on in its own bytes (relay.rs).
    pub relay: bool,
}

/// What the plugin path needs of the request beyond the request itself.
/// On a request a plugin gave its upstream path itself (`RequestCtx::exact_path`):
/// that path goes upstream as it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExactPath;

pub(crate) struct Exchange<'a> {
    pub conn: &'a ConnInfo,
    pub shared: &'a Shared,
    pub snapshot: &'a Arc<Snapshot>,
    pub matched: &'a RouteMatch<'a>,
    pub host: &'a str,
    pub port: u16,
    pub started: Instant,
    pub request_id: &'a RequestId,
}

impl Exchange<'_> {
    /// Proxy to the route's service (after the access phase); `detailed`
    /// keeps the upstream URI and tries for a log serializer, `relay` lets
    /// the upstream's head be passed on in its own bytes (relay.rs). Kong's
    /// fields and the proxied mark come beside the response:
    /// [`Exchange::into_map`] puts them where plugins read them.
    pub async fn forward(
        &self,
        request: Request<ProxyBody>,
        options: ForwardOptions,
    ) -> Result<(Response<ProxyBody>, Proxied, KongFields), ProxyError> {
        let service = self
            .matched
            .facts
            .service
            .and_then(|id| self.snapshot.service(id))
            .ok_or_else(|| ProxyError::new(ErrorKind::NoService, "route has no service"))?
            .clone();
        self.send(Box::new(request), &service, options).await
    }

    /// Kong's fields into the response's map, where header filters see
    /// them, and the proxied mark into its extensions (handler.rs `handle`).
    pub fn into_map(response: &mut Response<ProxyBody>, proxied: Proxied, fields: KongFields) {
        fields.insert(response.headers_mut());
        response.extensions_mut().insert(proxied);
    }
}

pub(crate) fn plugin_response_to_http(plugin: strait_plugins::PluginResponse) -> Response<ProxyBody> {
    let mut response = Response::new(full(plugin.body));
    *response.status_mut() = http::StatusCode::from_u16(plugin.status).unwrap_or(http::StatusCode::OK);
    for (name, value) in plugin.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().append(name, value);
        }
    }
    response
        .headers_mut()
        .insert(header::SERVER, HeaderValue::from_static(SERVER_HEADER));
    response
}

const X_KONG_RESPONSE_LATENCY: HeaderName = HeaderName::from_static("x-kong-response-latency");

fn millis(value: i64) -> Duration {
    Duration::from_millis(value.max(1) as u64)
}

impl Exchange<'_> {
    /// Send the request to `runtime`'s service (or its upstream's targets,
    /// with retries) and take its response head.
    async fn send(
        &self,
        mut request: BoxedRequest,
        runtime: &Arc<ServiceRuntime>,
        options: ForwardOptions,
    ) -> Result<(Response<ProxyBody>, Proxied, KongFields), ProxyError> {
        let Exchange {
            conn,
            shared,
            matched,
            host,
            port,
            started,
            request_id,
            ..
        } = *self;
        let ForwardOptions {
            host_override,
            detailed,
            consumer,
            relay,
        } = options;
        let service = &runtime.service;
        let route = matched.facts;
        let http2 = matches!(service.protocol.as_str(), "grpc" | "grpcs");
        let mut upgrade = if http2 {
            None
        } else {
            crate::pipeline::tunnel::requested(&mut request)
        };
        // The client's request becomes the upstream request in its box, its
        // URI set per attempt. Kept apart: the forwarding headers borrow its path.
        let uri = std::mem::take(request.uri_mut());
        // Read only where it is sent: a clone per request otherwise.
        let original_host = (route.preserve_host && host_override.is_none())
            .then(|| request.headers().get(header::HOST).cloned())
            .flatten();
        // The upstream's path and query: the request's own (shared, not built
        // and parsed again) unless the service's path or a stripped prefix
        // changes it, or a plugin set it.
        let request_path = uri.path();
        let rewritten = if request.extensions().get::<ExactPath>().is_some()
            || keeps_path(
                service.path.as_deref(),
                request_path,
                matched.matched_path.as_deref(),
                route.strip_path,
            ) {
            None
        } else {
            Some(upstream_path(
                service.path.as_deref(),
                request_path,
                matched.matched_path.as_deref(),
                route.strip_path,
                route.path_handling(),
            ))
            .filter(|path| path != request_path)
        };
        let path_and_query = match (rewritten, uri.path_and_query()) {
            (None, Some(own)) => own.clone(),
            (rewritten, _) => {
                let path = rewritten.unwrap_or_else(|| request_path.to_string());
                let joined = match uri.query() {
                    Some(q) => format!("{path}?{q}"),
                    None => path,
                };
                PathAndQuery::try_from(joined).map_err(|e| ProxyError::new(ErrorKind::BadRequest, e.to_string()))?
            }
        };
        let stripped_prefix = (route.strip_path && matched.matched_path.as_deref().is_some_and(|m| m != "/"))
            .then(|| matched.matched_path.clone())
            .flatten();
        strip_hop_by_hop(request.headers_mut());
        if let Some(upgrade) = &upgrade {
            upgrade.restore(request.headers_mut());
        }
        let forwarding = Forwarding::new(
            request.headers(),
            conn,
            host,
            port,
            uri.path(),
            stripped_prefix.as_deref(),
            shared.headers.upstream_request_id.then_some(request_id),
        );
        // HTTP/1.1 upstreams get the forwarding headers from the encoder;
        // HTTP/2 ones in the map. (Borrowed, not moved into an `Option`: the
        // fields are a few hundred bytes.)
        if http2 {
            forwarding.insert(request.headers_mut());
        }
        let forwarding = (!http2).then_some(&forwarding);
        let tls = runtime.tls.is_some();
        let connect_timeout = millis(service.connect_timeout);
        // A gRPC call's `grpc-timeout` is its deadline, counted from the
        // request's arrival: no response headers by then is a 504
        // (DEADLINE_EXCEEDED to the client), as a read timeout is; a response
        // stream still open then is ended with DEADLINE_EXCEEDED trailers.
        let deadline = http2
            .then(|| crate::pipeline::grpc::timeout(request.headers()))
            .flatten()
            .and_then(|timeout| started.checked_add(timeout));
        let attempts = service.retries.max(0) as usize + 1;
        let balancer = runtime.balancer.as_deref();
        // `request_buffering`: the body is read before anything is sent
        // upstream (up to REQUEST_BUFFER; a longer one streams after that), so
        // a slow client never holds an upstream connection and the body can be
        // sent again on a retry. gRPC and upgrades stream.
        let buffered = if route.request_buffering
            && !http2
            && upgrade.is_none()
            && !http_body::Body::is_end_stream(request.body())
        {
            let body = std::mem::replace(request.body_mut(), crate::pipeline::body::empty());
            match buffer_up_to(body, REQUEST_BUFFER).await {
                Ok(Buffered::Whole(bytes)) => {
                    let headers = request.headers_mut();
                    headers.remove(header::TRANSFER_ENCODING);
                    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
                    *request.body_mut() = full(bytes.clone());
                    Some(bytes)
                }
                Ok(Buffered::Partial(rest)) => {
                    *request.body_mut() = boxed(rest);
                    None
                }
                Err(error) => return Err(ProxyError::new(ErrorKind::BadRequest, format!("request body: {error}"))),
            }
        } else {
            http_body::Body::is_end_stream(request.body()).then(bytes::Bytes::new)
        };
        // A request that went out and met a reset before any response byte is
        // sent again only when it is idempotent and its whole body is held (or
        // it has none); keeping its headers for that costs a copy, so only
        // where a retry could reach another target.
        let replay =
            (attempts > 1 && balancer.is_some_and(|b| b.target_count() > 1) && request.method().is_idempotent())
                .then_some(buffered)
                .flatten()
                .map(|bytes| (request.headers().clone(), bytes));
        // It goes out as HTTP/1.1 (HTTP/2 set below), and none of the client's
        // extensions go with it.
        let method = request.method().clone();
        *request.version_mut() = Version::HTTP_11;
        request.extensions_mut().clear();
        let mut pending = Some(request);
        let mut picks = Attempts::default();
        let mut set_cookie: Option<String> = None;
        // Made only when an attempt failed: most requests never need it.
        let mut last_error: Option<ProxyError> = None;
        let mut tries: Vec<strait_plugins::UpstreamTry> = Vec::new();
        for _ in 0..attempts {
            let mut upstream_request = match pending.take() {
                Some(request) => request,
                None => match &replay {
                    Some((headers, bytes)) => {
                        let mut request = Box::new(Request::new(full(bytes.clone())));
                        *request.method_mut() = method.clone();
                        *request.headers_mut() = headers.clone();
                        request
                    }
                    None => break,
                },
            };
            let balancer_start = detailed.then(|| (epoch_ms(), Instant::now()));
            let (target_host, target_port, peer, ip): (&str, u16, _, _) = match balancer {
                Some(balancer) => {
                    let input = HashInput {
                        client_ip: conn.client.ip(),
                        consumer,
                        headers: upstream_request.headers(),
                        path: uri.path(),
                        query: uri.query(),
                        captures: &matched.captures,
                    };
                    match balancer.pick(&input, &mut picks) {
                        Some(pick) => {
                            set_cookie = pick.set_cookie.or(set_cookie);
                            let peer = balancer.peer(pick.index);
                            (&peer.address.host, peer.address.port, Some(pick.index), peer.ip)
                        }
                        None => {
                            return Err(ProxyError::new(
                                ErrorKind::NoPeer,
                                format!("upstream {}: no healthy target", balancer.upstream_name),
                            ))
                        }
                    }
                }
                None => (&service.host, service.port as u16, None, runtime.host_ip),
            };
            let report = |error: &ProxyError| {
                if let (Some(balancer), Some(index)) = (balancer, peer) {
                    if let Some(report) = passive_report(error.kind) {
                        balancer.report(index, report);
                    }
                }
            };
            if let Some((start, at)) = balancer_start {
                tries.push(strait_plugins::UpstreamTry {
                    ip: target_host.to_string(),
                    port: target_port,
                    balancer_start: start,
                    balancer_latency: at.elapsed().as_millis() as u64,
                    failure: None,
                });
            }
            let host_value = if host_override.is_some() {
                host_override.clone()
            } else if route.preserve_host {
                original_host.clone().or_else(|| HeaderValue::from_str(host).ok())
            } else if balancer.is_none() {
                runtime.host_header.clone()
            } else {
                let name = balancer.and_then(|b| b.host_header.as_deref()).unwrap_or(target_host);
                strait_snapshot::snapshot::host_header(name, target_port, tls)
            };
            let authority = host_value.as_ref().and_then(|h| h.to_str().ok()).unwrap_or("localhost");
            let sni = || {
                authority
                    .rsplit_once(':')
                    .map(|(n, _)| n)
                    .unwrap_or(authority)
                    .to_string()
            };
            let resolved = match ip {
                Some(ip) => Ok(std::net::SocketAddr::new(ip, target_port)),
                None => crate::upstream::dns::resolve(target_host, target_port).await,
            };
            let addr = match resolved {
                Ok(addr) => addr,
                Err(error) => {
                    let error = ProxyError::new(ErrorKind::NameResolution, error.to_string());
                    if let Some(last) = tries.last_mut() {
                        last.failure = Some(error.cause.clone());
                    }
                    last_error = Some(error);
                    pending = Some(upstream_request);
                    if balancer.is_some() {
                        continue;
                    }
                    break;
                }
            };
            let endpoint = Endpoint {
                write_timeout: millis(service.write_timeout),
                addr,
                http2,
                tls: runtime
                    .tls
                    .as_ref()
                    .map(|t| (if http2 { t.http2.clone() } else { t.http1.clone() }, sni())),
            };
            // Timed only for a log serializer or tracer (Exchange::forward).
            let connect_start = detailed.then(Instant::now);
            let lease = match shared.pool().acquire(&endpoint, connect_timeout).await {
                Ok(lease) => lease,
                Err(error) if error.retryable() => {
                    tracing::debug!(cause = %error.cause, "upstream connect failed, retrying");
                    report(&error);
                    if let Some(last) = tries.last_mut() {
                        last.failure = Some(error.cause.to_string());
                    }
                    last_error = Some(error);
                    pending = Some(upstream_request);
                    continue;
                }
                Err(error) => return Err(error),
            };
            let connected = connect_start.map(|start| (start, Instant::now(), lease.reused()));
            if http2 {
                *upstream_request.version_mut() = Version::HTTP_2;
                upstream_request.headers_mut().remove(header::HOST);
                let mut target = http::uri::Parts::default();
                target.scheme = Some(if tls { Scheme::HTTPS } else { Scheme::HTTP });
                target.authority = Some(
                    Authority::try_from(authority)
                        .map_err(|e| ProxyError::new(ErrorKind::BadRequest, e.to_string()))?,
                );
                target.path_and_query = Some(path_and_query.clone());
                *upstream_request.uri_mut() =
                    Uri::from_parts(target).map_err(|e| ProxyError::new(ErrorKind::BadRequest, e.to_string()))?;
            } else {
                if let Some(h) = host_value {
                    upstream_request.headers_mut().insert(header::HOST, h);
                }
                *upstream_request.uri_mut() = Uri::from(path_and_query.clone());
            }
            let upstream_started = Instant::now();
            let in_flight = match (balancer, peer) {
                (Some(balancer), Some(index)) if balancer.counts_in_flight() => {
                    Some(balancer.peer(index).health.begin())
                }
                _ => None,
            };
            let read_timeout = match deadline {
                Some(deadline) => millis(service.read_timeout).min(
                    deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(1)),
                ),
                None => millis(service.read_timeout),
            };
            let sent = shared
                .pool()
                .dispatch(
                    lease,
                    &endpoint,
                    upstream_request,
                    crate::upstream::SendOptions {
                        forwarding,
                        read_timeout,
                        relay,
                    },
                    connect_timeout,
                )
                .await;
            let (mut response, relayed) = match sent {
                Ok(response) => response,
                Err(failed) => {
                    report(&failed.error);
                    if let Some(last) = tries.last_mut() {
                        last.failure = Some(failed.error.cause.to_string());
                    }
                    let again = failed.error.retryable()
                        || (failed.error.kind == ErrorKind::UpstreamInvalid && replay.is_some());
                    if !again {
                        return Err(failed.error);
                    }
                    tracing::debug!(cause = %failed.error.cause, "upstream request failed, retrying");
                    pending = failed.unsent;
                    last_error = Some(failed.error);
                    continue;
                }
            };
            if let (Some(balancer), Some(index)) = (balancer, peer) {
                balancer.report_status(index, response.status().as_u16());
                if balancer.algorithm == Algorithm::Latency {
                    balancer.peer(index).health.record_latency(upstream_started.elapsed());
                }
            }
            let detail = connected.map(|(connect_start, connect_end, reused)| {
                Box::new(ProxiedDetail {
                    upstream_uri: path_and_query.as_str().to_string(),
                    tries: std::mem::take(&mut tries),
                    timing: Some(strait_plugins::UpstreamTiming {
                        connect_start,
                        connect_end,
                        sent: upstream_started,
                        // Set when the response head arrives.
                        head: upstream_started,
                        reused,
                    }),
                })
            });
            let switched = upgrade
                .take()
                .and_then(|upgrade| upgrade.start(&mut response, millis(service.read_timeout)));
            let body = ResponseBody {
                read_timeout: millis(service.read_timeout),
                in_flight,
                buffering: route.response_buffering && !http2,
                deadline: deadline.filter(|_| crate::pipeline::grpc::is_grpc(response.headers())),
            };
            let (mut response, proxied, mut fields) =
                finish_response(response, body, started, upstream_started, &shared.headers, detail);
            fields.relayed = relayed;
            if let Some(protocol) = switched {
                crate::pipeline::tunnel::set_headers(response.headers_mut(), protocol);
            }
            if let Some(cookie) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
                response.headers_mut().append(header::SET_COOKIE, cookie);
            }
            return Ok((response, proxied, fields));
        }
        Err(last_error.unwrap_or_else(|| ProxyError::new(ErrorKind::UpstreamConnect, "no attempt made")))
    }
}

/// Whether `upstream_path` would give back the request's own path: no
/// service path, and nothing stripped from it (a stripped `/` leaves a
/// path that still starts with one, unless it started with two).
fn keeps_path(service_path: Option<&str>, request_path: &str, matched: Option<&str>, strip_path: bool) -> bool {
    matches!(service_path, None | Some("/"))
        && request_path.starts_with('/')
        && match (strip_path, matched) {
            (true, Some(m)) => m.is_empty() || (m == "/" && !request_path.starts_with("//")),
            _ => true,
        }
}

/// What a failed exchange tells passive health checks.
fn passive_report(kind: ErrorKind) -> Option<Report> {
    match kind {
        ErrorKind::UpstreamConnect | ErrorKind::UpstreamInvalid => Some(Report::TcpFailure),
        ErrorKind::UpstreamConnectTimeout | ErrorKind::UpstreamTimeout => Some(Report::Timeout),
        _ => None,
    }
}

/// How the upstream's response body is passed on.
struct ResponseBody {
    /// Longest silence between two body frames (the service's `read_timeout`).
    read_timeout: Duration,
    /// Held until the body is done (least-connections and latency balancing).
    in_flight: Option<InFlight>,
    /// The route's `response_buffering`.
    buffering: bool,
    /// A gRPC call's deadline (`grpc-timeout`): the stream ends there.
    deadline: Option<Instant>,
}

fn finish_response(
    response: Response<crate::upstream::UpstreamBody>,
    policy: ResponseBody,
    started: Instant,
    upstream_started: Instant,
    switches: &HeaderSwitches,
    detail: Option<Box<ProxiedDetail>>,
) -> (Response<ProxyBody>, Proxied, KongFields) {
    let head = Instant::now();
    let upstream_ms = head.duration_since(upstream_started).as_millis();
    let proxy_ms = upstream_started.duration_since(started).as_millis();
    let (mut parts, body) = response.into_parts();
    // The client's connection keeps its own protocol: an HTTP/1.0 (or
    // HTTP/2) upstream must not turn an HTTP/1.1 client's response into
    // `HTTP/1.0` and close its connection. h1_server.rs writes HTTP/1.0 clients'
    // responses as HTTP/1.0 whatever this says, and HTTP/2 ignores it.
    // The HTTP/1.1 client left the hop-by-hop fields out of every head
    // but a `101`'s (h1_client.rs `ResponseFields`).
    if parts.version >= Version::HTTP_2 || parts.status == http::StatusCode::SWITCHING_PROTOCOLS {
        strip_hop_by_hop_keeping(&mut parts.headers, false);
    }
    parts.version = Version::HTTP_11;
    // Kong's fields go beside the map (kong_headers::KongFields).
    let mut fields = KongFields::default();
    fields.via = switches.via;
    if switches.upstream_latency {
        fields.set_upstream_latency(upstream_ms as u64);
    }
    if switches.proxy_latency {
        fields.set_proxy_latency(proxy_ms as u64);
    }
    if switches.upstream_status {
        fields.set_upstream_status(parts.status.as_u16());
    }
    let detail = detail.map(|mut detail| {
        if let Some(timing) = detail.timing.as_mut() {
            timing.head = head;
        }
        detail
    });
    let proxied = Proxied {
        upstream_ms: upstream_ms as u64,
        kong_ms: proxy_ms as u64,
        detail,
    };
    // nginx's rule: the upstream may turn buffering off for one response;
    // the header itself is not passed on.
    // (Looked for among the names first: comparing them costs less than
    // hashing the name for a removal, and almost no response has it.)
    let unbuffered = parts.headers.keys().any(|name| name == X_ACCEL_BUFFERING)
        && parts
            .headers
            .remove(X_ACCEL_BUFFERING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"no"));
    let body = if body.is_whole() && policy.in_flight.is_none() {
        // Nothing to wait for, nothing to gather: the body goes as it is.
        boxed(body)
    } else {
        let body = IdleTimeoutBody::new(body, policy.read_timeout).holding(policy.in_flight);
        if policy.buffering && !unbuffered {
            boxed(BlockBody::new(body))
        } else {
            boxed(body)
        }
    };
    let body = match policy.deadline {
        Some(deadline) => boxed(crate::pipeline::grpc::DeadlineBody::new(body, deadline.into())),
        None => body,
    };
    (Response::from_parts(parts, body), proxied, fields)
}

#[cfg(test)]
mod tests;
