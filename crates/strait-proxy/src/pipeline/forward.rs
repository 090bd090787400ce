//! The upstream exchange, the pipeline's last stage before the response
//! goes back: the request made into its upstream form once (path, Kong's
//! forwarding headers, the body held for `request_buffering` and retries),
//! then one attempt per try (forward/attempt.rs: a target from the
//! balancer, a pooled connection, the request sent, the response head
//! taken), and the response head made ready for the client
//! (forward/response.rs).
//!
//! Routes with and without plugins both come here, through
//! [`Exchange::forward`] (phases.rs); nothing here calls back into an
//! earlier stage.

mod attempt;
mod response;

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Response, Uri, Version};
use strait_router::{upstream_path, RouteMatch};
use strait_snapshot::balancer::Attempts;
use strait_snapshot::snapshot::{ServiceRuntime, Snapshot};

use self::attempt::{endpoint, send_options, set_target, target_tls, Plan, Sent, Tries};
use crate::pipeline::body::{boxed_as_is, buffer_up_to, full, Buffered, ProxyBody};
use crate::pipeline::error::{ErrorKind, ProxyError};
use crate::pipeline::forwarding::Forwarding;
use crate::pipeline::handler::{strip_hop_by_hop, BoxedRequest, ConnInfo};
use crate::pipeline::kong_headers::{KongFields, RequestId};
use crate::Shared;

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

/// Most of a request body `request_buffering` holds in memory; past it the
/// rest streams (Strait does not spill bodies to disk as nginx does).
pub const REQUEST_BUFFER: usize = 1024 * 1024;

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
    /// Kong's identity fields the plugins held beside the request's map.
    pub identity: strait_plugins::IdentityFields,
    /// Where a plugin sent the request instead of the service.
    pub target: Option<strait_plugins::UpstreamTarget>,
    /// A plugin streams the response to the client as it comes
    /// ([`strait_plugins::StreamResponse`]): no response buffering.
    pub unbuffered: bool,
}

/// On a request a plugin gave its upstream path itself (`RequestCtx::exact_path`):
/// that path goes upstream as it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExactPath;

/// One request's walk to its upstream: what routing found and what the
/// connection knows, for every stage after routing.
pub(crate) struct Exchange<'a> {
    pub conn: &'a ConnInfo,
    pub shared: &'a Shared,
    pub snapshot: &'a Arc<Snapshot>,
    pub matched: &'a RouteMatch<'a>,
    pub host: &'a str,
    pub port: u16,
    pub started: Instant,
    pub request_id: &'a RequestId,
    /// The request's content type is gRPC's.
    pub grpc: bool,
}

/// A response from the upstream, with the mark that it was proxied and
/// Kong's fields beside it.
pub(crate) type Forwarded = (Response<ProxyBody>, Proxied, KongFields);

