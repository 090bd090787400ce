//! Where queued log batches go: an HTTP endpoint (http-log, OTLP/HTTP), a
//! TCP stream (tcp-log), UDP datagrams (udp-log), and the local syslog
//! socket (syslog). Each runs on the shipping thread only.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Mutex;

use super::queue::{Handler, SendFuture};
use crate::clock::UtcTime;
use crate::tls::{ClientTls, Stream};

/// `send`, failed when it takes longer than `timeout`.
async fn within(timeout: Duration, send: impl std::future::Future<Output = Result<(), String>>) -> Result<(), String> {
    tokio::time::timeout(timeout, send)
        .await
        .unwrap_or_else(|_| Err(format!("could not send within {timeout:?}")))
}

/// An HTTP(S) endpoint taking POST/PUT/PATCH bodies.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path and query of the request.
    pub path: String,
    pub method: Method,
    /// Sent on every request (Host, Content-Length are added).
    pub headers: HeaderMap,
    pub timeout: Duration,
    pub keepalive: Duration,
}

/// How a batch of entries becomes one request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchBody {
    /// One entry, sent as it is (Kong's http-log with `max_batch_size` 1).
    Single,
    /// Entries as a JSON array.
    JsonArray,
    /// Entries concatenated (OTLP protobuf batches are merged by the caller).
    Concatenated,
}

/// Joins a batch as `shape` says.
pub fn batch_body(batch: &[Vec<u8>], shape: BatchBody) -> Vec<u8> {
    match shape {
        BatchBody::Single | BatchBody::Concatenated => batch.concat(),
        BatchBody::JsonArray => {
            let size = batch.iter().map(|e| e.len() + 1).sum::<usize>() + 1;
            let mut out = Vec::with_capacity(size);
            out.push(b'[');
            for (index, entry) in batch.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(entry);
            }
            out.push(b']');
            out
        }
    }
}

struct HttpState {
    target: HttpTarget,
    conn: Option<(SendRequest<Full<Bytes>>, Instant)>,
}

/// Builds a request body from a batch of entries.
pub type EncodeBatch = Box<dyn Fn(&[Vec<u8>]) -> Vec<u8> + Send>;

/// Sends batches to an [`HttpTarget`] over one kept-alive connection.
pub struct HttpSink {
    state: Arc<Mutex<HttpState>>,
    shape: BatchBody,
    /// Turns a batch into a body when the shape is not enough (OTLP).
    encode: Option<EncodeBatch>,
}

impl HttpSink {
    pub fn new(target: HttpTarget, shape: BatchBody) -> HttpSink {
        HttpSink {
            state: Arc::new(Mutex::new(HttpState { target, conn: None })),
            shape,
            encode: None,
        }
    }

    /// A sink whose request body is `encode(batch)`.
    pub fn encoded(target: HttpTarget, encode: EncodeBatch) -> HttpSink {
        HttpSink {
            encode: Some(encode),
            ..HttpSink::new(target, BatchBody::Concatenated)
        }
    }
}

impl Handler for HttpSink {
    fn send(&mut self, batch: Vec<Vec<u8>>) -> SendFuture {
        let body = match &self.encode {
            Some(encode) => encode(&batch),
            None => batch_body(&batch, self.shape),
        };
        let state = self.state.clone();
        Box::pin(async move {
            let mut state = state.lock().await;
            let timeout = state.target.timeout;
            let sent = within(timeout, state.exchange(Bytes::from(body))).await;
            if sent.is_err() {
                state.conn = None;
            }
            sent
        })
    }
}

