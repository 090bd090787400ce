//! Kong's PDK for Lua code, the parts this version provides, over the
//! request a phase call works on ([`Call`]).
//!
//! The functions are made once per worker state; while a phase runs Lua
//! code, the request's parts it may read or change are moved into a
//! thread-local [`Call`] (the header map moved, not copied) and moved back
//! after, so no per-request closure, userdata or pointer is handed to Lua.
//! A name the PDK does not provide raises `kong.<name> is not available in
//! Strait` rather than reading as nil.

use std::cell::RefCell;
use std::net::IpAddr;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::Method;
use mlua::{Error, Lua, MultiValue, Table, Value};
use strait_plugins::observability::serialize::SerializeMode;
use strait_plugins::PluginResponse;

use crate::ctx::Which;

pub mod client;
mod log;
mod response;

pub(crate) use log::{current_phase, display_value, read_var};

/// The phase a call runs in (Kong's phase names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Rewrite,
    Access,
    HeaderFilter,
    BodyFilter,
    Log,
}

impl Phase {
    /// Kong's name of the phase, which is also the handler method's.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Rewrite => "rewrite",
            Phase::Access => "access",
            Phase::HeaderFilter => "header_filter",
            Phase::BodyFilter => "body_filter",
            Phase::Log => "log",
        }
    }
}

/// What one phase call of Lua code works on.
#[derive(Debug)]
pub(crate) struct Call {
    pub phase: Phase,
    pub plugin: &'static str,
    pub method: Method,
    pub scheme: &'static str,
    /// The request line in the response phases (in rewrite and access it
    /// is read in place: [`Call::line`]).
    pub host: String,
    pub path: String,
    pub query: String,
    pub http_version: f64,
    pub client_ip: IpAddr,
    /// The request's headers: in `access` the map the upstream gets (moved
    /// out of the request and back), later a copy to read.
    pub headers: HeaderMap,
    /// `Host` for the upstream (`kong.service.request.set_header("host")`).
    pub upstream_host: Option<HeaderValue>,
    /// The response status, from `header_filter` on.
    pub status: Option<u16>,
    /// In `access`: headers to add to the response; in `header_filter` the
    /// response's own map (moved out and back).
    pub response_headers: HeaderMap,
    /// `kong.response.exit`'s answer.
    pub exit: Option<PluginResponse>,
    /// `kong.log.set_serialize_value` calls, for the logging plugins.
    pub serialize: Vec<(String, serde_json::Value, SerializeMode)>,
    /// The request body, when the chain read it (`reads_request_body`).
    pub body: Option<Bytes>,
    /// A body `set_raw_body`/`set_body` gave the upstream request, with the
    /// content type `set_body` chose.
    pub body_set: Option<(Bytes, Option<HeaderValue>)>,
    /// In `body_filter`: `ngx.arg[1]` (the piece of the response body;
    /// `None` reads as nil and sends nothing) and `ngx.arg[2]` (the last
    /// piece).
    pub chunk: Option<Bytes>,
    pub eof: bool,
    /// In `body_filter`: what `get_raw_body` buffered of earlier pieces.
    pub buffered: Option<bytes::BytesMut>,
    /// From `header_filter` on: where the response came from
    /// (`kong.response.get_source`).
    pub source: Option<&'static str>,
    /// What the rest of the PDK reads and sets (client.rs).
    pub more: client::More,
}

impl Call {
    /// A call of `plugin` in `phase`: the request's parts the caller does
    /// not give are empty, and nothing is set yet.
    pub(crate) fn new(phase: Phase, plugin: &'static str, method: Method, client_ip: IpAddr) -> Call {
        Call {
            phase,
            plugin,
            method,
            scheme: "http",
            host: String::new(),
            path: String::new(),
            query: String::new(),
            http_version: 1.1,
            client_ip,
            headers: HeaderMap::new(),
            upstream_host: None,
            status: None,
            response_headers: HeaderMap::new(),
            exit: None,
            serialize: Vec::new(),
            body: None,
            body_set: None,
            chunk: None,
            eof: false,
            buffered: None,
            source: None,
            more: client::More::default(),
        }
    }

