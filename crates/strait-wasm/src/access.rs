//! The chain's access phase: each filter's HTTP context made and its
//! `proxy_on_request_headers` run with the request's headers moved into its
//! store. A filter that asked for HTTP calls (and so paused) has them sent
//! and each answer handed to `proxy_on_http_call_response` before the next
//! filter runs. The phase is a plain call; only a request whose filter did
//! ask for calls waits (the chain suspends, strait-plugins' `SuspendAccess`,
//! and the proxy awaits the rest as a future).

use strait_plugins::{Flow, RequestCtx, SuspendAccess};

use crate::calls::{CallResponse, HttpCall};
use crate::chain::{internal_error, report, ChainEntry, Context, FilterChain, WasmRequest};
use crate::exchange::{version_name, Exchange};
use crate::instance::{self, lock, Fault, Shared};

/// What a callback in the access phase leaves the chain to do.
enum Step {
    /// On to the next filter.
    Next,
    /// The request is answered (a local response, or a failure).
    Answer(Flow),
    /// The filter waits for these calls (its instance, its root context
    /// to which the answers go, as the ABI wants).
    Calls(Shared, i32, Vec<HttpCall>),
}

/// Where a chain's access phase stopped for a filter's HTTP calls, kept in
/// the request until [`FilterChain::resume`] sends them.
pub(crate) struct Pending {
    entry: usize,
    shared: Shared,
    root: i32,
    calls: Vec<HttpCall>,
}

impl FilterChain {
    /// The access phase as a plain call: each filter's request-headers
    /// callback, until one answers or asks for HTTP calls (then the chain
    /// suspends: `SuspendAccess`, and [`FilterChain::resume`] goes on).
    pub(crate) fn request_headers(&self, ctx: &mut RequestCtx<'_>, request: &mut WasmRequest) -> Flow {
        let started = self.start_phase(request);
        let mut flow = Flow::Continue;
        for (at, entry) in self.entries.iter().enumerate() {
            match self.start_entry(entry, ctx, request) {
                Step::Next => {}
                Step::Answer(answer) => {
                    flow = answer;
                    break;
                }
                Step::Calls(shared, root, calls) if entry.filter.makes_calls => {
                    request.pending = Some(Pending {
                        entry: at,
                        shared,
                        root,
                        calls,
                    });
                    ctx.shared.insert(SuspendAccess);
                    break;
                }
                Step::Calls(..) => {
                    tracing::warn!(filter = %entry.filter.name, "wasm filter made an HTTP call it does not import");
                }
            }
        }
        crate::chain::end_phase(request, started);
        flow
    }

    /// The rest of an access phase that stopped for HTTP calls: the calls
    /// sent and answered, then the filters after that one.
    pub(crate) async fn resume(&self, ctx: &mut RequestCtx<'_>, request: &mut WasmRequest) -> Flow {
        let Some(Pending {
            entry: at,
            shared,
            root,
            calls,
        }) = request.pending.take()
        else {
            return Flow::Continue;
        };
        let first = Step::Calls(shared, root, calls);
        if let Some(flow) = self.wait_calls(&self.entries[at], first, ctx, request).await {
            return flow;
        }
        for entry in &self.entries[at + 1..] {
            let started = self.start_phase(request);
            let step = self.start_entry(entry, ctx, request);
            crate::chain::end_phase(request, started);
            if let Some(flow) = self.wait_calls(entry, step, ctx, request).await {
                return flow;
            }
        }
        Flow::Continue
    }

    /// A filter's calls sent and each answer handed to it, until it asks
    /// for no more; the flow when the request is answered.
    async fn wait_calls(
        &self,
        entry: &ChainEntry,
        mut step: Step,
        ctx: &mut RequestCtx<'_>,
        request: &mut WasmRequest,
    ) -> Option<Flow> {
        while let Step::Calls(shared, root, calls) = step {
            let mut more = Vec::new();
            for call in calls {
                let token = call.token;
                let answer = crate::calls::perform(call, &entry.filter.name).await;
                let started = self.start_phase(request);
                let answered = self.call_answered(entry, (&shared, root), token, answer, ctx, request);
                crate::chain::end_phase(request, started);
                match answered {
                    Step::Next => {}
                    Step::Calls(_, _, next) => more.extend(next),
                    Step::Answer(flow) => return Some(flow),
                }
            }
            step = match more.is_empty() {
                true => Step::Next,
                false => Step::Calls(shared, root, more),
            };
        }
        match step {
            Step::Answer(flow) => Some(flow),
            _ => None,
        }
    }

