//! `kong.log` and the `ngx` table's own members (log levels, time,
//! `ngx.var`, `ngx.ctx`), and the node's log lines they write.

use http::header::HeaderMap;
use mlua::{Error, Lua, MultiValue, Table, Value, Variadic};
use strait_plugins::observability::serialize::SerializeMode;

use super::{client, current, display, first_value, response::ngx_arg, strict, Which, CALL};

/// `kong.log.<level>(...)`: the arguments joined as Kong joins them, to the
/// node's log, naming the plugin.
pub(super) fn log(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for level in ["emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"] {
        t.set(
            level,
            lua.create_function(move |_, args: Variadic<Value>| {
                write_log(level, &args.iter().map(display).collect::<String>());
                Ok(())
            })?,
        )?;
    }
    t.set(
        "inspect",
        lua.create_function(|_, args: Variadic<Value>| {
            let mut out = String::new();
            for (at, value) in args.iter().enumerate() {
                if at > 0 {
                    out.push(' ');
                }
                client::inspect(value, 0, &mut out);
            }
            write_log("debug", &out);
            Ok(())
        })?,
    )?;
    t.set(
        "set_serialize_value",
        lua.create_function(|lua, (key, value, options): (Value, Value, Value)| {
            let Value::String(key) = key else {
                return Err(Error::runtime("key must be a string"));
            };
            if !matches!(
                value,
                Value::Nil
                    | Value::Boolean(_)
                    | Value::Integer(_)
                    | Value::Number(_)
                    | Value::String(_)
                    | Value::Table(_)
            ) {
                return Err(Error::runtime("value must be a number, string, boolean, table or nil"));
            }
            let mode = match &options {
                Value::Nil => SerializeMode::Set,
                Value::Table(options) => match options.get::<Option<String>>("mode")?.as_deref() {
                    None | Some("set") => SerializeMode::Set,
                    Some("add") => SerializeMode::Add,
                    Some("replace") => SerializeMode::Replace,
                    Some(_) => return Err(Error::runtime("mode must be 'set', 'add' or 'replace'")),
                },
                _ => return Err(Error::runtime("options must be a table")),
            };
            let json: serde_json::Value = match value {
                Value::Nil => serde_json::Value::Null,
                value => mlua::LuaSerdeExt::from_value(lua, value)
                    .map_err(|e| Error::runtime(format!("value cannot be serialized: {e}")))?,
            };
            let key = key.to_str()?.to_string();
            current("kong.log.set_serialize_value", |call| {
                call.serialize.push((key, json, mode));
                Ok(())
            })
        })?,
    )?;
    strict(lua, t, "kong.log")
}

/// The running call's phase name, for `ngx.get_phase()`.
pub(crate) fn current_phase() -> Option<&'static str> {
    CALL.with(|cell| cell.borrow().as_ref().map(|call| call.phase.name()))
}

/// `display` for the other modules.
pub(crate) fn display_value(value: &Value) -> String {
    display(value)
}

/// One of `ngx.var`'s variables for the running call (`None`: unset).
pub(crate) fn read_var(name: &str) -> mlua::Result<Option<String>> {
    current("ngx.var", |call| {
        let (host, path, query) =
            call.line(|host, path, query| (host.to_string(), path.to_string(), query.to_string()));
        let query = (!query.is_empty()).then_some(query);
        Ok(match name {
            "uri" => Some(path.clone()),
            "request_uri" => Some(match &query {
                Some(query) => format!("{path}?{query}"),
                None => path.clone(),
            }),
            "args" | "query_string" => query,
            "is_args" => Some(if query.is_some() { "?" } else { "" }.to_string()),
            "host" | "server_name" => Some(host.clone()),
            "hostname" => Some(client::hostname()),
            "scheme" => Some(call.scheme.to_string()),
            "https" => Some(if call.scheme == "https" { "on" } else { "" }.to_string()),
            "request_method" => Some(call.method.as_str().to_string()),
            "remote_addr" | "realip_remote_addr" | "binary_remote_addr" => Some(call.client_ip.to_string()),
            "remote_port" | "realip_remote_port" => Some(call.more.client_port.to_string()),
            "server_port" => Some(call.more.server_port.to_string()),
            "server_protocol" => Some(
                if call.http_version == 3.0 {
                    "HTTP/3.0"
                } else if call.http_version == 2.0 {
                    "HTTP/2.0"
                } else if call.http_version == 1.0 {
                    "HTTP/1.0"
                } else {
                    "HTTP/1.1"
                }
                .to_string(),
            ),
            "content_type" => first_value(&call.headers, "content-type"),
            "content_length" => first_value(&call.headers, "content-length"),
            "status" => call.status.map(|s| s.to_string()),
            "kong_request_id" | "request_id" => first_value(&call.headers, "x-kong-request-id"),
            other => {
                if let Some(header) = other.strip_prefix("http_") {
                    first_value(&call.headers, header)
                } else if let Some(arg) = other.strip_prefix("arg_") {
                    query_text(query.as_deref().unwrap_or(""), arg)
                } else if let Some(cookie) = other.strip_prefix("cookie_") {
                    cookie_value(&call.headers, cookie)
                } else if let Some(header) = other.strip_prefix("sent_http_") {
                    first_value(&call.response_headers, header)
                } else {
                    return Err(Error::runtime(format!("ngx.var.{other} is not available in Strait")));
                }
            }
        })
    })
}

