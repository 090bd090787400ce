//! The plugin phases, the pipeline's stage between routing and the upstream
//! exchange: run the access phase (reading the request body first when a
//! plugin needs it), proxy (forward.rs) or answer, run `header_filter` on
//! whatever answers, and follow the response body with `body_filter` and
//! `log` when a plugin has them. A route without plugins has the empty
//! chain: no phase to run, so handler.rs sends it to the exchange at once.
//!
//! See docs/plugins.md for the phase chart.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response};
use http_body_util::BodyExt;
use strait_plugins::{
    Flow, LogDetails, PluginChain, Protocol, RequestCtx, RequestSummary, ResponseCtx, ResponseSource, SharedStore,
};

mod follow;

use self::follow::{FollowedBody, Outcome};
use crate::pipeline::body::{boxed_as_is, full, ProxyBody};
use crate::pipeline::error::{ErrorKind, ProxyError};
use crate::pipeline::forward::{Exchange, ForwardOptions, Proxied};
use crate::pipeline::handler::{error_to_response, pin_in_place, BoxedRequest};
use crate::pipeline::kong_headers::KongFields;
use crate::SERVER_HEADER;

/// The most a plugin may make the proxy hold of a request or response body
/// in memory; a longer request body is refused with 413.
pub const MAX_BUFFERED_BODY: usize = 16 * 1024 * 1024;

fn protocol_of(grpc: bool, tls: bool) -> Protocol {
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

/// Run a chain's phases around the upstream exchange (handler.rs sends a
/// route without plugins, the empty chain, to the exchange at once). A
/// proxied response whose head no plugin reads comes with Kong's fields
/// beside it (handler.rs `handle`).
///
/// Boxed: the plugin phases are a future of kilobytes, and inline they
/// would make every request's future (boxed per request by h1_server.rs and
/// h2_server.rs) that large, plugins or not.
pub(crate) fn run<'a>(
    request: BoxedRequest,
    chain: &'a PluginChain,
    exchange: Exchange<'a>,
) -> Pin<Box<impl Future<Output = (Response<ProxyBody>, Option<KongFields>)> + 'a>> {
    let http1 = request.version() < http::Version::HTTP_2;
    pin_in_place(|| run_chain(request, chain, exchange, http1))
}

/// The phases of a chain with plugins: access (reading the request body
/// first when a plugin needs it), the exchange or a plugin's answer,
/// `header_filter`, and `body_filter` and `log` following the body.
async fn run_chain(
    mut boxed: BoxedRequest,
    chain: &PluginChain,
    exchange: Exchange<'_>,
    http1: bool,
) -> (Response<ProxyBody>, Option<KongFields>) {
    let failed = |error| {
        (
            error_to_response(error, http1, exchange.conn, exchange.request_id),
            None,
        )
    };
    let protocol = protocol_of(exchange.grpc, exchange.conn.tls);
    // Taken apart for the plugins, and put back in its box to go upstream
    // (the box is kept: no second allocation and copy of the request).
    let (mut parts, body) = std::mem::replace(&mut *boxed, Request::new(crate::pipeline::body::empty())).into_parts();
    // Plugins add headers (consumer, credential, groups, transforms): grow
    // the map once rather than as each arrives.
    parts.headers.reserve(8);
    let details = chain.serializes_log().then(|| log_details(&exchange, &parts));
    // Measured as it arrived, before plugins change it.
    let request_bytes = if chain.follows_response_body() {
        request_size(&parts)
    } else {
        0
    };
    let mut body = match chain.reads_request_body() {
        true => match read_body(body).await {
            Ok(bytes) => RequestBody {
                buffered: Some(bytes),
                streaming: None,
            },
            Err(error) => return failed(error),
        },
        false => RequestBody {
            buffered: None,
            streaming: Some(body),
        },
    };
    // The access phase (each step awaited here, in this one future).
    let request_headers = chain.keeps_request_headers().then(|| parts.headers.clone());
    let mut ctx = request_ctx(&exchange, &mut parts, protocol, body.buffered.take());
    let flow = chain.access(&mut ctx).await;
    let mut accessed = Accessed::take(&mut ctx, protocol, request_headers, body);
    if ctx.exact_path {
        parts.extensions.insert(crate::pipeline::forward::ExactPath);
    }
    let flow = match (flow, accessed.body_limit.take()) {
        (Flow::Continue, Some(limit)) => match accessed.limit_body(limit).await {
            Ok(flow) => flow,
            Err(error) => return failed(error),
        },
        (flow, _) => flow,
    };
    // The upstream's head goes on in its own bytes, as on a route without
    // plugins, when no plugin reads or changes it: Kong's fields then stay
    // beside it, and the map holds only what `access` added.
    let relay = parts.version == http::Version::HTTP_11
        && matches!(protocol, Protocol::Http | Protocol::Https)
        && chain.leaves_response_head()
        && accessed.shared.get::<strait_plugins::DropResponseBody>().is_none();
    let answer = match flow {
        Flow::Respond(answer) => Answer {
            response: plugin_response_to_http(answer),
            source: ResponseSource::Exit,
            beside: None,
        },
        Flow::Continue => {
            let (request, options) = accessed.upstream_request(boxed, parts, chain.serializes_log(), relay);
            let forwarded = exchange.forward(request, options).await;
            Answer::from_exchange(forwarded, relay, http1, &exchange)
        }
    };
    respond(chain, &exchange, accessed, answer, details, request_bytes, protocol)
}

