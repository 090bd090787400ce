//! One request's state through the plugin phases ([`PhaseState`]), in one
//! box made before the access phase: every later stage takes the box (a
//! pointer) rather than its fields, which moved by value were a few hundred
//! bytes copied at each step (about twenty copies a request). Also the
//! request's method, URI and headers taken out of its box for the plugins
//! and put back ([`Taken`]), and the plugins' context ([`request_ctx`]).

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Uri, Version};
use strait_plugins::{
    AddedHeaders, BodyLimit, Flow, IdentityFields, LogDetails, PluginChain, Protocol, RequestCtx, RequestSummary,
    SharedStore,
};

use super::{read_body_up_to, MAX_BUFFERED_BODY};
use crate::pipeline::body::{full, ProxyBody};
use crate::pipeline::error::{ErrorKind, ProxyError};
use crate::pipeline::forward::{ExactPath, Exchange, ForwardOptions};
use crate::pipeline::handler::BoxedRequest;

/// One request's state through the plugin phases: what is settled before
/// the access phase, what the access phase left, and what the later phases
/// and the log phase read.
pub(crate) struct PhaseState {
    pub protocol: Protocol,
    pub version: Version,
    /// The upstream's head is relayed in its own bytes (no plugin reads it).
    pub relay: bool,
    /// For a log serializer, as the request arrived.
    pub details: Option<Box<LogDetails>>,
    /// The snapshot the request loaded, for a log phase that reads its
    /// entities.
    pub entities: Option<Arc<dyn strait_plugins::Directory + Send>>,
    /// The request's size as it arrived, for the log phase.
    pub request_bytes: u64,
    /// The request body, when a plugin read it whole (or a limit made the
    /// proxy read it).
    pub buffered: Option<Bytes>,
    /// The request body is still the request's own (streaming, unread).
    pub body_in_box: bool,
    pub body_limit: Option<BodyLimit>,
    upstream_host: Option<HeaderValue>,
    identity: IdentityFields,
    exact_path: bool,
    /// A header filter reads who the request authenticated as.
    keeps_consumer: bool,
    /// The request as the later phases and the log phase see it.
    pub summary: RequestSummary,
    pub shared: SharedStore,
    /// Response headers the access phase asked for.
    pub response_headers: AddedHeaders,
}

impl PhaseState {
    pub fn new(request: &Request<ProxyBody>, chain: &PluginChain, exchange: &Exchange<'_>) -> Box<PhaseState> {
        let protocol = super::protocol_of(exchange.grpc, exchange.conn.tls);
        let route = &exchange.matched.route;
        // Written into its box, not made on the stack and copied there.
        Box::write(
            Box::new_uninit(),
            PhaseState {
                protocol,
                version: request.version(),
                relay: false,
                details: chain.serializes_log().then(|| log_details(exchange, request, true)),
                entities: chain.reads_entities().then(|| {
                    let entities: Arc<dyn strait_plugins::Directory + Send> = exchange.snapshot.clone();
                    entities
                }),
                // Measured as it arrived, before plugins change it.
                request_bytes: if chain.follows_response_body() {
                    request_size(request)
                } else {
                    0
                },
                buffered: None,
                body_in_box: true,
                body_limit: None,
                upstream_host: None,
                identity: IdentityFields::beside(),
                exact_path: false,
                keeps_consumer: chain.keeps_consumer(),
                summary: RequestSummary {
                    method: request.method().clone(),
                    protocol,
                    client_ip: exchange.conn.client.ip(),
                    route_id: Some(route.id),
                    service_id: route.service.map(|s| s.id),
                    consumer_id: None,
                    credential: None,
                    request_headers: chain.keeps_request_headers().then(|| request.headers().clone()),
                    authenticated: None,
                },
                shared: SharedStore::default(),
                response_headers: AddedHeaders::default(),
            },
        )
    }

    pub fn http1(&self) -> bool {
        self.version < Version::HTTP_2
    }

