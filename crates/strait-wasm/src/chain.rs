//! A route's filters as one plugin: Kong attaches the chain at the end of
//! the access phase, after every Lua plugin's access, so it runs at the
//! lowest priority. Per request, each filter gets an HTTP context in this
//! thread's instance of the filter; its callbacks run in the access
//! (request headers), header_filter (response headers), body_filter
//! (response body) and log (done, log, delete) phases. A filter that traps,
//! runs past the request's budget or is refused its configuration fails
//! only this request: Kong's 500 and a log line.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use strait_plugins::{
    AccessFuture, BodyChunk, DropResponseBody, Flow, LazyHeaders, LazyResponseCtx, LogRecord, Plugin, PluginResponse,
    RequestCtx, ResponseCtx, SharedStore,
};

use crate::filter::Filter;
use crate::instance::{lock, Fault, Shared};

/// One filter of a chain with its configuration.
pub(crate) struct ChainEntry {
    pub filter: Arc<Filter>,
    pub configuration: Configuration,
}

/// A filter configuration as the filter reads it (a string as written,
/// anything else JSON-encoded), with a number per distinct text, given when
/// the chain is built: a request finds its root context by that number, not
/// by hashing the text.
#[derive(Clone)]
pub(crate) struct Configuration {
    pub id: usize,
    pub bytes: Arc<[u8]>,
}

impl Configuration {
    /// The configuration `bytes`, numbered: the same text always gets the
    /// same number (the process keeps one entry per distinct text it was
    /// given, as each instance keeps a root context per text).
    pub(crate) fn interned(bytes: Arc<[u8]>) -> Configuration {
        static SEEN: std::sync::Mutex<Option<std::collections::HashMap<Arc<[u8]>, usize>>> =
            std::sync::Mutex::new(None);
        let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = seen.get_or_insert_with(Default::default);
        let next = seen.len();
        let id = *seen.entry(bytes.clone()).or_insert(next);
        Configuration { id, bytes }
    }
}

pub(crate) struct FilterChain {
    pub entries: Vec<ChainEntry>,
    /// The time the request's callbacks may run, all phases together
    /// (the log phase has one of its own).
    pub budget: Duration,
}

impl std::fmt::Debug for FilterChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.entries.iter().map(|e| &*e.filter.name).collect();
        f.debug_struct("FilterChain").field("filters", &names).finish()
    }
}

/// A filter's HTTP context for one request.
pub(crate) struct Context {
    pub instance: Shared,
    pub filter: Arc<str>,
    pub id: i32,
    /// Response body the filter held back (it answered Pause before the
    /// end of the body), handed to it again with the next piece.
    pub held: Vec<u8>,
    pub failed: bool,
}

/// The request's filter contexts, kept in its shared store.
pub(crate) struct WasmRequest {
    /// The epoch past which the running phase's callbacks trap.
    pub deadline: u64,
    /// Clock ticks the request's callbacks ran across so far (the
    /// budget's own resolution: a callback that spans a tick is charged
    /// one, so the charge is the time spent on average, with no clock read).
    pub spent: u64,
    pub contexts: Vec<Context>,
    /// `kong.ctx.shared.*` as the request's filters set it.
    pub ctx_shared: std::collections::HashMap<String, Vec<u8>>,
    /// Where the access phase stopped for a filter's HTTP calls.
    pub pending: Option<crate::access::Pending>,
}

impl WasmRequest {
    fn new(filters: usize) -> WasmRequest {
        WasmRequest {
            deadline: 0,
            spent: 0,
            contexts: Vec::with_capacity(filters),
            ctx_shared: Default::default(),
            pending: None,
        }
    }
}

pub(crate) fn internal_error() -> Flow {
    Flow::Respond(PluginResponse::message(500, "An unexpected error occurred"))
}

pub(crate) fn report(filter: &str, fault: &Fault, phase: &'static str) {
    match fault {
        Fault::Trapped(reason) => {
            tracing::error!(filter, phase, reason = %reason, "wasm filter failed: its request ends with 500")
        }
        Fault::Refused => tracing::error!(
            filter,
            phase,
            "wasm filter refused its configuration: request ends with 500"
        ),
        Fault::Broken => tracing::debug!(filter, phase, "wasm filter instance broke in this request earlier"),
    }
}

