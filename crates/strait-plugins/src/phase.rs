//! The plugin trait: one method per phase, each a no-op by default, in the
//! order Kong runs them (see docs/plugins.md for the chart).
//!
//! Phases that never wait (`certificate`, `rewrite`, `access`, `header_filter`,
//! `body_filter`, `log`) are plain synchronous calls and allocate nothing
//! unless the plugin itself does. A plugin whose access work must wait on the
//! network (Redis, HTTP) says so with [`Plugin::waits`] and implements
//! [`Plugin::access_async`]; only such plugins cost a boxed future.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

use crate::context::{BodyChunk, LogRecord, RequestCtx, ResponseCtx, SharedStore};

/// A response produced by a plugin instead of proxying.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// Kong's default message for `kong.response.error(status)` (every PDK's).
pub fn kong_error_message(status: u16) -> &'static str {
    match status {
        400 => "Bad request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not found",
        405 => "Method not allowed",
        406 => "Not acceptable",
        407 => "Proxy authentication required",
        408 => "Request timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length required",
        412 => "Precondition failed",
        413 => "Payload too large",
        414 => "URI too long",
        415 => "Unsupported media type",
        416 => "Range not satisfiable",
        417 => "Expectation failed",
        418 => "I'm a teapot",
        422 => "Unprocessable entity",
        426 => "Upgrade required",
        429 => "Too many requests",
        431 => "Request header fields too large",
        500 => "An unexpected error occurred",
        501 => "Not implemented",
        502 => "An invalid response was received from the upstream server",
        503 => "The upstream server is currently unavailable",
        504 => "The upstream server is timing out",
        _ => "The upstream server responded with the status code",
    }
}