    /// What the access phase left in `ctx`.
    pub fn take_from(&mut self, ctx: RequestCtx<'_>) {
        let RequestCtx {
            method,
            consumer,
            credential,
            body,
            request_body_limit,
            upstream_host,
            shared,
            response_headers,
            identity,
            exact_path,
            authenticated_groups,
            ..
        } = ctx;
        if *method != self.summary.method {
            self.summary.method = method.clone();
        }
        self.summary.consumer_id = consumer.map(|c| c.id);
        if self.keeps_consumer {
            self.summary.authenticated = consumer.map(|c| strait_plugins::ResponseIdentity {
                subject: c
                    .username
                    .clone()
                    .or_else(|| c.custom_id.clone())
                    .unwrap_or_else(|| c.id.to_string()),
                groups: authenticated_groups,
            });
        }
        self.summary.credential = credential;
        self.buffered = body;
        self.body_limit = request_body_limit;
        self.upstream_host = upstream_host;
        self.shared = shared;
        self.response_headers = response_headers;
        self.identity = identity;
        self.exact_path = exact_path;
    }

    /// What [`PhaseState::take_from`] took, back into a context made again
    /// for an access phase that resumes after waiting (chain.rs
    /// `Suspended`); the consumer found again by its id.
    pub fn give_back(&mut self, ctx: &mut RequestCtx<'_>) {
        ctx.consumer = self.summary.consumer_id.and_then(|id| ctx.directory.consumer(id));
        ctx.credential = self.summary.credential.take();
        ctx.body = self.buffered.take();
        ctx.request_body_limit = self.body_limit.take();
        ctx.upstream_host = self.upstream_host.take();
        ctx.shared = std::mem::take(&mut self.shared);
        ctx.response_headers = std::mem::take(&mut self.response_headers);
        ctx.identity = std::mem::take(&mut self.identity);
        ctx.exact_path = self.exact_path;
    }

    /// A body limit a plugin set (request-size-limiting) applied: a
    /// streaming body is read up to it.
    pub async fn limit_body(&mut self, request: &mut BoxedRequest, limit: BodyLimit) -> Result<Flow, ProxyError> {
        match (self.buffered.as_ref(), self.body_in_box) {
            (Some(bytes), _) if bytes.len() as u64 > limit.max_bytes => Ok(Flow::Respond(limit.exceeded)),
            (None, true) => {
                let max = usize::try_from(limit.max_bytes)
                    .unwrap_or(usize::MAX)
                    .min(MAX_BUFFERED_BODY);
                let body = std::mem::replace(request.body_mut(), crate::pipeline::body::empty());
                self.body_in_box = false;
                match read_body_up_to(body, max).await {
                    Ok(bytes) => {
                        self.buffered = Some(bytes);
                        Ok(Flow::Continue)
                    }
                    Err(error) if error.kind == ErrorKind::PayloadTooLarge => Ok(Flow::Respond(limit.exceeded)),
                    Err(error) => Err(error),
                }
            }
            _ => Ok(Flow::Continue),
        }
    }

    /// The request as the access phase left it, to go upstream: its body
    /// settled and what forwarding needs beside it.
    pub fn forward_options(&mut self, request: &mut BoxedRequest, detailed: bool) -> ForwardOptions {
        match (self.buffered.take(), self.body_in_box) {
            (Some(bytes), _) => {
                let headers = request.headers_mut();
                headers.remove(header::TRANSFER_ENCODING);
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
                *request.body_mut() = full(bytes);
            }
            (None, true) => {}
            (None, false) => *request.body_mut() = full(Bytes::new()),
        }
        let summary = &self.summary;
        ForwardOptions {
            host_override: self.upstream_host.take(),
            detailed,
            consumer: summary
                .consumer_id
                .or_else(|| summary.credential.as_ref().map(|c| c.id)),
            relay: self.relay,
            identity: std::mem::take(&mut self.identity),
            target: self.shared.remove(),
            unbuffered: self.shared.get::<strait_plugins::StreamResponse>().is_some(),
        }
    }
}

/// The request's method, URI and headers, out of its box while the
/// plugins see and change them (moved, not the whole request copied).
pub(super) struct Taken {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
}

