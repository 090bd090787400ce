//! proxy-wasm's host functions (module `env`): logging, time, header maps,
//! buffers, properties, local responses, shared data and queues, metrics.
//! HTTP and gRPC calls out and foreign functions answer
//! `UNIMPLEMENTED` (docs/plugins.md lists what is served).

use bytes::Bytes;
use strait_plugins::PluginResponse;
use wasmtime::{Caller, Linker, Result};

use super::memory::{give, read, read_text, write_u32, write_u64};
use super::{maps, properties, shared, status};
use crate::exchange::Phase;
use crate::instance::HostState;

type Host<'a> = Caller<'a, HostState>;

pub(super) fn define(linker: &mut Linker<HostState>) -> Result<()> {
    linker.func_wrap("env", "proxy_log", proxy_log)?;
    linker.func_wrap("env", "proxy_get_log_level", |mut caller: Host<'_>, out: i32| {
        write_u32(&mut caller, out, 2).map(|()| status::OK)
    })?;
    linker.func_wrap(
        "env",
        "proxy_get_current_time_nanoseconds",
        |mut caller: Host<'_>, out: i32| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            write_u64(&mut caller, out, now).map(|()| status::OK)
        },
    )?;
    linker.func_wrap("env", "proxy_get_header_map_value", get_header_map_value)?;
    linker.func_wrap("env", "proxy_get_header_map_pairs", get_header_map_pairs)?;
    linker.func_wrap("env", "proxy_set_header_map_pairs", set_header_map_pairs)?;
    linker.func_wrap("env", "proxy_add_header_map_value", |c: Host<'_>, m, k, kl, v, vl| {
        put_header(c, m, k, kl, v, vl, false)
    })?;
    linker.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        |c: Host<'_>, m, k, kl, v, vl| put_header(c, m, k, kl, v, vl, true),
    )?;
    linker.func_wrap("env", "proxy_remove_header_map_value", remove_header_map_value)?;
    linker.func_wrap("env", "proxy_get_buffer_bytes", get_buffer_bytes)?;
    linker.func_wrap("env", "proxy_set_buffer_bytes", set_buffer_bytes)?;
    linker.func_wrap(
        "env",
        "proxy_send_local_response",
        |caller: Host<'_>,
         code: i32,
         _details: i32,
         _details_len: i32,
         body,
         body_len,
         headers,
         headers_len,
         _grpc: i32| {
            let answer = LocalResponse {
                code,
                body: (body, body_len),
                headers: (headers, headers_len),
            };
            send_local_response(caller, answer)
        },
    )?;
    linker.func_wrap("env", "proxy_get_property", properties::get)?;
    linker.func_wrap("env", "proxy_set_property", properties::set)?;
    linker.func_wrap(
        "env",
        "proxy_http_call",
        |caller: Host<'_>,
         up: i32,
         up_len: i32,
         h: i32,
         h_len: i32,
         b: i32,
         b_len: i32,
         _t: i32,
         _t_len: i32,
         ms: i32,
         out| {
            let call = CallArgs {
                upstream: (up, up_len),
                headers: (h, h_len),
                body: (b, b_len),
                timeout_ms: ms,
                token_out: out,
            };
            http_call(caller, call)
        },
    )?;
    for name in ["proxy_continue_stream", "proxy_close_stream"] {
        linker.func_wrap("env", name, |_: Host<'_>, _stream: i32| status::OK)?;
    }
    for name in ["proxy_continue_request", "proxy_continue_response", "proxy_done"] {
        linker.func_wrap("env", name, |_: Host<'_>| status::OK)?;
    }
    linker.func_wrap(
        "env",
        "proxy_set_tick_period_milliseconds",
        |mut caller: Host<'_>, period: i32| {
            let exchange = &mut caller.data_mut().exchange;
            match exchange.phase {
                Phase::Configure => {
                    exchange.tick_period = Some(period as u32);
                    status::OK
                }
                _ => status::BAD_ARGUMENT,
            }
        },
    )?;
    linker.func_wrap("env", "proxy_set_effective_context", |_: Host<'_>, _context: i32| {
        status::OK
    })?;
    shared::define(linker)
}

