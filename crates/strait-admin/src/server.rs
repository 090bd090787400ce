//! HTTP plumbing for the Admin and status APIs: listeners, request routing,
//! body limits, token authentication, form and multipart field extraction.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use strait_core::header_switches::HeaderSwitches;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::crud::body::multipart_pairs;
use crate::endpoints::{self, Endpoint};
use crate::request::{decode_segment, form_pairs, AdminRequest, Query};
use crate::response::{empty_response, message, method_not_allowed, not_found, AdminResponse};
use crate::short_writes::ShortWrites;
use crate::{dispatch, AdminState};

/// Largest Admin API request body (a full declarative config).
const MAX_BODY: usize = 256 * 1024 * 1024;

/// Serve the Admin API on `listener` until `shutdown` turns true; over TLS
/// when `tls` is given (`admin_listen ... ssl`).
pub async fn serve_admin(
    listener: TcpListener,
    state: Arc<AdminState>,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: watch::Receiver<bool>,
) {
    serve(listener, state, tls, shutdown, false).await;
}

/// Serve the status API (`/status`, `/status/ready`) on `listener`.
pub async fn serve_status(listener: TcpListener, state: Arc<AdminState>, shutdown: watch::Receiver<bool>) {
    serve(listener, state, None, shutdown, true).await;
}

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

async fn serve(
    listener: TcpListener,
    state: Arc<AdminState>,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: watch::Receiver<bool>,
    status_only: bool,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let mut stop = shutdown.clone();
    loop {
        let (stream, client) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::warn!(%error, "admin accept failed");
                    continue;
                }
            },
            _ = strait_runtime::stopped(&mut stop) => return,
        };
        let state = state.clone();
        let shutdown = shutdown.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let stream = ShortWrites::new(stream);
            match acceptor {
                None => serve_connection(TokioIo::new(stream), state, shutdown, status_only).await,
                Some(acceptor) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => serve_connection(TokioIo::new(tls), state, shutdown, status_only).await,
                    Ok(Err(error)) => tracing::debug!(%error, %client, "admin TLS handshake failed"),
                    Err(_) => tracing::debug!(%client, "admin TLS handshake timed out"),
                },
            }
        });
    }
}

async fn serve_connection<IO>(io: IO, state: Arc<AdminState>, mut shutdown: watch::Receiver<bool>, status_only: bool)
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let state = state.clone();
        async move {
            let started = std::time::Instant::now();
            let old_client = request.version() < http::Version::HTTP_11;
            let verdict = match status_only {
                true => crate::origin::Verdict::NotCrossOrigin,
                false => crate::origin::judge(&state.origins, request.method(), request.headers()),
            };
            let mut response = match verdict {
                crate::origin::Verdict::NotCrossOrigin => route(&state, request, status_only).await,
                crate::origin::Verdict::Allowed(origin) => {
                    let mut response = route(&state, request, status_only).await;
                    crate::origin::add_cors(&mut response, origin);
                    response
                }
                crate::origin::Verdict::Preflight(origin) => {
                    let mut response = crate::response::empty_response(StatusCode::NO_CONTENT);
                    crate::origin::preflight(&mut response, origin);
                    response
                }
                crate::origin::Verdict::Refused(what) => {
                    tracing::warn!(%what, "Admin API: cross-origin request refused");
                    let mut response = crate::response::message(
                        StatusCode::FORBIDDEN,
                        &format!(
                            "cross-origin request refused: {what} is not the admin UI's origin (admin_gui_url{})",
                            state.origins.first().map(|o| format!(": {o}")).unwrap_or_default()
                        ),
                    );
                    response.headers_mut().remove(header::ACCESS_CONTROL_ALLOW_ORIGIN);
                    response
                }
            };
            if old_client {
                response = crate::body::gathered(response).await;
            }
            add_kong_headers(&mut response, &state.headers, started);
            Ok::<_, Infallible>(response)
        }
    });
    serve_http1(io, service, &mut shutdown).await;
}