    /// A call of `plugin` in `phase`, in this thread's spare box when it
    /// has one (put back empty by [`Call::put_back`]): a phase call neither
    /// allocates its call nor copies it into place.
    pub(crate) fn take(phase: Phase, plugin: &'static str, method: Method, client_ip: IpAddr) -> Box<Call> {
        match SPARE.take() {
            Some(mut call) => {
                call.phase = phase;
                call.plugin = plugin;
                call.method = method;
                call.client_ip = client_ip;
                call
            }
            None => Box::new(Call::new(phase, plugin, method, client_ip)),
        }
    }

    /// Done with `call`: what it still holds is dropped and the box kept
    /// as this thread's spare, as [`Call::new`] makes a call.
    pub(crate) fn put_back(mut call: Box<Call>) {
        call.empty();
        SPARE.set(Some(call));
    }

    /// Back to what [`Call::new`] leaves (the phase, plugin, method and
    /// client address are set by the next [`Call::take`]).
    fn empty(&mut self) {
        self.scheme = "http";
        self.host.clear();
        self.path.clear();
        self.query.clear();
        self.http_version = 1.1;
        if self.headers.capacity() != 0 {
            self.headers = HeaderMap::new();
        }
        self.upstream_host = None;
        self.status = None;
        if self.response_headers.capacity() != 0 {
            self.response_headers = HeaderMap::new();
        }
        self.exit = None;
        self.serialize.clear();
        self.body = None;
        self.body_set = None;
        self.chunk = None;
        self.eof = false;
        self.buffered = None;
        self.source = None;
        self.more = client::More::default();
    }

    /// The request's host, path and query.
    pub(crate) fn line<R>(&self, read: impl FnOnce(&str, &str, &str) -> R) -> R {
        crate::scoped::line(|line| match line {
            Some((host, path, query)) => read(host, path, query),
            None => read(&self.host, &self.path, &self.query),
        })
    }
}

thread_local! {
    static CALL: RefCell<Option<Box<Call>>> = const { RefCell::new(None) };
    static SPARE: std::cell::Cell<Option<Box<Call>>> = const { std::cell::Cell::new(None) };
}

/// Runs `run` with `call` as the current call, and gives the call back.
pub(crate) fn with_current<R>(call: Box<Call>, run: impl FnOnce() -> R) -> (R, Box<Call>) {
    CALL.with(|cell| *cell.borrow_mut() = Some(call));
    let result = run();
    let call = CALL.with(|cell| cell.borrow_mut().take()).expect("the call set above");
    (result, call)
}

/// The current call for a fast path (fast.rs): `None` outside a call, or
/// when `run` declines, never an error.
pub(crate) fn fast_call<R>(run: impl FnOnce(&mut Call) -> Option<R>) -> Option<R> {
    CALL.with(|cell| cell.try_borrow_mut().ok()?.as_mut().and_then(|call| run(call)))
}

/// The current call, for a PDK function named `name`.
fn current<R>(name: &str, read: impl FnOnce(&mut Call) -> mlua::Result<R>) -> mlua::Result<R> {
    CALL.with(|cell| match cell.borrow_mut().as_mut() {
        Some(call) => read(call),
        None => Err(Error::runtime(format!(
            "{name} can only be called while a request is handled"
        ))),
    })
}

/// Kong's phase check: `function cannot be called in <phase> phase (only
/// in: <names>)`, the names in Kong's bit order.
fn only_in(call: &Call, allowed: &[Phase], names: &str) -> mlua::Result<()> {
    match allowed.contains(&call.phase) {
        true => Ok(()),
        false => Err(Error::runtime(format!(
            "function cannot be called in {} phase (only in: {names})",
            call.phase.name()
        ))),
    }
}

pub(crate) const REQUEST_PHASES: &[Phase] = &[
    Phase::Rewrite,
    Phase::Access,
    Phase::HeaderFilter,
    Phase::BodyFilter,
    Phase::Log,
];
const REQUEST_NAMES: &str =
    "rewrite, access, balancer, response, cluster_listener, header_filter, body_filter, log, error, admin_api";
