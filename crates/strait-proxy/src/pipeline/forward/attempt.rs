//! The steps of one try of the upstream exchange (the loop that awaits
//! them is `Exchange::forward`): a target (the balancer's pick, or the
//! service's own host) and its `Host`, the endpoint to connect to, the
//! request's target, what a failure tells the balancer and whether another
//! try may follow, and the response head made ready for the client.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Uri, Version};
use strait_runtime::health::{InFlight, Report};
use strait_snapshot::balancer::hashing::HashInput;
use strait_snapshot::balancer::{Algorithm, Attempts, Balancer};
use strait_snapshot::snapshot::ServiceRuntime;
use strait_snapshot::tls::UpstreamTls;

use super::response::{finish_response, ResponseBody};
use super::{millis, Exchange, ForwardOptions, Forwarded, ProxiedDetail};
use crate::pipeline::error::{ErrorKind, ProxyError};
use crate::pipeline::forwarding::Forwarding;
use crate::pipeline::handler::{epoch_ms, BoxedRequest};
use crate::pipeline::tunnel::Upgrade;
use crate::upstream::{DispatchFailure, Endpoint};

/// What every try of one request shares, settled before the first.
pub(super) struct Plan<'p> {
    pub runtime: &'p ServiceRuntime,
    /// The client's URI (the balancer hashes its path and query).
    pub uri: &'p Uri,
    pub path_and_query: PathAndQuery,
    /// The client's `Host`, kept for `preserve_host`.
    pub original_host: Option<HeaderValue>,
    /// Kong's forwarding headers for the HTTP/1.1 encoder (HTTP/2 has them
    /// in the map).
    pub forwarding: Option<&'p Forwarding<'p>>,
    pub http2: bool,
    /// A gRPC call's deadline (`grpc-timeout`).
    pub deadline: Option<Instant>,
    pub options: ForwardOptions,
    /// Where a plugin sent the request instead of the service.
    pub target: Option<&'p strait_plugins::UpstreamTarget>,
    /// The balancer of the upstream a plugin's target names, if it names one.
    pub target_balancer: Option<&'p Balancer>,
    /// The TLS the request goes upstream with (the service's, or the
    /// plugin's target's).
    pub tls: Option<&'p Arc<UpstreamTls>>,
}

impl<'p> Plan<'p> {
    /// The service's balancer, or the one of the upstream a plugin's
    /// target names.
    pub fn balancer(&self) -> Option<&'p Balancer> {
        match self.target {
            Some(_) => self.target_balancer,
            None => self.runtime.balancer.as_deref(),
        }
    }

    /// The TLS for `runtime`, or for a plugin's `target` the TLS `made` for
    /// it ([`target_tls`]).
    pub fn tls_for(
        runtime: &'p ServiceRuntime,
        target: Option<&strait_plugins::UpstreamTarget>,
        made: Option<&'p Arc<UpstreamTls>>,
    ) -> Option<&'p Arc<UpstreamTls>> {
        match target {
            None => runtime.tls.as_ref(),
            Some(_) => made,
        }
    }
}

/// The TLS a plugin's target is reached with: its certificate verified
/// against the system's roots unless the service says `tls_verify = false`
/// (Kong does not verify by default; a provider's API key is worth the
/// check). Not the service's own settings: its client certificate and
/// CAs are for the service.
pub(super) fn target_tls(
    runtime: &ServiceRuntime,
    target: Option<&strait_plugins::UpstreamTarget>,
) -> Option<Arc<UpstreamTls>> {
    target
        .filter(|target| target.tls)
        .map(|_| strait_snapshot::tls::plugin_target_tls(runtime.service.tls_verify.unwrap_or(true)))
}

/// What carries over from one try to the next.
pub(super) struct Tries {
    /// How many tries may be made (the service's `retries` + 1).
    pub left: usize,
    pub picks: Attempts,
    /// A sticky-sessions cookie to set on the response.
    pub set_cookie: Option<String>,
    /// Made only when a try failed: most requests never need it.
    pub last_error: Option<ProxyError>,
    /// Each try, for a log serializer (`ForwardOptions::detailed`).
    pub log: Vec<strait_plugins::UpstreamTry>,
    /// The request can be made again from what is held (`attempts`'
    /// replay): an upstream that answered garbage is worth another try.
    pub replayable: bool,
}

