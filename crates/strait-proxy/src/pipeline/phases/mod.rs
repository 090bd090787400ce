//! The plugin phases, the pipeline's stage between routing and the upstream
//! exchange: run the access phase (reading the request body first when a
//! plugin needs it), proxy (forward.rs) or answer, run `header_filter` on
//! whatever answers, and follow the response body with `body_filter` and
//! `log` when a plugin has them.
//!
//! Every request takes one path through handler.rs `route`: the access
//! phase, the exchange, the response completed. A route without plugins has
//! the empty chain (no phase to run). Most chains run their access phase as
//! a plain call ([`before`]) and complete the response with [`finish`]; only
//! a chain whose access phase may wait (a plugin's network call, a request
//! body read first) runs as one boxed future ([`run`]). One box per request
//! holds the phases' state ([`PhaseState`], state.rs) from access to log.
//!
//! See docs/plugins.md for the phase chart.

use std::future::Future;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::Response;
use http_body_util::BodyExt;
use strait_plugins::{Flow, Inline, LogDetails, PluginChain, Protocol, ResponseCtx, ResponseSource, Suspended};

mod follow;
mod lazy;
mod state;

use self::follow::{FollowedBody, Outcome};
pub(crate) use self::state::PhaseState;
use self::state::{request_ctx, Taken};
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

/// Where the access phase leaves a request run inline ([`before`]).
pub(crate) enum Before {
    /// To the upstream; [`finish`] completes the response.
    Forward(BoxedRequest, ForwardOptions, Box<PhaseState>),
    /// Answered without the upstream: a plugin's response, or a failure.
    Done(Response<ProxyBody>, Option<KongFields>),
    /// A plugin set a limit the streaming body must be read against first
    /// (request-size-limiting without a `Content-Length`): the rest runs in
    /// a boxed future, [`limited`].
    Limited(BoxedRequest, Box<PhaseState>),
    /// A plugin's access must wait after all (a filter's HTTP call): the
    /// rest runs in a boxed future, [`resumed`].
    Suspended(BoxedRequest, Box<PhaseState>, Suspended),
}

/// The access phase of a chain that [`PluginChain::runs_inline`], as a plain
/// call: handler.rs then sends the request to the exchange as it sends one
/// without plugins, and completes the response with [`finish`]. No future
/// of its own, no box for one: most chains run this way.
pub(crate) fn before(mut request: BoxedRequest, chain: &PluginChain, exchange: &Exchange<'_>) -> Before {
    let mut state = PhaseState::new(&request, chain, exchange);
    let mut taken = Taken::out_of(&mut request);
    let mut ctx = request_ctx(exchange, &mut taken, &mut state);
    let flow = chain.access_now(&mut ctx);
    state.take_from(ctx);
    taken.restore(&mut request, &state);
    let flow = match flow {
        Inline::Done(flow) => flow,
        Inline::Suspended(suspended) => return Before::Suspended(request, state, suspended),
    };
    if matches!(flow, Flow::Continue) && state.body_limit.is_some() {
        return Before::Limited(request, state);
    }
    match decide(flow, state, chain, request, exchange) {
        Decided::Forward(request, options, state) => Before::Forward(request, options, state),
        Decided::Done(response, fields) => Before::Done(response, fields),
    }
}

/// The rest of a [`Before::Limited`] request, boxed (a rare path).
pub(crate) fn limited<'a>(
    request: BoxedRequest,
    state: Box<PhaseState>,
    chain: &'a PluginChain,
    exchange: Exchange<'a>,
) -> Pin<Box<impl Future<Output = (Response<ProxyBody>, Option<KongFields>)> + 'a>> {
    pin_in_place(move || proceed(request, Flow::Continue, state, chain, exchange))
}

