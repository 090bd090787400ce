//! Properties (`proxy_get_property` / `proxy_set_property`): a path of
//! NUL-separated segments. Kong's `kong.*` names, and the Envoy-style
//! `request.*`, `source.*`, `destination.*`, `response.*` ones filters
//! written for Envoy read.

use wasmtime::{Caller, Result};

use super::memory::{give, read, read_text};
use super::status;
use crate::exchange::{Exchange, Phase};
use crate::instance::HostState;

fn segments(path: &str) -> Vec<&str> {
    let mut parts: Vec<&str> = path.split('\0').collect();
    while parts.last() == Some(&"") {
        parts.pop();
    }
    parts
}

/// A property's value, or `None` when this host has no such property.
fn value(exchange: &Exchange, filter: &str, path: &[&str]) -> Option<Vec<u8>> {
    let text = |s: &str| Some(s.as_bytes().to_vec());
    let props = &exchange.properties;
    let in_request = exchange.phase != Phase::Configure && exchange.phase != Phase::Idle;
    if !in_request && path.first() != Some(&"plugin_name") && path != ["kong", "version"] {
        return None;
    }
    match path {
        ["plugin_name"] => text(filter),
        ["kong", "version"] => text(crate::KONG_VERSION),
        ["kong", "nginx", "subsystem"] => text("http"),
        ["kong", "client", "protocol"] => text(props.protocol),
        ["kong", "route_id"] => props.route_id.map(|id| id.to_string().into_bytes()),
        ["kong", "route_name"] => Some(props.route_name.as_bytes().to_vec()).filter(|n| !n.is_empty()),
        ["kong", "service_id"] => props.service_id.map(|id| id.to_string().into_bytes()),
        ["kong", "consumer_id"] => props.consumer_id.map(|id| id.to_string().into_bytes()),
        ["kong", "response", "status"] | ["response", "code"] if exchange.status != 0 => {
            text(&exchange.status.to_string())
        }
        ["kong", "ctx", "shared", key] => exchange.ctx_shared.get(*key).cloned(),
        ["request", "method"] => text(&exchange.method),
        ["request", "path"] | ["request", "url_path"] => {
            text(exchange.path.split('?').next().unwrap_or(&exchange.path))
        }
        ["request", "query"] => exchange.path.split_once('?').map(|(_, q)| q.as_bytes().to_vec()),
        ["request", "scheme"] => text(exchange.scheme),
        ["request", "protocol"] => text(props.http_version),
        ["request", "host"] => exchange
            .request_headers
            .get(http::header::HOST)
            .map(|v| v.as_bytes().to_vec()),
        ["source", "address"] => props
            .client_ip
            .map(|ip| format!("{ip}:{}", props.client_port).into_bytes()),
        ["source", "port"] => text(&props.client_port.to_string()),
        ["destination", "port"] => text(&props.server_port.to_string()),
        _ => None,
    }
}

pub(super) fn get(mut caller: Caller<'_, HostState>, path: i32, path_len: i32, out: i32, out_len: i32) -> Result<i32> {
    let path = read_text(&mut caller, path, path_len)?;
    let state = caller.data();
    match value(&state.exchange, &state.filter, &segments(&path)) {
        Some(bytes) => give(&mut caller, &bytes, out, out_len).map(|()| status::OK),
        None => Ok(status::NOT_FOUND),
    }
}

pub(super) fn set(
    mut caller: Caller<'_, HostState>,
    path: i32,
    path_len: i32,
    data: i32,
    data_len: i32,
) -> Result<i32> {
    let path = read_text(&mut caller, path, path_len)?;
    let data = read(&mut caller, data, data_len)?;
    let exchange = &mut caller.data_mut().exchange;
    Ok(match segments(&path).as_slice() {
        ["kong", "ctx", "shared", key] if exchange.phase != Phase::Configure => {
            exchange.ctx_shared.insert((*key).to_string(), data);
            status::OK
        }
        ["kong", "response", "status"] if exchange.phase == Phase::ResponseHeaders => {
            match std::str::from_utf8(&data).ok().and_then(|s| s.parse::<u16>().ok()) {
                Some(code) if (100..=999).contains(&code) => {
                    exchange.status = code;
                    status::OK
                }
                _ => status::BAD_ARGUMENT,
            }
        }
        _ => status::NOT_FOUND,
    })
}