/// Where one try goes.
pub(super) struct Target<'t> {
    pub host: &'t str,
    pub port: u16,
    /// The balancer's peer, when the service names an upstream.
    pub peer: Option<usize>,
    /// The address, when the target is one (no name to resolve).
    pub ip: Option<IpAddr>,
}

impl Exchange<'_> {
    /// A try's target and the `Host` it is sent with; the try is logged
    /// for a serializer (`ForwardOptions::detailed`).
    pub(super) fn begin_try<'p>(
        &self,
        request: &BoxedRequest,
        plan: &Plan<'p>,
        tries: &mut Tries,
    ) -> Result<(Target<'p>, Option<HeaderValue>), ProxyError> {
        let balancer_start = plan.options.detailed.then(|| (epoch_ms(), Instant::now()));
        let target = self.target(request, plan, tries)?;
        if let Some((start, at)) = balancer_start {
            tries.log.push(strait_plugins::UpstreamTry {
                ip: target.host.to_string(),
                port: target.port,
                balancer_start: start,
                balancer_latency: at.elapsed().as_millis() as u64,
                failure: None,
            });
        }
        let host_value = self.host_value(plan, &target);
        Ok((target, host_value))
    }

    /// The balancer's pick, or the service's own host.
    fn target<'p>(&self, request: &BoxedRequest, plan: &Plan<'p>, tries: &mut Tries) -> Result<Target<'p>, ProxyError> {
        let runtime = plan.runtime;
        if let (Some(target), None) = (plan.target, plan.target_balancer) {
            return Ok(Target {
                host: &target.host,
                port: target.port,
                peer: None,
                ip: target.host.parse().ok(),
            });
        }
        let Some(balancer) = plan.balancer() else {
            let service = &runtime.service;
            return Ok(Target {
                host: &service.host,
                port: service.port as u16,
                peer: None,
                ip: runtime.host_ip,
            });
        };
        let input = HashInput {
            client_ip: self.conn.client.ip(),
            consumer: plan.options.consumer,
            headers: request.headers(),
            path: plan.uri.path(),
            query: plan.uri.query(),
            captures: &self.matched.captures,
        };
        let Some(pick) = balancer.pick(&input, &mut tries.picks) else {
            return Err(ProxyError::new(
                ErrorKind::NoPeer,
                format!("upstream {}: no healthy target", balancer.upstream_name),
            ));
        };
        tries.set_cookie = pick.set_cookie.or(tries.set_cookie.take());
        let peer = balancer.peer(pick.index);
        Ok(Target {
            host: &peer.address.host,
            port: peer.address.port,
            peer: Some(pick.index),
            ip: peer.ip,
        })
    }

    /// The upstream request's `Host`: a plugin's, the client's with
    /// `preserve_host`, else the target's (the upstream's `host_header`).
    fn host_value(&self, plan: &Plan<'_>, target: &Target<'_>) -> Option<HeaderValue> {
        let route = self.matched.facts;
        let runtime = plan.runtime;
        if plan.options.host_override.is_some() {
            return plan.options.host_override.clone();
        }
        if let Some(chosen) = plan.target {
            let name = match plan.target_balancer {
                Some(balancer) => balancer.host_header.as_deref().unwrap_or(target.host),
                None => &chosen.host,
            };
            return strait_snapshot::snapshot::host_header(name, target.port, chosen.tls);
        }
        if route.preserve_host {
            return plan
                .original_host
                .clone()
                .or_else(|| HeaderValue::from_str(self.host).ok());
        }
        match runtime.balancer.as_deref() {
            None => runtime.host_header.clone(),
            Some(balancer) => {
                let name = balancer.host_header.as_deref().unwrap_or(target.host);
                strait_snapshot::snapshot::host_header(name, target.port, runtime.tls.is_some())
            }
        }
    }

    /// The response head ready for the client: what the answer tells the
    /// balancer, Kong's fields, the body's read timeout and buffering, the
    /// upgrade's headers, a sticky cookie.
    pub(super) fn answered(
        &self,
        (mut response, relayed): crate::upstream::Answer,
        plan: &Plan<'_>,
        tries: &mut Tries,
        sent: Sent,
        upgrade: &mut Option<Upgrade>,
    ) -> Forwarded {
        let service = &plan.runtime.service;
        if let (Some(balancer), Some(index)) = (plan.balancer(), sent.peer) {
            report_answer(balancer, index, response.status().as_u16(), sent.upstream_started);
        }
        let detail = sent
            .connected
            .map(|connected| detail(plan, tries, connected, sent.upstream_started));
        let switched = upgrade
            .take()
            .and_then(|upgrade| upgrade.start(&mut response, millis(service.read_timeout)));
        let body = ResponseBody {
            read_timeout: millis(service.read_timeout),
            in_flight: sent.in_flight,
            buffering: self.matched.facts.response_buffering && !plan.http2 && !plan.options.unbuffered,
            deadline: plan
                .deadline
                .filter(|_| crate::pipeline::grpc::is_grpc(response.headers())),
        };
        let (mut response, proxied, mut fields) = finish_response(
            response,
            body,
            self.started,
            sent.upstream_started,
            &self.shared.headers,
            detail,
        );
        fields.relayed = relayed;
        if let Some(protocol) = switched {
            crate::pipeline::tunnel::set_headers(response.headers_mut(), protocol);
        }
        if let Some(cookie) = tries.set_cookie.take().and_then(|c| HeaderValue::from_str(&c).ok()) {
            response.headers_mut().append(header::SET_COOKIE, cookie);
        }
        (response, proxied, fields)
    }
}

