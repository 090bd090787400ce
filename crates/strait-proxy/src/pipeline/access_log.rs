//! The node's proxy access log (`proxy_access_log`, `log_format`): one
//! line per request, written after the response's last byte by the log
//! file writer thread (strait_runtime::logs::files), never by a worker.
//!
//! Text lines use Kong's nginx format:
//! `$remote_addr - $remote_user [$time_local] "$request" $status
//! $body_bytes_sent "$http_referer" "$http_user_agent" kong_request_id:
//! "$kong_request_id"` (times in UTC). JSON lines carry the same facts
//! plus the latency in milliseconds.

use std::cell::RefCell;
use std::io::Write as _;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response};
use http_body::{Body, Frame, SizeHint};

use strait_runtime::clock::UtcTime;
use strait_runtime::logs::files::Batch;

use crate::pipeline::body::{boxed_as_is, BoxError, ProxyBody};
use crate::pipeline::kong_headers::RequestId;

/// Where and how access lines are written.
#[derive(Debug, Clone)]
pub struct AccessLog {
    pub path: Arc<Path>,
    pub json: bool,
}

impl AccessLog {
    /// The access log of one worker: its lines gather in a batch of its own
    /// and reach the file 64 KiB at a time (or within 100 ms), with no
    /// allocation, lock contention or system call per line.
    pub(crate) fn for_worker(&self) -> WorkerLog {
        WorkerLog {
            json: self.json,
            batch: Batch::new(self.path.clone()),
        }
    }
}

/// A worker's access log (see [`AccessLog::for_worker`]).
pub(crate) struct WorkerLog {
    json: bool,
    batch: Arc<Batch>,
}

/// What the line says of the request, taken before it is proxied: cheap
/// clones (the URI and header values share the parsed request's bytes);
/// the text is formatted when the line is written.
pub(crate) struct Pending {
    json: bool,
    batch: Arc<Batch>,
    client: std::net::IpAddr,
    method: http::Method,
    uri: http::Uri,
    version: http::Version,
    referer: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
    started: Instant,
}

impl Pending {
    pub(crate) fn new<B>(log: &WorkerLog, request: &Request<B>, client: std::net::IpAddr, started: Instant) -> Pending {
        Pending {
            json: log.json,
            batch: log.batch.clone(),
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
    pub(crate) fn follow(self, response: Response<ProxyBody>, request_id: RequestId) -> Response<ProxyBody> {
        let status = response.status().as_u16();
        let (head, body) = response.into_parts();
        let logged = Logged {
            inner: body,
            pending: Some(self),
            status,
            request_id,
            sent: 0,
        };
        Response::from_parts(head, boxed_as_is(logged))
    }

    fn write(self, status: u16, sent: u64, request_id: &RequestId) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let batch = self.batch.clone();
        batch.push(|line| match self.json {
            true => {
                let latency_ms = self.started.elapsed().as_millis() as u64;
                self.json_line(line, now, latency_ms, status, sent, request_id)
            }
            false => self.text_line(line, now.as_secs(), status, sent, request_id),
        });
    }

    fn uri(&self) -> &str {
        self.uri
            .path_and_query()
            .map_or_else(|| self.uri.path(), |p| p.as_str())
    }

    /// Kong's nginx line, formatted straight into the batch.
    fn text_line(&self, line: &mut Vec<u8>, secs: u64, status: u16, sent: u64, request_id: &RequestId) {
        let _ = write!(line, "{} - - [", self.client);
        with_times(secs, |times| line.extend_from_slice(&times.time_local));
        line.extend_from_slice(b"] \"");
        escape_into(line, self.method.as_str().as_bytes());
        line.push(b' ');
        escape_into(line, self.uri().as_bytes());
        let _ = write!(line, " {:?}\" {status} {sent} \"", self.version);
        quoted_into(line, &self.referer);
        line.extend_from_slice(b"\" \"");
        quoted_into(line, &self.user_agent);
        line.extend_from_slice(b"\" kong_request_id: \"");
        line.extend_from_slice(request_id.as_str().as_bytes());
        line.extend_from_slice(b"\"\n");
    }

    /// The JSON line, its keys in the order they always had.
    fn json_line(
        &self,
        line: &mut Vec<u8>,
        now: std::time::Duration,
        latency_ms: u64,
        status: u16,
        sent: u64,
        request_id: &RequestId,
    ) {
        line.extend_from_slice(b"{\"time\":\"");
        with_times(now.as_secs(), |times| line.extend_from_slice(&times.rfc3339_seconds));
        let _ = write!(
            line,
            ".{:03}Z\",\"client_ip\":\"{}\",\"method\":",
            now.subsec_millis(),
            self.client
        );
        json_string(line, self.method.as_str());
        line.extend_from_slice(b",\"uri\":");
        json_string(line, self.uri());
        let _ = write!(
            line,
            ",\"protocol\":\"{:?}\",\"status\":{status},\"bytes_sent\":{sent},\"referer\":",
            self.version
        );
        json_optional(line, &self.referer);
        line.extend_from_slice(b",\"user_agent\":");
        json_optional(line, &self.user_agent);
        let _ = writeln!(
            line,
            ",\"request_id\":\"{}\",\"latency_ms\":{}}}",
            request_id.as_str(),
            latency_ms
        );
    }
}

/// A header's text as the line shows it: invalid UTF-8 replaced, as
/// `String::from_utf8_lossy` does (no copy when the bytes are valid).
fn lossy(value: &HeaderValue) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(value.as_bytes())
}

