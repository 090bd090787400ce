//! One client connection: TLS handshake, the header pre-read that enforces
//! size/count/time limits before any parser runs, protocol choice (HTTP/1.1,
//! h2c prior knowledge, h2 via ALPN), and graceful shutdown.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::timeout;

use crate::pipeline::error::{raw_error_response, ErrorKind};
use crate::pipeline::handler::ConnInfo;
use crate::Shared;

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Limits applied to clients before and while parsing requests.
#[derive(Debug, Clone)]
pub struct ClientLimits {
    pub header_timeout: Duration,
    pub max_header_bytes: usize,
    /// The longest request line or header line (the size of Kong's
    /// `nginx_http_large_client_header_buffers`, 8k): 414 or 431 beyond.
    pub max_line_bytes: usize,
    pub max_headers: usize,
    /// Open client connections one worker keeps; past it, a new connection
    /// is closed as soon as it is accepted (nginx's `worker_connections`).
    pub max_connections_per_worker: usize,
    /// Streams one HTTP/2 connection may have open at once; more are
    /// refused with RST_STREAM(REFUSED_STREAM).
    pub http2_max_concurrent_streams: u32,
    /// A client connection older than this (±10% jitter) is asked to go:
    /// GOAWAY on HTTP/2, `Connection: close` on the next HTTP/1.1 response.
    pub max_connection_age: Option<Duration>,
    /// How long requests in flight may take to finish after that.
    pub max_connection_age_grace: Duration,
    /// Requests one client connection carries before it is asked to go (0: no limit).
    pub max_requests_per_connection: u64,
    /// HTTP/2 client connections' flow control, framing, keep-alive pings
    /// and abuse limits.
    pub http2: Http2Settings,
    /// HTTP/3 (QUIC) client connections' streams, windows, idle timeout and 0-RTT.
    pub http3: crate::wire::h3_server::Http3Settings,
}

/// The HTTP/2 settings of client connections (docs/grpc.md#http2-settings).
#[derive(Debug, Clone, PartialEq)]
pub struct Http2Settings {
    /// SETTINGS_INITIAL_WINDOW_SIZE: bytes a stream may send before it is read.
    pub initial_stream_window: u32,
    /// The connection's window (a WINDOW_UPDATE on stream 0).
    pub initial_connection_window: u32,
    /// Grow windows to the measured bandwidth-delay product instead.
    pub adaptive_window: bool,
    /// SETTINGS_MAX_FRAME_SIZE.
    pub max_frame_size: u32,
    /// PING an idle-looking connection this often (None: never) ...
    pub keepalive_interval: Option<Duration>,
    /// ... and close it when the PONG takes longer than this.
    pub keepalive_timeout: Duration,
    /// Streams a client may open and reset before they are accepted
    /// (the rapid-reset attack, CVE-2023-44487); past it, GOAWAY.
    pub max_pending_accept_reset_streams: usize,
    /// Streams Strait may reset for the client's protocol errors over a
    /// connection's life; past it, GOAWAY.
    pub max_local_error_reset_streams: usize,
}

impl Default for Http2Settings {
    fn default() -> Http2Settings {
        Http2Settings {
            initial_stream_window: 1 << 20,
            initial_connection_window: 1 << 20,
            adaptive_window: false,
            max_frame_size: 16_384,
            keepalive_interval: None,
            keepalive_timeout: Duration::from_secs(20),
            max_pending_accept_reset_streams: 20,
            max_local_error_reset_streams: 1024,
        }
    }
}

impl Default for ClientLimits {
    /// The node's defaults (docs/configuration.md).
    fn default() -> ClientLimits {
        ClientLimits {
            header_timeout: Duration::from_secs(60),
            max_header_bytes: 32768,
            max_line_bytes: 8192,
            max_headers: 100,
            max_connections_per_worker: 16384,
            http2_max_concurrent_streams: 128,
            max_connection_age: None,
            max_connection_age_grace: Duration::from_secs(30),
            max_requests_per_connection: 0,
            http2: Http2Settings::default(),
            http3: crate::wire::h3_server::Http3Settings::default(),
        }
    }
}

/// What the pre-read decided.
#[derive(Debug, PartialEq)]
enum Preread {
    Http1(BytesMut),
    Http2(Bytes),
    /// Peer closed before sending a request.
    Closed,
    Reject(ErrorKind),
    /// Not the HTTP/2 preface and no HTTP/1.x request line either.
    NotHttp,
}