impl Taken {
    pub fn out_of(request: &mut Request<ProxyBody>) -> Taken {
        let mut headers = std::mem::take(request.headers_mut());
        // Plugins add headers (transforms, groups): grow the map once
        // rather than as each arrives.
        headers.reserve(8);
        Taken {
            method: std::mem::take(request.method_mut()),
            uri: std::mem::take(request.uri_mut()),
            headers,
        }
    }

    /// Back into the request, as the access phase left them.
    pub fn restore(self, request: &mut Request<ProxyBody>, state: &PhaseState) {
        *request.method_mut() = self.method;
        // The placeholders `out_of` left own no memory (an empty map, the
        // static "/"): forgotten rather than dropped, which walked the
        // map's empty tables (80 instructions a request).
        let placeholder = std::mem::replace(request.headers_mut(), self.headers);
        debug_assert!(placeholder.capacity() == 0);
        std::mem::forget(placeholder);
        std::mem::forget(std::mem::replace(request.uri_mut(), self.uri));
        if state.exact_path {
            request.extensions_mut().insert(ExactPath);
        }
    }
}

/// The request's context for the access phase.
pub(super) fn request_ctx<'a>(
    exchange: &'a Exchange<'a>,
    taken: &'a mut Taken,
    state: &mut PhaseState,
) -> RequestCtx<'a> {
    let route = &exchange.matched.route;
    RequestCtx {
        method: &mut taken.method,
        protocol: state.protocol,
        http_version: state.version,
        client_ip: exchange.conn.client.ip(),
        client_port: exchange.conn.client.port(),
        server_port: exchange.conn.local.port(),
        host: exchange.host,
        route_id: Some(route.id),
        route_name: route.name.as_deref(),
        service_id: route.service.map(|s| s.id),
        captures: &exchange.matched.captures,
        uri: &mut taken.uri,
        headers: &mut taken.headers,
        body: state.buffered.take(),
        upstream_host: None,
        request_body_limit: None,
        directory: exchange.snapshot.as_ref(),
        consumer: None,
        consumer_view: None,
        credential: None,
        authenticated_groups: None,
        shared: SharedStore::default(),
        response_headers: Default::default(),
        exact_path: false,
        client_cert: exchange.conn.client_cert.clone(),
        identity: IdentityFields::beside(),
    }
}

/// What the request log serializers report, kept only when a plugin of the
/// chain serializes Kong's log entry.
pub(super) fn log_details(
    exchange: &Exchange<'_>,
    request: &Request<ProxyBody>,
    with_headers: bool,
) -> Box<LogDetails> {
    let entities: Arc<dyn strait_plugins::Directory + Send> = exchange.snapshot.clone();
    Box::new(LogDetails {
        request_id: exchange.request_id.as_str().to_string(),
        scheme: if exchange.conn.tls { "https" } else { "http" },
        host: exchange.host.to_string(),
        port: exchange.port,
        request_uri: request.uri().path_and_query().map_or("/", |p| p.as_str()).to_string(),
        request_headers: match with_headers {
            true => request.headers().clone(),
            false => http::HeaderMap::new(),
        },
        response_headers: http::HeaderMap::new(),
        upstream_uri: None,
        upstream_status: None,
        tries: Vec::new(),
        started_at: crate::pipeline::handler::epoch_ms().saturating_sub(exchange.started.elapsed().as_millis() as u64),
        started: exchange.started,
        http_version: request.version(),
        upstream_timing: None,
        kong_ms: None,
        tls_version: None,
        entities,
        trace_id: None,
    })
}

/// The request's size as it arrived (HTTP/1.1 framing): request line,
/// headers, and the body's declared length.
fn request_size(request: &Request<ProxyBody>) -> u64 {
    let target = request.uri().path_and_query().map_or(1, |p| p.as_str().len());
    let line = request.method().as_str().len() + target + " HTTP/1.1\r\n".len() + 1;
    // One pass over the fields: the declared body length is read on the way
    // (a lookup of its own hashed the name again).
    let mut headers = 0;
    let mut body = None;
    for (name, value) in request.headers() {
        headers += name.as_str().len() + value.len() + 4;
        if name == header::CONTENT_LENGTH && body.is_none() {
            body = Some(value.to_str().ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0));
        }
    }
    (line + headers + 2) as u64 + body.unwrap_or(0)
}