/// A quoted field's content: the escaped value, or `-` when absent.
fn quoted_into(line: &mut Vec<u8>, value: &Option<HeaderValue>) {
    match value {
        Some(value) => escape_into(line, lossy(value).as_bytes()),
        None => line.push(b'-'),
    }
}

fn json_string(line: &mut Vec<u8>, text: &str) {
    let _ = serde_json::to_writer(&mut *line, text);
}

fn json_optional(line: &mut Vec<u8>, value: &Option<HeaderValue>) {
    match value {
        Some(value) => json_string(line, &lossy(value)),
        None => line.extend_from_slice(b"null"),
    }
}

/// nginx's escaping of `"`, `\` and bytes outside printable ASCII.
fn escape_into(line: &mut Vec<u8>, text: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in text {
        match byte {
            b'"' | b'\\' | 0..0x20 | 0x7f.. => {
                line.extend_from_slice(&[b'\\', b'x', HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
            }
            _ => line.push(byte),
        }
    }
}

/// The second's texts a line needs, made once per second per thread.
struct Times {
    secs: u64,
    /// nginx's `$time_local` in UTC: `23/Nov/2026:19:05:09 +0000`.
    time_local: Vec<u8>,
    /// `2026-11-23T19:05:09` (the milliseconds follow).
    rfc3339_seconds: Vec<u8>,
}

fn with_times<T>(secs: u64, use_times: impl FnOnce(&Times) -> T) -> T {
    thread_local! {
        static TIMES: RefCell<Option<Times>> = const { RefCell::new(None) };
    }
    TIMES.with_borrow_mut(|cached| {
        let stale = cached.as_ref().is_none_or(|times| times.secs != secs);
        if stale {
            *cached = Some(Times {
                secs,
                time_local: time_local(secs).into_bytes(),
                rfc3339_seconds: rfc3339_seconds(secs).into_bytes(),
            });
        }
        use_times(cached.as_ref().expect("just filled"))
    })
}

/// nginx's `$time_local` in UTC: `23/Nov/2026:19:05:09 +0000`.
fn time_local(secs: u64) -> String {
    let t = UtcTime::of(secs);
    format!("{:02}/{}/{}:{} +0000", t.day, t.month_name(), t.year, t.clock())
}

fn rfc3339_seconds(secs: u64) -> String {
    let t = UtcTime::of(secs);
    format!("{:04}-{:02}-{:02}T{}", t.year, t.month, t.day, t.clock())
}

/// `2026-11-23T19:05:09.123Z`.
pub fn rfc3339(secs: u64, millis: u32) -> String {
    format!("{}.{millis:03}Z", rfc3339_seconds(secs))
}

/// A response body that writes the access line when it ends or is dropped.
struct Logged {
    inner: ProxyBody,
    pending: Option<Pending>,
    status: u16,
    request_id: RequestId,
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

    /// The line as Strait formatted it before lines were written into a
    /// batch (one `String` per line, `format!` and `serde_json::json!`):
    /// the batch's formatting must give the same bytes.
    fn reference_line(
        p: &Pending,
        now: std::time::Duration,
        latency_ms: u64,
        status: u16,
        sent: u64,
        request_id: &str,
    ) -> String {
        use std::fmt::Write as _;
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
        let uri = p.uri.path_and_query().map_or_else(|| p.uri.path(), |q| q.as_str());
        fn lossy(v: &Option<HeaderValue>) -> Option<std::borrow::Cow<'_, str>> {
            v.as_ref().map(|v| String::from_utf8_lossy(v.as_bytes()))
        }
        let (referer, user_agent) = (lossy(&p.referer), lossy(&p.user_agent));
        let mut line = String::new();
        if p.json {
            let value = serde_json::json!({
                "time": rfc3339(now.as_secs(), now.subsec_millis()),
                "client_ip": p.client.to_string(),
                "method": p.method.as_str(),
                "uri": uri,
                "protocol": format!("{:?}", p.version),
                "status": status,
                "bytes_sent": sent,
                "referer": referer,
                "user_agent": user_agent,
                "request_id": request_id,
                "latency_ms": latency_ms,
            });
            line.push_str(&value.to_string());
        } else {
            let quoted = |v: &Option<std::borrow::Cow<'_, str>>| v.as_deref().map_or_else(|| "-".to_string(), escape);
            let request_line = format!("{} {uri} {:?}", p.method, p.version);
            let _ = write!(
                line,
                "{} - - [{}] \"{}\" {status} {sent} \"{}\" \"{}\" kong_request_id: \"{request_id}\"",
                p.client,
                time_local(now.as_secs()),
                escape(&request_line),
                quoted(&referer),
                quoted(&user_agent),
            );
        }
        line.push('\n');
        line
    }

    #[test]
    fn lines_are_byte_for_byte_what_they_were() {
        let log = AccessLog {
            path: Arc::from(std::env::temp_dir().join("strait-access-format-test.log").as_path()),
            json: false,
        }
        .for_worker();
        let requests = [
            ("GET", "/", http::Version::HTTP_11, None, None, "127.0.0.1"),
            (
                "POST",
                "/a%20b/c?x='1'&y={z}|^`",
                http::Version::HTTP_2,
                Some(&b"https://r.example/\"q\""[..]),
                Some(&b"curl/8.5 \\ tab\tok"[..]),
                "2001:db8::1",
            ),
            (
                "PURGE",
                "/only/path",
                http::Version::HTTP_10,
                Some(&b""[..]),
                Some(&b"caf\xe9 bytes \xff\xfe"[..]),
                "10.0.0.7",
            ),
            (
                "GET",
                "http://host.example:8080/abs?q",
                http::Version::HTTP_11,
                None,
                Some(&b"{\"json\":1}"[..]),
                "::1",
            ),
        ];
        for json in [false, true] {
            for (method, uri, version, referer, user_agent, client) in requests {
                let mut builder = Request::builder().method(method).uri(uri).version(version);
                if let Some(referer) = referer {
                    builder = builder.header(header::REFERER, HeaderValue::from_bytes(referer).unwrap());
                }
                if let Some(user_agent) = user_agent {
                    builder = builder.header(header::USER_AGENT, HeaderValue::from_bytes(user_agent).unwrap());
                }
                let request = builder.body(()).unwrap();
                let mut pending = Pending::new(&log, &request, client.parse().unwrap(), Instant::now());
                pending.json = json;
                let request_id = RequestId::new();
                for now in [
                    std::time::Duration::new(1_795_460_709, 7_000_000),
                    std::time::Duration::new(1_795_460_709, 999_999_999),
                    std::time::Duration::new(1_795_460_710, 0),
                ] {
                    let mut line = Vec::new();
                    match json {
                        true => pending.json_line(&mut line, now, 17, 404, 1234, &request_id),
                        false => pending.text_line(&mut line, now.as_secs(), 404, 1234, &request_id),
                    }
                    let expected = reference_line(&pending, now, 17, 404, 1234, request_id.as_str());
                    assert_eq!(String::from_utf8_lossy(&line), expected, "{method} {uri} json={json}");
                    assert_eq!(line, expected.as_bytes());
                }
            }
        }
    }

    #[test]
    fn times_are_nginx_and_rfc3339() {
        assert_eq!(time_local(1_795_460_709), "23/Nov/2026:19:05:09 +0000");
        assert_eq!(rfc3339(1_795_460_709, 7), "2026-11-23T19:05:09.007Z");
    }

    fn escaped(text: &str) -> String {
        let mut out = Vec::new();
        escape_into(&mut out, text.as_bytes());
        String::from_utf8(out).expect("escaped text is ASCII")
    }

    #[test]
    fn quotes_and_control_bytes_are_escaped() {
        assert_eq!(escaped("GET /a\"b HTTP/1.1"), "GET /a\\x22b HTTP/1.1");
        assert_eq!(escaped("x\ny"), "x\\x0Ay");
        assert_eq!(escaped("\u{e9}\\"), "\\xC3\\xA9\\x5C");
    }
}
