//! Kong's PDK as a plugin server calls it: a dotted name
//! (`kong.request.get_header`) and its arguments, served from the request's
//! own context on the worker that runs the request (no other thread, no
//! copy of the request). Names, argument rules and messages are Kong's;
//! a function this version does not serve answers
//! `kong.<name> is not available in Strait`, as the Lua PDK does.

use std::collections::HashMap;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use strait_plugins::observability::serialize::{SerializeMode, SerializeValues};
use strait_plugins::{PluginResponse, RequestCtx};

use crate::msgpack::{self, Value};

/// What a PDK call did.
#[derive(Debug)]
pub enum Outcome {
    /// Its result (`nil` for a setter).
    Value(Value),
    /// `kong.response.exit`/`error`: the request's answer; the event ends.
    Exit(PluginResponse),
}

/// `kong.ctx.shared` and `ngx.ctx` (`kong.nginx.get_ctx/set_ctx`) as the
/// plugin servers see them: values they set, kept in the request's store
/// for the plugins and phases after them.
#[derive(Debug, Default, Clone)]
pub struct SharedValues {
    pub shared: HashMap<String, Value>,
    pub ngx: HashMap<String, Value>,
}

impl SharedValues {
    fn map(&self, ngx: bool) -> &HashMap<String, Value> {
        match ngx {
            true => &self.ngx,
            false => &self.shared,
        }
    }
}

/// The node's id (`kong.node.get_id`), set at start-up.
static NODE_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets what `kong.node.get_id()` answers.
pub fn set_node(id: String) {
    let _ = NODE_ID.set(id);
}

type Result<T> = std::result::Result<T, String>;

/// What serves an event's PDK calls: a method's Kong name and arguments
/// to its outcome (an error is the PDK's `nil, err`).
pub type Dispatch<'a> = &'a mut (dyn FnMut(&str, &[Value]) -> Result<Outcome> + Send);