impl PluginResponse {
    /// Kong's `{"message": ...}` JSON error body.
    pub fn message(status: u16, message: &str) -> PluginResponse {
        PluginResponse {
            status,
            headers: vec![("content-type".into(), "application/json; charset=utf-8".into())],
            body: Bytes::from(serde_json::json!({ "message": message }).to_string()),
        }
    }

    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> PluginResponse {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

/// Put in the [`crate::SharedStore`] by a `header_filter` that needs this
/// response's whole body at once: the proxy then holds the body (up to its
/// buffer limit) and calls every `body_filter` once, with `end` set.
#[derive(Debug, Clone, Copy)]
pub struct BufferResponseBody;

/// Put in the [`crate::SharedStore`] by an `access` that needs the
/// upstream's whole response before the header filters run (Kong's
/// `kong.service.request.enable_buffering()`): the proxy reads it (up to
/// its buffer limit) and hands it to them as [`ServiceResponseBody`].
#[derive(Debug, Clone, Copy)]
pub struct BufferUpstreamResponse;

/// The upstream's whole response body, in the [`crate::SharedStore`] while
/// the header filters run when an `access` left [`BufferUpstreamResponse`]
/// (Kong's `kong.service.response.get_raw_body()`). A header filter may
/// replace it; what is left is sent, with its `Content-Length`.
#[derive(Debug, Clone)]
pub struct ServiceResponseBody(pub Bytes);

/// Put in the [`crate::SharedStore`] by an `access` whose response is a
/// stream the client reads as it comes (server-sent events from an LLM):
/// the proxy passes each piece on as it arrives, whatever the route's
/// `response_buffering` (as for an upstream's `X-Accel-Buffering: no`).
#[derive(Debug, Clone, Copy)]
pub struct StreamResponse;

/// A body streamed through the gateway: the request's as the client sends
/// it, or a response's as a plugin produces it (the proxy's own body type).
pub type StreamBody = http_body_util::combinators::UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// What a [`ServeHere`] service answers with, once its response head is known.
pub type ServeFuture = std::pin::Pin<Box<dyn std::future::Future<Output = http::Response<StreamBody>> + Send>>;

/// Put in the [`crate::SharedStore`] by an `access` that serves the request
/// itself with both bodies streaming (kafka-upstream's gRPC ingestion):
/// the proxy hands it the request, body unread, where it would forward it
/// upstream, and its response goes through the response phases and the log
/// as an upstream's would. Only a plugin whose
/// [`Plugin::serves_grpc_streams`] is true leaves it, on gRPC requests (the
/// proxy then does not read their body first).
pub struct ServeHere(pub Box<dyn FnOnce(http::Request<StreamBody>) -> ServeFuture + Send>);

/// Put in the [`crate::SharedStore`] by a `header_filter` that replaces the
/// response with its head alone (a refusal decided after the upstream
/// answered): the proxy sends no body and `Content-Length: 0`.
#[derive(Debug, Clone, Copy)]
pub struct DropResponseBody;

/// Put in the [`crate::SharedStore`] by an `access` that found it must wait
/// after all (a proxy-wasm filter that dispatched an HTTP call): the proxy
/// then awaits [`Plugin::access_resume`] of the same plugin before the rest
/// of the chain. Only a plugin that [`Plugin::suspends`] may leave it.
#[derive(Debug, Clone, Copy)]
pub struct SuspendAccess;

/// Put in the [`crate::SharedStore`] by the `access` of a plugin that
/// [`Plugin::serializes_on_demand`]: this request's log phase gets
/// [`crate::LogRecord::details`] (a sampled trace), the others go without.
#[derive(Debug, Clone, Copy)]
pub struct WantsLogDetails;

/// Put in the [`crate::SharedStore`] by an `access` that sends the request
/// somewhere other than the route's service (Kong's
/// `kong.service.set_target` with `kong.service.request.set_scheme`; the
/// ai-proxy plugin's provider). The proxy then skips the service's
/// balancer (or uses the balancer of the upstream `host` names) and
/// connects to `host:port`, over TLS when `tls` (the certificate verified
/// against the system's roots unless the service says `tls_verify =
/// false`), with `Host` set to the target unless a plugin set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTarget {
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

/// The upstream's whole response, as a [`ResponseRewriter`] gets it.
#[derive(Debug, Clone)]
pub struct UpstreamResponse {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

pub type RewriteFuture<'a> = Pin<Box<dyn Future<Output = Result<UpstreamResponse, PluginResponse>> + Send + 'a>>;

/// Rewrites the upstream's whole response before the header filters, and
/// may wait to do it (ai-response-transformer asks an LLM). `Err` answers
/// with the plugin's response instead.
pub trait ResponseRewriter: Send + Sync + std::fmt::Debug {
    fn rewrite(&self, response: UpstreamResponse) -> RewriteFuture<'_>;
}

/// Put in the [`crate::SharedStore`] by an `access` whose plugin rewrites
/// the upstream's response: the proxy reads the whole response (as for
/// [`BufferUpstreamResponse`]) and sends what the rewriter returns.
#[derive(Debug)]
pub struct RewriteResponse(pub Box<dyn ResponseRewriter>);

/// How a try a [`Failover`] plan sent failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedTry {
    /// The upstream answered with a status the plan fails over on, with
    /// its `Retry-After` in seconds when it gave one.
    Status(u16, Option<u64>),
    /// No connection (refused, name not resolved, no healthy target).
    Unreachable,
    /// No connection, or no response head, in time.
    TimedOut,
}

/// The next request a [`Failover`] plan sends: where, and the whole
/// request (its body held, as it was for the first try).
#[derive(Debug, Clone)]
pub struct NextTry {
    pub target: UpstreamTarget,
    pub method: http::Method,
    pub path_and_query: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// Other upstreams to try, in a plugin's order, when one fails before the
/// client has seen anything of its answer: a response head with a status
/// the plan names (429, 5xx), no connection, or no head in time. The
/// plugin's own state (a translator for the next provider) is in `shared`.
pub trait FailoverPlan: Send + std::fmt::Debug {
    /// Whether a response head with `status` goes to the next upstream.
    fn fails_over_on(&self, status: u16) -> bool;

    /// The request for the next upstream, `None` when none is left (the
    /// last answer or error then goes to the client).
    fn next(&mut self, failed: FailedTry, shared: &mut SharedStore) -> Option<NextTry>;
}

/// Put in the [`crate::SharedStore`] by an `access` that has upstreams to
/// fail over to (ai-proxy's fallbacks): the proxy sends the next try
/// [`FailoverPlan::next`] gives it after each failure.
#[derive(Debug)]
pub struct Failover(pub Box<dyn FailoverPlan>);

/// What a phase tells the proxy to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Flow {
    Continue,
    Respond(PluginResponse),
}

/// What the certificate phase sees of a TLS handshake.
#[derive(Debug, Clone, Copy)]
pub struct CertificateCtx<'a> {
    /// The SNI the client sent, if any.
    pub server_name: Option<&'a str>,
    /// A stored certificate's SNI matches `server_name` (acme leaves such
    /// a handshake to it).
    pub has_sni_certificate: bool,
}

/// What a certificate-phase plugin decides for one TLS handshake.
#[derive(Debug, Clone)]
pub enum CertificateFlow {
    /// Let the next plugin, then the SNI lookup, choose.
    Continue,
    /// Serve this stored certificate (by id), whatever the SNI.
    UseCertificate(uuid::Uuid),
    /// Serve this certificate the plugin holds (acme's issued ones).
    UseKey(std::sync::Arc<rustls::sign::CertifiedKey>),
    /// Abort the handshake.
    Refuse,
}

pub type AccessFuture<'a> = Pin<Box<dyn Future<Output = Flow> + Send + 'a>>;

/// A built plugin instance. Every phase defaults to doing nothing.
pub trait Plugin: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;