fn proxy_log(mut caller: Host<'_>, level: i32, ptr: i32, len: i32) -> Result<i32> {
    let message = read_text(&mut caller, ptr, len)?;
    let filter = &*caller.data().filter;
    match level {
        0 => tracing::trace!(filter, "{message}"),
        1 => tracing::debug!(filter, "{message}"),
        2 => tracing::info!(filter, "{message}"),
        3 => tracing::warn!(filter, "{message}"),
        _ => tracing::error!(filter, "{message}"),
    }
    Ok(status::OK)
}

fn get_header_map_value(mut caller: Host<'_>, map: i32, key: i32, key_len: i32, out: i32, out_len: i32) -> Result<i32> {
    let name = read_text(&mut caller, key, key_len)?;
    match maps::get(&mut caller.data_mut().exchange, map, &name) {
        Ok(Some(value)) => give(&mut caller, &value, out, out_len).map(|()| status::OK),
        Ok(None) => Ok(status::NOT_FOUND),
        Err(code) => Ok(code),
    }
}

fn get_header_map_pairs(mut caller: Host<'_>, map: i32, out: i32, out_len: i32) -> Result<i32> {
    match maps::pairs(&mut caller.data_mut().exchange, map) {
        Ok(encoded) => give(&mut caller, &encoded, out, out_len).map(|()| status::OK),
        Err(code) => Ok(code),
    }
}

fn set_header_map_pairs(mut caller: Host<'_>, map: i32, ptr: i32, len: i32) -> Result<i32> {
    let bytes = read(&mut caller, ptr, len)?;
    let Some(pairs) = maps::decode(&bytes) else {
        return Ok(status::BAD_ARGUMENT);
    };
    Ok(maps::replace_all(&mut caller.data_mut().exchange, map, pairs))
}

fn put_header(
    mut caller: Host<'_>,
    map: i32,
    key: i32,
    key_len: i32,
    value: i32,
    value_len: i32,
    replace: bool,
) -> Result<i32> {
    let name = read_text(&mut caller, key, key_len)?;
    let value = read(&mut caller, value, value_len)?;
    Ok(maps::put(&mut caller.data_mut().exchange, map, &name, &value, replace))
}

fn remove_header_map_value(mut caller: Host<'_>, map: i32, key: i32, key_len: i32) -> Result<i32> {
    let name = read_text(&mut caller, key, key_len)?;
    Ok(maps::remove(&mut caller.data_mut().exchange, map, &name))
}

/// proxy-wasm's buffer types this host holds.
const RESPONSE_BODY: i32 = 1;
const CALL_RESPONSE_BODY: i32 = 4;
const VM_CONFIGURATION: i32 = 6;
const PLUGIN_CONFIGURATION: i32 = 7;

/// The buffer `kind` names, when the current callback has it.
fn buffer(state: &HostState, kind: i32) -> Option<&[u8]> {
    let exchange = &state.exchange;
    match (kind, exchange.phase) {
        (RESPONSE_BODY, Phase::ResponseBody) => Some(&exchange.body),
        // The VM's configuration is empty (Kong gives filters none).
        (VM_CONFIGURATION, Phase::Configure) => Some(&[]),
        (PLUGIN_CONFIGURATION, Phase::Configure) => Some(&exchange.configuration),
        (CALL_RESPONSE_BODY, Phase::CallResponse) => Some(&exchange.call_response.body),
        _ => None,
    }
}

/// `start` and `max_size` are unsigned (the Rust SDK passes `u32::MAX`).
fn get_buffer_bytes(mut caller: Host<'_>, kind: i32, start: i32, max: i32, out: i32, out_len: i32) -> Result<i32> {
    let Some(source) = buffer(caller.data(), kind) else {
        return Ok(status::NOT_FOUND);
    };
    let start = (start as u32 as usize).min(source.len());
    let end = start.saturating_add(max as u32 as usize).min(source.len());
    let slice = source[start..end].to_vec();
    give(&mut caller, &slice, out, out_len).map(|()| status::OK)
}

