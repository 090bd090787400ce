//! HTTP plumbing for the Admin and status APIs: listeners, request routing,
//! body limits, token authentication, form and multipart field extraction.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::lists::{get_one, kind_for_endpoint, list};
use crate::response::{empty_response, message, method_not_allowed, not_found, AdminResponse};
use crate::{config_endpoint, root, AdminState};

/// Largest Admin API request body (a full declarative config).
const MAX_BODY: usize = 256 * 1024 * 1024;

/// Serve the Admin API on `listener` until `shutdown` turns true.
pub async fn serve_admin(listener: TcpListener, state: Arc<AdminState>, shutdown: watch::Receiver<bool>) {
    serve(listener, state, shutdown, false).await;
}

/// Serve the status API (`/status`, `/status/ready`) on `listener`.
pub async fn serve_status(listener: TcpListener, state: Arc<AdminState>, shutdown: watch::Receiver<bool>) {
    serve(listener, state, shutdown, true).await;
}

async fn serve(listener: TcpListener, state: Arc<AdminState>, shutdown: watch::Receiver<bool>, status_only: bool) {
    let mut stop = shutdown.clone();
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::warn!(%error, "admin accept failed");
                    continue;
                }
            },
            _ = strait_proxy::stopped(&mut stop) => return,
        };
        let state = state.clone();
        let mut stop_conn = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, request, status_only).await) }
            });
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = strait_proxy::stopped(&mut stop_conn) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
}

fn authorized(state: &AdminState, request: &Request<Incoming>) -> bool {
    let Some(token) = &state.admin_token else { return true };
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| given.trim() == token)
}

async fn route(state: &AdminState, request: Request<Incoming>, status_only: bool) -> AdminResponse {
    if !status_only && !authorized(state, &request) {
        return message(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    let path = request.uri().path().trim_end_matches('/').to_string();
    let query = request.uri().query().map(str::to_string);
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let method = request.method().clone();
    if status_only && !matches!(segments.as_slice(), ["status"] | ["status", "ready"]) {
        return not_found();
    }
    match (segments.as_slice(), &method) {
        ([], &Method::GET) => root::root(state),
        (["status"], &Method::GET) => root::status(state),
        (["status", "ready"], &Method::GET) => root::ready(state),
        (["config"], &Method::GET) => config_endpoint::get_config(state),
        (["config"], &Method::POST) => {
            let content_type = request
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            match read_body(request).await {
                Ok(body) => config_endpoint::post_config(state, &content_type, query.as_deref(), &body).await,
                Err(response) => response,
            }
        }
        ([] | ["status"] | ["status", "ready"], &Method::OPTIONS) => allow("GET, HEAD, OPTIONS"),
        (["config"], &Method::OPTIONS) => allow("GET, POST, OPTIONS"),
        ([] | ["status"] | ["status", "ready"], _) => method_not_allowed("GET, HEAD, OPTIONS"),
        (["config"], _) => method_not_allowed("GET, POST, OPTIONS"),
        ([endpoint], &Method::GET) => match kind_for_endpoint(endpoint) {
            Some(kind) => list(state, endpoint, kind, query.as_deref()),
            None => not_found(),
        },
        ([endpoint, key], &Method::GET) => match kind_for_endpoint(endpoint) {
            Some(kind) => get_one(state, kind, key),
            None => not_found(),
        },
        _ => not_found(),
    }
}

fn allow(methods: &'static str) -> AdminResponse {
    let mut response = empty_response(StatusCode::NO_CONTENT);
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static(methods));
    response
}

async fn read_body(request: Request<Incoming>) -> Result<Bytes, AdminResponse> {
    match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(_) => Err(message(StatusCode::PAYLOAD_TOO_LARGE, "Request size limit exceeded")),
    }
}

fn percent_decode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < input.len() => {
                let hex = std::str::from_utf8(&input[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    out
}

/// The value of `name` in an `application/x-www-form-urlencoded` body.
pub fn form_field(body: &[u8], name: &str) -> Option<Vec<u8>> {
    body.split(|b| *b == b'&').find_map(|pair| {
        let mut parts = pair.splitn(2, |b| *b == b'=');
        let key = percent_decode(parts.next()?);
        (key == name.as_bytes()).then(|| percent_decode(parts.next().unwrap_or_default()))
    })
}

/// The content of the part named `name` in a `multipart/form-data` body.
pub fn multipart_field(content_type: &str, body: &[u8], name: &str) -> Option<Vec<u8>> {
    let boundary = content_type
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("boundary="))?
        .trim_matches('"');
    let delimiter = format!("--{boundary}");
    let text = body;
    let mut parts = split_bytes(text, delimiter.as_bytes());
    parts.find_map(|part| {
        let header_end = part.windows(4).position(|w| w == b"\r\n\r\n")?;
        let headers = std::str::from_utf8(&part[..header_end]).ok()?;
        let wanted = format!("name=\"{name}\"");
        if !headers.to_ascii_lowercase().contains(&wanted.to_ascii_lowercase()) {
            return None;
        }
        let content = &part[header_end + 4..];
        let content = content.strip_suffix(b"\r\n").unwrap_or(content);
        Some(content.to_vec())
    })
}

fn split_bytes<'a>(haystack: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
    let mut rest = haystack;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match rest.windows(needle.len()).position(|w| w == needle) {
            Some(at) => {
                let part = &rest[..at];
                rest = &rest[at + needle.len()..];
                Some(part)
            }
            None => {
                let part = rest;
                rest = &[];
                Some(part)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_and_multipart_fields() {
        assert_eq!(form_field(b"a=1&config=x%3A+1%0A", "config"), Some(b"x: 1\n".to_vec()));
        let body = b"--XYZ\r\nContent-Disposition: form-data; name=\"config\"; filename=\"k.yml\"\r\n\r\n_format_version: \"3.0\"\r\n--XYZ--\r\n";
        assert_eq!(
            multipart_field("multipart/form-data; boundary=XYZ", body, "config"),
            Some(b"_format_version: \"3.0\"".to_vec())
        );
        assert_eq!(
            multipart_field("multipart/form-data; boundary=XYZ", body, "other"),
            None
        );
    }
}