/// A request on its way: when it was sent, to which peer, and what is held
/// until its body is done.
pub(super) struct Sent {
    peer: Option<usize>,
    /// When connecting started and ended, and whether a pooled connection
    /// was reused (for a log serializer).
    connected: Option<(Instant, Instant, bool)>,
    upstream_started: Instant,
    /// Held until the body is done (least-connections and latency balancing).
    in_flight: Option<InFlight>,
}

impl Sent {
    pub(super) fn now(
        balancer: Option<&Balancer>,
        peer: Option<usize>,
        connected: Option<(Instant, Instant, bool)>,
    ) -> Sent {
        let in_flight = match (balancer, peer) {
            (Some(balancer), Some(index)) if balancer.counts_in_flight() => Some(balancer.peer(index).health.begin()),
            _ => None,
        };
        Sent {
            peer,
            connected,
            upstream_started: Instant::now(),
            in_flight,
        }
    }
}

/// How the request is sent on the connection.
pub(super) fn send_options<'p>(plan: &'p Plan<'p>) -> crate::upstream::SendOptions<'p> {
    crate::upstream::SendOptions {
        forwarding: plan.forwarding,
        read_timeout: read_timeout(plan.runtime.service.read_timeout, plan.deadline),
        relay: plan.options.relay,
    }
}

impl Tries {
    /// Notes `error` on the try being made, for a log serializer.
    pub(super) fn note_failure(&mut self, error: &ProxyError) {
        if let Some(last) = self.log.last_mut() {
            last.failure = Some(error.cause.to_string());
        }
    }

    /// A connection that could not be made (the caller tries again).
    pub(super) fn connect_failed(&mut self, balancer: Option<&Balancer>, peer: Option<usize>, error: &ProxyError) {
        tracing::debug!(cause = %error.cause, "upstream connect failed, retrying");
        report(balancer, peer, error);
        self.note_failure(error);
    }

    /// A request that failed on its connection: the request to try again
    /// with (`None` when some of it left and it cannot be made again), or
    /// the error when no other try will do better.
    pub(super) fn dispatch_failed(
        &mut self,
        failed: DispatchFailure,
        balancer: Option<&Balancer>,
        peer: Option<usize>,
    ) -> Result<Option<BoxedRequest>, ProxyError> {
        report(balancer, peer, &failed.error);
        self.note_failure(&failed.error);
        let again = failed.error.retryable() || (failed.error.kind == ErrorKind::UpstreamInvalid && self.replayable);
        if !again {
            return Err(failed.error);
        }
        tracing::debug!(cause = %failed.error.cause, "upstream request failed, retrying");
        self.last_error = Some(failed.error);
        Ok(failed.unsent)
    }
}