impl HttpState {
    async fn exchange(&mut self, body: Bytes) -> Result<(), String> {
        let target = &self.target;
        let where_to = format!("{}:{}", target.host, target.port);
        let reusable = self
            .conn
            .as_ref()
            .is_some_and(|(sender, used)| !sender.is_closed() && used.elapsed() < target.keepalive);
        if !reusable {
            let tls = target.tls.then_some(ClientTls {
                server_name: &target.host,
                verify: false,
            });
            let stream = crate::tls::connect(&target.host, target.port, tls)
                .await
                .map_err(|e| format!("failed request to {where_to}: {e}"))?;
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| format!("failed request to {where_to}: {e}"))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            self.conn = Some((sender, Instant::now()));
        }
        let Some((sender, used)) = self.conn.as_mut() else {
            return Err("no connection".into());
        };
        sender
            .ready()
            .await
            .map_err(|e| format!("failed request to {where_to}: {e}"))?;
        let mut request = http::Request::new(Full::new(body.clone()));
        *request.method_mut() = target.method.clone();
        *request.uri_mut() = target
            .path
            .parse()
            .map_err(|e| format!("endpoint path {:?}: {e}", target.path))?;
        let headers = request.headers_mut();
        *headers = target.headers.clone();
        let default_port = if target.tls { 443 } else { 80 };
        let host = match target.port == default_port {
            true => target.host.clone(),
            false => where_to.clone(),
        };
        if let Ok(host) = HeaderValue::from_str(&host) {
            headers.insert(http::header::HOST, host);
        }
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("failed request to {where_to}: {e}"))?;
        let status = response.status();
        let answer = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the answer of {where_to}: {e}"))?
            .to_bytes();
        *used = Instant::now();
        if status.as_u16() < 300 {
            return Ok(());
        }
        let answer = String::from_utf8_lossy(&answer[..answer.len().min(512)]).into_owned();
        Err(format!(
            "request to {where_to} returned status code {} and body {answer}",
            status.as_u16()
        ))
    }
}

/// A TCP (or TLS) stream taking one line per entry (tcp-log).
pub struct TcpSink {
    state: Arc<Mutex<TcpState>>,
}

/// Where tcp-log connects.
#[derive(Debug, Clone)]
pub struct TcpTarget {
    pub host: String,
    pub port: u16,
    /// TLS with this SNI (the host when `None`), not verified (Kong's).
    pub tls: Option<Option<String>>,
    pub timeout: Duration,
    pub keepalive: Duration,
}

struct TcpState {
    target: TcpTarget,
    conn: Option<(Box<dyn Stream>, Instant)>,
}

impl TcpSink {
    pub fn new(target: TcpTarget) -> TcpSink {
        TcpSink {
            state: Arc::new(Mutex::new(TcpState { target, conn: None })),
        }
    }
}

impl Handler for TcpSink {
    fn send(&mut self, batch: Vec<Vec<u8>>) -> SendFuture {
        let state = self.state.clone();
        Box::pin(async move {
            let mut state = state.lock().await;
            let timeout = state.target.timeout;
            let mut payload = Vec::with_capacity(batch.iter().map(|e| e.len() + 1).sum());
            for entry in &batch {
                payload.extend_from_slice(entry);
                payload.push(b'\n');
            }
            let sent = within(timeout, state.write(&payload)).await;
            if sent.is_err() {
                state.conn = None;
            }
            sent
        })
    }
}

impl TcpState {
    async fn write(&mut self, payload: &[u8]) -> Result<(), String> {
        let target = &self.target;
        let where_to = format!("{}:{}", target.host, target.port);
        if let Some((stream, used)) = self.conn.as_mut() {
            // A peer that closed an idle connection shows as EOF: don't
            // lose the next entries into a dead socket.
            let mut probe = [0u8; 64];
            let closed = match tokio::time::timeout(Duration::ZERO, stream.read(&mut probe)).await {
                Ok(Ok(0)) | Ok(Err(_)) => true,
                Ok(Ok(_)) | Err(_) => false,
            };
            if closed || used.elapsed() >= target.keepalive {
                self.conn = None;
            }
        }
        if self.conn.is_none() {
            let tls = target.tls.as_ref().map(|sni| ClientTls {
                server_name: sni.as_deref().unwrap_or(&target.host),
                verify: false,
            });
            let stream = crate::tls::connect(&target.host, target.port, tls)
                .await
                .map_err(|e| format!("failed to connect to {where_to}: {e}"))?;
            self.conn = Some((stream, Instant::now()));
        }
        let Some((stream, used)) = self.conn.as_mut() else {
            return Err("no connection".into());
        };
        stream
            .write_all(payload)
            .await
            .map_err(|e| format!("failed to send data to {where_to}: {e}"))?;
        stream
            .flush()
            .await
            .map_err(|e| format!("failed to send data to {where_to}: {e}"))?;
        *used = Instant::now();
        Ok(())
    }
}