/// Runs PDK method `method` with `args` on `ctx`, for plugin `plugin`.
pub fn call(ctx: &mut RequestCtx<'_>, plugin: &str, method: &str, args: &[Value]) -> Result<Outcome> {
    let arg = |at: usize| args.get(at).unwrap_or(&Value::Nil);
    let text = |at: usize, what: &str| -> Result<String> {
        match arg(at) {
            Value::Str(text) => Ok(text.clone()),
            Value::Int(n) => Ok(n.to_string()),
            Value::Float(x) => Ok(x.to_string()),
            Value::Bin(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
            _ => Err(format!("{what} must be a string")),
        }
    };
    let value = |v: Value| Ok(Outcome::Value(v));
    let text_or_nil = |v: Option<&str>| value(v.map_or(Value::Nil, Value::str));
    match method {
        "kong.request.get_scheme" => value(Value::str(scheme(ctx))),
        "kong.request.get_host" | "kong.request.get_forwarded_host" => value(Value::str(ctx.host)),
        "kong.request.get_port" | "kong.request.get_forwarded_port" => value(Value::Int(i64::from(ctx.server_port))),
        "kong.request.get_forwarded_scheme" => value(Value::str(scheme(ctx))),
        "kong.request.get_http_version" => value(Value::Float(match ctx.http_version {
            http::Version::HTTP_10 => 1.0,
            http::Version::HTTP_2 => 2.0,
            http::Version::HTTP_3 => 3.0,
            _ => 1.1,
        })),
        "kong.request.get_method" => value(Value::str(ctx.method.as_str())),
        "kong.request.get_path" => value(Value::str(ctx.path())),
        "kong.request.get_raw_path" => value(Value::str(ctx.path())),
        "kong.request.get_path_with_query" => {
            let query = ctx.query();
            value(Value::Str(match query.is_empty() {
                true => ctx.path().to_string(),
                false => format!("{}?{query}", ctx.path()),
            }))
        }
        "kong.request.get_raw_query" => value(Value::str(ctx.query())),
        "kong.request.get_query_arg" => {
            let name = text(0, "query argument name")?;
            value(ctx.query_arg(&name).map_or(Value::Nil, |v| Value::Str(v.into_owned())))
        }
        "kong.request.get_query" => value(query_map(ctx.query())),
        "kong.request.get_header" => {
            let name = text(0, "header name")?;
            text_or_nil(header_value(ctx.headers, &name).and_then(|v| v.to_str().ok()))
        }
        "kong.request.get_headers" => value(headers_map(ctx.headers)),
        "kong.request.get_raw_body" => match &ctx.body {
            Some(body) => value(Value::Bin(body.to_vec())),
            None => {
                Err("kong.request.get_raw_body is not available in Strait for plugin servers in this version".into())
            }
        },
        "kong.service.request.set_header" | "kong.service.request.add_header" => {
            let (name, value_text) = (text(0, "header name")?, text(1, "header value")?);
            let name = header_name(&name)?;
            let header =
                HeaderValue::from_str(&value_text).map_err(|_| format!("invalid header value for \"{name}\""))?;
            if name == http::header::HOST {
                ctx.upstream_host = Some(header);
            } else if method.ends_with("set_header") {
                ctx.headers.insert(name, header);
            } else {
                ctx.headers.append(name, header);
            }
            value(Value::Nil)
        }
        "kong.service.request.clear_header" => {
            let name = header_name(&text(0, "header name")?)?;
            ctx.headers.remove(name);
            value(Value::Nil)
        }
        "kong.service.request.set_headers" => {
            let Value::Map(pairs) = arg(0) else {
                return Err("headers must be a table".into());
            };
            for (name, values) in pairs {
                let name = header_name(&name.to_string())?;
                ctx.headers.remove(&name);
                for item in list_of(values) {
                    let header = HeaderValue::from_str(&item.to_string())
                        .map_err(|_| format!("invalid header value for \"{name}\""))?;
                    ctx.headers.append(name.clone(), header);
                }
            }
            value(Value::Nil)
        }
        "kong.service.request.set_path" => {
            let path = text(0, "path")?;
            if !path.starts_with('/') {
                return Err("path must start with /".into());
            }
            let query = ctx.query().to_string();
            ctx.set_path_and_query(&path, &query).map_err(|e| e.to_string())?;
            value(Value::Nil)
        }
        "kong.service.request.set_raw_query" => {
            let query = text(0, "query")?;
            ctx.set_query(&query).map_err(|e| e.to_string())?;
            value(Value::Nil)
        }
        "kong.service.request.set_query" => {
            let Value::Map(pairs) = arg(0) else {
                return Err("args must be a table".into());
            };
            // Kong encodes the table with its keys sorted; a list repeats
            // its key, `true` is a bare key.
            let mut encoded: Vec<(String, Option<String>)> = Vec::new();
            for (name, values) in pairs {
                for item in list_of(values) {
                    match item {
                        Value::Bool(true) => encoded.push((name.to_string(), None)),
                        Value::Bool(false) | Value::Nil => {}
                        other => encoded.push((name.to_string(), Some(other.to_string()))),
                    }
                }
            }
            encoded.sort_by(|a, b| a.0.cmp(&b.0));
            let query = encoded
                .iter()
                .map(|(name, item)| match item {
                    Some(item) => strait_plugins::form::serialize([(name.as_str(), item.as_str())]),
                    None => strait_plugins::form::encode(name).into_owned(),
                })
                .collect::<Vec<_>>()
                .join("&");
            ctx.set_query(&query).map_err(|e| e.to_string())?;
            value(Value::Nil)
        }
        "kong.service.request.set_method" => {
            let name = text(0, "method")?;
            *ctx.method = http::Method::from_bytes(name.as_bytes()).map_err(|_| format!("invalid method: {name}"))?;
            value(Value::Nil)
        }
        "kong.service.request.set_raw_body" => {
            let body = match arg(0) {
                Value::Bin(bytes) => bytes.clone(),
                Value::Str(text) => text.clone().into_bytes(),
                _ => return Err("body must be a string".into()),
            };
            ctx.body = Some(body.into());
            value(Value::Nil)
        }
        "kong.response.exit" | "kong.response.error" => Ok(Outcome::Exit(exit(method, args)?)),
        "kong.response.set_header" | "kong.response.add_header" => {
            let (name, value_text) = (text(0, "header name")?, text(1, "header value")?);
            let name = header_name(&name)?;
            let header =
                HeaderValue::from_str(&value_text).map_err(|_| format!("invalid header value for \"{name}\""))?;
            ctx.response_headers.push(&name, &header);
            value(Value::Nil)
        }
        "kong.client.get_ip" | "kong.client.get_forwarded_ip" => value(Value::Str(ctx.client_ip.to_string())),
        "kong.client.get_port" | "kong.client.get_forwarded_port" => value(Value::Int(i64::from(ctx.client_port))),
        "kong.client.get_protocol" => value(Value::str(ctx.protocol.name())),
        "kong.client.get_consumer" => value(
            ctx.consumer
                .map(|c| msgpack::from_json(&serde_json::to_value(c).unwrap_or_default()))
                .unwrap_or(Value::Nil),
        ),
        "kong.client.get_credential" => value(match &ctx.credential {
            Some(credential) => Value::map([
                ("id", Value::Str(credential.id.to_string())),
                (
                    "consumer",
                    ctx.consumer
                        .map_or(Value::Nil, |c| Value::map([("id", Value::Str(c.id.to_string()))])),
                ),
            ]),
            None => Value::Nil,
        }),
        "kong.router.get_route" => value(entity(ctx.route_id.and_then(|id| ctx.directory.route(id)))),
        "kong.router.get_service" => value(entity(ctx.service_id.and_then(|id| ctx.directory.service(id)))),
        "kong.node.get_id" => value(NODE_ID.get().map_or(Value::Nil, |id| Value::str(id.as_str()))),
        "kong.ip.is_trusted" => value(Value::Bool(false)),
        "kong.ctx.shared.get" | "kong.nginx.get_ctx" => {
            let key = text(0, "key")?;
            let ngx = method == "kong.nginx.get_ctx";
            value(
                ctx.shared
                    .get::<SharedValues>()
                    .and_then(|values| values.map(ngx).get(&key).cloned())
                    .unwrap_or(Value::Nil),
            )
        }
        "kong.ctx.shared.set" | "kong.nginx.set_ctx" => {
            let key = text(0, "key")?;
            let item = arg(1).clone();
            if ctx.shared.get::<SharedValues>().is_none() {
                ctx.shared.insert(SharedValues::default());
            }
            if let Some(values) = ctx.shared.get_mut::<SharedValues>() {
                match method == "kong.nginx.set_ctx" {
                    true => values.ngx.insert(key, item),
                    false => values.shared.insert(key, item),
                };
            }
            value(Value::Nil)
        }
        "kong.nginx.get_var" => {
            let name = text(0, "variable name")?;
            value(nginx_var(ctx, &name).map_or(Value::Nil, Value::Str))
        }
        "kong.nginx.get_subsystem" => value(Value::str("http")),
        "kong.log.set_serialize_value" => {
            let key = text(0, "key")?;
            let mode = match arg(2).get("mode").and_then(Value::as_str) {
                None | Some("set") => SerializeMode::Set,
                Some("add") => SerializeMode::Add,
                Some("replace") => SerializeMode::Replace,
                Some(_) => return Err("mode must be 'set', 'add' or 'replace'".into()),
            };
            let entry = (key, msgpack::to_json(arg(1)), mode);
            match ctx.shared.get_mut::<SerializeValues>() {
                Some(values) => values.0.push(entry),
                None => ctx.shared.insert(SerializeValues(vec![entry])),
            }
            value(Value::Nil)
        }
        _ if method.starts_with("kong.log.") => {
            log(plugin, &method["kong.log.".len()..], args);
            value(Value::Nil)
        }
        other => Err(format!("{other} is not available in Strait")),
    }
}

fn scheme(ctx: &RequestCtx<'_>) -> &'static str {
    match ctx.protocol {
        strait_plugins::Protocol::Https | strait_plugins::Protocol::Grpcs => "https",
        _ => "http",
    }
}

/// A header by name as Kong reads it: any case, `_` for `-`.
fn header_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h HeaderValue> {
    headers.get(name).or_else(|| {
        name.contains('_')
            .then(|| headers.get(name.replace('_', "-")))
            .flatten()
    })
}

fn header_name(name: &str) -> Result<HeaderName> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("invalid header name \"{name}\""))
}