/// What an answer tells the balancer: the status for passive health
/// checks, the time to the head for latency balancing.
fn report_answer(balancer: &Balancer, index: usize, status: u16, upstream_started: Instant) {
    balancer.report_status(index, status);
    if balancer.algorithm == Algorithm::Latency {
        balancer.peer(index).health.record_latency(upstream_started.elapsed());
    }
}

/// The exchange as a log serializer reports it: the upstream URI, each
/// try, and the connection's timing (`connected`: when connecting started
/// and ended, and whether a pooled connection was reused).
fn detail(
    plan: &Plan<'_>,
    tries: &mut Tries,
    (connect_start, connect_end, reused): (Instant, Instant, bool),
    upstream_started: Instant,
) -> Box<ProxiedDetail> {
    Box::new(ProxiedDetail {
        upstream_uri: plan.path_and_query.as_str().to_string(),
        tries: std::mem::take(&mut tries.log),
        timing: Some(strait_plugins::UpstreamTiming {
            connect_start,
            connect_end,
            sent: upstream_started,
            // Set when the response head arrives.
            head: upstream_started,
            reused,
        }),
    })
}

/// Where the pool connects: the address, the protocol, and for TLS the
/// client configuration with the server name (the `Host`'s name).
pub(super) fn endpoint(plan: &Plan<'_>, addr: SocketAddr, host_value: Option<&HeaderValue>) -> Endpoint {
    let runtime = plan.runtime;
    Endpoint {
        write_timeout: millis(runtime.service.write_timeout),
        addr,
        http2: plan.http2,
        tls: plan.tls.as_ref().map(|tls| {
            let config = if plan.http2 { &tls.http2 } else { &tls.http1 };
            let authority = host_value.and_then(|h| h.to_str().ok()).unwrap_or("localhost");
            let sni = authority.rsplit_once(':').map_or(authority, |(name, _)| name);
            (config.clone(), sni.to_string())
        }),
    }
}

/// What a failed try tells the balancer's passive health checks.
fn report(balancer: Option<&Balancer>, peer: Option<usize>, error: &ProxyError) {
    if let (Some(balancer), Some(index)) = (balancer, peer) {
        if let Some(report) = passive_report(error.kind) {
            balancer.report(index, report);
        }
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

/// The wait for the response head: the service's `read_timeout`, cut
/// short by a gRPC deadline.
fn read_timeout(read_timeout: i64, deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(deadline) => millis(read_timeout).min(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        ),
        None => millis(read_timeout),
    }
}

/// The upstream request's target: HTTP/2 in its URI (with the authority
/// instead of `Host`), HTTP/1.1 in its path and `Host`.
pub(super) fn set_target(
    request: &mut BoxedRequest,
    plan: &Plan<'_>,
    host_value: Option<HeaderValue>,
) -> Result<(), ProxyError> {
    let invalid = |e: &dyn std::fmt::Display| ProxyError::new(ErrorKind::BadRequest, e.to_string());
    if !plan.http2 {
        if let Some(host) = host_value {
            request.headers_mut().insert(header::HOST, host);
        }
        *request.uri_mut() = Uri::from(plan.path_and_query.clone());
        return Ok(());
    }
    let authority = host_value.as_ref().and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    *request.version_mut() = Version::HTTP_2;
    request.headers_mut().remove(header::HOST);
    let mut target = http::uri::Parts::default();
    target.scheme = Some(if plan.tls.is_some() {
        Scheme::HTTPS
    } else {
        Scheme::HTTP
    });
    target.authority = Some(Authority::try_from(authority).map_err(|e| invalid(&e))?);
    target.path_and_query = Some(plan.path_and_query.clone());
    *request.uri_mut() = Uri::from_parts(target).map_err(|e| invalid(&e))?;
    Ok(())
}