/// The rest of a [`Before::Suspended`] request, boxed: the access phase
/// goes on from the plugin that waits, then as [`proceed`] goes on.
pub(crate) fn resumed<'a>(
    request: BoxedRequest,
    state: Box<PhaseState>,
    suspended: Suspended,
    chain: &'a PluginChain,
    exchange: Exchange<'a>,
) -> Pin<Box<impl Future<Output = (Response<ProxyBody>, Option<KongFields>)> + 'a>> {
    pin_in_place(move || resume_chain(request, state, suspended, chain, exchange))
}

async fn resume_chain(
    mut request: BoxedRequest,
    mut state: Box<PhaseState>,
    suspended: Suspended,
    chain: &PluginChain,
    exchange: Exchange<'_>,
) -> (Response<ProxyBody>, Option<KongFields>) {
    let mut taken = Taken::out_of(&mut request);
    let mut ctx = request_ctx(&exchange, &mut taken, &mut state);
    // A consumer the directory does not hold (a plugin's own) is kept by id.
    let consumer_id = state.summary.consumer_id;
    state.give_back(&mut ctx);
    let found = ctx.consumer.is_some();
    let flow = chain.resume(&mut ctx, suspended).await;
    state.take_from(ctx);
    if !found && state.summary.consumer_id.is_none() {
        state.summary.consumer_id = consumer_id;
    }
    taken.restore(&mut request, &state);
    proceed(request, flow, state, chain, exchange).await
}

/// Run a chain whose access phase may wait (on a plugin's network call, or
/// the request body read first) as one future around the upstream exchange.
/// A proxied response whose head no plugin reads comes with Kong's fields
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
    pin_in_place(|| run_chain(request, chain, exchange))
}

/// The phases of a chain whose access may wait: the request body read first
/// when a plugin needs it, access, then as [`proceed`] goes on.
async fn run_chain(
    mut request: BoxedRequest,
    chain: &PluginChain,
    exchange: Exchange<'_>,
) -> (Response<ProxyBody>, Option<KongFields>) {
    let mut state = PhaseState::new(&request, chain, &exchange);
    // A gRPC call a plugin may serve itself streams to it unread.
    if chain.reads_request_body() && !(exchange.grpc && chain.serves_grpc_streams()) {
        let body = std::mem::replace(request.body_mut(), crate::pipeline::body::empty());
        state.body_in_box = false;
        match read_body(body).await {
            Ok(bytes) => state.buffered = Some(bytes),
            Err(error) => return failed(error, state.http1(), &exchange),
        }
    }
    let mut taken = Taken::out_of(&mut request);
    let mut ctx = request_ctx(&exchange, &mut taken, &mut state);
    let flow = chain.access(&mut ctx).await;
    state.take_from(ctx);
    taken.restore(&mut request, &state);
    proceed(request, flow, state, chain, exchange).await
}

/// After the access phase: a body limit applied, then the exchange or the
/// plugin's answer, completed by [`finish`].
async fn proceed(
    mut request: BoxedRequest,
    flow: Flow,
    mut state: Box<PhaseState>,
    chain: &PluginChain,
    exchange: Exchange<'_>,
) -> (Response<ProxyBody>, Option<KongFields>) {
    let flow = match (flow, state.body_limit.take()) {
        (Flow::Continue, Some(limit)) => match state.limit_body(&mut request, limit).await {
            Ok(flow) => flow,
            Err(error) => return failed(error, state.http1(), &exchange),
        },
        (flow, _) => flow,
    };
    match decide(flow, state, chain, request, &exchange) {
        Decided::Forward(request, options, mut state) => {
            let forwarded = match state.shared.remove::<strait_plugins::ServeHere>() {
                Some(here) => Ok(serve_here(here, request, &exchange).await),
                None => {
                    let forwarded = exchange.forward(request, options).await;
                    fail_over(&exchange, &mut state, forwarded).await
                }
            };
            let forwarded = buffer_if_asked(&mut state, forwarded).await;
            finish(state, forwarded, chain, &exchange)
        }
        Decided::Done(response, fields) => (response, fields),
    }
}