/// A value, or each of a list's items.
fn list_of(value: &Value) -> Vec<&Value> {
    match value {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    }
}

/// Request headers as the MsgPack PDKs receive them: each name (lower
/// case) with the list of its values.
fn headers_map(headers: &HeaderMap) -> Value {
    let mut pairs: Vec<(Value, Value)> = Vec::new();
    for name in headers.keys() {
        let values = headers
            .get_all(name)
            .iter()
            .map(|v| Value::Str(String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        pairs.push((Value::str(name.as_str()), Value::Array(values)));
    }
    Value::Map(pairs)
}

/// The query as a map of lists (a flag without `=` has an empty list).
fn query_map(query: &str) -> Value {
    let mut pairs: Vec<(Value, Value)> = Vec::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (name, item) = match part.split_once('=') {
            Some((name, item)) => (decode(name), Some(decode(item))),
            None => (decode(part), None),
        };
        let at = match pairs.iter().position(|(k, _)| k.as_str() == Some(&name)) {
            Some(at) => at,
            None => {
                pairs.push((Value::Str(name), Value::Array(Vec::new())));
                pairs.len() - 1
            }
        };
        if let (Value::Array(items), Some(item)) = (&mut pairs[at].1, item) {
            items.push(Value::Str(item));
        }
    }
    Value::Map(pairs)
}

fn decode(text: &str) -> String {
    strait_plugins::form::decode(text).into_owned()
}

fn entity<T: serde::Serialize>(entity: Option<&T>) -> Value {
    entity
        .and_then(|e| serde_json::to_value(e).ok())
        .map_or(Value::Nil, |json| msgpack::from_json(&json))
}

/// `kong.response.exit(status, body, headers)` or `kong.response.error(status,
/// message, headers)` as the request's answer: a table body is JSON.
fn exit(method: &str, args: &[Value]) -> Result<PluginResponse> {
    let status = args
        .first()
        .and_then(Value::as_i64)
        .filter(|s| (100..=599).contains(s))
        .ok_or_else(|| "code must be a number between 100 and 599".to_string())? as u16;
    let mut response = match (method, args.get(1)) {
        ("kong.response.error", Some(Value::Str(message))) => PluginResponse::message(status, message),
        ("kong.response.error", _) => PluginResponse::message(status, strait_plugins::kong_error_message(status)),
        (_, None | Some(Value::Nil)) => PluginResponse {
            status,
            body: bytes::Bytes::new(),
            headers: Vec::new(),
        },
        (_, Some(Value::Str(text))) => PluginResponse {
            status,
            body: text.clone().into(),
            headers: Vec::new(),
        },
        (_, Some(Value::Bin(bytes))) => PluginResponse {
            status,
            body: bytes.clone().into(),
            headers: Vec::new(),
        },
        (_, Some(table)) => PluginResponse {
            status,
            body: serde_json::to_vec(&msgpack::to_json(table)).unwrap_or_default().into(),
            headers: vec![("Content-Type".into(), "application/json; charset=utf-8".into())],
        },
    };
    if let Some(Value::Map(pairs)) = args.get(2) {
        for (name, values) in pairs {
            let name = name.to_string();
            response
                .headers
                .retain(|(existing, _)| !existing.eq_ignore_ascii_case(&name));
            for item in list_of(values) {
                response.headers.push((name.clone(), item.to_string()));
            }
        }
    }
    Ok(response)
}

/// The few nginx variables the PDKs' helpers read.
fn nginx_var(ctx: &RequestCtx<'_>, name: &str) -> Option<String> {
    Some(match name {
        "host" => ctx.host.to_string(),
        "scheme" => scheme(ctx).to_string(),
        "request_method" => ctx.method.as_str().to_string(),
        "uri" => ctx.path().to_string(),
        "args" | "query_string" => ctx.query().to_string(),
        "request_uri" => match ctx.query() {
            "" => ctx.path().to_string(),
            query => format!("{}?{query}", ctx.path()),
        },
        "remote_addr" | "realip_remote_addr" => ctx.client_ip.to_string(),
        "remote_port" => ctx.client_port.to_string(),
        "server_port" => ctx.server_port.to_string(),
        _ => {
            let header = name.strip_prefix("http_")?;
            return header_value(ctx.headers, header).and_then(|v| v.to_str().ok().map(str::to_string));
        }
    })
}

/// `kong.log.<level>(...)`: Kong's namespaced line, `[<plugin>] <args>`.
fn log(plugin: &str, level: &str, args: &[Value]) {
    let line = args.iter().map(ToString::to_string).collect::<Vec<_>>().join("");
    match level {
        "alert" | "crit" | "err" => tracing::error!(target: "strait::pluginserver", "[{plugin}] {line}"),
        "warn" => tracing::warn!(target: "strait::pluginserver", "[{plugin}] {line}"),
        "notice" | "info" => tracing::info!(target: "strait::pluginserver", "[{plugin}] {line}"),
        _ => tracing::debug!(target: "strait::pluginserver", "[{plugin}] {line}"),
    }
}

/// The step method Kong answers a PDK call with (`plugin.StepMultiMap` for
/// the map getters, ...); the PDKs treat them alike.
pub fn step_method(method: &str) -> &'static str {
    match method {
        "kong.client.get_credential" | "kong.client.authenticate" => "plugin.StepCredential",
        "kong.client.load_consumer" | "kong.client.get_consumer" => "plugin.StepConsumer",
        "kong.router.get_route" => "plugin.StepRoute",
        "kong.router.get_service" => "plugin.StepService",
        "kong.request.get_query"
        | "kong.request.get_headers"
        | "kong.response.get_headers"
        | "kong.service.response.get_headers" => "plugin.StepMultiMap",
        _ => "plugin.Step",
    }
}