const SERVICE_REQUEST: &[Phase] = &[Phase::Rewrite, Phase::Access];
const SERVICE_REQUEST_NAMES: &str = "rewrite, access, balancer";
const RESPONSE_READ: &[Phase] = &[Phase::HeaderFilter, Phase::BodyFilter, Phase::Log];
const RESPONSE_READ_NAMES: &str = "response, header_filter, body_filter, log, error, admin_api";
const RESPONSE_WRITE: &[Phase] = &[Phase::Rewrite, Phase::Access, Phase::HeaderFilter];
const RESPONSE_WRITE_NAMES: &str = "rewrite, access, balancer, response, header_filter, error, admin_api";
const EXIT: &[Phase] = &[Phase::Rewrite, Phase::Access];
const EXIT_NAMES: &str = "rewrite, access, balancer, response, error, admin_api";

/// The error `kong.response.exit` raises to end the phase's code; the
/// call's `exit` holds the answer.
pub(crate) const EXIT_SENTINEL: &str = "strait: kong.response.exit";

/// A header name given by Lua code: Kong's checks and messages.
fn header_name(value: &Value) -> mlua::Result<HeaderName> {
    match value {
        Value::String(name) => {
            let text = name.to_str()?;
            HeaderName::from_bytes(text.as_bytes())
                .map_err(|_| Error::runtime(format!("invalid header name \"{}\"", &*text)))
        }
        other => Err(Error::runtime(format!(
            "invalid header name \"{}\": got {}, expected string",
            display(other),
            other.type_name()
        ))),
    }
}

/// A header value given by Lua code (strings, numbers and booleans; an
/// array of them for several fields), as Kong normalises them: an empty
/// string becomes a single space.
fn header_values(name: &HeaderName, value: &Value) -> mlua::Result<Vec<HeaderValue>> {
    if let Value::String(text) = value {
        let bytes = text.as_bytes();
        if !bytes.is_empty() {
            if let Ok(value) = HeaderValue::from_bytes(&bytes) {
                return Ok(vec![value]);
            }
        }
    }
    let one = |value: &Value| -> mlua::Result<Option<String>> {
        Ok(match value {
            Value::String(text) => Some(text.to_str()?.to_string()),
            Value::Integer(n) => Some(n.to_string()),
            Value::Number(n) => Some(lua_number(*n)),
            Value::Boolean(b) => Some(b.to_string()),
            _ => None,
        })
    };
    let to_value = |text: String| {
        let text = if text.is_empty() { " ".to_string() } else { text };
        HeaderValue::from_str(&text)
            .map_err(|_| Error::runtime(format!("invalid header value for \"{name}\": {text:?}")))
    };
    if let Some(text) = one(value)? {
        return Ok(vec![to_value(text)?]);
    }
    if let Value::Table(array) = value {
        let mut values = Vec::new();
        for item in array.clone().sequence_values::<Value>() {
            let item = item?;
            match one(&item)? {
                Some(text) if matches!(item, Value::String(_)) => values.push(to_value(text)?),
                _ => {
                    return Err(Error::runtime(format!(
                        "invalid header value in array \"{name}\": got {}, expected string",
                        item.type_name()
                    )))
                }
            }
        }
        return Ok(values);
    }
    Err(Error::runtime(format!(
        "invalid header value for \"{name}\": got {}, expected array of string, string, number or boolean",
        value.type_name()
    )))
}

/// A number as Lua's `tostring` writes it (integers without a fraction).
fn lua_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// A value as `%q`-with-`tostring` shows it in Kong's messages.
fn display(value: &Value) -> String {
    match value {
        Value::Nil => "nil".into(),
        Value::Boolean(b) => b.to_string(),
        Value::Integer(n) => n.to_string(),
        Value::Number(n) => lua_number(*n),
        Value::String(s) => s.to_string_lossy(),
        other => other.type_name().into(),
    }
}