/// The first line of `buf`, once it is complete.
fn first_line(buf: &[u8]) -> Option<&[u8]> {
    let end = buf.iter().position(|b| *b == b'\n')?;
    let line = &buf[..end];
    Some(line.strip_suffix(b"\r").unwrap_or(line))
}

/// True when `line` ends with an HTTP version (` HTTP/1.1`, ` HTTP/2.0`):
/// the shape of an HTTP/1 request line, however flawed otherwise.
fn has_http_version(line: &[u8]) -> bool {
    match line.len().checked_sub(9).map(|at| &line[at..]) {
        Some([b' ', b'H', b'T', b'T', b'P', b'/', major, b'.', minor]) => {
            major.is_ascii_digit() && minor.is_ascii_digit()
        }
        _ => false,
    }
}

/// The end of a request head: the first empty line, ended by CRLF or by a
/// bare LF, which RFC 9112 §2.2 lets a recipient accept and the HTTP/1.1
/// codec's parser (httparse) accepts (the request is re-serialized with CRLF before it goes upstream).
fn find_header_end(buf: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(offset) = buf[at..].iter().position(|b| *b == b'\n') {
        let newline = at + offset;
        match &buf[newline + 1..] {
            [b'\n', ..] => return Some(newline + 2),
            [b'\r', b'\n', ..] => return Some(newline + 3),
            _ => at = newline + 1,
        }
    }
    None
}

/// What the first bytes of a connection decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadDecision {
    Http1,
    Http2,
    Reject(ErrorKind),
    /// A first line without an HTTP version (`GARBAGE / NOT-HTTP`, `GET`):
    /// answered as HTTP/1, with Kong's 400.
    NotHttp,
}

/// The decision the bytes read so far allow, or `None` while more are needed:
/// the HTTP/2 preface, a complete HTTP/1 head within the limits, or a
/// refusal. Only the exact client preface selects HTTP/2 (as in nginx);
/// everything else is HTTP/1's to answer. Pure, so the fuzz target drives
/// it with arbitrary bytes.
pub fn examine_head(buf: &[u8], limits: &ClientLimits) -> Option<HeadDecision> {
    if buf.len() >= H2_PREFACE.len() && buf.starts_with(H2_PREFACE) {
        return Some(HeadDecision::Http2);
    }
    if !buf.is_empty() && H2_PREFACE.starts_with(&buf[..buf.len().min(H2_PREFACE.len())]) {
        // Could still become the HTTP/2 preface: keep reading.
    } else if first_line(buf).is_some_and(|line| !has_http_version(line)) {
        return Some(HeadDecision::NotHttp);
    } else if let Some(end) = find_header_end(buf) {
        let lines = buf[..end].split(|b| *b == b'\n').count().saturating_sub(3);
        if lines > limits.max_headers || end > limits.max_header_bytes {
            return Some(HeadDecision::Reject(ErrorKind::HeadersTooLarge));
        }
        return Some(HeadDecision::Http1);
    }
    if buf.len() > limits.max_header_bytes {
        return Some(HeadDecision::Reject(ErrorKind::HeadersTooLarge));
    }
    None
}

/// Read until the end of the first request's headers, enforcing the limits.
async fn preread<IO: AsyncRead + Unpin>(io: &mut IO, limits: &ClientLimits) -> Preread {
    let mut buf = BytesMut::with_capacity(4096);
    let read_headers = async {
        loop {
            match examine_head(&buf, limits) {
                Some(HeadDecision::Http1) => return Preread::Http1(buf.split()),
                Some(HeadDecision::Http2) => return Preread::Http2(buf.split().freeze()),
                Some(HeadDecision::Reject(kind)) => return Preread::Reject(kind),
                Some(HeadDecision::NotHttp) => return Preread::NotHttp,
                None => {}
            }
            buf.reserve(4096);
            match io.read_buf(&mut buf).await {
                Ok(0) | Err(_) if buf.is_empty() => return Preread::Closed,
                Ok(0) | Err(_) => return Preread::Reject(ErrorKind::BadRequest),
                Ok(_) => {}
            }
        }
    };
    match timeout(limits.header_timeout, read_headers).await {
        Ok(outcome) => outcome,
        Err(_) => Preread::Reject(ErrorKind::RequestTimeout),
    }
}

/// An IO that first yields bytes already read from the inner IO (the
/// protocol sniffing's read, an upgraded connection's read-ahead).
pub(crate) struct Rewind<IO> {
    prefix: Bytes,
    inner: IO,
}

