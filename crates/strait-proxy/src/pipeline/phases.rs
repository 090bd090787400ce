//! The plugin phases, the pipeline's stage between routing and the upstream
//! exchange: run the access phase (reading the request body first when a
//! plugin needs it), proxy (forward.rs) or answer, run `header_filter` on
//! whatever answers, and follow the response body with `body_filter` and
//! `log` when a plugin has them. A route without plugins runs the empty
//! chain here too: no phase, straight to the exchange.
//!
//! See docs/plugins.md for the phase chart.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use strait_plugins::{
    BodyChunk, Flow, LogDetails, LogRecord, Plugin, PluginChain, Protocol, RequestCtx, RequestSummary, ResponseCtx,
    ResponseSource, SharedStore,
};

use crate::pipeline::body::{boxed, full, BoxError, ProxyBody};
use crate::pipeline::error::{ErrorKind, ProxyError};
use crate::pipeline::forward::{Exchange, ForwardOptions};
use crate::pipeline::handler::{error_to_response, pin_in_place, BoxedRequest};
use crate::pipeline::kong_headers::KongFields;
use crate::SERVER_HEADER;

/// The most a plugin may make the proxy hold of a request or response body
/// in memory; a longer request body is refused with 413.
pub const MAX_BUFFERED_BODY: usize = 16 * 1024 * 1024;

fn protocol_of(request: &Request<ProxyBody>, tls: bool) -> Protocol {
    let grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    match (grpc, tls) {
        (true, true) => Protocol::Grpcs,
        (true, false) => Protocol::Grpc,
        (false, true) => Protocol::Https,
        (false, false) => Protocol::Http,
    }
}

/// Reads the whole body, refusing more than [`MAX_BUFFERED_BODY`].
async fn read_body(body: ProxyBody) -> Result<Bytes, ProxyError> {
    read_body_up_to(body, MAX_BUFFERED_BODY).await
}