/// A map's values of `name` as Lua sees them: nil, the first value, and
/// every value for `get_headers`.
fn first_value(headers: &HeaderMap, name: &str) -> Option<String> {
    header_value(headers, name).map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// A header's first value, the name case-insensitive (Kong reads
/// `ngx.var.http_<name>`, where `_` matches `-`).
pub(crate) fn header_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h HeaderValue> {
    if let Some(value) = headers.get(name) {
        return Some(value);
    }
    match name.contains('_') {
        true => headers.get(name.replace('_', "-").as_str()),
        false => None,
    }
}

/// A Lua string made outside the memory limit's protected mode. With a
/// limit set, mlua wraps every allocation it makes in a protected call (a
/// C closure made and called each time); a PDK function's own result is
/// small and bounded by the request, so it is made directly, the limit
/// set back right after.
pub(crate) fn text(lua: &Lua, bytes: impl AsRef<[u8]>) -> mlua::Result<mlua::String> {
    let limit = lua.set_memory_limit(0).unwrap_or(0);
    let made = lua.create_string(bytes);
    if limit > 0 {
        let _ = lua.set_memory_limit(limit);
    }
    made
}

/// A header map as Kong's `get_headers` table: lower-case names, repeated
/// fields as arrays.
fn headers_table(lua: &Lua, headers: &HeaderMap, limit: usize) -> mlua::Result<(Table, Option<&'static str>)> {
    let table = lua.create_table()?;
    let mut count = 0;
    for name in headers.keys() {
        let values: Vec<String> = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        count += values.len();
        if count > limit {
            return Ok((table, Some("truncated")));
        }
        match values.len() {
            1 => table.set(name.as_str(), values.into_iter().next())?,
            _ => table.set(name.as_str(), values)?,
        }
    }
    Ok((table, None))
}

/// `get_headers`' optional limit: Kong's checks, default 100.
fn header_limit(max: Option<Value>) -> mlua::Result<usize> {
    match max {
        None | Some(Value::Nil) => Ok(100),
        Some(Value::Integer(n)) => limit_in_range(n as f64),
        Some(Value::Number(n)) => limit_in_range(n),
        Some(_) => Err(Error::runtime("max_headers must be a number")),
    }
}

fn limit_in_range(n: f64) -> mlua::Result<usize> {
    if n < 1.0 {
        return Err(Error::runtime("max_headers must be >= 1"));
    }
    if n > 1000.0 {
        return Err(Error::runtime("max_headers must be <= 1000"));
    }
    Ok(n as usize)
}

/// The first value of a query argument, as Kong returns it: `true` for a
/// key without `=`.
fn query_arg(lua: &Lua, query: &str, name: &str) -> mlua::Result<Value> {
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = match pair.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (pair, None),
        };
        if unescape(key) == name {
            return match value {
                Some(value) => Ok(Value::String(lua.create_string(unescape(value))?)),
                None => Ok(Value::Boolean(true)),
            };
        }
    }
    Ok(Value::Nil)
}

/// `%XX` escapes and `+` decoded (ngx's `unescape_uri` for query args).
fn unescape(text: &str) -> String {
    String::from_utf8_lossy(&crate::ngx::unescape(text.as_bytes(), true)).into_owned()
}

/// The `kong`, `ngx` and `kong.ctx` tables of a worker state.
pub(crate) struct Tables {
    pub kong: Table,
    pub ngx: Table,
}

