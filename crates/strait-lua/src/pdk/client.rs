//! The PDK beyond requests and responses: `kong.client` (who is calling),
//! `kong.router`, `kong.node`, `kong.ip`, `kong.table`, `kong.cache`,
//! `kong.response.error`, and the `kong.request`/`kong.service.request`
//! members that read or change the request line.

use std::sync::OnceLock;

use http::Method;
use mlua::{Error, Lua, Table, Value};
use serde_json::Value as Json;
use uuid::Uuid;

use super::{current, display, only_in, Phase, REQUEST_NAMES, REQUEST_PHASES, SERVICE_REQUEST, SERVICE_REQUEST_NAMES};
use crate::scoped;

/// What a call reads of the request beyond its line and headers, and what
/// it asks to change.
#[derive(Debug, Default)]
pub(crate) struct More {
    pub client_port: u16,
    pub server_port: u16,
    /// `http`, `https`, `grpc` or `grpcs`.
    pub protocol: &'static str,
    pub route_id: Option<Uuid>,
    pub service_id: Option<Uuid>,
    /// The authenticated consumer: its id (its entity read through the
    /// directory in rewrite/access).
    pub consumer_id: Option<Uuid>,
    /// The authenticated credential: id and the plugin that accepted it.
    pub credential: Option<(Uuid, &'static str)>,
    /// `kong.router.get_route/get_service` in the response phases: what
    /// access noted (functions.rs).
    pub route: Option<Json>,
    pub service: Option<Json>,
    /// `kong.client.authenticate(consumer, credential)`.
    pub authenticate: Option<Authenticated>,
    /// `kong.service.request.set_path/set_raw_query/set_query`: the
    /// upstream path and query (`None`: unchanged).
    pub upstream_path: Option<String>,
    pub upstream_query: Option<String>,
    /// `kong.service.request.set_method`.
    pub upstream_method: Option<Method>,
}

/// `kong.client.authenticate`'s consumer id and credential (id and the
/// identifier sent as `X-Credential-Identifier`).
pub(crate) type Authenticated = (Option<Uuid>, Option<(Uuid, String)>);

/// The node's id and host name (`kong.node`), set at start-up.
static NODE: OnceLock<(String, String)> = OnceLock::new();

/// Sets what `kong.node.get_id()` and `get_hostname()` answer.
pub fn set_node(id: String, hostname: String) {
    let _ = NODE.set((id, hostname));
}

fn node_identity() -> (String, String) {
    NODE.get().cloned().unwrap_or_else(|| {
        // A node that did not say (tests): one id for the process.
        static FALLBACK: OnceLock<String> = OnceLock::new();
        let id = FALLBACK.get_or_init(|| Uuid::new_v4().to_string()).clone();
        (id, "localhost".into())
    })
}

/// The node's host name (`ngx.var.hostname`).
pub(crate) fn hostname() -> String {
    node_identity().1
}

fn to_lua(lua: &Lua, json: &Json) -> mlua::Result<Value> {
    let options = mlua::SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false);
    mlua::LuaSerdeExt::to_value_with(lua, json, options)
}

/// An id given as a string (or a table with `id`), as Kong's functions
/// take them.
fn uuid_of(value: &Value, what: &str) -> mlua::Result<Uuid> {
    let text = match value {
        Value::String(text) => text.to_str()?.to_string(),
        Value::Table(table) => table
            .get::<String>("id")
            .map_err(|_| Error::runtime(format!("{what} must have an id")))?,
        _ => return Err(Error::runtime(format!("{what} must be a table or a string"))),
    };
    Uuid::parse_str(&text).map_err(|_| Error::runtime(format!("{what} id must be a valid UUID")))
}