/// A plugin serves the request itself ([`strait_plugins::ServeHere`]): its
/// response stands for the upstream's, timed as one.
async fn serve_here(
    here: strait_plugins::ServeHere,
    request: BoxedRequest,
    exchange: &Exchange<'_>,
) -> crate::pipeline::forward::Forwarded {
    let started = std::time::Instant::now();
    let kong_ms = started.duration_since(exchange.started).as_millis() as u64;
    let mut response = (here.0)(*request).await;
    *response.version_mut() = http::Version::HTTP_11;
    let proxied = crate::pipeline::forward::Proxied {
        upstream_ms: started.elapsed().as_millis() as u64,
        kong_ms,
        detail: None,
    };
    (response, proxied, Default::default())
}

fn failed(error: ProxyError, http1: bool, exchange: &Exchange<'_>) -> (Response<ProxyBody>, Option<KongFields>) {
    (
        error_to_response(error, http1, exchange.conn, exchange.request_id),
        None,
    )
}

/// What [`decide`] made of the access phase's flow.
enum Decided {
    Forward(BoxedRequest, ForwardOptions, Box<PhaseState>),
    Done(Response<ProxyBody>, Option<KongFields>),
}

/// The access phase's decision carried out: the request readied for the
/// upstream, or the plugin's answer completed.
fn decide(
    flow: Flow,
    mut state: Box<PhaseState>,
    chain: &PluginChain,
    mut request: BoxedRequest,
    exchange: &Exchange<'_>,
) -> Decided {
    // The upstream's head goes on in its own bytes, as on a route without
    // plugins, when no plugin reads or changes it (or the plugins that may
    // take it lazily, lazy.rs): Kong's fields then stay beside it, and the
    // map holds only what `access` added.
    state.relay = state.version == http::Version::HTTP_11
        && matches!(state.protocol, Protocol::Http | Protocol::Https)
        && (chain.leaves_response_head() || chain.filters_lazy_heads())
        && state.shared.get::<strait_plugins::DropResponseBody>().is_none();
    // A plugin that wants the log details of this request only (a sampled
    // trace) gets them from here on; the client's headers are not kept.
    let wanted = chain.serializes_on_demand()
        && state.details.is_none()
        && state.shared.get::<strait_plugins::WantsLogDetails>().is_some();
    if wanted {
        state.details = Some(state::log_details(exchange, &request, false));
    }
    match flow {
        Flow::Respond(answer) => {
            let answer = Answer {
                response: plugin_response_to_http(answer),
                source: ResponseSource::Exit,
                beside: None,
            };
            let (response, fields) = respond(state, chain, exchange, answer);
            Decided::Done(response, fields)
        }
        Flow::Continue => {
            let options = state.forward_options(&mut request, chain.serializes_log() || wanted);
            Decided::Forward(request, options, state)
        }
    }
}