/// Makes the `kong` and `ngx` tables of a worker state.
pub(crate) fn install(lua: &Lua) -> mlua::Result<Tables> {
    let kong = lua.create_table()?;
    let ctx = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.set(
        "__index",
        lua.create_function(|lua, (_, key): (Value, Value)| match &key {
            Value::String(name) if name.as_bytes().as_ref() == b"shared" => {
                crate::ctx::table(lua, Which::Shared).map(Value::Table)
            }
            Value::String(name) if name.as_bytes().as_ref() == b"plugin" => {
                crate::ctx::table(lua, Which::Plugin).map(Value::Table)
            }
            _ => Ok(Value::Nil),
        })?,
    )?;
    meta.set(
        "__newindex",
        lua.create_function(|_, (_, key): (Value, Value)| -> mlua::Result<()> {
            Err(Error::runtime(format!(
                "kong.ctx.{} cannot be set: use kong.ctx.shared or kong.ctx.plugin",
                display(&key)
            )))
        })?,
    )?;
    ctx.set_metatable(Some(meta))?;
    kong.set("ctx", ctx.clone())?;
    let request_table = request(lua)?;
    kong.set("request", request_table.clone())?;
    let service = lua.create_table()?;
    let upstream_table = service_request(lua)?;
    service.set("request", upstream_table.clone())?;
    service.set("response", response::service_response(lua)?)?;
    kong.set("service", strict(lua, service, "kong.service")?)?;
    let response_table = response::response(lua)?;
    kong.set("response", response_table.clone())?;
    crate::fast::install(lua, &request_table, &upstream_table, &response_table)?;
    kong.set("client", client(lua)?)?;
    kong.set("log", log::log(lua)?)?;
    kong.set("router", strict(lua, client::router(lua)?, "kong.router")?)?;
    kong.set("node", strict(lua, client::node(lua)?, "kong.node")?)?;
    kong.set("ip", strict(lua, client::ip(lua)?, "kong.ip")?)?;
    kong.set("table", client::table(lua)?)?;
    let kong = strict(lua, kong, "kong")?;
    let ngx = log::ngx(lua)?;
    crate::ngx::install(lua, &ngx)?;
    lua.load(include_str!("pdk.lua"))
        .set_name("=strait/pdk.lua")
        .call::<()>((kong.clone(), ngx.clone()))?;
    Ok(Tables { kong, ngx })
}

/// `table` with a metatable that names what it lacks.
fn strict(lua: &Lua, table: Table, prefix: &'static str) -> mlua::Result<Table> {
    let meta = lua.create_table()?;
    meta.set(
        "__index",
        lua.create_function(move |_, (_, key): (Value, Value)| -> mlua::Result<Value> {
            Err(Error::runtime(format!(
                "{prefix}.{} is not available in Strait",
                display(&key)
            )))
        })?,
    )?;
    table.set_metatable(Some(meta))?;
    Ok(table)
}

fn request(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    macro_rules! getter {
        ($name:literal, |$call:ident| $body:expr) => {
            t.set(
                $name,
                lua.create_function(|lua, ()| {
                    current(concat!("kong.request.", $name), |$call| {
                        only_in($call, REQUEST_PHASES, REQUEST_NAMES)?;
                        text(lua, $body)
                    })
                })?,
            )?;
        };
    }
    getter!("get_method", |call| call.method.as_str());
    getter!("get_scheme", |call| call.scheme);
    for (name, part) in [("get_host", 0), ("get_path", 1), ("get_raw_query", 2)] {
        let full = format!("kong.request.{name}");
        t.set(
            name,
            lua.create_function(move |lua, ()| {
                current(&full, |call| {
                    only_in(call, REQUEST_PHASES, REQUEST_NAMES)?;
                    call.line(|host, path, query| text(lua, [host, path, query][part]))
                })
            })?,
        )?;
    }
    t.set(
        "get_http_version",
        lua.create_function(|_, ()| {
            current("kong.request.get_http_version", |call| {
                only_in(call, REQUEST_PHASES, REQUEST_NAMES)?;
                Ok(call.http_version)
            })
        })?,
    )?;
    getter!("get_path_with_query", |call| call.line(|_, path, query| {
        match query.is_empty() {
            true => path.to_string(),
            false => format!("{path}?{query}"),
        }
    }));
    client::request(lua, &t)?;
    header_getters(
        lua,
        &t,
        "kong.request",
        |call| &call.headers,
        REQUEST_PHASES,
        REQUEST_NAMES,
    )?;
    t.set(
        "get_query_arg",
        lua.create_function(|lua, name: Value| {
            current("kong.request.get_query_arg", |call| {
                only_in(call, REQUEST_PHASES, REQUEST_NAMES)?;
                match &name {
                    Value::String(name) => {
                        let name = name.to_str()?;
                        call.line(|_, _, query| query_arg(lua, query, &name))
                    }
                    _ => Err(Error::runtime("query argument name must be a string")),
                }
            })
        })?,
    )?;
    t.set(
        "get_raw_body",
        lua.create_function(|lua, ()| {
            current("kong.request.get_raw_body", |call| {
                only_in(call, BODY_PHASES, BODY_NAMES)?;
                match &call.body {
                    Some(body) => Ok((Value::String(lua.create_string(&body[..])?), Value::Nil)),
                    None => Ok((Value::String(lua.create_string("")?), Value::Nil)),
                }
            })
        })?,
    )?;
    t.set(
        "get_body",
        lua.create_function(|lua, mime: Option<String>| {
            let (body, content_type) = current("kong.request.get_body", |call| {
                only_in(call, BODY_PHASES, BODY_NAMES)?;
                let content_type = first_value(&call.headers, "content-type").unwrap_or_default();
                Ok((call.body.clone().unwrap_or_default(), content_type))
            })?;
            let mime = mime.unwrap_or(content_type).to_ascii_lowercase();
            let mut values = MultiValue::new();
            if mime.starts_with("application/json") {
                match serde_json::from_slice::<serde_json::Value>(&body) {
                    Ok(json) => values.push_back(mlua::LuaSerdeExt::to_value(lua, &json)?),
                    Err(_) => {
                        values.push_back(Value::Nil);
                        values.push_back(Value::String(lua.create_string("invalid json body")?));
                    }
                }
            } else if mime.starts_with("application/x-www-form-urlencoded") {
                let table = lua.create_table()?;
                for (key, value) in strait_plugins::form::pairs(&String::from_utf8_lossy(&body)) {
                    table.set(key.as_ref(), value.as_ref())?;
                }
                values.push_back(Value::Table(table));
            } else {
                values.push_back(Value::Nil);
                values.push_back(Value::String(lua.create_string("missing content type")?));
            }
            values.push_back(Value::String(lua.create_string(&mime)?));
            Ok(values)
        })?,
    )?;
    strict(lua, t, "kong.request")
}