pub(super) fn client(lua: &Lua, t: &Table) -> mlua::Result<()> {
    t.set(
        "get_port",
        lua.create_function(|_, ()| current("kong.client.get_port", |call| Ok(call.more.client_port)))?,
    )?;
    t.set(
        "get_forwarded_port",
        lua.create_function(|_, ()| current("kong.client.get_forwarded_port", |call| Ok(call.more.client_port)))?,
    )?;
    t.set(
        "get_protocol",
        lua.create_function(|_, ()| current("kong.client.get_protocol", |call| Ok(call.more.protocol)))?,
    )?;
    t.set(
        "get_consumer",
        lua.create_function(|lua, ()| {
            let id = current("kong.client.get_consumer", |call| Ok(call.more.consumer_id))?;
            let Some(id) = id else { return Ok(Value::Nil) };
            let found = scoped::directory(|directory| {
                directory
                    .and_then(|d| d.consumer(id))
                    .map(|consumer| serde_json::to_value(consumer).unwrap_or(Json::Null))
            });
            match found {
                Some(json) => to_lua(lua, &json),
                // The response phases: the id the request was identified by.
                None => to_lua(lua, &serde_json::json!({ "id": id.to_string() })),
            }
        })?,
    )?;
    t.set(
        "get_credential",
        lua.create_function(|lua, ()| {
            let credential = current("kong.client.get_credential", |call| {
                Ok(call
                    .more
                    .credential
                    .map(|(id, plugin)| (id, plugin, call.more.consumer_id)))
            })?;
            match credential {
                None => Ok(Value::Nil),
                Some((id, plugin, consumer)) => {
                    let mut json = serde_json::json!({ "id": id.to_string(), "plugin": plugin });
                    if let Some(consumer) = consumer {
                        json["consumer"] = serde_json::json!({ "id": consumer.to_string() });
                    }
                    to_lua(lua, &json)
                }
            }
        })?,
    )?;
    t.set(
        "load_consumer",
        lua.create_function(|lua, (key, by_username): (Value, Option<bool>)| {
            let Value::String(key) = key else {
                return Err(Error::runtime("consumer_id must be a string"));
            };
            let key = key.to_str()?.to_string();
            let by_username = by_username.unwrap_or(false);
            if !by_username && Uuid::parse_str(&key).is_err() {
                return Err(Error::runtime("consumer_id must be a valid UUID"));
            }
            current("kong.client.load_consumer", |call| only_in(call, LOOKUP, LOOKUP_NAMES))?;
            let found = scoped::directory(|directory| {
                let directory = directory?;
                let consumer = match Uuid::parse_str(&key) {
                    Ok(id) => directory.consumer(id),
                    Err(_) => None,
                };
                let consumer = consumer.or_else(|| {
                    by_username
                        .then(|| directory.consumer_by_id_or_username(&key))
                        .flatten()
                        .filter(|c| c.username.as_deref() == Some(key.as_str()) || c.id.to_string() == key)
                });
                consumer.map(|c| serde_json::to_value(c).unwrap_or(Json::Null))
            });
            match found {
                Some(json) => Ok((to_lua(lua, &json)?, Value::Nil)),
                None => Ok((Value::Nil, Value::Nil)),
            }
        })?,
    )?;
    t.set(
        "authenticate",
        lua.create_function(|_, (consumer, credential): (Value, Value)| {
            if consumer.is_nil() && credential.is_nil() {
                return Err(Error::runtime("either credential or consumer must be provided"));
            }
            let consumer = match &consumer {
                Value::Nil => None,
                Value::Table(_) => Some(uuid_of(&consumer, "consumer")?),
                _ => return Err(Error::runtime("consumer must be a table or nil")),
            };
            let credential = match &credential {
                Value::Nil => None,
                Value::Table(table) => {
                    let id = uuid_of(&credential, "credential")?;
                    let identifier = ["key", "username", "id"]
                        .iter()
                        .find_map(|field| table.get::<String>(*field).ok())
                        .unwrap_or_else(|| id.to_string());
                    Some((id, identifier))
                }
                _ => return Err(Error::runtime("credential must be a table or nil")),
            };
            if let Some(id) = consumer {
                let known = scoped::directory(|directory| directory.map(|d| d.consumer(id).is_some()));
                if known == Some(false) {
                    return Err(Error::runtime(format!("consumer {id} does not exist")));
                }
            }
            current("kong.client.authenticate", |call| {
                only_in(call, LOOKUP, LOOKUP_NAMES)?;
                call.more.consumer_id = consumer;
                call.more.credential = credential.as_ref().map(|(id, _)| (*id, call.plugin));
                call.more.authenticate = Some((consumer, credential));
                Ok(())
            })
        })?,
    )?;
    Ok(())
}

/// Where the directory can be read: the phases before the response.
const LOOKUP: &[Phase] = &[Phase::Rewrite, Phase::Access];
const LOOKUP_NAMES: &str = "access";

