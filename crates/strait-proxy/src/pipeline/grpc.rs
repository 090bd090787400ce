//! gRPC at the edge: a response Strait or a plugin produces for a gRPC
//! request (no route, upstream down, timeout, an authentication failure, a
//! rate limit) is sent as a gRPC status, so a gRPC client sees UNAVAILABLE
//! or UNAUTHENTICATED instead of a JSON body it cannot parse.
//!
//! The answer is a trailers-only response (the gRPC wire spec): HTTP 200,
//! `content-type: application/grpc`, `grpc-status` and `grpc-message` in
//! the only HEADERS frame, which ends the stream. The status follows Kong's
//! table (`kong/pdk/response.lua`), except 502, which Kong maps to INTERNAL
//! and Strait to UNAVAILABLE: the upstream could not be reached, which is
//! what gRPC clients retry on. The message is the one the JSON body would
//! have carried.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::time::{sleep_until, Instant, Sleep};

use crate::pipeline::body::{full, BoxError, ProxyBody};

/// gRPC status codes and their names.
pub const OK: u8 = 0;
pub const INVALID_ARGUMENT: u8 = 3;
pub const DEADLINE_EXCEEDED: u8 = 4;
pub const NOT_FOUND: u8 = 5;
pub const PERMISSION_DENIED: u8 = 7;
pub const RESOURCE_EXHAUSTED: u8 = 8;
pub const UNIMPLEMENTED: u8 = 12;
pub const INTERNAL: u8 = 13;
pub const UNAVAILABLE: u8 = 14;
pub const UNAUTHENTICATED: u8 = 16;

/// Whether a request (by its `content-type`) speaks gRPC (or gRPC-Web).
pub fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The gRPC status for an HTTP status of a response Strait produced.
pub fn status_for(http: StatusCode) -> u8 {
    match http.as_u16() {
        200..=299 => OK,
        401 => UNAUTHENTICATED,
        403 => PERMISSION_DENIED,
        404 => NOT_FOUND,
        409 => 6,
        429 => RESOURCE_EXHAUSTED,
        499 => 1,
        501 => UNIMPLEMENTED,
        502 | 503 => UNAVAILABLE,
        504 => DEADLINE_EXCEEDED,
        400..=499 => INVALID_ARGUMENT,
        500..=599 => INTERNAL,
        _ => 2,
    }
}

/// The `grpc-timeout` of a request: up to 8 digits and a unit (`H`, `M`,
/// `S`, `m`, `u`, `n`); `None` when absent or malformed (then the
/// service's timeouts alone apply).
pub fn timeout(headers: &http::HeaderMap) -> Option<std::time::Duration> {
    use std::time::Duration;
    let value = headers.get("grpc-timeout")?.to_str().ok()?.trim();
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A gRPC response body cut at the call's deadline: when the deadline
/// passes before the upstream's stream ends, the upstream stream is dropped
/// (h2 resets it with CANCEL, so the server stops working for nobody) and
/// the client's stream ends with `grpc-status: 4` (DEADLINE_EXCEEDED)
/// trailers, as a gRPC server ends a call past its deadline.
pub struct DeadlineBody {
    inner: Option<ProxyBody>,
    deadline: Instant,
    /// Set the first time the body has to wait: a response whose frames
    /// are all there (most unary calls) never arms a timer.
    timer: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    pub fn new(inner: ProxyBody, deadline: Instant) -> DeadlineBody {
        DeadlineBody {
            inner: Some(inner),
            deadline,
            timer: None,
        }
    }
}

/// The trailers that end a call at its deadline.
fn deadline_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from(u16::from(DEADLINE_EXCEEDED)));
    trailers.insert("grpc-message", HeaderValue::from_static("Deadline exceeded"));
    trailers
}

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(frame) = Pin::new(inner).poll_frame(cx) {
            if frame.is_none() {
                self.inner = None;
            }
            return Poll::Ready(frame);
        }
        let deadline = self.deadline;
        let timer = self.timer.get_or_insert_with(|| Box::pin(sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.inner = None;
                Poll::Ready(Some(Ok(Frame::trailers(deadline_trailers()))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|inner| inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map(|inner| inner.size_hint()).unwrap_or_default()
    }
}

/// `grpc-message` encoding: printable ASCII except `%` as is, the rest
/// percent-encoded (UTF-8 bytes).
pub fn encode_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A trailers-only gRPC answer carrying `response`'s status and message
/// (the `message` of a JSON body, else the body's text). Headers other than
/// the body's own (`content-type`, `content-length`) are kept.
pub async fn to_grpc(response: Response<ProxyBody>) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let message = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).trim().to_string());
    let message = if message.is_empty() {
        parts.status.canonical_reason().unwrap_or("").to_string()
    } else {
        message
    };
    let status = status_for(parts.status);
    parts.status = StatusCode::OK;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    parts
        .headers
        .insert("grpc-status", HeaderValue::from(u16::from(status)));
    if let Ok(value) = HeaderValue::from_str(&encode_message(&message)) {
        parts.headers.insert("grpc-message", value);
    }
    Response::from_parts(parts, full(Bytes::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_kongs_table_but_502_is_unavailable() {
        let status = |code: u16| status_for(StatusCode::from_u16(code).unwrap());
        assert_eq!(status(401), UNAUTHENTICATED);
        assert_eq!(status(404), NOT_FOUND);
        assert_eq!(status(429), RESOURCE_EXHAUSTED);
        assert_eq!(status(502), UNAVAILABLE);
        assert_eq!(status(503), UNAVAILABLE);
        assert_eq!(status(504), DEADLINE_EXCEEDED);
        assert_eq!(status(418), INVALID_ARGUMENT);
        assert_eq!(status(507), INTERNAL);
    }

    #[test]
    fn grpc_timeouts_parse() {
        use std::time::Duration;
        let of = |v: &'static str| {
            let mut headers = http::HeaderMap::new();
            headers.insert("grpc-timeout", HeaderValue::from_static(v));
            timeout(&headers)
        };
        assert_eq!(of("200m"), Some(Duration::from_millis(200)));
        assert_eq!(of("2S"), Some(Duration::from_secs(2)));
        assert_eq!(of("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(of("5u"), Some(Duration::from_micros(5)));
        assert_eq!(of("123456789m"), None, "more than 8 digits");
        assert_eq!(of("m"), None);
        assert_eq!(of("10x"), None);
        assert_eq!(timeout(&http::HeaderMap::new()), None);
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(encode_message("No API key found"), "No API key found");
        assert_eq!(encode_message("100% né\n"), "100%25 n%C3%A9%0A");
    }

    #[tokio::test]
    async fn a_json_error_becomes_trailers_only() {
        let mut response = Response::new(full(r#"{"message":"API rate limit exceeded"}"#));
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        response
            .headers_mut()
            .insert("x-ratelimit-remaining", HeaderValue::from(0));
        let grpc = to_grpc(response).await;
        assert_eq!(grpc.status(), StatusCode::OK);
        assert_eq!(grpc.headers()["grpc-status"], "8");
        assert_eq!(grpc.headers()["grpc-message"], "API rate limit exceeded");
        assert_eq!(grpc.headers()["content-type"], "application/grpc");
        assert_eq!(grpc.headers()["x-ratelimit-remaining"], "0");
        assert!(grpc.into_body().collect().await.unwrap().to_bytes().is_empty());
    }
}