/// `get_header(name)` and `get_headers(max?)` over one of the call's maps:
/// the request's (`kong.request`) or the response's (`kong.response`,
/// `kong.service.response`), in `phases`.
fn header_getters(
    lua: &Lua,
    t: &Table,
    prefix: &'static str,
    map: fn(&Call) -> &HeaderMap,
    phases: &'static [Phase],
    names: &'static str,
) -> mlua::Result<()> {
    let full = format!("{prefix}.get_header");
    t.set(
        "get_header",
        lua.create_function(move |lua, name: Value| {
            current(&full, |call| {
                only_in(call, phases, names)?;
                match &name {
                    Value::String(name) => match header_value(map(call), &name.to_str()?) {
                        Some(value) => text(lua, value.as_bytes()).map(Some),
                        None => Ok(None),
                    },
                    _ => Err(Error::runtime("header name must be a string")),
                }
            })
        })?,
    )?;
    let full = format!("{prefix}.get_headers");
    t.set(
        "get_headers",
        lua.create_function(move |lua, max: Option<Value>| {
            let limit = header_limit(max)?;
            current(&full, |call| {
                only_in(call, phases, names)?;
                headers_table(lua, map(call), limit)
            })
        })?,
    )
}

const BODY_PHASES: &[Phase] = &[Phase::Rewrite, Phase::Access];
const BODY_NAMES: &str = "rewrite, access, response, error, admin_api";

/// Which map a family of header functions writes: the upstream request's
/// (`kong.service.request`) or the response's (`kong.response`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    Upstream,
    Response,
}