/// The request as the log phase sees it, after the response: what the
/// request arrived with and what was answered, owned (the event runs after
/// the request is done, as Kong runs external plugins' `log` in a timer
/// with the request's data saved).
#[derive(Debug)]
pub struct LogView {
    pub scheme: &'static str,
    pub host: String,
    pub port: u16,
    pub request_uri: String,
    pub method: http::Method,
    pub http_version: http::Version,
    pub client_ip: std::net::IpAddr,
    pub request_headers: HeaderMap,
    pub response_headers: HeaderMap,
    pub status: u16,
    pub source: &'static str,
    pub consumer_id: Option<uuid::Uuid>,
    pub shared: SharedValues,
    /// Kong's log serializer's entry (`kong.log.serialize`).
    pub serialized: Option<serde_json::Value>,
}

impl LogView {
    fn path(&self) -> &str {
        self.request_uri.split('?').next().unwrap_or("/")
    }

    fn query(&self) -> &str {
        self.request_uri.split_once('?').map_or("", |(_, query)| query)
    }
}

/// The PDK in the log phase: the request's and the response's reads, the
/// shared values, logging and the serializer; setters raise Kong's phase
/// error.
pub fn call_log(view: &LogView, plugin: &str, method: &str, args: &[Value]) -> Result<Outcome> {
    let arg = |at: usize| match args.get(at) {
        Some(Value::Str(text)) => Ok(text.clone()),
        _ => Err(format!("{method}: the argument must be a string")),
    };
    let value = |v: Value| Ok(Outcome::Value(v));
    let text_or_nil = |v: Option<&str>| value(v.map_or(Value::Nil, Value::str));
    match method {
        "kong.request.get_scheme" | "kong.request.get_forwarded_scheme" => value(Value::str(view.scheme)),
        "kong.request.get_host" | "kong.request.get_forwarded_host" => value(Value::str(view.host.as_str())),
        "kong.request.get_port" | "kong.request.get_forwarded_port" => value(Value::Int(i64::from(view.port))),
        "kong.request.get_http_version" => value(Value::Float(match view.http_version {
            http::Version::HTTP_10 => 1.0,
            http::Version::HTTP_2 => 2.0,
            http::Version::HTTP_3 => 3.0,
            _ => 1.1,
        })),
        "kong.request.get_method" => value(Value::str(view.method.as_str())),
        "kong.request.get_path" | "kong.request.get_raw_path" => value(Value::str(view.path())),
        "kong.request.get_path_with_query" => value(Value::str(view.request_uri.as_str())),
        "kong.request.get_raw_query" => value(Value::str(view.query())),
        "kong.request.get_query" => value(query_map(view.query())),
        "kong.request.get_header" => {
            text_or_nil(header_value(&view.request_headers, &arg(0)?).and_then(|v| v.to_str().ok()))
        }
        "kong.request.get_headers" => value(headers_map(&view.request_headers)),
        "kong.response.get_status" | "kong.service.response.get_status" => value(Value::Int(i64::from(view.status))),
        "kong.response.get_header" | "kong.service.response.get_header" => {
            text_or_nil(header_value(&view.response_headers, &arg(0)?).and_then(|v| v.to_str().ok()))
        }
        "kong.response.get_headers" | "kong.service.response.get_headers" => value(headers_map(&view.response_headers)),
        "kong.response.get_source" => value(Value::str(view.source)),
        "kong.client.get_ip" | "kong.client.get_forwarded_ip" => value(Value::Str(view.client_ip.to_string())),
        "kong.client.get_protocol" => value(Value::str(view.scheme)),
        "kong.client.get_consumer" => value(
            view.consumer_id
                .map_or(Value::Nil, |id| Value::map([("id", Value::Str(id.to_string()))])),
        ),
        "kong.ctx.shared.get" | "kong.nginx.get_ctx" => value(
            view.shared
                .map(method == "kong.nginx.get_ctx")
                .get(&arg(0)?)
                .cloned()
                .unwrap_or(Value::Nil),
        ),
        "kong.log.serialize" => value(
            view.serialized
                .as_ref()
                .map_or(Value::Nil, |entry| Value::Str(entry.to_string())),
        ),
        "kong.node.get_id" => value(NODE_ID.get().map_or(Value::Nil, |id| Value::str(id.as_str()))),
        "kong.nginx.get_subsystem" => value(Value::str("http")),
        _ if method.starts_with("kong.log.") => {
            log(plugin, &method["kong.log.".len()..], args);
            value(Value::Nil)
        }
        _ if method.starts_with("kong.service.request.") || method.starts_with("kong.response.") => {
            Err(format!("function cannot be called in log phase ({method})"))
        }
        other => Err(format!("{other} is not available in Strait")),
    }
}