impl Exchange<'_> {
    /// Proxy to the route's service (after the access phase); `detailed`
    /// keeps the upstream URI and tries for a log serializer, `relay` lets
    /// the upstream's head be passed on in its own bytes (relay.rs). Kong's
    /// fields and the proxied mark come beside the response:
    /// [`Exchange::into_map`] puts them where plugins read them.
    /// Kong's fields into the response's map, where header filters see
    /// them, and the proxied mark into its extensions (handler.rs `handle`).
    pub fn into_map(response: &mut Response<ProxyBody>, proxied: Proxied, fields: KongFields) {
        fields.insert(response.headers_mut());
        response.extensions_mut().insert(proxied);
    }

    /// Proxy to the route's service (or its upstream's targets, with
    /// retries) and take its response head. `detailed` keeps the upstream
    /// URI and tries for a log serializer, `relay` lets the upstream's head
    /// be passed on in its own bytes (relay.rs). Kong's fields and the
    /// proxied mark come beside the response: [`Exchange::into_map`] puts
    /// them where plugins read them.
    pub async fn forward(
        &self,
        mut request: BoxedRequest,
        mut options: ForwardOptions,
    ) -> Result<Forwarded, ProxyError> {
        let runtime = self.service_runtime()?;
        let service = &runtime.service;
        let route = self.matched.facts;
        let http2 = matches!(service.protocol.as_str(), "grpc" | "grpcs");
        let upgrade = if http2 {
            None
        } else {
            crate::pipeline::tunnel::requested(&mut request)
        };
        // The client's request becomes the upstream request in its box, its
        // URI set per attempt. Kept apart: the forwarding headers borrow its path.
        let uri = std::mem::take(request.uri_mut());
        // Read only where it is sent: a clone per request otherwise.
        let original_host = (route.preserve_host && options.host_override.is_none())
            .then(|| request.headers().get(header::HOST).cloned())
            .flatten();
        let path_and_query = self.upstream_target(&request, &uri, runtime)?;
        let stripped_prefix = (self.matched.matched_path.as_deref()).filter(|m| route.strip_path && *m != "/");
        strip_hop_by_hop(request.headers_mut());
        if let Some(upgrade) = &upgrade {
            upgrade.restore(request.headers_mut());
        }
        let mut identity = std::mem::take(&mut options.identity);
        if http2 {
            identity.move_into(request.headers_mut());
        }
        let forwarding = Forwarding::new(
            request.headers(),
            self.conn,
            self.host,
            self.port,
            uri.path(),
            stripped_prefix,
            self.shared.headers.upstream_request_id.then_some(self.request_id),
        )
        .with_identity(&identity);
        // HTTP/1.1 upstreams get the forwarding headers from the encoder;
        // HTTP/2 ones in the map. (Borrowed, not moved into an `Option`: the
        // fields are a few hundred bytes.)
        if http2 {
            forwarding.insert(request.headers_mut());
        }
        // A gRPC call's `grpc-timeout` is its deadline, counted from the
        // request's arrival: no response headers by then is a 504
        // (DEADLINE_EXCEEDED to the client), as a read timeout is; a response
        // stream still open then is ended with DEADLINE_EXCEEDED trailers.
        let deadline = http2
            .then(|| crate::pipeline::grpc::timeout(request.headers()))
            .flatten()
            .and_then(|timeout| self.started.checked_add(timeout));
        let buffered =
            buffer_request_body(&mut request, route.request_buffering && !http2 && upgrade.is_none()).await?;
        let target = options.target.take();
        let made_tls = target_tls(runtime, target.as_ref());
        let plan = Plan {
            tls: Plan::tls_for(runtime, target.as_ref(), made_tls.as_ref()),
            target_balancer: target
                .as_ref()
                .and_then(|t| self.snapshot.balancer_named(&t.host))
                .map(|b| b.as_ref()),
            target: target.as_ref(),
            runtime,
            uri: &uri,
            path_and_query,
            original_host,
            forwarding: (!http2).then_some(&forwarding),
            http2,
            deadline,
            options,
        };
        let (mut pending, replay, mut tries) = prepare_tries(request, &plan, buffered);
        let mut upgrade = upgrade;
        let balancer = plan.balancer();
        let connect_timeout = millis(service.connect_timeout);
        // One try per attempt (forward/attempt.rs has each step); awaited
        // here, in one future, rather than in a future per try.
        for _ in 0..tries.left {
            let mut request = match (pending.take(), &replay) {
                (Some(request), _) => request,
                (None, Some(replay)) => replay.request(),
                (None, None) => break,
            };
            let (target, host_value) = self.begin_try(&request, &plan, &mut tries)?;
            let resolved = match target.ip {
                Some(ip) => Ok(std::net::SocketAddr::new(ip, target.port)),
                None => crate::upstream::dns::resolve(target.host, target.port)
                    .await
                    .map_err(|error| ProxyError::new(ErrorKind::NameResolution, error.to_string())),
            };
            let addr = match resolved {
                Ok(addr) => addr,
                Err(error) => {
                    tries.note_failure(&error);
                    if balancer.is_none() {
                        return Err(error);
                    }
                    (pending, tries.last_error) = (Some(request), Some(error));
                    continue;
                }
            };
            let endpoint = endpoint(&plan, addr, host_value.as_ref());
            // Timed only for a log serializer or tracer.
            let connect_start = plan.options.detailed.then(Instant::now);
            let lease = match self.shared.pool().acquire(&endpoint, connect_timeout).await {
                Ok(lease) => lease,
                Err(error) if error.retryable() => {
                    tries.connect_failed(balancer, target.peer, &error);
                    (pending, tries.last_error) = (Some(request), Some(error));
                    continue;
                }
                Err(error) => return Err(error),
            };
            let connected = connect_start.map(|start| (start, Instant::now(), lease.reused()));
            set_target(&mut request, &plan, host_value)?;
            let sent = Sent::now(balancer, target.peer, connected);
            let options = send_options(&plan);
            match self
                .shared
                .pool()
                .dispatch(lease, &endpoint, request, options, connect_timeout)
                .await
            {
                Ok(answer) => return Ok(self.answered(answer, &plan, &mut tries, sent, &mut upgrade)),
                Err(failed) => pending = tries.dispatch_failed(failed, balancer, target.peer)?,
            }
        }
        Err(tries
            .last_error
            .unwrap_or_else(|| ProxyError::new(ErrorKind::UpstreamConnect, "no attempt made")))
    }

    /// The route's service, prepared at compile time.
    fn service_runtime(&self) -> Result<&ServiceRuntime, ProxyError> {
        self.matched
            .facts
            .service
            .and_then(|id| self.snapshot.service(id))
            .map(|runtime| runtime.as_ref())
            .ok_or_else(|| ProxyError::new(ErrorKind::NoService, "route has no service"))
    }

    /// The upstream's path and query: the request's own (shared, not built
    /// and parsed again) unless the service's path or a stripped prefix
    /// changes it, or a plugin set it.
    fn upstream_target(
        &self,
        request: &Request<ProxyBody>,
        uri: &Uri,
        runtime: &ServiceRuntime,
    ) -> Result<PathAndQuery, ProxyError> {
        let service = &runtime.service;
        let route = self.matched.facts;
        let matched_path = self.matched.matched_path.as_deref();
        let request_path = uri.path();
        let rewritten = if request.extensions().get::<ExactPath>().is_some()
            || keeps_path(service.path.as_deref(), request_path, matched_path, route.strip_path)
        {
            None
        } else {
            Some(upstream_path(
                service.path.as_deref(),
                request_path,
                matched_path,
                route.strip_path,
                route.path_handling(),
            ))
            .filter(|path| path != request_path)
        };
        match (rewritten, uri.path_and_query()) {
            (None, Some(own)) => Ok(own.clone()),
            (rewritten, _) => {
                let mut joined = rewritten.unwrap_or_else(|| request_path.to_string());
                // Pushed, not `format!`ted: a third of the cost of a query's join.
                if let Some(query) = uri.query() {
                    joined.reserve_exact(1 + query.len());
                    joined.push('?');
                    joined.push_str(query);
                }
                PathAndQuery::try_from(joined).map_err(|e| ProxyError::new(ErrorKind::BadRequest, e.to_string()))
            }
        }
    }
}

