//! `kong.response`, `kong.service.response` and `ngx.arg`: the response
//! as the response phases read and change it, its body in `body_filter`.

use bytes::Bytes;
use mlua::{Error, Function, Lua, Table, Value};
use strait_plugins::PluginResponse;

use super::{
    current, header_functions, header_getters, header_name, header_values, only_in, strict, Phase, Target, CALL, EXIT,
    EXIT_NAMES, EXIT_SENTINEL, RESPONSE_READ, RESPONSE_READ_NAMES,
};

const BODY_FILTER: &[Phase] = &[Phase::BodyFilter];
const BODY_FILTER_NAMES: &str = "body_filter";

pub(super) fn response(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    header_functions(lua, &t, Target::Response)?;
    t.set(
        "get_status",
        lua.create_function(|_, ()| {
            current("kong.response.get_status", |call| {
                only_in(call, RESPONSE_READ, RESPONSE_READ_NAMES)?;
                Ok(call.status)
            })
        })?,
    )?;
    header_getters(
        lua,
        &t,
        "kong.response",
        |call| &call.response_headers,
        RESPONSE_READ,
        RESPONSE_READ_NAMES,
    )?;
    let exit = lua.create_function(|lua, (status, body, headers): (Value, Value, Value)| {
        let status = status_code(&status)?;
        let mut answer = PluginResponse {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
        };
        if let Value::Table(headers) = &headers {
            for pair in headers.pairs::<Value, Value>() {
                let (name, value) = pair?;
                let name = header_name(&name)?;
                for value in header_values(&name, &value)? {
                    let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
                    answer.headers.push((name.as_str().to_string(), text));
                }
            }
        } else if !headers.is_nil() {
            return Err(Error::runtime("headers must be a nil or table"));
        }
        match body {
            Value::Nil => {}
            Value::String(text) => answer.body = Bytes::copy_from_slice(&text.as_bytes()),
            Value::Table(table) => {
                let json: serde_json::Value = mlua::LuaSerdeExt::from_value(lua, Value::Table(table))
                    .map_err(|e| Error::runtime(format!("body cannot be encoded as JSON: {e}")))?;
                answer.body = Bytes::from(json.to_string());
                if !answer.headers.iter().any(|(n, _)| n == "content-type") {
                    answer
                        .headers
                        .push(("content-type".into(), "application/json; charset=utf-8".into()));
                }
            }
            _ => return Err(Error::runtime("body must be a nil, string or table")),
        }
        current("kong.response.exit", |call| {
            only_in(call, EXIT, EXIT_NAMES)?;
            call.exit = Some(answer);
            Ok(())
        })?;
        Err::<(), _>(Error::runtime(EXIT_SENTINEL))
    })?;
    lua.set_named_registry_value("strait.response.exit", exit.clone())?;
    t.set("exit", exit)?;
    t.set(
        "error",
        lua.create_function(|lua, (status, message, headers): (Value, Value, Value)| {
            let code = status_code(&status)?;
            let exit: Function = lua.named_registry_value("strait.response.exit")?;
            let message = match message {
                Value::Nil => Value::String(lua.create_string(strait_plugins::kong_error_message(code))?),
                other => other,
            };
            let body = match message {
                Value::Table(table) => Value::Table(table),
                other => {
                    let table = lua.create_table()?;
                    table.set("message", other)?;
                    Value::Table(table)
                }
            };
            exit.call::<()>((status, body, headers))
        })?,
    )?;
    t.set(
        "get_source",
        lua.create_function(|_, ()| {
            current("kong.response.get_source", |call| {
                only_in(call, RESPONSE_READ, RESPONSE_READ_NAMES)?;
                Ok(call.source.unwrap_or("error"))
            })
        })?,
    )?;
    t.set(
        "set_status",
        lua.create_function(|_, status: Value| {
            let status = status_code(&status)?;
            current("kong.response.set_status", |call| {
                only_in(call, SET_STATUS, SET_STATUS_NAMES)?;
                call.status = Some(status);
                Ok(())
            })
        })?,
    )?;
    t.set(
        "get_raw_body",
        lua.create_function(|lua, ()| raw_body(lua, "kong.response.get_raw_body"))?,
    )?;
    t.set(
        "set_raw_body",
        lua.create_function(|_, body: Value| {
            let Value::String(body) = body else {
                return Err(Error::runtime("body must be a string"));
            };
            let bytes = Bytes::copy_from_slice(&body.as_bytes());
            current("kong.response.set_raw_body", |call| {
                only_in(call, BODY_FILTER, BODY_FILTER_NAMES)?;
                call.chunk = Some(bytes);
                call.eof = true;
                call.buffered = None;
                Ok(())
            })
        })?,
    )?;
    strict(lua, t, "kong.response")
}