pub(super) fn router(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for (name, service) in [("get_route", false), ("get_service", true)] {
        let full = format!("kong.router.{name}");
        t.set(
            name,
            lua.create_function(move |lua, ()| {
                let (id, noted) = current(&full, |call| {
                    let (id, noted) = match service {
                        false => (call.more.route_id, call.more.route.clone()),
                        true => (call.more.service_id, call.more.service.clone()),
                    };
                    Ok((id, noted))
                })?;
                if let Some(json) = noted {
                    return to_lua(lua, &json);
                }
                let Some(id) = id else { return Ok(Value::Nil) };
                let json = scoped::directory(|directory| {
                    let directory = directory?;
                    match service {
                        false => directory.route(id).map(serde_json::to_value),
                        true => directory.service(id).map(serde_json::to_value),
                    }
                    .and_then(Result::ok)
                });
                match json {
                    Some(json) => to_lua(lua, &json),
                    None => Ok(Value::Nil),
                }
            })?,
        )?;
    }
    Ok(t)
}

pub(super) fn node(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set("get_id", lua.create_function(|_, ()| Ok(node_identity().0))?)?;
    t.set("get_hostname", lua.create_function(|_, ()| Ok(node_identity().1))?)?;
    Ok(t)
}

/// `kong.ip`: Strait has no `trusted_ips` setting, so, as with Kong's
/// default (none), no address is trusted.
pub(super) fn ip(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "is_trusted",
        lua.create_function(|_, address: Value| match address {
            Value::String(text) => match text.to_str()?.parse::<std::net::IpAddr>() {
                Ok(_) => Ok(false),
                Err(_) => Err(Error::runtime(format!(
                    "invalid IP address: {}",
                    text.to_string_lossy()
                ))),
            },
            other => Err(Error::runtime(format!(
                "address must be a string, got {}",
                other.type_name()
            ))),
        })?,
    )?;
    Ok(t)
}

/// `kong.request` members for the request line's other parts.
pub(super) fn request(lua: &Lua, t: &Table) -> mlua::Result<()> {
    macro_rules! getter {
        ($name:literal, |$call:ident| $body:expr) => {
            t.set(
                $name,
                lua.create_function(|_, ()| {
                    current(concat!("kong.request.", $name), |$call| {
                        only_in($call, REQUEST_PHASES, REQUEST_NAMES)?;
                        Ok($body)
                    })
                })?,
            )?;
        };
    }
    // No trusted_ips in Strait (Kong's default: none): the forwarded
    // values are the request's own.
    getter!("get_port", |call| call.more.server_port);
    getter!("get_forwarded_scheme", |call| call.scheme);
    getter!("get_forwarded_host", |call| call.line(|host, _, _| host.to_string()));
    getter!("get_forwarded_port", |call| call.more.server_port);
    getter!("get_forwarded_path", |call| call.line(|_, path, _| path.to_string()));
    getter!("get_forwarded_prefix", |_call| Option::<String>::None);
    t.set(
        "get_query",
        lua.create_function(|lua, max: Option<Value>| {
            let limit = match max {
                None | Some(Value::Nil) => 100,
                Some(Value::Integer(n)) if (1..=1000).contains(&n) => n as usize,
                Some(Value::Integer(n)) if n < 1 => return Err(Error::runtime("max_args must be >= 1")),
                Some(Value::Integer(_)) => return Err(Error::runtime("max_args must be <= 1000")),
                Some(_) => return Err(Error::runtime("max_args must be a number")),
            };
            let query = current("kong.request.get_query", |call| {
                only_in(call, REQUEST_PHASES, REQUEST_NAMES)?;
                Ok(call.line(|_, _, query| query.to_string()))
            })?;
            crate::ngx::decode_args(lua, &query, limit)
        })?,
    )?;
    Ok(())
}