    /// Kong's priority number: higher runs first.
    fn priority(&self) -> i32;

    /// True when the plugin implements [`Plugin::certificate`].
    fn handles_certificate(&self) -> bool {
        false
    }

    /// During the TLS handshake, before the certificate is chosen by SNI;
    /// global plugins only (as in Kong). Runs on the handshake's thread:
    /// must be quick and never block.
    fn certificate(&self, _ctx: &CertificateCtx<'_>) -> CertificateFlow {
        CertificateFlow::Continue
    }

    /// True when the plugin implements [`Plugin::rewrite`].
    fn rewrites(&self) -> bool {
        false
    }

    /// Runs before routing, for global plugins only (as in Kong).
    fn rewrite(&self, _ctx: &mut RequestCtx<'_>) -> Flow {
        Flow::Continue
    }

    /// Decides whether the request goes on and changes what goes upstream.
    fn access(&self, _ctx: &mut RequestCtx<'_>) -> Flow {
        Flow::Continue
    }

    /// True when access must wait on the network: the chain then awaits
    /// [`Plugin::access_async`] instead of calling [`Plugin::access`].
    fn waits(&self) -> bool {
        false
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        let flow = self.access(ctx);
        Box::pin(std::future::ready(flow))
    }

    /// True when `access` usually decides at once but may have to wait:
    /// it then leaves [`SuspendAccess`] in `ctx.shared`, and the proxy
    /// awaits [`Plugin::access_resume`]. The chain still runs inline (no
    /// future for requests that do not wait). What a resumed access sees of
    /// the request is what the proxy keeps between phases: not the
    /// consumer's groups (`authenticated_groups`) nor its view, so only a
    /// plugin that runs after authentication and ACLs should suspend.
    fn suspends(&self) -> bool {
        false
    }