impl Target {
    fn prefix(self) -> &'static str {
        match self {
            Target::Upstream => "kong.service.request",
            Target::Response => "kong.response",
        }
    }

    pub(crate) fn check(self, call: &Call) -> mlua::Result<()> {
        match self {
            Target::Upstream => only_in(call, SERVICE_REQUEST, SERVICE_REQUEST_NAMES),
            Target::Response => only_in(call, RESPONSE_WRITE, RESPONSE_WRITE_NAMES),
        }
    }

    /// Sets (replacing) or adds `name`'s values; `None` clears the field.
    /// The upstream's `Host` is the request's upstream host.
    pub(crate) fn write(self, call: &mut Call, name: &HeaderName, values: Option<Vec<HeaderValue>>, replace: bool) {
        if self.is_host(name) {
            call.upstream_host = values.and_then(|values| values.into_iter().next());
            return;
        }
        match values {
            Some(mut values) if values.len() == 1 => {
                self.write_one(call, name, values.pop().expect("one value"), replace);
            }
            values => {
                let map = self.map(call);
                if replace || values.is_none() {
                    map.remove(name);
                }
                for value in values.into_iter().flatten() {
                    map.append(name.clone(), value);
                }
            }
        }
    }

    /// [`Target::write`] of one value (the common case: no list made).
    pub(crate) fn write_one(self, call: &mut Call, name: &HeaderName, value: HeaderValue, replace: bool) {
        if self.is_host(name) {
            call.upstream_host = Some(value);
            return;
        }
        let map = self.map(call);
        match replace {
            // One probe of the map: replaced and set at once.
            true => {
                map.insert(name.clone(), value);
            }
            false => {
                map.append(name.clone(), value);
            }
        }
    }

    /// The upstream's `Host`, kept beside the map.
    fn is_host(self, name: &HeaderName) -> bool {
        matches!(self, Target::Upstream) && name == http::header::HOST
    }

    fn map(self, call: &mut Call) -> &mut HeaderMap {
        match self {
            Target::Upstream => &mut call.headers,
            Target::Response => &mut call.response_headers,
        }
    }
}

/// `set_header`, `add_header` and `clear_header` of `target`, into `t`.
fn header_functions(lua: &Lua, t: &Table, target: Target) -> mlua::Result<()> {
    for (function, replace) in [("set_header", true), ("add_header", false)] {
        let full = format!("{}.{function}", target.prefix());
        t.set(
            function,
            lua.create_function(move |_, (name, value): (Value, Value)| {
                let name = header_name(&name)?;
                let values = header_values(&name, &value)?;
                current(&full, |call| {
                    target.check(call)?;
                    target.write(call, &name, Some(values), replace);
                    Ok(())
                })
            })?,
        )?;
    }
    let full = format!("{}.clear_header", target.prefix());
    t.set(
        "clear_header",
        lua.create_function(move |_, name: Value| {
            let name = header_name(&name)?;
            current(&full, |call| {
                target.check(call)?;
                target.write(call, &name, None, true);
                Ok(())
            })
        })?,
    )
}