/// Replaces `size` bytes from `start` with the given data: all of it with
/// `(0, len or more)`, an append with `start` at or past the end, a
/// prepend with `(0, 0)`. Only the response body can be changed.
fn set_buffer_bytes(mut caller: Host<'_>, kind: i32, start: i32, size: i32, ptr: i32, len: i32) -> Result<i32> {
    let data = read(&mut caller, ptr, len)?;
    let state = caller.data_mut();
    match (kind, buffer(state, kind)) {
        (_, None) => return Ok(status::NOT_FOUND),
        (RESPONSE_BODY, Some(_)) => {}
        (_, Some(_)) => return Ok(status::BAD_ARGUMENT),
    }
    let body = &mut state.exchange.body;
    let start = (start as u32 as usize).min(body.len());
    let end = start.saturating_add(size as u32 as usize).min(body.len());
    let mut changed = Vec::with_capacity(body.len() - (end - start) + data.len());
    changed.extend_from_slice(&body[..start]);
    changed.extend_from_slice(&data);
    changed.extend_from_slice(&body[end..]);
    *body = bytes::Bytes::from(changed);
    Ok(status::OK)
}

/// `proxy_send_local_response`'s arguments this host reads (the details
/// string and the gRPC status are not used by an HTTP answer).
struct LocalResponse {
    code: i32,
    body: (i32, i32),
    headers: (i32, i32),
}

fn send_local_response(mut caller: Host<'_>, answer: LocalResponse) -> Result<i32> {
    let LocalResponse { code, body, headers } = answer;
    let body = read(&mut caller, body.0, body.1)?;
    let encoded = read(&mut caller, headers.0, headers.1)?;
    let Some(pairs) = maps::decode(&encoded) else {
        return Ok(status::BAD_ARGUMENT);
    };
    let Ok(code) = u16::try_from(code) else {
        return Ok(status::BAD_ARGUMENT);
    };
    if !(200..=999).contains(&code) {
        return Ok(status::BAD_ARGUMENT);
    }
    let headers = pairs
        .into_iter()
        .map(|(name, value)| {
            (
                String::from_utf8_lossy(&name).to_ascii_lowercase(),
                String::from_utf8_lossy(&value).into_owned(),
            )
        })
        .collect();
    caller.data_mut().exchange.local_response = Some(PluginResponse {
        status: code,
        headers,
        body: Bytes::from(body),
    });
    Ok(status::OK)
}

/// `proxy_http_call`'s arguments (trailers are not sent).
struct CallArgs {
    upstream: (i32, i32),
    headers: (i32, i32),
    body: (i32, i32),
    timeout_ms: i32,
    token_out: i32,
}

/// Records a call for the host to send when the callback returns; the
/// token goes to the filter.
fn http_call(mut caller: Host<'_>, args: CallArgs) -> Result<i32> {
    let upstream = read_text(&mut caller, args.upstream.0, args.upstream.1)?;
    let encoded = read(&mut caller, args.headers.0, args.headers.1)?;
    let body = read(&mut caller, args.body.0, args.body.1)?;
    if !caller.data().exchange.in_request() {
        return Ok(status::BAD_ARGUMENT);
    }
    let Some(headers) = maps::decode(&encoded) else {
        return Ok(status::BAD_ARGUMENT);
    };
    if let Err(code) = crate::calls::check(&headers) {
        return Ok(code);
    }
    if upstream.is_empty() {
        return Ok(status::BAD_ARGUMENT);
    }
    let state = caller.data_mut();
    state.next_call_token = state.next_call_token.wrapping_add(1).max(1);
    let token = state.next_call_token;
    state.exchange.pending_calls.push(crate::calls::HttpCall {
        token,
        upstream,
        headers,
        body,
        timeout: crate::calls::timeout(args.timeout_ms),
    });
    write_u32(&mut caller, args.token_out, token).map(|()| status::OK)
}
