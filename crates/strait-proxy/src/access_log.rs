//! The node's proxy access log (`proxy_access_log`, `log_format`): one
//! line per request, written after the response's last byte by the log
//! file writer thread (strait_runtime::logs::files), never by a worker.
//!
//! Text lines use Kong's nginx format:
//! `$remote_addr - $remote_user [$time_local] "$request" $status
//! $body_bytes_sent "$http_referer" "$http_user_agent" kong_request_id:
//! "$kong_request_id"` (times in UTC). JSON lines carry the same facts
//! plus the latency in milliseconds.

use std::fmt::Write as _;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response};
use http_body::{Body, Frame, SizeHint};

use strait_runtime::clock::UtcTime;

use crate::body::{boxed, BoxError, ProxyBody};

/// Where and how access lines are written.
#[derive(Debug, Clone)]
pub struct AccessLog {
    pub path: Arc<Path>,
    pub json: bool,
}

/// What the line says of the request, taken before it is proxied: cheap
/// clones (the URI and header values share the parsed request's bytes);
/// the text is formatted when the line is written.
pub(crate) struct Pending {
    log: AccessLog,
    client: std::net::IpAddr,
    method: http::Method,
    uri: http::Uri,
    version: http::Version,
    referer: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
    started: Instant,
}

impl Pending {
    pub(crate) fn new<B>(log: &AccessLog, request: &Request<B>, client: std::net::IpAddr, started: Instant) -> Pending {
        Pending {
            log: log.clone(),
            client,
            method: request.method().clone(),
            uri: request.uri().clone(),
            version: request.version(),
            referer: request.headers().get(header::REFERER).cloned(),
            user_agent: request.headers().get(header::USER_AGENT).cloned(),
            started,
        }
    }

    /// Follows `response`'s body and writes the line when it ends.
    pub(crate) fn follow(self, response: Response<ProxyBody>, request_id: &str) -> Response<ProxyBody> {
        let status = response.status().as_u16();
        let (head, body) = response.into_parts();
        let logged = Logged {
            inner: body,
            pending: Some(self),
            status,
            request_id: request_id.to_string(),
            sent: 0,
        };
        Response::from_parts(head, boxed(logged))
    }

    fn write(self, status: u16, sent: u64, request_id: &str) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let uri = self
            .uri
            .path_and_query()
            .map_or_else(|| self.uri.path(), |p| p.as_str());
        let (referer, user_agent) = (lossy(&self.referer), lossy(&self.user_agent));
        let mut line = String::with_capacity(256);
        if self.log.json {
            let value = serde_json::json!({
                "time": rfc3339(now.as_secs(), now.subsec_millis()),
                "client_ip": self.client.to_string(),
                "method": self.method.as_str(),
                "uri": uri,
                "protocol": format!("{:?}", self.version),
                "status": status,
                "bytes_sent": sent,
                "referer": referer,
                "user_agent": user_agent,
                "request_id": request_id,
                "latency_ms": self.started.elapsed().as_millis() as u64,
            });
            line.push_str(&value.to_string());
        } else {
            let quoted = |v: &Option<std::borrow::Cow<'_, str>>| v.as_deref().map_or_else(|| "-".to_string(), escape);
            let request_line = format!("{} {uri} {:?}", self.method, self.version);
            let _ = write!(
                line,
                "{} - - [{}] \"{}\" {status} {sent} \"{}\" \"{}\" kong_request_id: \"{request_id}\"",
                self.client,
                time_local(now.as_secs()),
                escape(&request_line),
                quoted(&referer),
                quoted(&user_agent),
            );
        }
        line.push('\n');
        strait_runtime::logs::files::append(&self.log.path, line.into_bytes(), false);
    }
}

fn lossy(value: &Option<HeaderValue>) -> Option<std::borrow::Cow<'_, str>> {
    value.as_ref().map(|v| String::from_utf8_lossy(v.as_bytes()))
}

/// nginx's escaping of `"`, `\` and bytes outside printable ASCII.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'"' | b'\\' | 0..0x20 | 0x7f.. => {
                let _ = write!(out, "\\x{byte:02X}");
            }
            _ => out.push(byte as char),
        }
    }
    out
}

/// nginx's `$time_local` in UTC: `23/Nov/2026:19:05:09 +0000`.
fn time_local(secs: u64) -> String {
    let t = UtcTime::of(secs);
    format!("{:02}/{}/{}:{} +0000", t.day, t.month_name(), t.year, t.clock())
}

/// `2026-11-23T19:05:09.123Z`.
pub fn rfc3339(secs: u64, millis: u32) -> String {
    let t = UtcTime::of(secs);
    format!("{:04}-{:02}-{:02}T{}.{millis:03}Z", t.year, t.month, t.day, t.clock())
}

/// A response body that writes the access line when it ends or is dropped.
struct Logged {
    inner: ProxyBody,
    pending: Option<Pending>,
    status: u16,
    request_id: String,
    sent: u64,
}

impl Logged {
    fn finish(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.write(self.status, self.sent, &self.request_id);
        }
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Body for Logged {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.sent += data.len() as u64;
                }
                if this.inner.is_end_stream() {
                    this.finish();
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.finish(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_nginx_and_rfc3339() {
        assert_eq!(time_local(1_795_460_709), "23/Nov/2026:19:05:09 +0000");
        assert_eq!(rfc3339(1_795_460_709, 7), "2026-11-23T19:05:09.007Z");
    }

    #[test]
    fn quotes_and_control_bytes_are_escaped() {
        assert_eq!(escape("GET /a\"b HTTP/1.1"), "GET /a\\x22b HTTP/1.1");
        assert_eq!(escape("x\ny"), "x\\x0Ay");
    }
}