/// An argument's raw (escaped) value, as `$arg_<name>` gives it.
fn query_text(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        key.eq_ignore_ascii_case(name).then(|| value.to_string())
    })
}

/// A cookie's value from the `Cookie` headers.
fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(http::header::COOKIE).iter().find_map(|value| {
        value.to_str().ok()?.split(';').find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then(|| value.to_string())
        })
    })
}

/// One line to the node's log at a Kong level, naming the plugin.
pub(crate) fn write_log(level: &str, message: &str) {
    let plugin = CALL
        .with(|cell| cell.borrow().as_ref().map(|call| call.plugin))
        .unwrap_or("lua");
    match level {
        "emerg" | "alert" | "crit" | "err" | "error" => tracing::error!(target: "strait::lua", "[{plugin}] {message}"),
        "warn" => tracing::warn!(target: "strait::lua", "[{plugin}] {message}"),
        "notice" => tracing::info!(target: "strait::lua", "[{plugin}] {message}"),
        _ => tracing::debug!(target: "strait::lua", "[{plugin}] {message}"),
    }
}

/// The `ngx` members plugins commonly reach for (this version: logging,
/// levels, `null`, time).
pub(super) fn ngx(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    const LEVELS: [(&str, i64, &str); 9] = [
        ("STDERR", 0, "err"),
        ("EMERG", 1, "emerg"),
        ("ALERT", 2, "alert"),
        ("CRIT", 3, "crit"),
        ("ERR", 4, "err"),
        ("WARN", 5, "warn"),
        ("NOTICE", 6, "notice"),
        ("INFO", 7, "info"),
        ("DEBUG", 8, "debug"),
    ];
    for (name, number, _) in LEVELS {
        t.set(name, number)?;
    }
    t.set(
        "log",
        lua.create_function(|_, (level, rest): (i64, MultiValue)| {
            let name = LEVELS
                .iter()
                .find(|(_, number, _)| *number == level)
                .map_or("notice", |(_, _, name)| name);
            write_log(name, &rest.iter().map(display).collect::<String>());
            Ok(())
        })?,
    )?;
    t.set("arg", ngx_arg(lua)?)?;
    t.set("null", Value::LightUserData(mlua::LightUserData(std::ptr::null_mut())))?;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
    };
    t.set("time", lua.create_function(move |_, ()| Ok(now().as_secs() as i64))?)?;
    t.set(
        "now",
        lua.create_function(move |_, ()| Ok((now().as_millis() as f64) / 1000.0))?,
    )?;
    t.set("update_time", lua.create_function(|_, ()| Ok(()))?)?;
    for (name, status) in [
        ("HTTP_OK", 200),
        ("HTTP_CREATED", 201),
        ("HTTP_NO_CONTENT", 204),
        ("HTTP_MOVED_PERMANENTLY", 301),
        ("HTTP_MOVED_TEMPORARILY", 302),
        ("HTTP_BAD_REQUEST", 400),
        ("HTTP_UNAUTHORIZED", 401),
        ("HTTP_FORBIDDEN", 403),
        ("HTTP_NOT_FOUND", 404),
        ("HTTP_NOT_ALLOWED", 405),
        ("HTTP_TOO_MANY_REQUESTS", 429),
        ("HTTP_INTERNAL_SERVER_ERROR", 500),
        ("HTTP_BAD_GATEWAY", 502),
        ("HTTP_SERVICE_UNAVAILABLE", 503),
        ("HTTP_GATEWAY_TIMEOUT", 504),
    ] {
        t.set(name, status)?;
    }
    let meta = lua.create_table()?;
    meta.set(
        "__index",
        lua.create_function(|lua, (_, key): (Value, Value)| -> mlua::Result<Value> {
            match &key {
                Value::String(name) if name.as_bytes().as_ref() == b"ctx" => {
                    crate::ctx::table(lua, Which::Ngx).map(Value::Table)
                }
                other => Err(Error::runtime(format!(
                    "ngx.{} is not available in Strait",
                    display(other)
                ))),
            }
        })?,
    )?;
    t.set_metatable(Some(meta))?;
    Ok(t)
}