    /// The rest of an `access` that left [`SuspendAccess`].
    fn access_resume<'a>(&'a self, _ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(std::future::ready(Flow::Continue))
    }

    /// True unless the plugin's `access` (and `rewrite`) never read or
    /// change Kong's identity fields on the request (`X-Consumer-*`,
    /// `X-Credential-Identifier`, ..., identity.rs) other than through
    /// [`RequestCtx::set_identity`]. Before such a plugin the chain moves
    /// the fields held beside the request's map into it. The safe answer,
    /// and the default, is true.
    fn reads_identity_fields(&self) -> bool {
        true
    }

    /// True when access needs the whole request body in `ctx.body`.
    fn reads_request_body(&self) -> bool {
        false
    }

    /// True when, on a gRPC request, access serves the call itself with
    /// [`ServeHere`]: the proxy then leaves a gRPC request's body unread
    /// (streaming to the plugin) even when [`Plugin::reads_request_body`].
    fn serves_grpc_streams(&self) -> bool {
        false
    }

    /// True when the plugin implements [`Plugin::header_filter`]. A chain
    /// none of whose plugins do (nor filter the body, serialize or trace)
    /// lets the proxy pass the upstream's response head on in its own
    /// bytes, with only what `access` added beside it.
    fn filters_headers(&self) -> bool {
        false
    }

    /// Changes status and headers of the response before they are sent
    /// (upstream answers, plugin exits and gateway errors alike).
    fn header_filter(&self, _ctx: &mut ResponseCtx<'_>) {}

    /// True when the plugin implements [`Plugin::header_filter_lazy`]: a
    /// chain whose header and body filters all do (and that neither
    /// serializes nor traces) keeps an HTTP/1.1 upstream's head in its own
    /// bytes unless a filter changes it (lazy_head.rs).
    fn filters_lazy_heads(&self) -> bool {
        false
    }

    /// [`Plugin::header_filter`] on a head whose map is made only when the
    /// plugin reads it; called instead of `header_filter` for a proxied
    /// response the proxy would pass on as it came.
    fn header_filter_lazy(&self, _ctx: &mut crate::LazyResponseCtx<'_>) {}

    /// True when `header_filter` reads the client's request headers
    /// (`ctx.request.request_headers`); the proxy then keeps a copy.
    fn reads_request_headers_in_response(&self) -> bool {
        false
    }

    /// True when `header_filter` reads who the request authenticated as
    /// (`ctx.request.authenticated`); the proxy then keeps it.
    fn reads_consumer_in_response(&self) -> bool {
        false
    }

    /// True when the plugin implements [`Plugin::body_filter`].
    fn filters_body(&self) -> bool {
        false
    }

    /// True when a body filter that changes the body's length removes
    /// `Content-Length` itself in `header_filter` (proxy-wasm's contract:
    /// the SDKs tell filters to). Otherwise, the default, the proxy removes
    /// it before any body filter runs, and the response is sent chunked.
    fn removes_content_length(&self) -> bool {
        false
    }

    /// Sees and may replace each piece of the response body.
    fn body_filter(&self, _shared: &mut SharedStore, _chunk: &mut BodyChunk) {}

    /// True when the plugin implements [`Plugin::log`].
    fn logs(&self) -> bool {
        false
    }

    /// True when `log` needs [`crate::LogRecord::details`] only for the
    /// requests whose `access` left [`WantsLogDetails`] (zipkin's sampled
    /// ones): the proxy then builds them after the access phase, for those
    /// requests only, without the client's request headers.
    fn serializes_on_demand(&self) -> bool {
        false
    }

    /// True when `log` does nothing for a request whose `access` did not
    /// leave [`WantsLogDetails`] (zipkin's unsampled ones): when every
    /// plugin following such a request's response is like this, the
    /// response is not followed at all (no log phase, the body passed on
    /// as it is).
    fn logs_only_on_demand(&self) -> bool {
        false
    }

    /// True when the plugin traces requests: the chain then times every
    /// plugin's `access` and `header_filter` into
    /// [`crate::PhaseTimings`] in the shared store.
    fn traces(&self) -> bool {
        false
    }

    /// True when `log` needs [`crate::LogRecord::details`] (Kong's
    /// serialized log entry); the proxy then keeps the request's and
    /// response's headers and URIs for it.
    fn serializes(&self) -> bool {
        false
    }

    /// True when `log` reads the request's route, service or consumer
    /// entities ([`crate::LogRecord::entities`]) without the rest of
    /// Kong's entry (statsd, datadog): the proxy then keeps the snapshot
    /// the request loaded for the log phase, and nothing else.
    fn reads_entities(&self) -> bool {
        false
    }

    /// After the last byte of the response was handed to the connection.
    /// Must not block: queue slow work.
    fn log(&self, _record: &LogRecord, _shared: &SharedStore) {}
}

#[cfg(test)]
mod tests {
    /// The proxy trusts the flags: a plugin with a `header_filter`,
    /// `body_filter` or `log` that does not say so would be skipped. Every
    /// source file that implements one of them also implements its flag.
    #[test]
    fn every_phase_a_plugin_implements_is_flagged() {
        let pairs = [
            ("fn header_filter(", "fn filters_headers("),
            ("fn body_filter(", "fn filters_body("),
            ("fn log(", "fn logs("),
            ("fn header_filter_lazy(", "fn filters_lazy_heads("),
        ];
        let mut files = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
        let mut checked = 0;
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|entry| entry.unwrap().path()));
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy();
            if !name.ends_with(".rs") || name == "phase.rs" || name == "chain.rs" {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            for (phase, flag) in pairs {
                if source.contains(phase) {
                    checked += 1;
                    assert!(
                        source.contains(flag),
                        "{} implements `{phase}..)` without `{flag}..)`",
                        path.display()
                    );
                }
            }
        }
        assert!(checked >= 7, "only {checked} phases found: the walk is broken");
    }
}
