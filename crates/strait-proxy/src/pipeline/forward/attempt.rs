//! One try of the upstream exchange: a target (the balancer's pick, or the
//! service's own host), its address, a pooled connection, the request sent
//! and the response head taken. A failure says whether another try may
//! follow, with the request when none of it left.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Uri, Version};
use strait_runtime::health::Report;
use strait_snapshot::balancer::hashing::HashInput;
use strait_snapshot::balancer::{Algorithm, Attempts, Balancer};
use strait_snapshot::snapshot::ServiceRuntime;

use super::response::{finish_response, ResponseBody};
use super::{millis, Exchange, ForwardOptions, Forwarded, ProxiedDetail};
use crate::pipeline::error::{ErrorKind, ProxyError};
use crate::pipeline::forwarding::Forwarding;
use crate::pipeline::handler::{epoch_ms, BoxedRequest};
use crate::pipeline::tunnel::Upgrade;
use crate::upstream::{Endpoint, UpstreamBody};

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
}

/// What carries over from one try to the next.
pub(super) struct Tries {
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

/// A try that got no response head.
pub(super) enum Missed {
    /// Another try may follow; `unsent` is the request when none of it left.
    Again {
        unsent: Option<BoxedRequest>,
        error: ProxyError,
    },
    /// No other try will do better.
    Failed(ProxyError),
}

/// Where one try goes.
struct Target<'t> {
    host: &'t str,
    port: u16,
    /// The balancer's peer, when the service names an upstream.
    peer: Option<usize>,
    /// The address, when the target is one (no name to resolve).
    ip: Option<IpAddr>,
}

impl Exchange<'_> {
    pub(super) async fn attempt(
        &self,
        mut request: BoxedRequest,
        plan: &Plan<'_>,
        tries: &mut Tries,
        upgrade: &mut Option<Upgrade>,
    ) -> Result<Forwarded, Missed> {
        let runtime = plan.runtime;
        let service = &runtime.service;
        let balancer = runtime.balancer.as_deref();
        let balancer_start = plan.options.detailed.then(|| (epoch_ms(), Instant::now()));
        let target = match self.target(&request, plan, tries) {
            Ok(target) => target,
            Err(error) => return Err(Missed::Failed(error)),
        };
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
        let addr = match address(&target).await {
            Ok(addr) => addr,
            Err(error) => {
                tries.note_failure(&error);
                return Err(match balancer {
                    Some(_) => Missed::Again {
                        unsent: Some(request),
                        error,
                    },
                    None => Missed::Failed(error),
                });
            }
        };
        let endpoint = endpoint(plan, addr, host_value.as_ref());
        let connect_timeout = millis(service.connect_timeout);
        // Timed only for a log serializer or tracer (Exchange::forward).
        let connect_start = plan.options.detailed.then(Instant::now);
        let lease = match self.shared.pool().acquire(&endpoint, connect_timeout).await {
            Ok(lease) => lease,
            Err(error) if error.retryable() => {
                tracing::debug!(cause = %error.cause, "upstream connect failed, retrying");
                report(balancer, target.peer, &error);
                tries.note_failure(&error);
                return Err(Missed::Again {
                    unsent: Some(request),
                    error,
                });
            }
            Err(error) => return Err(Missed::Failed(error)),
        };
        let connected = connect_start.map(|start| (start, Instant::now(), lease.reused()));
        set_target(&mut request, plan, host_value).map_err(Missed::Failed)?;
        let upstream_started = Instant::now();
        let in_flight = match (balancer, target.peer) {
            (Some(balancer), Some(index)) if balancer.counts_in_flight() => Some(balancer.peer(index).health.begin()),
            _ => None,
        };
        let options = crate::upstream::SendOptions {
            forwarding: plan.forwarding,
            read_timeout: read_timeout(service.read_timeout, plan.deadline),
            relay: plan.options.relay,
        };
        let sent = self
            .shared
            .pool()
            .dispatch(lease, &endpoint, request, options, connect_timeout)
            .await;
        let (mut response, relayed) = match sent {
            Ok(response) => response,
            Err(failed) => {
                report(balancer, target.peer, &failed.error);
                tries.note_failure(&failed.error);
                let again =
                    failed.error.retryable() || (failed.error.kind == ErrorKind::UpstreamInvalid && tries.replayable);
                if !again {
                    return Err(Missed::Failed(failed.error));
                }
                tracing::debug!(cause = %failed.error.cause, "upstream request failed, retrying");
                return Err(Missed::Again {
                    unsent: failed.unsent,
                    error: failed.error,
                });
            }
        };
        if let (Some(balancer), Some(index)) = (balancer, target.peer) {
            report_answer(balancer, index, response.status().as_u16(), upstream_started);
        }
        let detail = connected.map(|connected| detail(plan, tries, connected, upstream_started));
        let switched = upgrade
            .take()
            .and_then(|upgrade| upgrade.start(&mut response, millis(service.read_timeout)));
        let body = ResponseBody {
            read_timeout: millis(service.read_timeout),
            in_flight,
            buffering: self.matched.facts.response_buffering && !plan.http2,
            deadline: plan
                .deadline
                .filter(|_| crate::pipeline::grpc::is_grpc(response.headers())),
        };
        let (response, proxied, mut fields) = self.answered(response, body, upstream_started, detail, tries, switched);
        fields.relayed = relayed;
        Ok((response, proxied, fields))
    }

    /// The balancer's pick, or the service's own host.
    fn target<'p>(&self, request: &BoxedRequest, plan: &Plan<'p>, tries: &mut Tries) -> Result<Target<'p>, ProxyError> {
        let runtime = plan.runtime;
        let Some(balancer) = runtime.balancer.as_deref() else {
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

    /// The response head ready for the client: Kong's fields, the body's
    /// read timeout and buffering, the upgrade's headers, a sticky cookie.
    fn answered(
        &self,
        response: http::Response<UpstreamBody>,
        body: ResponseBody,
        upstream_started: Instant,
        detail: Option<Box<ProxiedDetail>>,
        tries: &mut Tries,
        switched: Option<HeaderValue>,
    ) -> Forwarded {
        let (mut response, proxied, fields) = finish_response(
            response,
            body,
            self.started,
            upstream_started,
            &self.shared.headers,
            detail,
        );
        if let Some(protocol) = switched {
            crate::pipeline::tunnel::set_headers(response.headers_mut(), protocol);
        }
        if let Some(cookie) = tries.set_cookie.take().and_then(|c| HeaderValue::from_str(&c).ok()) {
            response.headers_mut().append(header::SET_COOKIE, cookie);
        }
        (response, proxied, fields)
    }
}