/// What the request log serializers report, kept only when a plugin of the
/// chain serializes Kong's log entry.
fn log_details(exchange: &Exchange<'_>, parts: &http::request::Parts) -> Box<LogDetails> {
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
        started_at: crate::pipeline::handler::epoch_ms().saturating_sub(exchange.started.elapsed().as_millis() as u64),
        started: exchange.started,
        http_version: parts.version,
        upstream_timing: None,
        kong_ms: None,
        tls_version: None,
        entities,
        trace_id: None,
    })
}

/// The request body as the access phase gets it: read whole first when a
/// plugin of the chain reads it, else still streaming.
struct RequestBody {
    buffered: Option<Bytes>,
    streaming: Option<ProxyBody>,
}

/// What the access phase left for the stages after it.
struct Accessed {
    summary: RequestSummary,
    body: RequestBody,
    body_limit: Option<strait_plugins::BodyLimit>,
    upstream_host: Option<HeaderValue>,
    shared: SharedStore,
    response_headers: strait_plugins::AddedHeaders,
    identity: strait_plugins::IdentityFields,
}

/// The request's context for the access phase.
fn request_ctx<'a>(
    exchange: &'a Exchange<'a>,
    parts: &'a mut http::request::Parts,
    protocol: Protocol,
    body: Option<Bytes>,
) -> RequestCtx<'a> {
    let route = &exchange.matched.route;
    RequestCtx {
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
        body,
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
        identity: strait_plugins::IdentityFields::beside(),
    }
}

impl Accessed {
    /// What the access phase left in `ctx`.
    fn take(
        ctx: &mut RequestCtx<'_>,
        protocol: Protocol,
        request_headers: Option<http::HeaderMap>,
        body: RequestBody,
    ) -> Accessed {
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
        Accessed {
            summary,
            body: RequestBody {
                buffered: ctx.body.take(),
                streaming: body.streaming,
            },
            body_limit: ctx.request_body_limit.take(),
            upstream_host: ctx.upstream_host.take(),
            shared: std::mem::take(&mut ctx.shared),
            response_headers: std::mem::take(&mut ctx.response_headers),
            identity: std::mem::take(&mut ctx.identity),
        }
    }

    /// A body limit a plugin set (request-size-limiting) applied: a
    /// streaming body is read up to it.
    async fn limit_body(&mut self, limit: strait_plugins::BodyLimit) -> Result<Flow, ProxyError> {
        match (self.body.buffered.as_ref(), self.body.streaming.take()) {
            (Some(bytes), _) if bytes.len() as u64 > limit.max_bytes => Ok(Flow::Respond(limit.exceeded)),
            (None, Some(body)) => {
                let max = usize::try_from(limit.max_bytes)
                    .unwrap_or(usize::MAX)
                    .min(MAX_BUFFERED_BODY);
                match read_body_up_to(body, max).await {
                    Ok(bytes) => {
                        self.body.buffered = Some(bytes);
                        Ok(Flow::Continue)
                    }
                    Err(error) if error.kind == ErrorKind::PayloadTooLarge => Ok(Flow::Respond(limit.exceeded)),
                    Err(error) => Err(error),
                }
            }
            _ => Ok(Flow::Continue),
        }
    }