/// The next upstreams of a plugin's [`strait_plugins::Failover`] plan,
/// tried while each answers with a status the plan fails over on, cannot
/// be reached, or gives no head in time; the last answer or error stands.
/// A failed try's response is dropped unread (its connection closed).
pub(crate) async fn fail_over(
    exchange: &Exchange<'_>,
    state: &mut PhaseState,
    mut forwarded: Result<crate::pipeline::forward::Forwarded, ProxyError>,
) -> Result<crate::pipeline::forward::Forwarded, ProxyError> {
    use strait_plugins::FailedTry;
    loop {
        let Some(mut plan) = state.shared.remove::<strait_plugins::Failover>() else {
            return forwarded;
        };
        let failed = match &forwarded {
            Ok((response, _, _)) if plan.0.fails_over_on(response.status().as_u16()) => {
                let retry_after = response
                    .headers()
                    .get(header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse().ok());
                Some(FailedTry::Status(response.status().as_u16(), retry_after))
            }
            Ok(_) => None,
            Err(error) => match error.kind {
                ErrorKind::UpstreamConnectTimeout | ErrorKind::UpstreamTimeout => Some(FailedTry::TimedOut),
                ErrorKind::UpstreamConnect
                | ErrorKind::UpstreamInvalid
                | ErrorKind::NoPeer
                | ErrorKind::NameResolution => Some(FailedTry::Unreachable),
                _ => None,
            },
        };
        let next = failed.and_then(|failed| plan.0.next(failed, &mut state.shared));
        state.shared.insert(plan);
        let Some(next) = next else {
            return forwarded;
        };
        let uri = match http::Uri::try_from(next.path_and_query.as_str()) {
            Ok(uri) => uri,
            Err(error) => return Err(ProxyError::new(ErrorKind::Internal, format!("failover path: {error}"))),
        };
        let length = HeaderValue::from(next.body.len());
        let mut request: crate::pipeline::handler::BoxedRequest = Box::new(http::Request::new(full(next.body)));
        *request.method_mut() = next.method;
        *request.uri_mut() = uri;
        *request.headers_mut() = next.headers;
        request.headers_mut().remove(header::TRANSFER_ENCODING);
        request.headers_mut().insert(header::CONTENT_LENGTH, length);
        request.extensions_mut().insert(crate::pipeline::forward::ExactPath);
        let options = ForwardOptions {
            detailed: state.details.is_some(),
            consumer: state.summary.consumer_id,
            relay: state.relay,
            target: Some(next.target),
            unbuffered: state.shared.get::<strait_plugins::StreamResponse>().is_some(),
            ..ForwardOptions::default()
        };
        drop(forwarded);
        forwarded = exchange.forward(request, options).await;
    }
}

/// The upstream's whole body read before the header filters, when an
/// access phase left [`strait_plugins::BufferUpstreamResponse`] (Kong's
/// `enable_buffering`): they find it as
/// [`strait_plugins::ServiceResponseBody`]. A body past the buffer limit,
/// or one the upstream broke off, is the upstream's failure (502).
pub(crate) async fn buffer_if_asked(
    state: &mut PhaseState,
    forwarded: Result<crate::pipeline::forward::Forwarded, ProxyError>,
) -> Result<crate::pipeline::forward::Forwarded, ProxyError> {
    let Ok((response, proxied, fields)) = forwarded else {
        return forwarded;
    };
    let rewriter = state.shared.remove::<strait_plugins::RewriteResponse>();
    if rewriter.is_none() && state.shared.get::<strait_plugins::BufferUpstreamResponse>().is_none() {
        return Ok((response, proxied, fields));
    }
    let (mut head, body) = response.into_parts();
    let bytes = read_body(body).await.map_err(|error| {
        ProxyError::new(
            ErrorKind::UpstreamInvalid,
            format!("reading the upstream's body: {}", error.cause),
        )
    })?;
    let bytes = match rewriter {
        None => bytes,
        Some(strait_plugins::RewriteResponse(rewriter)) => {
            let upstream = strait_plugins::UpstreamResponse {
                status: head.status.as_u16(),
                headers: std::mem::take(&mut head.headers),
                body: bytes,
            };
            match rewriter.rewrite(upstream).await {
                Ok(rewritten) => {
                    head.status = http::StatusCode::from_u16(rewritten.status).unwrap_or(head.status);
                    head.headers = rewritten.headers;
                    rewritten.body
                }
                Err(answer) => {
                    head.status =
                        http::StatusCode::from_u16(answer.status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
                    for (name, value) in answer.headers {
                        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
                            head.headers.insert(name, value);
                        }
                    }
                    answer.body
                }
            }
        }
    };
    state.shared.insert(strait_plugins::ServiceResponseBody(bytes));
    Ok((
        Response::from_parts(head, crate::pipeline::body::empty()),
        proxied,
        fields,
    ))
}

