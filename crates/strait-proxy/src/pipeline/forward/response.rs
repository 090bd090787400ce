//! The upstream's response head made ready for the client: hop-by-hop
//! fields out, the client's protocol version, Kong's latency and status
//! fields beside the map, and the body wrapped for the read timeout,
//! `response_buffering` and a gRPC deadline.

use std::time::{Duration, Instant};

use http::header::HeaderName;
use http::{Response, Version};
use strait_runtime::health::InFlight;

use super::{Proxied, ProxiedDetail};
use crate::pipeline::body::{boxed_as_is, BlockBody, IdleTimeoutBody, ProxyBody};
use crate::pipeline::handler::hop_by_hop::strip_hop_by_hop_keeping;
use crate::pipeline::kong_headers::{HeaderSwitches, KongFields};

const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

/// How the upstream's response body is passed on.
pub(super) struct ResponseBody {
    /// Longest silence between two body frames (the service's `read_timeout`).
    pub read_timeout: Duration,
    /// Held until the body is done (least-connections and latency balancing).
    pub in_flight: Option<InFlight>,
    /// The route's `response_buffering`.
    pub buffering: bool,
    /// A gRPC call's deadline (`grpc-timeout`): the stream ends there.
    pub deadline: Option<Instant>,
}

pub(super) fn finish_response(
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
        boxed_as_is(body)
    } else {
        let body = IdleTimeoutBody::new(body, policy.read_timeout).holding(policy.in_flight);
        if policy.buffering && !unbuffered {
            boxed_as_is(BlockBody::new(body))
        } else {
            boxed_as_is(body)
        }
    };
    let body = match policy.deadline {
        Some(deadline) => boxed_as_is(crate::pipeline::grpc::DeadlineBody::new(body, deadline.into())),
        None => body,
    };
    (Response::from_parts(parts, body), proxied, fields)
}