/// A request held whole, to be sent again after a try that met a reset
/// before any response byte.
struct Replay {
    method: http::Method,
    headers: http::HeaderMap,
    body: bytes::Bytes,
}

impl Replay {
    fn request(&self) -> BoxedRequest {
        let mut request = Box::new(Request::new(full(self.body.clone())));
        *request.method_mut() = self.method.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

/// The request as it goes out (HTTP/1.1, HTTP/2 set per try, none of the
/// client's extensions), a replay of it when retries may need one, and the
/// tries' shared state.
fn prepare_tries(
    mut request: BoxedRequest,
    plan: &Plan<'_>,
    buffered: Option<bytes::Bytes>,
) -> (Option<BoxedRequest>, Option<Replay>, Tries) {
    let attempts = plan.runtime.service.retries.max(0) as usize + 1;
    let balancer = plan.balancer();
    // A request that went out and met a reset before any response byte is
    // sent again only when it is idempotent and its whole body is held (or
    // it has none); keeping its headers for that costs a copy, so only
    // where a retry could reach another target.
    let replay = (attempts > 1 && balancer.is_some_and(|b| b.target_count() > 1) && request.method().is_idempotent())
        .then_some(buffered)
        .flatten()
        .map(|body| Replay {
            method: request.method().clone(),
            headers: request.headers().clone(),
            body,
        });
    *request.version_mut() = Version::HTTP_11;
    request.extensions_mut().clear();
    let tries = Tries {
        left: attempts,
        picks: Attempts::default(),
        set_cookie: None,
        last_error: None,
        log: Vec::new(),
        replayable: replay.is_some(),
    };
    (Some(request), replay, tries)
}

/// `request_buffering`: the body is read before anything is sent upstream
/// (up to [`REQUEST_BUFFER`]; a longer one streams after that), so a slow
/// client never holds an upstream connection and the body can be sent
/// again on a retry. gRPC and upgrades stream. The body, when all of it is
/// held (or there is none).
async fn buffer_request_body(request: &mut BoxedRequest, buffer: bool) -> Result<Option<bytes::Bytes>, ProxyError> {
    let ended = http_body::Body::is_end_stream(request.body());
    if !buffer || ended {
        return Ok(ended.then(bytes::Bytes::new));
    }
    let body = std::mem::replace(request.body_mut(), crate::pipeline::body::empty());
    match buffer_up_to(body, REQUEST_BUFFER).await {
        Ok(Buffered::Whole(bytes)) => {
            let headers = request.headers_mut();
            headers.remove(header::TRANSFER_ENCODING);
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            *request.body_mut() = full(bytes.clone());
            Ok(Some(bytes))
        }
        Ok(Buffered::Partial(rest)) => {
            *request.body_mut() = boxed_as_is(rest);
            Ok(None)
        }
        Err(error) => Err(ProxyError::new(ErrorKind::BadRequest, format!("request body: {error}"))),
    }
}

/// Whether `upstream_path` would give back the request's own path: no
/// service path, and nothing stripped from it (a stripped `/` leaves a
/// path that still starts with one, unless it started with two).
pub(crate) fn keeps_path(
    service_path: Option<&str>,
    request_path: &str,
    matched: Option<&str>,
    strip_path: bool,
) -> bool {
    matches!(service_path, None | Some("/"))
        && request_path.starts_with('/')
        && match (strip_path, matched) {
            (true, Some(m)) => m.is_empty() || (m == "/" && !request_path.starts_with("//")),
            _ => true,
        }
}

fn millis(value: i64) -> Duration {
    Duration::from_millis(value.max(1) as u64)
}