/// Reads the whole body, refusing more than `limit` bytes.
async fn read_body_up_to(mut body: ProxyBody, limit: usize) -> Result<Bytes, ProxyError> {
    let mut buffer = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ProxyError::new(ErrorKind::BadRequest, e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() + data.len() > limit {
                return Err(ProxyError::new(
                    ErrorKind::PayloadTooLarge,
                    "request body larger than the plugin buffer",
                ));
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer.freeze())
}

/// Run `chain`'s phases around the upstream exchange. An empty chain (a
/// route without plugins) has no phase to run: the request goes upstream
/// at once, its response head relayed to an HTTP/1.1 client in the
/// upstream's own bytes (relay.rs). A proxied response whose head no plugin
/// reads comes with Kong's fields beside it (handler.rs `handle`).
pub(crate) async fn run(
    request: BoxedRequest,
    chain: &PluginChain,
    exchange: Exchange<'_>,
) -> Result<(Response<ProxyBody>, Option<KongFields>), ProxyError> {
    let http1 = request.version() < http::Version::HTTP_2;
    if chain.is_empty() {
        let options = ForwardOptions {
            relay: request.version() == http::Version::HTTP_11,
            ..ForwardOptions::default()
        };
        let (response, _, fields) = exchange.forward(request, options).await?;
        return Ok((response, Some(fields)));
    }
    // Boxed: the plugin phases are a future of kilobytes, and inline they
    // would make every request's future (boxed per request by h1_server.rs
    // and h2_server.rs) that large, plugins or not.
    Ok(pin_in_place(|| run_chain(*request, chain, exchange, http1)).await)
}

/// The phases of a chain with plugins: access (reading the request body
/// first when a plugin needs it), the exchange or a plugin's answer,
/// `header_filter`, and `body_filter` and `log` following the body.
async fn run_chain(
    request: Request<ProxyBody>,
    chain: &PluginChain,
    exchange: Exchange<'_>,
    http1: bool,
) -> (Response<ProxyBody>, Option<KongFields>) {
    let protocol = protocol_of(&request, exchange.conn.tls);
    let (mut parts, body) = request.into_parts();
    // Plugins add headers (consumer, credential, groups, transforms): grow
    // the map once rather than as each arrives.
    parts.headers.reserve(8);
    let request_headers = chain.keeps_request_headers().then(|| parts.headers.clone());
    let serializes = chain.serializes_log();
    let mut details = serializes.then(|| {
        let entities: Arc<dyn strait_plugins::Directory + Send> = exchange.snapshot.clone();
        Box::new(LogDetails {
            request_id: exchange.request_id.as_str().to_string(),
            scheme: if exchange.conn.tls { "https" } else { "http" },
            host: exchange.host.to_string(),
            port: exchange.port,
            request_uri: parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
            request_headers: parts.headers.clone(),
            response_headers: http::HeaderMap::new(),
            upstream_uri: None,
            upstream_status: None,
            tries: Vec::new(),
            started_at: crate::pipeline::handler::epoch_ms()
                .saturating_sub(exchange.started.elapsed().as_millis() as u64),
            started: exchange.started,
            http_version: parts.version,
            upstream_timing: None,
            kong_ms: None,
            tls_version: None,
            entities,
            trace_id: None,
        })
    });
    // Measured as it arrived, before plugins change it.
    let request_bytes = if chain.follows_response_body() {
        request_size(&parts)
    } else {
        0
    };
    let (buffered, streaming): (Option<Bytes>, Option<ProxyBody>) = if chain.reads_request_body() {
        match read_body(body).await {
            Ok(bytes) => (Some(bytes), None),
            Err(error) => {
                return (
                    error_to_response(error, http1, exchange.conn, exchange.request_id),
                    None,
                )
            }
        }
    } else {
        (None, Some(body))
    };
    let snapshot: &strait_snapshot::snapshot::Snapshot = exchange.snapshot;
    let route = &exchange.matched.route;
    let mut ctx = RequestCtx {
        method: &mut parts.method,
        protocol,
        http_version: parts.version,
        client_ip: exchange.conn.client.ip(),
        host: exchange.host,
        route_id: Some(route.id),
        route_name: route.name.as_deref(),
        service_id: route.service.map(|s| s.id),
        captures: &exchange.matched.captures,
        uri: &mut parts.uri,
        headers: &mut parts.headers,
        body: buffered,
        upstream_host: None,
        request_body_limit: None,
        directory: snapshot,
        consumer: None,
        consumer_view: None,
        credential: None,
        authenticated_groups: None,
        shared: SharedStore::default(),
        response_headers: Default::default(),
        exact_path: false,
        client_cert: exchange.conn.client_cert.clone(),
    };
    let flow = chain.access(&mut ctx).await;
    let summary = RequestSummary {
        method: ctx.method.clone(),
        protocol,
        client_ip: ctx.client_ip,
        route_id: ctx.route_id,
        service_id: ctx.service_id,
        consumer_id: ctx.consumer.map(|c| c.id),
        credential: ctx.credential.take(),
        request_headers,
    };
    let mut new_body = ctx.body.take();
    if ctx.exact_path {
        parts.extensions.insert(crate::pipeline::forward::ExactPath);
    }
    let body_limit = ctx.request_body_limit.take();
    let upstream_host = ctx.upstream_host.take();
    let mut shared = std::mem::take(&mut ctx.shared);
    let response_headers = std::mem::take(&mut ctx.response_headers);
    // The upstream's head goes on in its own bytes, as on a route without
    // plugins, when no plugin reads or changes it: Kong's fields then stay
    // beside it, and the map holds only what `access` added.
    let relay = parts.version == http::Version::HTTP_11
        && matches!(protocol, Protocol::Http | Protocol::Https)
        && chain.leaves_response_head()
        && shared.get::<strait_plugins::DropResponseBody>().is_none();
    let mut streaming = streaming;
    let flow = match (flow, body_limit) {
        (Flow::Continue, Some(limit)) => match (new_body.as_ref(), streaming.take()) {
            (Some(bytes), _) if bytes.len() as u64 > limit.max_bytes => Flow::Respond(limit.exceeded),
            (None, Some(body)) => {
                let max = usize::try_from(limit.max_bytes)
                    .unwrap_or(usize::MAX)
                    .min(MAX_BUFFERED_BODY);
                match read_body_up_to(body, max).await {
                    Ok(bytes) => {
                        new_body = Some(bytes);
                        Flow::Continue
                    }
                    Err(error) if error.kind == ErrorKind::PayloadTooLarge => Flow::Respond(limit.exceeded),
                    Err(error) => {
                        return (
                            error_to_response(error, http1, exchange.conn, exchange.request_id),
                            None,
                        )
                    }
                }
            }
            _ => Flow::Continue,
        },
        (flow, _) => flow,
    };
    let (response, source, mut beside) = match flow {
        Flow::Respond(answer) => (plugin_response_to_http(answer), ResponseSource::Exit, None),
        Flow::Continue => {
            let body = match (new_body, streaming) {
                (Some(bytes), _) => {
                    parts.headers.remove(header::TRANSFER_ENCODING);
                    parts
                        .headers
                        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
                    full(bytes)
                }
                (None, Some(body)) => body,
                (None, None) => full(Bytes::new()),
            };
            let options = ForwardOptions {
                host_override: upstream_host,
                detailed: serializes,
                consumer: summary
                    .consumer_id
                    .or_else(|| summary.credential.as_ref().map(|c| c.id)),
                relay,
            };
            match exchange
                .forward(Box::new(Request::from_parts(parts, body)), options)
                .await
            {
                Ok((response, proxied, fields)) if relay => {
                    (response, ResponseSource::Service, Some((proxied, fields)))
                }
                Ok((mut response, proxied, fields)) => {
                    Exchange::into_map(&mut response, proxied, fields);
                    (response, ResponseSource::Service, None)
                }
                Err(error) => (
                    error_to_response(error, http1, exchange.conn, exchange.request_id),
                    ResponseSource::Error,
                    None,
                ),
            }
        }
    };
    let consumer_plugins = match summary.consumer_id {
        Some(id) if chain.has_consumer_scoped() => snapshot.consumer_plugins(id),
        _ => &[],
    };
    let (mut head, body) = response.into_parts();
    if let Some(details) = details.as_deref_mut() {
        if let Some(proxied) = head.extensions.get_mut::<crate::pipeline::forward::Proxied>() {
            details.upstream_status = Some(head.status.as_u16());
            details.kong_ms = Some(proxied.kong_ms);
            if let Some(detail) = proxied.detail.take() {
                details.upstream_uri = Some(detail.upstream_uri);
                details.tries = detail.tries;
                details.upstream_timing = detail.timing;
            }
        }
    }
    if let Some((_, fields)) = beside.as_mut() {
        fields.added = response_headers;
    } else {
        response_headers.append_to(&mut head.headers);
        let mut response_ctx = ResponseCtx {
            status: &mut head.status,
            headers: &mut head.headers,
            source,
            request: &summary,
            shared: &mut shared,
        };
        chain.header_filter(consumer_plugins, &mut response_ctx);
    }
    let (proxied, fields) = match beside {
        Some((proxied, fields)) => (Some(proxied), Some(fields)),
        None => (None, None),
    };
    let body = match shared.get::<strait_plugins::DropResponseBody>() {
        Some(_) => {
            head.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
            full(Bytes::new())
        }
        None => body,
    };
    if !chain.follows_response_body() {
        return (Response::from_parts(head, body), fields);
    }
    let followers = chain.response_followers(consumer_plugins, summary.route_id, summary.service_id, protocol);
    if followers.is_empty() {
        return (Response::from_parts(head, body), fields);
    }
    if followers.iter().any(|p| p.filters_body()) {
        // Filters may change the length.
        head.headers.remove(header::CONTENT_LENGTH);
    }
    if let Some(details) = details.as_deref_mut() {
        details.response_headers = head.headers.clone();
        // Added to every response after this point (handler.rs).
        if exchange.shared.headers.request_id {
            details.response_headers.insert(
                crate::pipeline::handler::X_KONG_REQUEST_ID,
                exchange.request_id.header_value(),
            );
        }
    }
    let outcome = Outcome {
        status: head.status,
        source,
        upstream_ms: proxied
            .as_ref()
            .or_else(|| head.extensions.get::<crate::pipeline::forward::Proxied>())
            .map(|p| p.upstream_ms),
        request_bytes,
        details,
    };
    let followed = FollowedBody::new(body, followers, shared, summary, outcome, exchange.started);
    (Response::from_parts(head, boxed(followed)), fields)
}

/// The request's size as it arrived (HTTP/1.1 framing): request line,
/// headers, and the body's declared length.
fn request_size(parts: &http::request::Parts) -> u64 {
    let target = parts.uri.path_and_query().map_or(1, |p| p.as_str().len());
    let line = parts.method.as_str().len() + target + " HTTP/1.1\r\n".len() + 1;
    let headers: usize = parts
        .headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    let body = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(0);
    (line + headers + 2) as u64 + body
}

/// How the response was produced, for the log phase.
struct Outcome {
    status: StatusCode,
    source: ResponseSource,
    upstream_ms: Option<u64>,
    request_bytes: u64,
    details: Option<Box<LogDetails>>,
}

/// A response body passed through the body filters of the request's
/// plugins, calling their log phase once it ends (or is dropped).
struct FollowedBody {
    inner: ProxyBody,
    plugins: Vec<Arc<dyn Plugin>>,
    buffers: bool,
    buffer: BytesMut,
    shared: SharedStore,
    summary: Option<RequestSummary>,
    outcome: Outcome,
    started: Instant,
    sent: u64,
    done: bool,
    /// Trailers to send after the data the last filter produced.
    pending: Option<Frame<Bytes>>,
}

impl FollowedBody {
    fn new(
        inner: ProxyBody,
        plugins: Vec<Arc<dyn Plugin>>,
        shared: SharedStore,
        summary: RequestSummary,
        outcome: Outcome,
        started: Instant,
    ) -> FollowedBody {
        FollowedBody {
            inner,
            buffers: shared.get::<strait_plugins::BufferResponseBody>().is_some(),
            plugins,
            buffer: BytesMut::new(),
            shared,
            summary: Some(summary),
            outcome,
            started,
            sent: 0,
            done: false,
            pending: None,
        }
    }

    fn filter(&mut self, data: Bytes, end: bool) -> Bytes {
        self.filter_last(data, end, None).0
    }

    /// Filters a piece, the last one with the body's trailers; returns what
    /// the filters left of both.
    fn filter_last(
        &mut self,
        data: Bytes,
        end: bool,
        trailers: Option<http::HeaderMap>,
    ) -> (Bytes, Option<http::HeaderMap>) {
        let mut chunk = BodyChunk { data, end, trailers };
        for plugin in self.plugins.iter().filter(|p| p.filters_body()) {
            plugin.body_filter(&mut self.shared, &mut chunk);
        }
        self.sent += chunk.data.len() as u64;
        (chunk.data, chunk.trailers)
    }

    /// Runs the log phase once.
    fn finish(&mut self) {
        let Some(request) = self.summary.take() else { return };
        let record = LogRecord {
            request,
            status: self.outcome.status.as_u16(),
            response_bytes: self.sent,
            total_ms: self.started.elapsed().as_millis() as u64,
            source: self.outcome.source,
            upstream_ms: self.outcome.upstream_ms,
            request_bytes: self.outcome.request_bytes,
            details: self.outcome.details.take().map(|mut details| {
                details.trace_id = self
                    .shared
                    .get::<strait_plugins::bundled::opentelemetry::TraceContext>()
                    .map(|trace| trace.trace_id_hex());
                details
            }),
        };
        for plugin in self.plugins.iter().filter(|p| p.logs()) {
            plugin.log(&record, &self.shared);
        }
    }
}

impl Drop for FollowedBody {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Body for FollowedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(this.pending.take().map(Ok));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(error))) => {
                    this.done = true;
                    this.finish();
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    let frame = match frame.into_data() {
                        Ok(data) if this.buffers => {
                            if this.buffer.len() + data.len() > MAX_BUFFERED_BODY {
                                this.done = true;
                                this.finish();
                                return Poll::Ready(Some(Err("response body larger than the plugin buffer".into())));
                            }
                            this.buffer.extend_from_slice(&data);
                            continue;
                        }
                        Ok(data) => Frame::data(this.filter(data, false)),
                        Err(trailers) => {
                            // Trailers end the body: flush what was held first.
                            if this.buffers && !this.buffer.is_empty() {
                                let held = this.buffer.split().freeze();
                                let data = this.filter(held, true);
                                this.done = true;
                                this.finish();
                                // Trailers after a buffered body are dropped:
                                // the buffering plugins rewrote the body.
                                let _ = trailers;
                                return Poll::Ready(Some(Ok(Frame::data(data))));
                            }
                            // The body's end: the filters see the trailers.
                            let trailers = trailers.into_trailers().unwrap_or_default();
                            let (data, trailers) = this.filter_last(Bytes::new(), true, Some(trailers));
                            this.done = true;
                            this.finish();
                            this.pending = trailers.map(Frame::trailers);
                            if data.is_empty() {
                                return Poll::Ready(this.pending.take().map(Ok));
                            }
                            Frame::data(data)
                        }
                    };
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    let held = this.buffer.split().freeze();
                    let data = this.filter(held, true);
                    this.finish();
                    if data.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// A plugin's own answer (`Flow::Respond`) as a response.
fn plugin_response_to_http(plugin: strait_plugins::PluginResponse) -> Response<ProxyBody> {
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
