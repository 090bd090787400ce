//! `pre-function` (Kong priority 1000000) and `post-function` (-1000): Lua
//! code sent in the plugin's config, one array of strings per phase, run
//! under Kong's `untrusted_lua` setting (worker.rs, sandbox.lua).
//!
//! This version runs the `rewrite` (on a global instance, as Kong does),
//! `access`, `header_filter`, `body_filter` and `log` arrays; a config with
//! `certificate` code is refused when written, with a message saying so,
//! rather than accepted and not run.

use std::sync::Arc;

use http::header::HeaderMap;
use http::Version;
use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;
use strait_plugins::observability::serialize::SerializeValues;
use strait_plugins::{
    BundledPlugin, Flow, LogRecord, Plugin, PluginError, PluginResponse, PluginScope, Protocol, RequestCtx,
    ResponseCtx, SharedStore,
};

use crate::pdk::client::More;
use crate::pdk::{Call, Phase};
use crate::scoped;
use crate::worker::{self, Code, Store};

const PHASES: [&str; 6] = [
    "certificate",
    "rewrite",
    "access",
    "header_filter",
    "body_filter",
    "log",
];

/// Phases whose code this version does not run yet.
const NOT_YET: [&str; 1] = ["certificate"];

pub(crate) const PRE_FUNCTION: BundledPlugin = BundledPlugin {
    name: "pre-function",
    priority: 1_000_000,
    schema: || schema(pre_syntax),
    build: |config, scope| build("pre-function", 1_000_000, config, scope),
};

pub(crate) const POST_FUNCTION: BundledPlugin = BundledPlugin {
    name: "post-function",
    priority: -1000,
    schema: || schema(post_syntax),
    build: |config, scope| build("post-function", -1000, config, scope),
};

fn schema(syntax: fn(&str) -> Result<(), String>) -> PluginSchema {
    PluginSchema {
        no_consumer: true,
        http_only: false,
        protocols_default: None,
        fill: |_| {},
        shorthands: &[],
        config: PHASES
            .iter()
            .map(|phase| {
                (
                    *phase,
                    Field::array(Field::string().required().check(syntax))
                        .required()
                        .default(json!([])),
                )
            })
            .collect(),
        check,
    }
}

/// Kong's `at_least_one_of` over the phase arrays, and this version's
/// refusal of the phases it does not run.
fn check(config: &Map<String, Value>) -> Result<(), String> {
    let filled = |phase: &str| {
        config
            .get(phase)
            .and_then(Value::as_array)
            .is_some_and(|code| !code.is_empty())
    };
    if !PHASES.iter().any(|phase| filled(phase)) {
        let names: Vec<String> = PHASES.iter().map(|phase| format!("'config.{phase}'")).collect();
        return Err(format!(
            "at least one of these fields must be non-empty: {}",
            names.join(", ")
        ));
    }
    if let Some(phase) = NOT_YET.iter().find(|phase| filled(phase)) {
        return Err(format!(
            "config.{phase}: Strait does not run {phase} code in pre-function or post-function yet (rewrite, access, header_filter, body_filter and log are supported)"
        ));
    }
    Ok(())
}

fn syntax_check(plugin: &str, source: &str) -> Result<(), String> {
    match worker::syntax_error(source) {
        Some(message) => Err(format!("error parsing {plugin}: {message}")),
        None => Ok(()),
    }
}

fn pre_syntax(source: &str) -> Result<(), String> {
    syntax_check("pre-function", source)
}

fn post_syntax(source: &str) -> Result<(), String> {
    syntax_check("post-function", source)
}

fn build(
    name: &'static str,
    priority: i32,
    config: &Map<String, Value>,
    _scope: PluginScope,
) -> Result<Arc<dyn Plugin>, PluginError> {
    let code = |phase: &str| -> Result<Vec<String>, PluginError> {
        match config.get(phase) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(String::from)
                        .ok_or_else(|| PluginError::InvalidConfig {
                            field: phase.to_string(),
                            message: "expected an array of strings".into(),
                        })
                })
                .collect(),
            Some(_) => Err(PluginError::InvalidConfig {
                field: phase.to_string(),
                message: "expected an array of strings".into(),
            }),
        }
    };
    let code = Code::new(
        name,
        [
            code("rewrite")?,
            code("access")?,
            code("header_filter")?,
            code("body_filter")?,
            code("log")?,
        ],
    );
    let reads_router = [&code.header_filter, &code.body_filter, &code.log]
        .iter()
        .any(|phase| phase.iter().any(|source| mentions_router(source)));
    Ok(Arc::new(Function {
        priority,
        code,
        reads_router,
    }))
}

