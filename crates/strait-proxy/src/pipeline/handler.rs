//! The pipeline's entry: a request in, its response out, never an error.
//! Loads the snapshot once, routes, runs the route's access phase
//! (phases/), the upstream exchange (forward.rs) and the phases after it;
//! whatever comes back gets Kong's headers here, and failures become Kong's
//! responses (error.rs). See docs/life-of-a-request.md for the walk.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Response, Uri, Version};
use strait_core::ProtocolSet;
use strait_router::{normalize_path, HeaderLookup, InvalidPath, RequestFacts};
use strait_snapshot::snapshot::Snapshot;

use crate::pipeline::body::ProxyBody;
use crate::pipeline::error::{error_response, ErrorKind, ProxyError};
use crate::pipeline::forward::{Exchange, ForwardOptions, Proxied};
use crate::pipeline::kong_headers::{HeaderSwitches, KongFields, RequestId};
use crate::pipeline::phases::{self, Before};
use crate::{Shared, SERVER_HEADER};

pub(crate) mod hop_by_hop;
pub use hop_by_hop::strip_hop_by_hop;
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
    /// `Alt-Svc` on this connection's responses: the TLS listener's port
    /// also serves HTTP/3 (`ssl http3`).
    pub alt_svc: Option<HeaderValue>,
}

impl ConnInfo {
    /// A connection from `client` accepted on `local`: the addresses formatted
    /// once as the header values requests take.
    pub fn new(client: SocketAddr, local: SocketAddr, tls: bool, alt_svc: Option<HeaderValue>) -> ConnInfo {
        ConnInfo {
            client,
            client_ip: HeaderValue::from_str(&client.ip().to_string()).expect("an IP address is a valid header value"),
            local_port: HeaderValue::from(local.port()),
            local,
            tls,
            sni: None,
            client_cert: None,
            alt_svc,
        }
    }
}

/// The client's certificate as the auth plugins read it: the leaf of the
/// chain the handshake verified.
pub(crate) fn client_cert(
    chain: Option<&[rustls::pki_types::CertificateDer<'static>]>,
) -> Option<Arc<strait_plugins::auth::x509::ClientCert>> {
    chain
        .and_then(|chain| chain.first())
        .and_then(|leaf| strait_plugins::auth::x509::parse(leaf.as_ref()))
        .map(Arc::new)
}

#[derive(Debug)]
struct Headers<'a>(&'a HeaderMap);

impl HeaderLookup for Headers<'_> {
    fn values(&self, name: &str) -> Vec<&str> {
        self.0.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect()
    }
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
        None => route(request, conn, shared, &snapshot, started, &request_id, grpc).await,
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
    if let Some(alt_svc) = &conn.alt_svc {
        if !response.headers().contains_key(header::ALT_SVC) {
            response.headers_mut().insert(header::ALT_SVC, alt_svc.clone());
        }
    }
    strait_runtime::stats::record_response(response.status().as_u16(), started.elapsed());
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

/// Route the request and walk the rest of the pipeline: the route's plugin
/// phases around the upstream exchange (phases.rs, forward.rs).
async fn route(
    mut request: BoxedRequest,
    conn: &ConnInfo,
    shared: &Shared,
    snapshot: &Arc<Snapshot>,
    started: Instant,
    request_id: &RequestId,
    grpc: bool,
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
    let exchange = Exchange {
        conn,
        shared,
        snapshot,
        matched: &matched,
        host: &host,
        port,
        started,
        request_id,
        grpc,
    };
    // One path for every request: the access phase (none for a route
    // without plugins, the empty chain; a plain call for most chains), the
    // exchange, and the response completed by the later phases. A chain
    // whose access phase may wait runs as one boxed future (phases.rs).
    let chain = snapshot
        .route_runtime(facts.id)
        .map(|runtime| &runtime.plugins)
        .filter(|chain| !chain.is_empty());
    let Some(chain) = chain else {
        // The upstream's response head is relayed to an HTTP/1.1 client in
        // its own bytes (relay.rs).
        let options = ForwardOptions {
            relay: request.version() == Version::HTTP_11,
            ..ForwardOptions::default()
        };
        let (response, _, fields) = exchange.forward(request, options).await?;
        return Ok((response, Some(fields)));
    };
    if !chain.runs_inline() {
        return Ok(phases::run(request, chain, exchange).await);
    }
    match phases::before(request, chain, &exchange) {
        Before::Forward(request, options, mut state) => {
            let forwarded = exchange.forward(request, options).await;
            let forwarded = phases::fail_over(&exchange, &mut state, forwarded).await;
            let forwarded = phases::buffer_if_asked(&mut state, forwarded).await;
            Ok(phases::finish(state, forwarded, chain, &exchange))
        }
        Before::Done(response, fields) => Ok((response, fields)),
        Before::Limited(request, state) => Ok(phases::limited(request, state, chain, exchange).await),
        Before::Suspended(request, state, suspended) => {
            Ok(phases::resumed(request, state, suspended, chain, exchange).await)
        }
    }
}

const X_KONG_RESPONSE_LATENCY: HeaderName = HeaderName::from_static("x-kong-response-latency");

#[cfg(test)]
mod tests;