impl<IO> Rewind<IO> {
    pub(crate) fn new(prefix: Bytes, inner: IO) -> Rewind<IO> {
        Rewind { prefix, inner }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Rewind<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Rewind<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Serve a plain TCP connection (HTTP/1.1 or h2c prior knowledge).
pub async fn serve_plain(stream: TcpStream, info: ConnInfo, shared: Arc<Shared>, shutdown: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    serve_stream(stream, info, shared, shutdown, false).await;
}

/// Serve a TLS connection: handshake, then h2 when ALPN chose it.
pub async fn serve_tls(
    stream: TcpStream,
    mut info: ConnInfo,
    shared: Arc<Shared>,
    acceptor: tokio_rustls::TlsAcceptor,
    shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let handshake = timeout(shared.limits().header_timeout, acceptor.accept(stream)).await;
    let tls = match handshake {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            tracing::debug!(%error, client = %info.client, "TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let (_, session) = tls.get_ref();
    info.sni = session.server_name().map(str::to_string);
    info.client_cert = crate::pipeline::handler::client_cert(session.peer_certificates());
    let h2 = session.alpn_protocol() == Some(b"h2");
    serve_stream(tls, info, shared, shutdown, h2).await;
}

/// How a connection ends after a client that spoke no HTTP was answered.
trait ResetOnClose {
    /// Make the coming close a reset (`SO_LINGER` 0) where the transport
    /// has one.
    fn reset_on_close(&self);
}

/// A plain port serves HTTP/1 and h2c alike, so a client whose first line
/// is no HTTP may be an HTTP/2 client with a bad preface. It gets Kong's 400,
/// then a reset rather than a FIN: an HTTP/1 client has its whole answer
/// (`Content-Length`, `Connection: close`) before the reset arrives, and an
/// HTTP/2 client, which reads that answer as a frame header announcing
/// megabytes and would wait for them, sees the connection terminated, as
/// RFC 9113 §3.4 asks for an invalid preface (h2spec 3.5/2).
impl ResetOnClose for TcpStream {
    fn reset_on_close(&self) {
        let _ = socket2::SockRef::from(self).set_linger(Some(Duration::ZERO));
    }
}

/// Over TLS, ALPN already chose the protocol: a graceful close.
impl<IO> ResetOnClose for tokio_rustls::server::TlsStream<IO> {
    fn reset_on_close(&self) {}
}

async fn serve_stream<IO>(
    mut io: IO,
    info: ConnInfo,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    alpn_h2: bool,
) where
    IO: AsyncRead + AsyncWrite + ResetOnClose + Unpin + Send + 'static,
{
    let decision = if alpn_h2 {
        Preread::Http2(Bytes::new())
    } else {
        preread(&mut io, &shared.limits()).await
    };
    match decision {
        Preread::Closed => {}
        Preread::Reject(kind) => refuse(&mut io, kind, &shared).await,
        Preread::NotHttp => {
            answer_refused(&mut io, ErrorKind::BadRequest, &shared).await;
            io.reset_on_close();
        }
        Preread::Http1(read) => crate::wire::h1_server::serve(io, read, info, shared, shutdown).await,
        Preread::Http2(prefix) => {
            crate::wire::h2_server::serve(Rewind::new(prefix, io), info, shared, shutdown).await;
        }
    }
}

/// Answer a request refused before it was parsed whole (a head too large,
/// too slow, malformed) with its Kong error, then close.
pub(crate) async fn refuse<IO: AsyncWrite + Unpin>(io: &mut IO, kind: ErrorKind, shared: &Shared) {
    answer_refused(io, kind, shared).await;
    let _ = timeout(Duration::from_secs(1), io.shutdown()).await;
}

/// Write the Kong error of a request refused before it was parsed.
async fn answer_refused<IO: AsyncWrite + Unpin>(io: &mut IO, kind: ErrorKind, shared: &Shared) {
    shared.stats.request_started();
    let response = raw_error_response(kind, &shared.headers);
    let _ = timeout(Duration::from_secs(1), io.write_all(&response)).await;
}

/// When a client connection should be asked to go: at its (jittered) age,
/// or after its last allowed request.
pub(crate) struct Retire {
    requests: std::sync::atomic::AtomicU64,
    max_requests: u64,
    spent: tokio::sync::Notify,
}

impl Retire {
    pub(crate) fn new(limits: &ClientLimits) -> Arc<Retire> {
        Arc::new(Retire {
            requests: std::sync::atomic::AtomicU64::new(0),
            max_requests: limits.max_requests_per_connection,
            spent: tokio::sync::Notify::new(),
        })
    }

    pub(crate) fn count_request(&self) {
        if self.max_requests == 0 {
            return;
        }
        let count = self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if count == self.max_requests {
            self.spent.notify_one();
        }
    }

    /// Resolves when the connection should go.
    pub(crate) async fn due(&self, limits: &ClientLimits) {
        let age = async {
            match limits.max_connection_age {
                Some(age) => tokio::time::sleep(jittered(age)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = age => {}
            _ = self.spent.notified() => {}
        }
    }
}

/// `age` ±10%, uniformly, so a fleet of clients that connected together does
/// not reconnect in one wave.
pub fn jittered(age: Duration) -> Duration {
    // A fraction in [0.9, 1.1), from the top 53 bits.
    let fraction = 0.9 + 0.2 * ((strait_runtime::random::next_u64() >> 11) as f64 / (1u64 << 53) as f64);
    age.mul_f64(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_ages_spread_ten_percent_either_way() {
        let age = Duration::from_secs(100);
        let samples: Vec<f64> = (0..2000).map(|_| jittered(age).as_secs_f64()).collect();
        let min = samples.iter().copied().fold(f64::MAX, f64::min);
        let max = samples.iter().copied().fold(f64::MIN, f64::max);
        assert!(min >= 90.0 && max < 110.0, "{min} .. {max}");
        assert!(min < 91.0 && max > 109.0, "the whole range is used: {min} .. {max}");
        let below = samples.iter().filter(|s| **s < 100.0).count();
        assert!((800..=1200).contains(&below), "{below} of 2000 below the age");
    }

    fn limits() -> ClientLimits {
        ClientLimits {
            header_timeout: Duration::from_millis(200),
            max_header_bytes: 256,
            max_headers: 3,
            ..ClientLimits::default()
        }
    }

    async fn run(input: &'static [u8]) -> Preread {
        let mut reader = input;
        preread(&mut reader, &limits()).await
    }

    #[tokio::test]
    async fn complete_headers_are_handed_on_with_body_bytes() {
        let outcome = run(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nextra").await;
        assert_eq!(
            outcome,
            Preread::Http1(BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\n\r\nextra"[..]))
        );
    }

    #[tokio::test]
    async fn too_many_or_too_large_headers_are_rejected() {
        let many = run(b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\n\r\n").await;
        assert_eq!(many, Preread::Reject(ErrorKind::HeadersTooLarge));
        let big: &'static [u8] = Box::leak(
            format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(400))
                .into_bytes()
                .into_boxed_slice(),
        );
        assert_eq!(run(big).await, Preread::Reject(ErrorKind::HeadersTooLarge));
    }

    #[tokio::test]
    async fn a_first_line_without_an_http_version_is_not_http() {
        assert_eq!(run(b"INVALID CONNECTION PREFACE\r\n\r\n").await, Preread::NotHttp);
        assert_eq!(run(b"GARBAGE\r\n\r\n").await, Preread::NotHttp);
        assert_eq!(run(b"GARBAGE / NOT-HTTP\r\n\r\n").await, Preread::NotHttp);
        assert_eq!(run(b"GET / FOO/1.1\r\n\r\n").await, Preread::NotHttp);
        assert_eq!(run(b"GET\r\n\r\n").await, Preread::NotHttp);
        assert_eq!(run(b"GET / HTTQ/1.1\r\n\r\n").await, Preread::NotHttp);
        // Only the exact preface is HTTP/2: a near miss is an HTTP/1 head
        // for the HTTP/1 parser to refuse.
        assert!(matches!(
            run(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n").await,
            Preread::Http1(_)
        ));
        assert!(matches!(
            run(b"GET / HTTP/1.1\r\nbad header\r\n\r\n").await,
            Preread::Http1(_)
        ));
        assert!(matches!(run(b"get /x HTTP/1.0\n\n").await, Preread::Http1(_)));
    }

    #[test]
    fn head_ends_at_the_first_empty_line_crlf_or_bare_lf() {
        assert_eq!(find_header_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody"), Some(27));
        assert_eq!(find_header_end(b"GET / HTTP/1.1\nHost: a\n\nbody"), Some(24));
        assert_eq!(find_header_end(b"GET / HTTP/1.1\nHost: a\n\r\n"), Some(25));
        assert_eq!(find_header_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
        assert_eq!(find_header_end(b"GET / HTTP/1.1\r\nHost: a\r"), None);
    }

    #[tokio::test]
    async fn h2_preface_and_truncated_requests() {
        assert!(matches!(run(H2_PREFACE).await, Preread::Http2(_)));
        assert_eq!(
            run(b"GET / HTTP/1.1\r\nHost").await,
            Preread::Reject(ErrorKind::BadRequest)
        );
        assert_eq!(run(b"").await, Preread::Closed);
    }
}