impl Plugin for FilterChain {
    fn name(&self) -> &'static str {
        "filter-chain"
    }

    /// After every other plugin's access, as Kong attaches filter chains.
    fn priority(&self) -> i32 {
        i32::MIN
    }

    fn reads_identity_fields(&self) -> bool {
        false
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let mut request = WasmRequest::new(self.entries.len());
        let flow = self.request_headers(ctx, &mut request);
        ctx.shared.insert(request);
        flow
    }

    /// A chain with a filter that makes HTTP calls suspends when one asks
    /// for them (its other requests run inline).
    fn suspends(&self) -> bool {
        self.entries.iter().any(|e| e.filter.makes_calls)
    }

    fn access_resume<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(async move {
            let Some(mut request) = ctx.shared.remove::<WasmRequest>() else {
                return Flow::Continue;
            };
            let flow = self.resume(ctx, &mut request).await;
            ctx.shared.insert(request);
            flow
        })
    }

    fn filters_headers(&self) -> bool {
        true
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        let mut headers = LazyHeaders::of_map(std::mem::take(ctx.headers));
        let mut lazy = LazyResponseCtx {
            status: &mut *ctx.status,
            headers: &mut headers,
            source: ctx.source,
            request: ctx.request,
            shared: &mut *ctx.shared,
        };
        self.header_filter_lazy(&mut lazy);
        *ctx.headers = headers.into_map();
    }

    /// The response-headers callback gets the head as a lazy map: most
    /// filters never read it, and the upstream's head then goes on in its
    /// own bytes.
    fn filters_lazy_heads(&self) -> bool {
        true
    }

    fn header_filter_lazy(&self, ctx: &mut LazyResponseCtx<'_>) {
        let Some(request) = ctx.shared.get_mut::<WasmRequest>() else {
            return;
        };
        let mut failed = false;
        let started = self.start_phase(request);
        for context in request.contexts.iter_mut().filter(|c| !c.failed) {
            let mut guard = lock(&context.instance);
            if !guard.exports_response_headers() {
                continue;
            }
            let exchange = guard.exchange();
            exchange.clear();
            exchange.response_headers = std::mem::take(ctx.headers);
            exchange.status = ctx.status.as_u16();
            exchange.properties.route_id = ctx.request.route_id;
            exchange.properties.service_id = ctx.request.service_id;
            exchange.ctx_shared = std::mem::take(&mut request.ctx_shared);
            let count = exchange.response_headers.len() as i32 + 1;
            let outcome = guard.on_response_headers(context.id, count, request.deadline);
            let exchange = guard.exchange();
            *ctx.headers = std::mem::take(&mut exchange.response_headers);
            request.ctx_shared = std::mem::take(&mut exchange.ctx_shared);
            if exchange.status != ctx.status.as_u16() {
                if let Ok(status) = StatusCode::from_u16(exchange.status) {
                    *ctx.status = status;
                }
            }
            if let Err(fault) = outcome {
                report(&context.filter, &fault, "header_filter");
                context.failed = true;
                failed = true;
                break;
            }
        }
        end_phase(request, started);
        if failed {
            *ctx.status = StatusCode::INTERNAL_SERVER_ERROR;
            *ctx.headers = LazyHeaders::of_map(http::HeaderMap::new());
            ctx.shared.insert(DropResponseBody);
        }
    }

    fn filters_body(&self) -> bool {
        true
    }

    /// A filter that changes the body's length removes `Content-Length`
    /// in its response-headers callback (every proxy-wasm SDK says so);
    /// the others' responses keep theirs.
    fn removes_content_length(&self) -> bool {
        true
    }

    fn body_filter(&self, shared: &mut SharedStore, chunk: &mut BodyChunk) {
        let Some(request) = shared.get_mut::<WasmRequest>() else {
            return;
        };
        let started = self.start_phase(request);
        let deadline = request.deadline;
        self.filter_body(request, chunk, deadline);
        end_phase(request, started);
    }

    fn logs(&self) -> bool {
        true
    }

    fn log(&self, _record: &LogRecord, shared: &SharedStore) {
        let Some(request) = shared.get::<WasmRequest>() else {
            return;
        };
        // The log phase has a budget of its own.
        let deadline = crate::runtime::epoch() + crate::runtime::ticks(self.budget);
        for context in &request.contexts {
            let mut guard = lock(&context.instance);
            guard.exchange().clear();
            if let Err(fault) = guard.finish(context.id, deadline) {
                report(&context.filter, &fault, "log");
            }
        }
    }
}

/// Charges the ticks a phase begun at `started` ran across.
pub(crate) fn end_phase(request: &mut WasmRequest, started: u64) {
    request.spent += crate::runtime::epoch().saturating_sub(started);
}

impl FilterChain {
    /// Sets the deadline of a phase from what is left of the budget; the
    /// epoch it started at, for [`end_phase`].
    pub(crate) fn start_phase(&self, request: &mut WasmRequest) -> u64 {
        let now = crate::runtime::epoch();
        let left = crate::runtime::ticks(self.budget).saturating_sub(request.spent);
        request.deadline = match left {
            0 => 0,
            left => now + left,
        };
        now
    }

    fn filter_body(&self, request: &mut WasmRequest, chunk: &mut BodyChunk, deadline: u64) {
        for context in request.contexts.iter_mut().filter(|c| !c.failed) {
            let mut guard = lock(&context.instance);
            if !guard.exports_response_body() {
                continue;
            }
            let exchange = guard.exchange();
            exchange.clear();
            // The piece as it came (no copy) unless the filter held some back.
            exchange.body = match context.held.is_empty() {
                true => chunk.data.clone(),
                false => {
                    let mut held = std::mem::take(&mut context.held);
                    held.extend_from_slice(&chunk.data);
                    Bytes::from(held)
                }
            };
            let size = exchange.body.len() as i32;
            let outcome = guard.on_response_body(context.id, size, chunk.end, deadline);
            let body = std::mem::take(&mut guard.exchange().body);
            match outcome {
                Ok(1) if !chunk.end => {
                    context.held = Vec::from(body);
                    chunk.data = Bytes::new();
                }
                Ok(_) => chunk.data = body,
                Err(fault) => {
                    report(&context.filter, &fault, "body_filter");
                    context.failed = true;
                    // The head is gone: what is left of the body is dropped.
                    chunk.data = Bytes::new();
                    return;
                }
            }
        }
    }
}