    /// The request as the access phase left it, to go upstream.
    fn upstream_request(
        &mut self,
        mut boxed: BoxedRequest,
        mut parts: http::request::Parts,
        detailed: bool,
        relay: bool,
    ) -> (BoxedRequest, ForwardOptions) {
        let body = match (self.body.buffered.take(), self.body.streaming.take()) {
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
        let summary = &self.summary;
        let options = ForwardOptions {
            host_override: self.upstream_host.take(),
            detailed,
            consumer: summary
                .consumer_id
                .or_else(|| summary.credential.as_ref().map(|c| c.id)),
            relay,
            identity: std::mem::take(&mut self.identity),
        };
        *boxed = Request::from_parts(parts, body);
        (boxed, options)
    }
}

/// What answered the request, and whether Kong's fields travel beside a
/// relayed head instead of in its map.
struct Answer {
    response: Response<ProxyBody>,
    source: ResponseSource,
    beside: Option<(Proxied, KongFields)>,
}

impl Answer {
    /// What the upstream exchange answered, or the error it met.
    fn from_exchange(
        forwarded: Result<crate::pipeline::forward::Forwarded, ProxyError>,
        relay: bool,
        http1: bool,
        exchange: &Exchange<'_>,
    ) -> Answer {
        let (response, source, beside) = match forwarded {
            Ok((response, proxied, fields)) if relay => (response, ResponseSource::Service, Some((proxied, fields))),
            Ok((mut response, proxied, fields)) => {
                Exchange::into_map(&mut response, proxied, fields);
                (response, ResponseSource::Service, None)
            }
            Err(error) => (
                error_to_response(error, http1, exchange.conn, exchange.request_id),
                ResponseSource::Error,
                None,
            ),
        };
        Answer {
            response,
            source,
            beside,
        }
    }
}

/// After the answer: `header_filter` (unless the head is relayed), then
/// the body followed by `body_filter` and `log` when a plugin has them.
fn respond(
    chain: &PluginChain,
    exchange: &Exchange<'_>,
    accessed: Accessed,
    answer: Answer,
    mut details: Option<Box<LogDetails>>,
    request_bytes: u64,
    protocol: Protocol,
) -> (Response<ProxyBody>, Option<KongFields>) {
    let Accessed {
        summary,
        mut shared,
        response_headers,
        ..
    } = accessed;
    let Answer {
        response,
        source,
        mut beside,
    } = answer;
    let consumer_plugins = match summary.consumer_id {
        Some(id) if chain.has_consumer_scoped() => exchange.snapshot.consumer_plugins(id),
        _ => &[],
    };
    let (mut head, body) = response.into_parts();
    if let Some(details) = details.as_deref_mut() {
        note_upstream(details, &mut head);
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
    let followers = chain
        .follows_response_body()
        .then(|| chain.response_followers(consumer_plugins, summary.route_id, summary.service_id, protocol))
        .filter(|followers| !followers.is_empty());
    let Some(followers) = followers else {
        return (Response::from_parts(head, body), fields);
    };
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
            .or_else(|| head.extensions.get::<Proxied>())
            .map(|p| p.upstream_ms),
        request_bytes,
        details,
    };
    let followed = FollowedBody::new(body, followers, shared, summary, outcome, exchange.started);
    (Response::from_parts(head, boxed_as_is(followed)), fields)
}

/// What the upstream exchange tells a log serializer.
fn note_upstream(details: &mut LogDetails, head: &mut http::response::Parts) {
    if let Some(proxied) = head.extensions.get_mut::<Proxied>() {
        details.upstream_status = Some(head.status.as_u16());
        details.kong_ms = Some(proxied.kong_ms);
        if let Some(detail) = proxied.detail.take() {
            details.upstream_uri = Some(detail.upstream_uri);
            details.tries = detail.tries;
            details.upstream_timing = detail.timing;
        }
    }
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
