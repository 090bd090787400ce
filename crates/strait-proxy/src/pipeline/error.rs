//! The data plane's one error type and the one function that turns an error
//! kind into a response (Kong's status codes and bodies).

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Full};

use crate::pipeline::body::ProxyBody;
use crate::pipeline::kong_headers::{HeaderSwitches, RequestId};

/// Where a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    Client,
    Upstream,
    Internal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NoRoute,
    NoService,
    /// A plain-HTTP request to an https-only route; carries the route's status.
    HttpsRequired(u16),
    BadRequest,
    PayloadTooLarge,
    RequestTimeout,
    HeadersTooLarge,
    /// TRACE and CONNECT, which the proxy does not forward (nginx's 405).
    MethodNotAllowed,
    /// A request line longer than 8 KiB (nginx's `large_client_header_buffers`).
    UriTooLong,
    UpstreamConnect,
    /// No connection within the service's `connect_timeout`.
    UpstreamConnectTimeout,
    UpstreamTimeout,
    UpstreamInvalid,
    NoPeer,
    NameResolution,
    Internal,
}

/// A failure on the request path.
#[derive(Debug)]
pub struct ProxyError {
    pub kind: ErrorKind,
    /// Human-readable cause for logs (never sent to the client).
    pub cause: String,
}

impl ProxyError {
    pub fn new(kind: ErrorKind, cause: impl Into<String>) -> ProxyError {
        ProxyError {
            kind,
            cause: cause.into(),
        }
    }

    /// A connect failure can be retried on the next target.
    pub fn retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::UpstreamConnect | ErrorKind::UpstreamConnectTimeout
        )
    }
}

impl ErrorKind {
    pub fn source(self) -> ErrorSource {
        match self {
            ErrorKind::NoRoute
            | ErrorKind::HttpsRequired(_)
            | ErrorKind::BadRequest
            | ErrorKind::PayloadTooLarge
            | ErrorKind::RequestTimeout
            | ErrorKind::HeadersTooLarge
            | ErrorKind::MethodNotAllowed
            | ErrorKind::UriTooLong => ErrorSource::Client,
            ErrorKind::UpstreamConnect
            | ErrorKind::UpstreamTimeout
            | ErrorKind::UpstreamConnectTimeout
            | ErrorKind::UpstreamInvalid
            | ErrorKind::NoPeer
            | ErrorKind::NameResolution => ErrorSource::Upstream,
            ErrorKind::NoService | ErrorKind::Internal => ErrorSource::Internal,
        }
    }

    /// Status and Kong's message for this kind.
    pub fn status_and_message(self) -> (StatusCode, &'static str) {
        match self {
            ErrorKind::NoRoute => (StatusCode::NOT_FOUND, "no Route matched with those values"),
            ErrorKind::NoService => (StatusCode::SERVICE_UNAVAILABLE, "no Service found with those values"),
            ErrorKind::HttpsRequired(code) => (
                StatusCode::from_u16(code).unwrap_or(StatusCode::UPGRADE_REQUIRED),
                "Please use HTTPS protocol",
            ),
            ErrorKind::BadRequest => (StatusCode::BAD_REQUEST, "Bad request"),
            ErrorKind::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large"),
            ErrorKind::RequestTimeout => (StatusCode::REQUEST_TIMEOUT, "Request timeout"),
            ErrorKind::HeadersTooLarge => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "Request header or cookie too large",
            ),
            ErrorKind::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "Method not allowed"),
            ErrorKind::UriTooLong => (StatusCode::URI_TOO_LONG, "Request-URI Too Large"),
            ErrorKind::UpstreamConnect | ErrorKind::UpstreamInvalid => (
                StatusCode::BAD_GATEWAY,
                "An invalid response was received from the upstream server",
            ),
            ErrorKind::UpstreamTimeout | ErrorKind::UpstreamConnectTimeout => {
                (StatusCode::GATEWAY_TIMEOUT, "The upstream server is timing out")
            }
            ErrorKind::NoPeer => (
                StatusCode::SERVICE_UNAVAILABLE,
                "failure to get a peer from the ring-balancer",
            ),
            ErrorKind::NameResolution => (StatusCode::SERVICE_UNAVAILABLE, "name resolution failed"),
            ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "An unexpected error occurred"),
        }
    }

    /// The JSON body Kong (3.5+, `kong.response.error`) sends for this kind:
    /// the message and the request's `X-Kong-Request-Id`.
    pub fn body(self, request_id: &RequestId) -> String {
        let (_, message) = self.status_and_message();
        serde_json::json!({ "message": message, "request_id": request_id.as_str() }).to_string()
    }
}

/// The one place an error kind becomes a response.
pub fn error_response(kind: ErrorKind, request_id: &RequestId) -> Response<ProxyBody> {
    let (status, _) = kind.status_and_message();
    let body = kind.body(request_id);
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    headers.insert(header::SERVER, HeaderValue::from_static(crate::SERVER_HEADER));
    if let ErrorKind::HttpsRequired(_) = kind {
        headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("TLS/1.2, HTTP/1.1"));
    }
    response
}

/// The same response as raw HTTP/1.1 bytes, for connections rejected before
/// an HTTP parser owns them (oversized or slow headers). Always closes.
/// `X-Kong-Request-Id` and `Server` follow `headers` as on any response.
pub fn raw_error_response(kind: ErrorKind, switches: &HeaderSwitches) -> Vec<u8> {
    let (status, _) = kind.status_and_message();
    let request_id = RequestId::new();
    let body = kind.body(&request_id);
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len(),
    );
    if switches.server {
        head.push_str(&format!("Server: {}\r\n", crate::SERVER_HEADER));
    }
    if switches.request_id {
        head.push_str(&format!("X-Kong-Request-Id: {}\r\n", request_id.as_str()));
    }
    format!("{head}Connection: close\r\n\r\n{body}").into_bytes()
}