fn service_request(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    header_functions(lua, &t, Target::Upstream)?;
    client::service_request(lua, &t)?;
    t.set(
        "set_headers",
        lua.create_function(|_, headers: Value| {
            let Value::Table(headers) = headers else {
                return Err(Error::runtime("headers must be a table"));
            };
            let mut parsed = Vec::new();
            for pair in headers.pairs::<Value, Value>() {
                let (name, value) = pair?;
                let name = header_name(&name)?;
                let values = header_values(&name, &value)?;
                parsed.push((name, values));
            }
            current("kong.service.request.set_headers", |call| {
                only_in(call, SERVICE_REQUEST, SERVICE_REQUEST_NAMES)?;
                for (name, values) in parsed {
                    Target::Upstream.write(call, &name, Some(values), true);
                }
                Ok(())
            })
        })?,
    )?;
    t.set(
        "set_raw_body",
        lua.create_function(|_, body: Value| {
            let Value::String(body) = body else {
                return Err(Error::runtime(format!(
                    "body must be a string, got {}",
                    body.type_name()
                )));
            };
            let bytes = Bytes::copy_from_slice(&body.as_bytes());
            current("kong.service.request.set_raw_body", |call| {
                only_in(call, SERVICE_REQUEST, SERVICE_REQUEST_NAMES)?;
                call.body_set = Some((bytes, None));
                Ok(())
            })
        })?,
    )?;
    t.set(
        "set_body",
        lua.create_function(|lua, (args, mime): (Value, Option<String>)| {
            let Value::Table(args) = args else {
                return Err(Error::runtime("args must be a table"));
            };
            let content_type = current("kong.service.request.set_body", |call| {
                only_in(call, SERVICE_REQUEST, SERVICE_REQUEST_NAMES)?;
                Ok(first_value(&call.headers, "content-type"))
            })?;
            let mime = mime.or(content_type).unwrap_or_default();
            let lower = mime.to_ascii_lowercase();
            let body = if lower.starts_with("application/json") {
                let json: serde_json::Value = mlua::LuaSerdeExt::from_value(lua, Value::Table(args))
                    .map_err(|e| Error::runtime(format!("args cannot be encoded as JSON: {e}")))?;
                json.to_string()
            } else if lower.starts_with("application/x-www-form-urlencoded") {
                let mut pairs = Vec::new();
                for pair in args.pairs::<String, Value>() {
                    let (key, value) = pair?;
                    match value {
                        Value::Table(list) => {
                            for item in list.sequence_values::<Value>() {
                                pairs.push((key.clone(), display(&item?)));
                            }
                        }
                        Value::Boolean(true) => pairs.push((key, String::new())),
                        other => pairs.push((key, display(&other))),
                    }
                }
                // Kong sorts the arguments by name.
                pairs.sort();
                pairs
                    .iter()
                    .map(|(k, v)| match v.is_empty() {
                        true => strait_plugins::form::encode(k).into_owned(),
                        false => format!(
                            "{}={}",
                            strait_plugins::form::encode(k),
                            strait_plugins::form::encode(v)
                        ),
                    })
                    .collect::<Vec<_>>()
                    .join("&")
            } else if mime.is_empty() {
                return Err(Error::runtime(
                    "content type was neither explicitly given as an argument or received as a header",
                ));
            } else {
                return Err(Error::runtime(format!("unsupported content type '{mime}'")));
            };
            let content_type = HeaderValue::from_str(&mime).ok();
            current("kong.service.request.set_body", |call| {
                call.body_set = Some((Bytes::from(body), content_type));
                Ok(())
            })
        })?,
    )?;
    strict(lua, t, "kong.service.request")
}

fn client(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "get_ip",
        lua.create_function(|_, ()| current("kong.client.get_ip", |call| Ok(call.client_ip.to_string())))?,
    )?;
    t.set(
        "get_forwarded_ip",
        lua.create_function(|_, ()| current("kong.client.get_forwarded_ip", |call| Ok(call.client_ip.to_string())))?,
    )?;
    client::client(lua, &t)?;
    strict(lua, t, "kong.client")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_arguments_read_as_kong_reads_them() {
        let lua = Lua::new();
        let arg = |query: &str, name: &str| query_arg(&lua, query, name).unwrap();
        assert!(matches!(arg("a=1&b", "b"), Value::Boolean(true)));
        assert_eq!(display(&arg("a=1&a=2", "a")), "1");
        assert_eq!(display(&arg("x=a%20b+c", "x")), "a b c");
        assert_eq!(display(&arg("x=", "x")), "");
        assert!(arg("x=1", "y").is_nil());
        assert_eq!(unescape("%zz%4"), "%zz%4");
    }

    #[test]
    fn header_values_are_normalised_as_kong_does() {
        let lua = Lua::new();
        let name = HeaderName::from_static("x-a");
        let values = |code: &str| header_values(&name, &lua.load(code).eval::<Value>().unwrap());
        assert_eq!(values("return ''").unwrap(), [" "]);
        assert_eq!(values("return 5").unwrap(), ["5"]);
        assert_eq!(values("return true").unwrap(), ["true"]);
        assert_eq!(values("return {'a', 'b'}").unwrap(), ["a", "b"]);
        assert_eq!(
            values("return {'a', 1}").unwrap_err().to_string(),
            "runtime error: invalid header value in array \"x-a\": got integer, expected string"
        );
        assert!(values("return nil").unwrap_err().to_string().contains(
            "invalid header value for \"x-a\": got nil, expected array of string, string, number or boolean"
        ));
        assert!(header_name(&Value::Nil)
            .unwrap_err()
            .to_string()
            .contains("invalid header name \"nil\": got nil, expected string"));
    }
}