/// One HTTP/1.1 connection served by `service` until it ends; at shutdown,
/// what is in flight finishes and the connection closes.
pub(crate) async fn serve_http1<IO, S>(io: IO, service: S, shutdown: &mut watch::Receiver<bool>)
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = crate::body::AdminBody>,
{
    let connection = http1::Builder::new().serve_connection(io, service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = strait_runtime::stopped(shutdown) => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// Kong's Admin (and Status) API headers: `X-Kong-Admin-Latency` (ms) and
/// `Server` as `headers` switches them, and `X-Kong-Admin-Request-ID`.
fn add_kong_headers(response: &mut AdminResponse, switches: &HeaderSwitches, started: std::time::Instant) {
    let headers = response.headers_mut();
    if switches.server {
        headers.insert(header::SERVER, HeaderValue::from_static(strait_core::SERVER_HEADER));
    } else {
        headers.remove(header::SERVER);
    }
    if switches.admin_latency {
        headers.insert(
            HeaderName::from_static("x-kong-admin-latency"),
            HeaderValue::from(started.elapsed().as_millis() as u64),
        );
    }
    headers.insert(
        HeaderName::from_static("x-kong-admin-request-id"),
        crate::request_id::admin_request_id(),
    );
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
    let segments: Vec<String> = request
        .uri()
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode_segment)
        .collect();
    let Some(endpoint) = endpoints::parse(&segments) else {
        return not_found();
    };
    if status_only && !matches!(endpoint, Endpoint::Status | Endpoint::StatusReady | Endpoint::Metrics) {
        return not_found();
    }
    let allow = endpoint.allow();
    let method = request.method().clone();
    if method == Method::OPTIONS {
        return allow_response(allow);
    }
    if !allow.split(", ").any(|m| m == method.as_str()) {
        return method_not_allowed(allow);
    }
    let admin_request = match admin_request(request).await {
        Ok(admin_request) => admin_request,
        Err(response) => return response,
    };
    if endpoint.writes(&method) {
        if let crate::Cluster::DataPlane(link) = &state.cluster {
            return crate::clustering::read_only(link);
        }
        let _serialized = state.writes.lock().await;
        let attempt = || dispatch::handle(state, endpoint.clone(), &admin_request);
        return crate::crud::attempts::run(state, attempt).await;
    }
    dispatch::handle(state, endpoint, &admin_request).await
}

/// Reads the whole request into an [`AdminRequest`].
async fn admin_request(request: Request<Incoming>) -> Result<AdminRequest, AdminResponse> {
    let method = request.method().clone();
    let query = Query::parse(request.uri().query());
    let raw_query = request.uri().query().map(str::to_string);
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let media_type = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let body = read_body(request).await?;
    Ok(AdminRequest {
        method,
        query,
        raw_query,
        media_type,
        content_type,
        body,
    })
}

fn allow_response(methods: &'static str) -> AdminResponse {
    let mut response = empty_response(StatusCode::NO_CONTENT);
    let value = header::HeaderValue::from_static(methods);
    response.headers_mut().insert(header::ALLOW, value.clone());
    response
        .headers_mut()
        .insert(header::ACCESS_CONTROL_ALLOW_METHODS, value);
    response
}

async fn read_body(request: Request<Incoming>) -> Result<Bytes, AdminResponse> {
    let too_large = || message(StatusCode::PAYLOAD_TOO_LARGE, "Request size limit exceeded");
    // Sized once from Content-Length (a declarative document can be
    // megabytes), not grown chunk by chunk.
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|length| length > MAX_BODY) {
        return Err(too_large());
    }
    let mut body = Limited::new(request.into_body(), MAX_BODY);
    let mut buffer = Vec::with_capacity(declared.unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| too_large())?;
        if let Ok(data) = frame.into_data() {
            buffer.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buffer))
}

/// The value of `name` in an `application/x-www-form-urlencoded` body.
pub fn form_field(body: &[u8], name: &str) -> Option<Vec<u8>> {
    form_pairs(body)
        .into_iter()
        .find_map(|(key, value)| (key == name.as_bytes()).then_some(value))
}

/// The content of the part named `name` in a `multipart/form-data` body.
pub fn multipart_field(content_type: &str, body: &[u8], name: &str) -> Option<Vec<u8>> {
    multipart_pairs(content_type, body)
        .into_iter()
        .find_map(|(key, value)| (key == name.as_bytes()).then_some(value))
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