/// The response to what the exchange answered (or the error it met).
pub(crate) fn finish(
    state: Box<PhaseState>,
    forwarded: Result<crate::pipeline::forward::Forwarded, ProxyError>,
    chain: &PluginChain,
    exchange: &Exchange<'_>,
) -> (Response<ProxyBody>, Option<KongFields>) {
    let answer = Answer::from_exchange(forwarded, state.relay, state.http1(), exchange);
    respond(state, chain, exchange, answer)
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

/// After the answer: `header_filter` (on a relayed head, only the lazy
/// header filters, lazy.rs), then
/// the body followed by `body_filter` and `log` when a plugin has them.
fn respond(
    mut state: Box<PhaseState>,
    chain: &PluginChain,
    exchange: &Exchange<'_>,
    answer: Answer,
) -> (Response<ProxyBody>, Option<KongFields>) {
    let Answer {
        response,
        source,
        mut beside,
    } = answer;
    let consumer_plugins = match state.summary.consumer_id {
        Some(id) if chain.has_consumer_scoped() => exchange.snapshot.consumer_plugins(id),
        _ => &[],
    };
    let (mut head, body) = response.into_parts();
    if let Some(details) = state.details.as_deref_mut() {
        // A relayed head keeps the exchange's facts beside it.
        match beside.as_mut() {
            Some((proxied, _)) => note_proxied(details, head.status, proxied),
            None => note_upstream(details, &mut head),
        }
    }
    let response_headers = std::mem::take(&mut state.response_headers);
    if let Some((_, fields)) = beside.as_mut() {
        fields.added = response_headers;
        if chain.filters_lazy_heads() {
            lazy::header_filter(chain, consumer_plugins, &mut state, &mut head, &mut beside, source);
        }
    } else {
        response_headers.append_to(&mut head.headers);
        let state = &mut *state;
        let mut response_ctx = ResponseCtx {
            status: &mut head.status,
            headers: &mut head.headers,
            source,
            request: &state.summary,
            shared: &mut state.shared,
        };
        chain.header_filter(consumer_plugins, &mut response_ctx);
    }
    let (proxied, fields) = match beside {
        Some((proxied, fields)) => (Some(proxied), Some(fields)),
        None => (None, None),
    };
    let body = match state.shared.get::<strait_plugins::DropResponseBody>() {
        Some(_) => {
            head.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
            full(Bytes::new())
        }
        None => match state.shared.remove::<strait_plugins::ServiceResponseBody>() {
            Some(strait_plugins::ServiceResponseBody(bytes)) => {
                head.headers.remove(header::TRANSFER_ENCODING);
                head.headers
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
                full(bytes)
            }
            None => body,
        },
    };
    let followers = chain
        .follows_response_body()
        .then(|| {
            let summary = &state.summary;
            chain.response_followers(consumer_plugins, summary.route_id, summary.service_id, state.protocol)
        })
        .filter(|followers| !followers.is_empty())
        .filter(|followers| {
            // An unsampled trace's log phase would do nothing.
            !followers.iter().all(|p| p.logs_only_on_demand() && !p.filters_body())
                || state.shared.get::<strait_plugins::WantsLogDetails>().is_some()
        });
    let Some(followers) = followers else {
        return (Response::from_parts(head, body), fields);
    };
    if followers
        .iter()
        .any(|p| p.filters_body() && !p.removes_content_length())
    {
        // Filters may change the length.
        head.headers.remove(header::CONTENT_LENGTH);
    }
    if let Some(details) = state.details.as_deref_mut() {
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
    };
    let followed = FollowedBody::new(body, followers, state, outcome, exchange.started);
    (Response::from_parts(head, boxed_as_is(followed)), fields)
}

/// What the upstream exchange tells a log serializer.
fn note_upstream(details: &mut LogDetails, head: &mut http::response::Parts) {
    if let Some(proxied) = head.extensions.get_mut::<Proxied>() {
        note_proxied(details, head.status, proxied);
    }
}

fn note_proxied(details: &mut LogDetails, status: http::StatusCode, proxied: &mut Proxied) {
    details.upstream_status = Some(status.as_u16());
    details.kong_ms = Some(proxied.kong_ms);
    if let Some(detail) = proxied.detail.take() {
        details.upstream_uri = Some(detail.upstream_uri);
        details.tries = detail.tries;
        details.upstream_timing = detail.timing;
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