/// One pre-function or post-function instance.
#[derive(Debug)]
pub(crate) struct Function {
    priority: i32,
    code: Code,
    /// Code of a later phase reads `kong.router`: access notes the route
    /// and service for it.
    reads_router: bool,
}

/// What the later phases' Lua code reads of the request (the request's
/// parts the response phases do not otherwise keep), noted in `access`.
#[derive(Debug, Clone)]
struct RequestLine {
    scheme: &'static str,
    host: String,
    path: String,
    query: String,
    http_version: f64,
    method: http::Method,
    client_ip: std::net::IpAddr,
    client_port: u16,
    server_port: u16,
    /// The request's headers, for `body_filter` code (the other response
    /// phases have the proxy's copy).
    headers: Option<HeaderMap>,
}

/// What `body_filter` code reads of the response head, noted by the
/// plugin's `header_filter`.
#[derive(Debug, Clone)]
struct ResponseHead {
    status: u16,
    headers: HeaderMap,
    source: &'static str,
}

/// Per request, each Lua plugin's `body_filter` state: what
/// `get_raw_body` buffered, and whether its code ended the body early
/// (`ngx.arg[2] = true`, `set_raw_body`).
#[derive(Debug, Default)]
struct BodyFilters(Vec<(&'static str, Option<bytes::BytesMut>, bool)>);

fn scheme_of(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Https | Protocol::Grpcs => "https",
        _ => "http",
    }
}

fn version_number(version: Version) -> f64 {
    match version {
        Version::HTTP_09 => 0.9,
        Version::HTTP_10 => 1.0,
        Version::HTTP_2 => 2.0,
        Version::HTTP_3 => 3.0,
        _ => 1.1,
    }
}

impl Function {
    fn later_phases(&self) -> bool {
        !self.code.header_filter.is_empty() || !self.code.body_filter.is_empty() || !self.code.log.is_empty()
    }
}

/// Notes what the later phases' Lua code reads of the request, once per
/// request, when a plugin has later phases (with the request headers when
/// one has a body filter).
pub(crate) fn note_request(ctx: &mut RequestCtx<'_>, later_phases: bool, body_filter: bool) {
    if !later_phases {
        return;
    }
    if let Some(line) = ctx.shared.get_mut::<RequestLine>() {
        if body_filter && line.headers.is_none() {
            line.headers = Some(ctx.headers.clone());
        }
        return;
    }
    ctx.shared.insert(RequestLine {
        scheme: scheme_of(ctx.protocol),
        host: ctx.host.to_string(),
        path: ctx.path().to_string(),
        query: ctx.query().to_string(),
        http_version: version_number(ctx.http_version),
        method: ctx.method.clone(),
        client_ip: ctx.client_ip,
        client_port: ctx.client_port,
        server_port: ctx.server_port,
        headers: body_filter.then(|| ctx.headers.clone()),
    });
}

/// The route and service as `kong.router` returns them in the response
/// phases (which have no directory), noted in access by a plugin whose
/// code reads them.
#[derive(Debug, Clone)]
struct RouterNote {
    route: Option<serde_json::Value>,
    service: Option<serde_json::Value>,
}

pub(crate) fn note_router(ctx: &mut RequestCtx<'_>) {
    if ctx.shared.get::<RouterNote>().is_some() {
        return;
    }
    let directory = ctx.directory;
    let route = ctx
        .route_id
        .and_then(|id| directory.route(id))
        .and_then(|r| serde_json::to_value(r).ok());
    let service = ctx
        .service_id
        .and_then(|id| directory.service(id))
        .and_then(|s| serde_json::to_value(s).ok());
    ctx.shared.insert(RouterNote { route, service });
}

/// Whether Lua source reads the route or service (`kong.router`).
pub(crate) fn mentions_router(source: &str) -> bool {
    source.contains("kong.router")
}

/// The access (or rewrite) phase's call: the request's headers moved in.
pub(crate) fn access_call(ctx: &mut RequestCtx<'_>, plugin: &'static str, phase: Phase) -> Box<Call> {
    // The request line is read in place while the call runs (scoped.rs).
    let mut call = Call::take(phase, plugin, ctx.method.clone(), ctx.client_ip);
    call.scheme = scheme_of(ctx.protocol);
    call.http_version = version_number(ctx.http_version);
    call.body = ctx.body.clone();
    call.headers = std::mem::take(ctx.headers);
    let more = &mut call.more;
    more.client_port = ctx.client_port;
    more.server_port = ctx.server_port;
    more.protocol = ctx.protocol.name();
    more.route_id = ctx.route_id;
    more.service_id = ctx.service_id;
    more.consumer_id = ctx.consumer.map(|c| c.id);
    more.credential = ctx.credential.as_ref().map(|c| (c.id, c.plugin));
    call
}

/// What a call set for the logging plugins, into the request's store.
pub(crate) fn keep_serialize_values(shared: &mut SharedStore, call: &mut Call) {
    if call.serialize.is_empty() {
        return;
    }
    let edits = std::mem::take(&mut call.serialize);
    match shared.get_mut::<SerializeValues>() {
        Some(values) => values.0.extend(edits),
        None => shared.insert(SerializeValues(edits)),
    }
}

/// The access phase's call back into the request, and what it decided:
/// `kong.response.exit`'s answer, or Kong's 500 for an error.
pub(crate) fn finish_access(
    ctx: &mut RequestCtx<'_>,
    plugin: &'static str,
    result: Result<(), String>,
    mut call: Box<Call>,
) -> Flow {
    let phase = call.phase;
    keep_serialize_values(&mut ctx.shared, &mut call);
    *ctx.headers = std::mem::take(&mut call.headers);
    if let Some((body, content_type)) = call.body_set.take() {
        ctx.body = Some(body);
        if let Some(content_type) = content_type {
            ctx.headers.insert(http::header::CONTENT_TYPE, content_type);
        }
    }
    if call.upstream_host.is_some() {
        ctx.upstream_host = call.upstream_host.take();
    }
    apply_more(ctx, plugin, &mut call.more);
    for (name, value) in &call.response_headers {
        ctx.response_headers.push(name, value);
    }
    let exit = call.exit.take();
    Call::put_back(call);
    match (exit, result) {
        (Some(exit), _) => Flow::Respond(exit),
        (None, Ok(())) => Flow::Continue,
        (None, Err(error)) => {
            failed(plugin, phase, &error);
            Flow::Respond(PluginResponse::message(500, "An unexpected error occurred"))
        }
    }
}

/// What `kong.client.authenticate` and the request-line setters asked.
fn apply_more(ctx: &mut RequestCtx<'_>, plugin: &'static str, more: &mut More) {
    if let Some(method) = more.upstream_method.take() {
        *ctx.method = method;
    }
    if more.upstream_path.is_some() || more.upstream_query.is_some() {
        let path = more.upstream_path.take().unwrap_or_else(|| ctx.path().to_string());
        let query = more.upstream_query.take().unwrap_or_else(|| ctx.query().to_string());
        if let Err(error) = ctx.set_path_and_query(&path, &query) {
            tracing::warn!(target: "strait::lua", "the upstream path or query was not valid: {error}");
        }
    }
    if let Some((consumer, credential)) = more.authenticate.take() {
        let directory = ctx.directory;
        let consumer = consumer.and_then(|id| directory.consumer(id));
        let credential =
            credential.map(|(id, identifier)| strait_plugins::AuthenticatedCredential::new(id, &identifier, plugin));
        strait_plugins::auth::set_consumer(ctx, consumer, credential);
    }
}

/// A later phase's call: what access noted, the request's headers as the
/// response phases keep them (`request`; in `body_filter`, the copy
/// access noted).
pub(crate) fn later_call(
    plugin: &'static str,
    phase: Phase,
    shared: &SharedStore,
    request: Option<&strait_plugins::RequestSummary>,
) -> Box<Call> {
    let line = shared.get::<RequestLine>();
    let router = shared.get::<RouterNote>();
    let more = More {
        client_port: line.map_or(0, |l| l.client_port),
        server_port: line.map_or(0, |l| l.server_port),
        protocol: request.map_or("http", |r| r.protocol.name()),
        route_id: request.and_then(|r| r.route_id),
        service_id: request.and_then(|r| r.service_id),
        consumer_id: request.and_then(|r| r.consumer_id),
        credential: request.and_then(|r| r.credential.as_ref().map(|c| (c.id, c.plugin))),
        route: router.and_then(|r| r.route.clone()),
        service: router.and_then(|r| r.service.clone()),
        ..More::default()
    };
    let headers = match request {
        Some(request) => request.request_headers.clone().unwrap_or_default(),
        None => line.and_then(|l| l.headers.clone()).unwrap_or_default(),
    };
    let method = request.map_or_else(
        || line.map_or(http::Method::GET, |l| l.method.clone()),
        |r| r.method.clone(),
    );
    let client_ip = request.map_or_else(
        || line.map_or(std::net::IpAddr::from([0, 0, 0, 0]), |l| l.client_ip),
        |r| r.client_ip,
    );
    let mut call = Call::take(phase, plugin, method, client_ip);
    call.scheme = match (line, request) {
        (Some(l), _) => l.scheme,
        (None, Some(r)) => scheme_of(r.protocol),
        (None, None) => "http",
    };
    if let Some(line) = line {
        call.host.push_str(&line.host);
        call.path.push_str(&line.path);
        call.query.push_str(&line.query);
        call.http_version = line.http_version;
    }
    call.headers = headers;
    call.more = more;
    call
}

/// A Lua plugin's `header_filter` call on `ctx`, through `run`; notes
/// the response head for the plugin's body filter when it has one.
pub(crate) fn header_filter(
    plugin: &'static str,
    ctx: &mut ResponseCtx<'_>,
    code: bool,
    body_filter: bool,
    run: impl FnOnce(Store<'_>, Box<Call>) -> (Result<(), String>, Box<Call>),
) {
    if code {
        let mut call = later_call(plugin, Phase::HeaderFilter, ctx.shared, Some(ctx.request));
        let status = ctx.status.as_u16();
        call.status = Some(status);
        call.source = Some(ctx.source.name());
        call.response_headers = std::mem::take(ctx.headers);
        let (result, mut call) = run(Store::Write(ctx.shared), call);
        keep_serialize_values(ctx.shared, &mut call);
        *ctx.headers = std::mem::take(&mut call.response_headers);
        if let Some(changed) = call.status.filter(|s| *s != status) {
            if let Ok(changed) = http::StatusCode::from_u16(changed) {
                *ctx.status = changed;
            }
        }
        Call::put_back(call);
        if let Err(error) = result {
            failed(plugin, Phase::HeaderFilter, &error);
        }
    }
    if body_filter {
        // Kong's body filters change the length: the proxy drops
        // Content-Length for a chain that filters bodies.
        ctx.shared.insert(ResponseHead {
            status: ctx.status.as_u16(),
            headers: ctx.headers.clone(),
            source: ctx.source.name(),
        });
    }
}

/// A Lua plugin's `body_filter` call on one piece of the body, through
/// `run`: `ngx.arg[1]`/`[2]` in and out, its buffer kept between pieces.
/// An error is logged and leaves the piece as it was.
pub(crate) fn body_filter(
    plugin: &'static str,
    shared: &mut SharedStore,
    chunk: &mut strait_plugins::BodyChunk,
    run: impl FnOnce(Store<'_>, Box<Call>) -> (Result<(), String>, Box<Call>),
) {
    let filters = match shared.get_mut::<BodyFilters>() {
        Some(filters) => filters,
        None => {
            shared.insert(BodyFilters::default());
            shared.get_mut::<BodyFilters>().expect("inserted above")
        }
    };
    let at = match filters.0.iter().position(|(name, _, _)| *name == plugin) {
        Some(at) => at,
        None => {
            filters.0.push((plugin, None, false));
            filters.0.len() - 1
        }
    };
    if filters.0[at].2 {
        // The code ended the body on an earlier piece.
        chunk.data = bytes::Bytes::new();
        return;
    }
    let buffered = filters.0[at].1.take();
    let mut call = later_call(plugin, Phase::BodyFilter, shared, None);
    if let Some(head) = shared.get::<ResponseHead>() {
        call.status = Some(head.status);
        call.response_headers = head.headers.clone();
        call.source = Some(head.source);
    }
    call.chunk = Some(chunk.data.clone());
    call.eof = chunk.end;
    call.buffered = buffered;
    let (result, mut call) = run(Store::Write(shared), call);
    if let Some(filters) = shared.get_mut::<BodyFilters>() {
        filters.0[at].1 = call.buffered.take();
        filters.0[at].2 = call.eof && !chunk.end;
    }
    match result {
        Ok(()) => chunk.data = call.chunk.take().unwrap_or_default(),
        Err(error) => failed(plugin, Phase::BodyFilter, &error),
    }
    Call::put_back(call);
}

/// Whether Lua source reads the request body through the PDK.
pub(crate) fn mentions_body(source: &str) -> bool {
    source.contains("get_raw_body") || source.contains("get_body")
}

/// A failed phase call: an error line naming the plugin (Kong's
/// namespaced log) and the phase.
pub(crate) fn failed(plugin: &str, phase: Phase, error: &str) {
    tracing::error!(target: "strait::lua", "[{plugin}] {} phase: {error}", phase.name());
}

impl Plugin for Function {
    fn name(&self) -> &'static str {
        self.code.plugin
    }

    fn priority(&self) -> i32 {
        self.priority
    }

    fn rewrites(&self) -> bool {
        !self.code.rewrite.is_empty()
    }

    /// Runs for a global instance only, as Kong runs rewrite handlers.
    fn rewrite(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        if self.code.rewrite.is_empty() {
            return Flow::Continue;
        }
        let call = access_call(ctx, self.code.plugin, Phase::Rewrite);
        let (result, call) = scoped::with_request(ctx, |shared| {
            worker::run(&self.code, Phase::Rewrite, Store::Write(shared), call)
        });
        finish_access(ctx, self.code.plugin, result, call)
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        note_request(ctx, self.later_phases(), !self.code.body_filter.is_empty());
        if self.reads_router {
            note_router(ctx);
        }
        if self.code.access.is_empty() {
            return Flow::Continue;
        }
        let call = access_call(ctx, self.code.plugin, Phase::Access);
        let (result, call) = scoped::with_request(ctx, |shared| {
            worker::run(&self.code, Phase::Access, Store::Write(shared), call)
        });
        finish_access(ctx, self.code.plugin, result, call)
    }

    /// Code that reads the request body (`get_raw_body`, `get_body`) has
    /// it read before the access phase.
    fn reads_request_body(&self) -> bool {
        self.code.access.iter().any(|code| mentions_body(code))
    }

    fn filters_headers(&self) -> bool {
        !self.code.header_filter.is_empty() || !self.code.body_filter.is_empty()
    }

    fn reads_request_headers_in_response(&self) -> bool {
        self.later_phases()
    }

    fn header_filter(&self, ctx: &mut ResponseCtx<'_>) {
        header_filter(
            self.code.plugin,
            ctx,
            !self.code.header_filter.is_empty(),
            !self.code.body_filter.is_empty(),
            |store, call| worker::run(&self.code, Phase::HeaderFilter, store, call),
        );
    }

    fn filters_body(&self) -> bool {
        !self.code.body_filter.is_empty()
    }

    fn body_filter(&self, shared: &mut SharedStore, chunk: &mut strait_plugins::BodyChunk) {
        body_filter(self.code.plugin, shared, chunk, |store, call| {
            worker::run(&self.code, Phase::BodyFilter, store, call)
        });
    }

    fn logs(&self) -> bool {
        !self.code.log.is_empty()
    }

    fn serializes(&self) -> bool {
        !self.code.log.is_empty()
    }

    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        if self.code.log.is_empty() {
            return;
        }
        let mut call = later_call(self.code.plugin, Phase::Log, shared, Some(record.request));
        call.status = Some(record.status);
        call.source = Some(record.source.name());
        if let Some(details) = &record.details {
            call.response_headers = details.response_headers.clone();
        }
        let (result, call) = worker::run(&self.code, Phase::Log, Store::Read(shared), call);
        Call::put_back(call);
        if let Err(error) = result {
            failed(self.code.plugin, Phase::Log, &error);
        }
    }
}