const SET_STATUS: &[Phase] = &[Phase::Rewrite, Phase::Access, Phase::HeaderFilter];
const SET_STATUS_NAMES: &str = "rewrite, access, header_filter, response, admin_api";

/// A status code given by Lua code: Kong's checks.
fn status_code(status: &Value) -> mlua::Result<u16> {
    match status {
        Value::Integer(n) if (100..=599).contains(n) => Ok(*n as u16),
        Value::Number(n) if n.fract() == 0.0 && (100.0..=599.0).contains(n) => Ok(*n as u16),
        Value::Integer(_) | Value::Number(_) => Err(Error::runtime("code must be a number between 100 and 599")),
        _ => Err(Error::runtime("code must be a number")),
    }
}

/// Kong's `get_raw_body` in `body_filter`: a piece before the last is
/// buffered (and not sent: `ngx.arg[1]` becomes nil) and nil returned;
/// the last piece returns the whole body, which is then what is sent.
fn raw_body(lua: &Lua, name: &str) -> mlua::Result<Value> {
    let whole = current(name, |call| {
        only_in(call, BODY_FILTER, BODY_FILTER_NAMES)?;
        let chunk = call.chunk.take().unwrap_or_default();
        if !call.eof {
            call.buffered
                .get_or_insert_with(bytes::BytesMut::new)
                .extend_from_slice(&chunk);
            return Ok(None);
        }
        let whole = match call.buffered.take() {
            None => chunk,
            Some(mut buffered) => {
                buffered.extend_from_slice(&chunk);
                buffered.freeze()
            }
        };
        call.chunk = Some(whole.clone());
        Ok(Some(whole))
    })?;
    match whole {
        None => Ok(Value::Nil),
        Some(body) => Ok(Value::String(lua.create_string(&body[..])?)),
    }
}

/// `kong.service.response`: the response as it came to the plugins.
pub(super) fn service_response(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "get_status",
        lua.create_function(|_, ()| {
            current("kong.service.response.get_status", |call| {
                only_in(call, RESPONSE_READ, RESPONSE_READ_NAMES)?;
                Ok(call.status.filter(|_| call.source == Some("service")))
            })
        })?,
    )?;
    header_getters(
        lua,
        &t,
        "kong.service.response",
        |call| &call.response_headers,
        RESPONSE_READ,
        RESPONSE_READ_NAMES,
    )?;
    t.set(
        "get_raw_body",
        lua.create_function(|lua, ()| raw_body(lua, "kong.service.response.get_raw_body"))?,
    )?;
    strict(lua, t, "kong.service.response")
}

/// `ngx.arg`: in `body_filter`, `[1]` the piece of the body and `[2]`
/// whether it is the last, both writable.
pub(super) fn ngx_arg(lua: &Lua) -> mlua::Result<Table> {
    let arg = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.set(
        "__index",
        lua.create_function(|lua, (_, key): (Value, Value)| {
            let read = CALL.with(|cell| {
                cell.borrow()
                    .as_ref()
                    .filter(|c| c.phase == Phase::BodyFilter)
                    .map(|call| match key {
                        Value::Integer(1) => call.chunk.clone().map(ArgValue::Chunk),
                        Value::Integer(2) => Some(ArgValue::Eof(call.eof)),
                        _ => None,
                    })
            });
            match read.flatten() {
                Some(ArgValue::Chunk(chunk)) => Ok(Value::String(lua.create_string(&chunk[..])?)),
                Some(ArgValue::Eof(eof)) => Ok(Value::Boolean(eof)),
                None => Ok(Value::Nil),
            }
        })?,
    )?;
    meta.set(
        "__newindex",
        lua.create_function(|_, (_, key, value): (Value, Value, Value)| {
            current("ngx.arg", |call| {
                if call.phase != Phase::BodyFilter {
                    return Err(Error::runtime("ngx.arg can only be set in body_filter"));
                }
                match (key, value) {
                    (Value::Integer(1), Value::Nil) => call.chunk = None,
                    (Value::Integer(1), Value::String(text)) => {
                        call.chunk = Some(Bytes::copy_from_slice(&text.as_bytes()))
                    }
                    (Value::Integer(1), other) => {
                        return Err(Error::runtime(format!(
                            "bad argument #1 to 'ngx.arg' (string or nil expected, got {})",
                            other.type_name()
                        )))
                    }
                    (Value::Integer(2), value) => call.eof = value.as_boolean().unwrap_or(false),
                    _ => return Err(Error::runtime("ngx.arg has only [1] (the body piece) and [2] (eof)")),
                }
                Ok(())
            })
        })?,
    )?;
    arg.set_metatable(Some(meta))?;
    Ok(arg)
}

enum ArgValue {
    Chunk(Bytes),
    Eof(bool),
}