impl Tries {
    /// Notes `error` on the try being made, for a log serializer.
    fn note_failure(&mut self, error: &ProxyError) {
        if let Some(last) = self.log.last_mut() {
            last.failure = Some(error.cause.to_string());
        }
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

/// The target's address: its own, or its name resolved (dns.rs).
async fn address(target: &Target<'_>) -> Result<SocketAddr, ProxyError> {
    match target.ip {
        Some(ip) => Ok(SocketAddr::new(ip, target.port)),
        None => crate::upstream::dns::resolve(target.host, target.port)
            .await
            .map_err(|error| ProxyError::new(ErrorKind::NameResolution, error.to_string())),
    }
}

/// Where the pool connects: the address, the protocol, and for TLS the
/// client configuration with the server name (the `Host`'s name).
fn endpoint(plan: &Plan<'_>, addr: SocketAddr, host_value: Option<&HeaderValue>) -> Endpoint {
    let runtime = plan.runtime;
    let authority = host_value.and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let sni = authority.rsplit_once(':').map_or(authority, |(name, _)| name);
    Endpoint {
        write_timeout: millis(runtime.service.write_timeout),
        addr,
        http2: plan.http2,
        tls: runtime.tls.as_ref().map(|tls| {
            let config = if plan.http2 { &tls.http2 } else { &tls.http1 };
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
fn set_target(request: &mut BoxedRequest, plan: &Plan<'_>, host_value: Option<HeaderValue>) -> Result<(), ProxyError> {
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
    target.scheme = Some(if plan.runtime.tls.is_some() {
        Scheme::HTTPS
    } else {
        Scheme::HTTP
    });
    target.authority = Some(Authority::try_from(authority).map_err(|e| invalid(&e))?);
    target.path_and_query = Some(plan.path_and_query.clone());
    *request.uri_mut() = Uri::from_parts(target).map_err(|e| invalid(&e))?;
    Ok(())
}