/// `kong.service.request` members that change the request line: each
/// checks its argument, then records the change on the call.
pub(super) fn service_request(lua: &Lua, t: &Table) -> mlua::Result<()> {
    setter(lua, t, "set_path", |value| {
        let path = string_argument(value, "path")?;
        if !path.starts_with('/') {
            return Err(Error::runtime("path must start with /"));
        }
        if http::uri::PathAndQuery::try_from(path.as_str()).is_err() || path.contains('?') {
            return Err(Error::runtime(format!("invalid path: {path:?}")));
        }
        Ok(Change::Path(path))
    })?;
    setter(lua, t, "set_raw_query", |value| {
        let query = string_argument(value, "query")?;
        if http::uri::PathAndQuery::try_from(format!("/?{query}").as_str()).is_err() {
            return Err(Error::runtime(format!("invalid query: {query:?}")));
        }
        Ok(Change::Query(query))
    })?;
    setter(lua, t, "set_query", |value| {
        let Value::Table(args) = value else {
            return Err(Error::runtime("args must be a table"));
        };
        Ok(Change::Query(crate::ngx::encode_args(&args)?))
    })?;
    setter(lua, t, "set_method", |value| {
        let text = string_argument(value, "method")?;
        const METHODS: [&str; 15] = [
            "GET",
            "HEAD",
            "PUT",
            "POST",
            "DELETE",
            "OPTIONS",
            "MKCOL",
            "COPY",
            "MOVE",
            "PROPFIND",
            "PROPPATCH",
            "LOCK",
            "UNLOCK",
            "PATCH",
            "TRACE",
        ];
        match METHODS.contains(&text.as_str()) {
            true => Method::from_bytes(text.as_bytes())
                .map(Change::Method)
                .map_err(|_| Error::runtime(format!("invalid method: {text}"))),
            false => Err(Error::runtime(format!("invalid method: {text}"))),
        }
    })?;
    setter(lua, t, "set_scheme", |value| {
        let scheme = string_argument(value, "scheme")?;
        if scheme != "http" && scheme != "https" {
            return Err(Error::runtime(format!("invalid scheme: {scheme}")));
        }
        Err(Error::runtime(
            "kong.service.request.set_scheme is not available in Strait (the service's protocol decides the upstream scheme)",
        ))
    })
}

/// What a request-line setter changes.
enum Change {
    Path(String),
    Query(String),
    Method(Method),
}

fn string_argument(value: Value, what: &str) -> mlua::Result<String> {
    match value {
        Value::String(text) => Ok(text.to_str()?.to_string()),
        _ => Err(Error::runtime(format!("{what} must be a string"))),
    }
}

/// `kong.service.request.<name>(value)`: `parse` checks the argument,
/// then the change is recorded in the request phases.
fn setter(lua: &Lua, t: &Table, name: &'static str, parse: fn(Value) -> mlua::Result<Change>) -> mlua::Result<()> {
    let full = format!("kong.service.request.{name}");
    t.set(
        name,
        lua.create_function(move |_, value: Value| {
            let change = parse(value)?;
            current(&full, |call| {
                only_in(call, SERVICE_REQUEST, SERVICE_REQUEST_NAMES)?;
                match change {
                    Change::Path(path) => call.more.upstream_path = Some(path),
                    Change::Query(query) => call.more.upstream_query = Some(query),
                    Change::Method(method) => call.more.upstream_method = Some(method),
                }
                Ok(())
            })
        })?,
    )
}

/// `kong.table.new(narr, nrec)` and `kong.table.clear(t)`.
pub(super) fn table(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "new",
        lua.create_function(|lua, (narr, nrec): (Option<usize>, Option<usize>)| {
            lua.create_table_with_capacity(narr.unwrap_or(0).min(1 << 16), nrec.unwrap_or(0).min(1 << 16))
        })?,
    )?;
    t.set(
        "clear",
        lua.create_function(|_, table: Table| {
            table.clear()?;
            Ok(())
        })?,
    )?;
    Ok(t)
}

/// `kong.log.inspect(...)`: the values as Lua literals, at debug level.
pub(super) fn inspect(value: &Value, depth: usize, out: &mut String) {
    match value {
        Value::String(text) => out.push_str(&format!("{:?}", text.to_string_lossy())),
        Value::Table(table) if depth < 8 => {
            out.push('{');
            let mut first = true;
            for (key, value) in table.pairs::<Value, Value>().flatten() {
                if !first {
                    out.push_str(", ");
                }
                first = false;
                match &key {
                    Value::String(name) => out.push_str(&name.to_string_lossy()),
                    other => {
                        out.push('[');
                        inspect(other, depth + 1, out);
                        out.push(']');
                    }
                }
                out.push_str(" = ");
                inspect(&value, depth + 1, out);
            }
            out.push('}');
        }
        other => out.push_str(&display(other)),
    }
}