    /// The filter's HTTP context made and its request-headers callback run.
    fn start_entry(&self, entry: &ChainEntry, ctx: &mut RequestCtx<'_>, request: &mut WasmRequest) -> Step {
        let name = &entry.filter.name;
        let shared = match instance::for_thread(&entry.filter) {
            Ok(shared) => shared,
            Err(reason) => {
                report(name, &Fault::Trapped(reason), "access");
                return Step::Answer(internal_error());
            }
        };
        let mut guard = lock(&shared);
        let started = guard
            .root(&entry.configuration, request.deadline)
            .and_then(|root| Ok((root, guard.http_context(root, request.deadline)?)));
        for (root, period) in guard.take_tick_requests() {
            instance::start_ticks(&shared, root, period, self.budget);
        }
        let (root, id) = match started {
            Ok(started) => started,
            Err(fault) => {
                report(name, &fault, "access");
                return Step::Answer(internal_error());
            }
        };
        let end = !has_body(ctx);
        let exchange = guard.exchange();
        fill_request(exchange, ctx);
        exchange.ctx_shared = std::mem::take(&mut request.ctx_shared);
        let count = exchange.request_headers.len() as i32 + 4;
        let outcome = guard.on_request_headers(id, count, end, request.deadline);
        let step = after_callback(
            guard.exchange(),
            ctx,
            request,
            (&shared, root),
            outcome.as_ref().map(|_| ()),
        );
        drop(guard);
        request.contexts.push(Context {
            instance: shared,
            filter: name.clone(),
            id,
            held: Vec::new(),
            failed: outcome.is_err(),
        });
        if let Err(fault) = outcome {
            report(name, &fault, "access");
        }
        step
    }

    /// An HTTP call's answer handed to the filter that asked for it
    /// (through its root context; the SDKs find the HTTP context by token).
    fn call_answered(
        &self,
        entry: &ChainEntry,
        (shared, root): (&Shared, i32),
        token: u32,
        answer: CallResponse,
        ctx: &mut RequestCtx<'_>,
        request: &mut WasmRequest,
    ) -> Step {
        let mut guard = lock(shared);
        let exchange = guard.exchange();
        fill_request(exchange, ctx);
        exchange.ctx_shared = std::mem::take(&mut request.ctx_shared);
        exchange.call_response = answer;
        let outcome = guard.on_http_call_response(root, token, request.deadline);
        let step = after_callback(
            guard.exchange(),
            ctx,
            request,
            (shared, root),
            outcome.as_ref().map(|_| ()),
        );
        drop(guard);
        if let Err(fault) = outcome {
            report(&entry.filter.name, &fault, "access");
            if let Some(context) = request.contexts.last_mut() {
                context.failed = true;
            }
            return Step::Answer(internal_error());
        }
        step
    }
}

/// Collects what a request callback left: the request's changes put back,
/// then a local answer, calls to send, or nothing.
fn after_callback<E>(
    exchange: &mut Exchange,
    ctx: &mut RequestCtx<'_>,
    request: &mut WasmRequest,
    (shared, root): (&Shared, i32),
    outcome: Result<(), E>,
) -> Step {
    apply_request(exchange, ctx);
    request.ctx_shared = std::mem::take(&mut exchange.ctx_shared);
    let answer = exchange.local_response.take();
    let calls = std::mem::take(&mut exchange.pending_calls);
    match (outcome, answer) {
        (Err(_), _) => Step::Answer(internal_error()),
        (Ok(()), Some(answer)) => Step::Answer(Flow::Respond(answer)),
        (Ok(()), None) if !calls.is_empty() => Step::Calls(shared.clone(), root, calls),
        (Ok(()), None) => Step::Next,
    }
}

/// Fills what a request callback sees from the request.
fn fill_request(exchange: &mut Exchange, ctx: &mut RequestCtx<'_>) {
    exchange.clear();
    exchange.request_headers = std::mem::take(ctx.headers);
    exchange.method.push_str(ctx.method.as_str());
    exchange
        .path
        .push_str(ctx.uri.path_and_query().map_or("/", |p| p.as_str()));
    exchange.scheme = match ctx.protocol {
        strait_plugins::Protocol::Https | strait_plugins::Protocol::Grpcs => "https",
        _ => "http",
    };
    let properties = &mut exchange.properties;
    properties.route_id = ctx.route_id;
    properties.route_name.clear();
    properties.route_name.push_str(ctx.route_name.unwrap_or(""));
    properties.service_id = ctx.service_id;
    properties.protocol = ctx.protocol.name();
    properties.http_version = version_name(ctx.http_version);
    // Written out only if a filter reads it.
    properties.client_ip = Some(ctx.client_ip);
    properties.client_port = ctx.client_port;
    properties.server_port = ctx.server_port;
    properties.consumer_id = ctx.consumer.map(|c| c.id);
}

/// Puts back what the filter changed of the request.
fn apply_request(exchange: &mut Exchange, ctx: &mut RequestCtx<'_>) {
    *ctx.headers = std::mem::take(&mut exchange.request_headers);
    if exchange.method_changed {
        if let Ok(method) = http::Method::from_bytes(exchange.method.as_bytes()) {
            *ctx.method = method;
        }
    }
    if exchange.path_changed {
        let joined = std::mem::take(&mut exchange.path);
        if let Err(error) = ctx.set_joined_path_and_query(joined) {
            tracing::warn!(error = %error, "wasm filter set an invalid :path; kept the request's");
        }
    }
}

fn has_body(ctx: &RequestCtx<'_>) -> bool {
    ctx.body.as_ref().is_some_and(|b| !b.is_empty())
        || ctx.headers.contains_key(http::header::TRANSFER_ENCODING)
        || ctx
            .header("content-length")
            .is_some_and(|v| v.trim() != "0" && !v.trim().is_empty())
}