/// One datagram per entry (udp-log).
pub struct UdpSink {
    host: Arc<str>,
    port: u16,
    timeout: Duration,
}

impl UdpSink {
    pub fn new(host: &str, port: u16, timeout: Duration) -> UdpSink {
        UdpSink {
            host: Arc::from(host),
            port,
            timeout,
        }
    }
}

impl Handler for UdpSink {
    fn send(&mut self, batch: Vec<Vec<u8>>) -> SendFuture {
        let (host, port, timeout) = (self.host.clone(), self.port, self.timeout);
        Box::pin(async move {
            let send = async {
                let peer = tokio::net::lookup_host((&*host, port))
                    .await
                    .map_err(|e| format!("resolving {host}: {e}"))?
                    .next()
                    .ok_or_else(|| format!("{host} has no address"))?;
                let local = if peer.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
                let socket = tokio::net::UdpSocket::bind(local).await.map_err(|e| e.to_string())?;
                for entry in &batch {
                    socket
                        .send_to(entry, peer)
                        .await
                        .map_err(|e| format!("failed to send data to {host}:{port}: {e}"))?;
                }
                Ok(())
            };
            within(timeout, send).await
        })
    }
}

/// The local syslog socket (`/dev/log`), RFC 3164 framing like libc's
/// `syslog(3)`: `<PRI>Mmm dd hh:mm:ss kong[pid]: message`.
pub struct SyslogSink {
    socket: PathBuf,
}

impl SyslogSink {
    pub fn new(socket: PathBuf) -> SyslogSink {
        SyslogSink { socket }
    }
}

/// Entries for [`SyslogSink`] start with their priority byte (facility *
/// 8 + severity), then the message.
pub fn syslog_entry(priority: u8, message: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(message.len() + 1);
    entry.push(priority);
    entry.extend_from_slice(message);
    entry
}

impl Handler for SyslogSink {
    fn send(&mut self, batch: Vec<Vec<u8>>) -> SendFuture {
        let socket = self.socket.clone();
        Box::pin(async move {
            let sender = tokio::net::UnixDatagram::unbound().map_err(|e| e.to_string())?;
            let pid = std::process::id();
            for entry in &batch {
                let Some((&priority, message)) = entry.split_first() else {
                    continue;
                };
                let mut datagram = format!("<{priority}>{} kong[{pid}]: ", syslog_time(now_secs())).into_bytes();
                datagram.extend_from_slice(message);
                sender
                    .send_to(&datagram, &socket)
                    .await
                    .map_err(|e| format!("syslog socket {}: {e}", socket.display()))?;
            }
            Ok(())
        })
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `Mmm dd hh:mm:ss` (UTC) for `secs` since the epoch.
pub fn syslog_time(secs: u64) -> String {
    let t = UtcTime::of(secs);
    format!("{} {:>2} {}", t.month_name(), t.day, t.clock())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_join_as_kong_sends_them() {
        let batch = vec![b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()];
        assert_eq!(batch_body(&batch[..1], BatchBody::Single), b"{\"a\":1}");
        assert_eq!(batch_body(&batch, BatchBody::JsonArray), b"[{\"a\":1},{\"b\":2}]");
    }

    #[test]
    fn syslog_time_is_rfc3164() {
        // 2026-11-23T19:05:09Z
        assert_eq!(syslog_time(1_795_460_709), "Nov 23 19:05:09");
        assert_eq!(syslog_time(0), "Jan  1 00:00:00");
    }
}
