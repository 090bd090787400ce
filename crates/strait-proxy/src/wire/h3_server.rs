//! HTTP/3 on the proxy's TLS listeners (`proxy_listen = ... ssl http3`):
//! QUIC from quinn, HTTP/3 framing from h3, and every request through the
//! same pipeline as HTTP/1.1 and HTTP/2 (`handle`), with the version
//! `HTTP/3.0`.
//!
//! Each worker has its own UDP socket on the address (`SO_REUSEPORT`, as
//! its TCP sockets): the kernel keeps a client's datagrams on one socket by
//! their addresses, so one worker serves a connection for its life (a
//! client that migrates to another address may land on another worker,
//! which does not know it: it starts again, as with nginx without eBPF).
//!
//! Backpressure is QUIC's flow control: a request body is read from the
//! stream only as fast as the upstream takes it, so the stream's window
//! (`http3_stream_buffer_size`) stops the client; a response body is
//! written as fast as the client's window opens, and the upstream is read
//! no faster.

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use h3::server::RequestStream;
use http::header::{HeaderValue, CONTENT_LENGTH, DATE};
use http::{Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use tokio::sync::watch;
use tokio::time::timeout;

use crate::pipeline::body::{BoxError, ProxyBody};
use crate::pipeline::handler::{handle, strip_hop_by_hop, ConnInfo};
use crate::Shared;

/// The `http3_*` settings (docs/configuration.md#http3).
#[derive(Debug, Clone, PartialEq)]
pub struct Http3Settings {
    /// Request streams a client may have open at once on one connection
    /// (QUIC's `initial_max_streams_bidi`; nginx's default, 128).
    pub max_concurrent_streams: u32,
    /// Bytes of a request body a stream takes before it is read (the
    /// stream's flow-control window; the connection's is this times
    /// `max_concurrent_streams`, as nginx sets them).
    pub stream_buffer_size: u32,
    /// A connection with no packets for this long is closed (QUIC's
    /// `max_idle_timeout`).
    pub idle_timeout: Duration,
    /// 0-RTT: requests in a returning client's first flight. Off by
    /// default; when on, only safe methods are served before the handshake
    /// completes (marked `Early-Data: 1`); others wait for it.
    pub early_data: bool,
}

impl Default for Http3Settings {
    fn default() -> Http3Settings {
        Http3Settings {
            max_concurrent_streams: 128,
            stream_buffer_size: 65_536,
            idle_timeout: Duration::from_secs(60),
            early_data: false,
        }
    }
}

/// `Early-Data: 1` on a request served from 0-RTT data (RFC 8470).
const EARLY_DATA: http::header::HeaderName = http::header::HeaderName::from_static("early-data");

/// H3_NO_ERROR: the code of a connection closed on purpose.
const H3_NO_ERROR: u32 = 0x100;

/// The QUIC server configuration of `ssl http3` listeners: the TLS
/// configuration of the `ssl` listeners (certificates by SNI, session
/// tickets and cache, client certificates) with ALPN `h3`, and the
/// transport limits of `settings`. An error names what TLS setting stands
/// in the way (QUIC needs TLS 1.3).
pub fn server_config(tls: &rustls::ServerConfig, settings: &Http3Settings) -> Result<quinn::ServerConfig, String> {
    let mut tls = tls.clone();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    // QUIC carries 0-RTT itself: all or nothing (RFC 9001 §4.6.1).
    tls.max_early_data_size = if settings.early_data { u32::MAX } else { 0 };
    if settings.early_data {
        // rustls accepts early data only on a stateful resumption: the ticket is a key into
        // the session cache, taken out when used, so one ticket's 0-RTT is accepted once.
        tls.ticketer = Arc::new(StatefulTickets);
    }
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| format!("http3 needs TLS 1.3 with TLS_AES_128_GCM_SHA256 (ssl_protocols, ssl_ciphers): {e}"))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    let streams = settings.max_concurrent_streams.max(1);
    let window = settings.stream_buffer_size.max(1);
    transport
        .max_concurrent_bidi_streams(streams.into())
        // The client's control and QPACK streams (RFC 9114 §6.2), and room for extensions.
        .max_concurrent_uni_streams(16u32.into())
        .stream_receive_window(window.into())
        .receive_window(quinn::VarInt::from_u64(u64::from(window) * u64::from(streams)).unwrap_or(quinn::VarInt::MAX))
        .max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(settings.idle_timeout)
                .map_err(|_| "http3_idle_timeout: too long".to_string())?,
        ));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// Tickets that are session cache keys (rustls's stateful resumption),
/// which 0-RTT needs: a ticketer that produces none itself.
#[derive(Debug)]
struct StatefulTickets;

impl rustls::server::ProducesTickets for StatefulTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// Serve `endpoint`'s connections until Strait stops: then no new
/// connection is accepted, and each one served gets a GOAWAY and finishes
/// what it has in flight.
pub async fn accept_loop(
    endpoint: quinn::Endpoint,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    active: Arc<AtomicUsize>,
) {
    let Ok(local) = endpoint.local_addr() else {
        return;
    };
    let mut stop = shutdown.clone();
    loop {
        let incoming = tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => break,
            },
            _ = crate::stopped(&mut stop) => break,
        };
        if active.load(Ordering::Acquire) >= shared.limits().max_connections_per_worker {
            shared.stats.connection_refused();
            tracing::debug!(client = %incoming.remote_address(), "worker_connections reached: QUIC connection refused");
            incoming.refuse();
            continue;
        }
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        let active = active.clone();
        active.fetch_add(1, Ordering::AcqRel);
        shared.stats.connection_opened();
        tokio::spawn(async move {
            serve(incoming, local, &shared, shutdown).await;
            shared.stats.connection_closed();
            active.fetch_sub(1, Ordering::AcqRel);
        });
    }
    // New connections are refused from here on; those served keep the
    // endpoint's driver running until they end.
    endpoint.set_server_config(None);
}

/// One QUIC connection: the handshake, then its request streams.
async fn serve(
    incoming: quinn::Incoming,
    local: SocketAddr,
    shared: &Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let limits = shared.limits();
    let connecting = match incoming.accept() {
        Ok(connecting) => connecting,
        Err(error) => {
            tracing::debug!(%error, "QUIC connection not accepted");
            return;
        }
    };
    // With 0-RTT on, the connection serves before the handshake ends;
    // `confirmed` turns true once it has (the client proved it is live:
    // a replayed first flight never gets there).
    let (confirm, confirmed) = watch::channel(true);
    let connection = match connecting.into_0rtt() {
        Ok((connection, accepted)) if limits.http3.early_data => {
            confirm.send_replace(false);
            let live = connection.clone();
            tokio::spawn(async move {
                accepted.await;
                if live.close_reason().is_none() {
                    confirm.send_replace(true);
                }
            });
            connection
        }
        Ok((connection, _)) => connection,
        Err(connecting) => match timeout(limits.header_timeout, connecting).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                tracing::debug!(%error, "QUIC handshake failed");
                return;
            }
            Err(_) => return,
        },
    };
    let info = Arc::new(conn_info(&connection, local));
    let quic = connection.clone();
    let mut builder = h3::server::builder();
    builder.max_field_section_size(limits.max_header_bytes as u64);
    let built = timeout(
        limits.header_timeout,
        builder.build::<_, Bytes>(h3_quinn::Connection::new(connection)),
    )
    .await;
    let mut conn = match built {
        Ok(Ok(conn)) => conn,
        Ok(Err(error)) => {
            tracing::debug!(%error, client = %info.client, "HTTP/3 connection setup failed");
            return;
        }
        Err(_) => return,
    };
    let mut draining = false;
    loop {
        tokio::select! {
            accepted = conn.accept() => match accepted {
                Ok(Some(resolver)) => {
                    let info = info.clone();
                    let shared = shared.clone();
                    let confirmed = confirmed.clone();
                    tokio::spawn(async move {
                        match resolver.resolve_request().await {
                            Ok((request, stream)) => serve_request(request, stream, &info, &shared, confirmed).await,
                            Err(error) => tracing::debug!(%error, client = %info.client, "HTTP/3 request refused"),
                        }
                    });
                }
                // After a GOAWAY (either side's), every request answered.
                Ok(None) => break,
                Err(error) => {
                    if !error.is_h3_no_error() {
                        tracing::debug!(%error, client = %info.client, "HTTP/3 connection ended");
                    }
                    return;
                }
            },
            _ = crate::stopped(&mut shutdown), if !draining => {
                draining = true;
                // GOAWAY: streams already open are served, no new ones.
                if conn.shutdown(0).await.is_err() {
                    return;
                }
            }
        }
    }
    // Responses may still be in flight in QUIC's buffers: the client closes
    // once it has them (it was told GOAWAY); a client that does not is
    // closed after a short wait.
    let _ = timeout(Duration::from_secs(2), quic.closed()).await;
    quic.close(H3_NO_ERROR.into(), b"");
}

/// The connection's addresses, SNI and client certificate. No `Alt-Svc`:
/// it advertises HTTP/3 to clients that do not use it yet.
fn conn_info(connection: &quinn::Connection, local: SocketAddr) -> ConnInfo {
    let mut info = ConnInfo::new(connection.remote_address(), local, true, None);
    info.sni = connection
        .handshake_data()
        .and_then(|data| data.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|data| data.server_name);
    let chain = connection.peer_identity().and_then(|identity| {
        identity
            .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
            .ok()
    });
    info.client_cert = crate::pipeline::handler::client_cert(chain.as_deref().map(Vec::as_slice));
    info
}

type Stream = RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;
type SendHalf = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// One request: through the pipeline, the answer back on its stream.
///
/// A request that came in 0-RTT (before the handshake completed) can be a
/// replay: a safe method is served at once and marked `Early-Data: 1` for
/// the upstream (RFC 8470 §5.1); any other waits until the handshake
/// completes, which a replayed first flight never does.
async fn serve_request(
    request: Request<()>,
    stream: Stream,
    info: &ConnInfo,
    shared: &Shared,
    mut confirmed: watch::Receiver<bool>,
) {
    let (mut send, recv) = stream.split();
    let mut request = request;
    if !*confirmed.borrow() {
        if request.method().is_safe() {
            request.headers_mut().insert(EARLY_DATA, HeaderValue::from_static("1"));
        } else {
            let limit = shared.limits().header_timeout;
            if !matches!(timeout(limit, confirmed.wait_for(|done| *done)).await, Ok(Ok(_))) {
                send.stop_stream(h3::error::Code::H3_REQUEST_REJECTED);
                return;
            }
        }
    }
    let request = match pipeline_request(request, recv).await {
        Incoming::Request(request) => request,
        Incoming::Malformed(why) => {
            tracing::debug!(client = %info.client, why, "malformed HTTP/3 request: 400");
            respond(send, bad_request()).await;
            return;
        }
        Incoming::Gone => return,
    };
    let (response, fields) = answer(request, info, shared).await;
    let mut response = response;
    if let Some(fields) = fields {
        fields.insert(response.headers_mut());
    }
    respond(send, response).await;
}

/// What a request stream gave the pipeline.
enum Incoming {
    Request(Box<Request<ProxyBody>>),
    /// RFC 9114 §4.1.2: malformed (its `Content-Length` is no length).
    Malformed(&'static str),
    /// The stream failed before its body began.
    Gone,
}

/// The request as the pipeline takes it: version `HTTP/3.0`, and its body
/// read from the stream as asked for, checked against `Content-Length`. A
/// request whose stream ended with its headers (most GETs) has no body.
async fn pipeline_request<R>(request: Request<()>, mut recv: RequestStream<R, Bytes>) -> Incoming
where
    R: h3::quic::RecvStream + Send + 'static,
{
    let (mut parts, ()) = request.into_parts();
    parts.version = Version::HTTP_3;
    let mut lengths = parts.headers.get_all(CONTENT_LENGTH).iter();
    let length = match (lengths.next(), lengths.next()) {
        (None, _) => None,
        (Some(value), None) => match value.to_str().ok().and_then(|v| v.parse::<u64>().ok()) {
            Some(length) => Some(length),
            None => return Incoming::Malformed("content-length is not a number"),
        },
        (Some(_), Some(_)) => return Incoming::Malformed("more than one content-length"),
    };
    let body = match length {
        Some(0) => crate::pipeline::body::empty(),
        Some(_) => crate::pipeline::body::boxed_as_is(RequestBody::new(recv, length, None)),
        None => match poll_fn(|cx| Poll::Ready(recv.poll_recv_data(cx).map(|r| r.map(|d| d.map(into_bytes))))).await {
            Poll::Ready(Ok(None)) => crate::pipeline::body::empty(),
            Poll::Ready(Ok(Some(first))) => {
                crate::pipeline::body::boxed_as_is(RequestBody::new(recv, None, Some(first)))
            }
            Poll::Ready(Err(_)) => return Incoming::Gone,
            Poll::Pending => crate::pipeline::body::boxed_as_is(RequestBody::new(recv, None, None)),
        },
    };
    Incoming::Request(Box::new(Request::from_parts(parts, body)))
}

/// Kong's answer to a malformed request.
fn bad_request() -> Response<ProxyBody> {
    let mut response = Response::new(crate::pipeline::body::full(&b"{\n  \"message\":\"Bad request\"\n}"[..]));
    *response.status_mut() = http::StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response
}

/// The pipeline's answer; its future is boxed (kilobytes, written once).
async fn answer(
    request: Box<Request<ProxyBody>>,
    info: &ConnInfo,
    shared: &Shared,
) -> (Response<ProxyBody>, Option<crate::pipeline::kong_headers::KongFields>) {
    Box::pin(handle(request, info, shared)).await
}

fn into_bytes(mut data: impl Buf) -> Bytes {
    data.copy_to_bytes(data.remaining())
}

/// Send `response` on the stream: its head, its body as the client's
/// flow-control window opens, its trailers, then the stream's end. A body
/// that fails resets the stream (the client sees the response cut, never
/// a short one passed for whole).
async fn respond(mut send: SendHalf, response: Response<ProxyBody>) {
    let (mut parts, body) = response.into_parts();
    // HTTP/3 forbids connection-specific fields (RFC 9114 §4.2).
    strip_hop_by_hop(&mut parts.headers);
    if !parts.headers.contains_key(DATE) {
        parts.headers.insert(DATE, crate::wire::h2_server::http_date());
    }
    if let Err(error) = send.send_response(Response::from_parts(parts, ())).await {
        tracing::debug!(%error, "HTTP/3 response head not sent");
        return;
    }
    let mut body = std::pin::pin!(body);
    while let Some(frame) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let sent = match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) if data.is_empty() => Ok(()),
                Ok(data) => send.send_data(data).await,
                Err(frame) => match frame.into_trailers() {
                    Ok(trailers) => send.send_trailers(trailers).await,
                    Err(_) => Ok(()),
                },
            },
            Err(error) => {
                tracing::debug!(%error, "response body failed: HTTP/3 stream reset");
                send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return;
            }
        };
        if let Err(error) = sent {
            tracing::debug!(%error, "HTTP/3 response body not sent");
            return;
        }
    }
    if let Err(error) = send.finish().await {
        tracing::debug!(%error, "HTTP/3 response end not sent");
    }
}

/// A request body read from its stream as the pipeline asks for it, its
/// length checked against `Content-Length` (RFC 9114 §4.1.2: a body
/// longer or shorter is malformed and fails the request).
struct RequestBody<R: h3::quic::RecvStream> {
    recv: RequestStream<R, Bytes>,
    length: Option<u64>,
    received: u64,
    first: Option<Bytes>,
    data_done: bool,
    done: bool,
}

impl<R: h3::quic::RecvStream> RequestBody<R> {
    fn new(recv: RequestStream<R, Bytes>, length: Option<u64>, first: Option<Bytes>) -> RequestBody<R> {
        let received = first.as_ref().map_or(0, |b| b.len() as u64);
        RequestBody {
            recv,
            length,
            received,
            first,
            data_done: false,
            done: false,
        }
    }

    fn too_long(&self) -> bool {
        self.length.is_some_and(|length| self.received > length)
    }
}

thread_local! {
    /// Set while a call whose panic is expected and caught runs: the panic
    /// hook stays silent for it.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `call()`, or None when it panicked. h3 0.0.8 asserts in
/// `poll_recv_trailers` when a client's stream ended inside a DATA frame
/// (found by fuzz/fuzz_targets/http3_request.rs): a client could panic the
/// request's task with it. The assert comes before h3 changes any state,
/// so the panic is caught here, silently (not in the error log, where a
/// client could flood it), and the request fails as the malformed stream
/// it is. Any other panic still reaches the hook that was there before.
fn quietly<T>(call: impl FnOnce() -> T) -> Option<T> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    QUIET.with(|quiet| quiet.set(true));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call));
    QUIET.with(|quiet| quiet.set(false));
    outcome.ok()
}

fn body_error(message: &'static str) -> BoxError {
    message.into()
}

impl<R: h3::quic::RecvStream> Body for RequestBody<R> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        if !this.data_done {
            match this.recv.poll_recv_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(Box::new(error))));
                }
                Poll::Ready(Ok(Some(data))) => {
                    let data = into_bytes(data);
                    this.received += data.len() as u64;
                    if this.too_long() {
                        this.done = true;
                        this.recv.stop_sending(h3::error::Code::H3_MESSAGE_ERROR);
                        return Poll::Ready(Some(Err(body_error("request body longer than its content-length"))));
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Ok(None)) => {
                    this.data_done = true;
                    if this.length.is_some_and(|length| this.received < length) {
                        this.done = true;
                        return Poll::Ready(Some(Err(body_error("request body shorter than its content-length"))));
                    }
                }
            }
        }
        let Some(trailers) = quietly(|| this.recv.poll_recv_trailers(cx)) else {
            this.done = true;
            return Poll::Ready(Some(Err(body_error("request stream ended inside a DATA frame"))));
        };
        let Poll::Ready(trailers) = trailers else {
            return Poll::Pending;
        };
        this.done = true;
        match trailers {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(error) => Poll::Ready(Some(Err(Box::new(error)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        match self.length {
            Some(length) => SizeHint::with_exact(
                length.saturating_sub(self.received) + self.first.as_ref().map_or(0, |b| b.len() as u64),
            ),
            None => SizeHint::default(),
        }
    }
}

/// An HTTP/3 request from raw bytes, without a network, as far as the
/// pipeline (fuzz/fuzz_targets/http3_request.rs): the first byte says how
/// many of the following bytes go on the client's control stream after an
/// empty SETTINGS frame; the rest is the request stream. h3 reads them,
/// [`pipeline_request`] makes the request, its body is read to its end.
/// None of it may panic on any bytes.
pub fn read_request_bytes(data: &[u8]) {
    run_ready(async {
        if let Some(Incoming::Request(request)) = incoming_from_bytes(data).await {
            let mut body = std::pin::pin!(request.into_body());
            while let Some(Ok(_)) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {}
        }
    });
}

async fn incoming_from_bytes(data: &[u8]) -> Option<Incoming> {
    let (first, rest) = data.split_first().unwrap_or((&0, &[]));
    let split = usize::from(*first).min(rest.len());
    let mut control = vec![0x00, 0x04, 0x00];
    control.extend_from_slice(&rest[..split]);
    let request = Bytes::copy_from_slice(&rest[split..]);
    let connection = crate::wire::h3_memory::Connection::new(request, Bytes::from(control));
    let mut builder = h3::server::builder();
    builder.max_field_section_size(32_768);
    let mut conn = builder.build::<_, Bytes>(connection).await.ok()?;
    let resolver = conn.accept().await.ok()??;
    let (request, stream) = resolver.resolve_request().await.ok()?;
    let (_send, recv) = stream.split();
    Some(pipeline_request(request, recv).await)
}

/// Polls `work` until it is done; in memory each step is ready or never
/// will be, so it gives up after many polls that were not.
fn run_ready<F: Future>(work: F) -> Option<F::Output> {
    let mut work = std::pin::pin!(work);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for _ in 0..100_000 {
        if let Poll::Ready(out) = work.as_mut().poll(&mut cx) {
            return Some(out);
        }
    }
    None
}

/// A UDP socket for an `http3` listener (its own per worker, as TCP's).
pub fn bind_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// The QUIC endpoint of one worker's `socket`, on the worker's runtime.
pub fn endpoint(socket: std::net::UdpSocket, config: quinn::ServerConfig) -> std::io::Result<quinn::Endpoint> {
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(config),
        socket,
        Arc::new(quinn::TokioRuntime),
    )
}

/// `Alt-Svc` for the TLS listener of `port` when it also serves HTTP/3.
pub fn alt_svc(port: u16) -> HeaderValue {
    HeaderValue::from_str(&format!("h3=\":{port}\"; ma=86400")).expect("a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![kind, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    /// QPACK, static table only: `:method` (GET or POST), `:scheme https`, `:path /`,
    /// `:authority a`, then `extra` field lines.
    fn headers(post: bool, extra: &[u8]) -> Vec<u8> {
        let mut fields = vec![0, 0, if post { 0xd4 } else { 0xd1 }, 0xd7, 0xc1, 0x50, 0x01, b'a'];
        fields.extend_from_slice(extra);
        frame(1, &fields)
    }

    /// `content-length: <value>` (a literal with the static name at index 4).
    fn length(value: &str) -> Vec<u8> {
        let mut out = vec![0x54, value.len() as u8];
        out.extend_from_slice(value.as_bytes());
        out
    }

    fn incoming(stream: Vec<u8>) -> Incoming {
        let mut data = vec![0];
        data.extend(stream);
        run_ready(incoming_from_bytes(&data)).flatten().expect("a request")
    }

    fn body(stream: Vec<u8>) -> Result<Bytes, String> {
        let Incoming::Request(request) = incoming(stream) else {
            panic!("not a request");
        };
        assert_eq!(request.version(), Version::HTTP_3);
        run_ready(request.into_body().collect())
            .expect("the body ends")
            .map(|collected| collected.to_bytes())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_get_has_no_body() {
        assert_eq!(body(headers(false, &[])), Ok(Bytes::new()));
    }

    #[test]
    fn a_body_is_checked_against_its_content_length() {
        let post = |declared: &str, sent: &[u8]| {
            let mut stream = headers(true, &length(declared));
            stream.extend(frame(0, sent));
            body(stream)
        };
        assert_eq!(post("5", b"hello"), Ok(Bytes::from_static(b"hello")));
        assert_eq!(
            post("5", b"hello!"),
            Err("request body longer than its content-length".into())
        );
        assert_eq!(
            post("5", b"hel"),
            Err("request body shorter than its content-length".into())
        );
        let mut chunks = headers(true, &[]);
        chunks.extend(frame(0, b"ab"));
        chunks.extend(frame(0, b"cde"));
        assert_eq!(body(chunks), Ok(Bytes::from_static(b"abcde")));
    }

    #[test]
    fn a_content_length_that_is_no_number_is_malformed() {
        assert!(matches!(incoming(headers(true, &length("5x"))), Incoming::Malformed(_)));
        let mut twice = length("1");
        twice.extend(length("1"));
        assert!(matches!(incoming(headers(true, &twice)), Incoming::Malformed(_)));
    }

    #[test]
    fn a_stream_ending_inside_a_data_frame_fails_the_body_without_a_panic() {
        // The fuzzer's finds: h3 0.0.8 would panic reading trailers after these.
        for found in [
            &b"\x00\x01\x08\x00\x00\xd4\xd7\xc1\x50\x01\x62\x00\x03\x63\x64\x01\x65\x64\x01\x65\x0b\x00\x00\x31"[..],
            &b"\x00\x01\x08\x00\x00\xd4\xd7\xc1\x50\x01\x61\x00\x02\x61\xa5\x00\xd4\x50\xd7\xc1\x5f\x0d\x01\x78"[..],
        ] {
            read_request_bytes(found);
        }
        // A DATA frame's header (5 bytes to come), then the stream's end.
        let mut cut = headers(true, &[]);
        cut.extend(frame(0, b"ab"));
        cut.extend([0x00, 0x05]);
        assert!(
            body(cut).is_err(),
            "a DATA frame cut short is an error, not a whole body"
        );
    }

    #[test]
    fn any_bytes_are_read_without_a_panic() {
        for data in [
            &[][..],
            &[0],
            &[0, 1, 200],
            &[3, 0x07, 0x01, 0x00, 0x01, 0x00],
            &[0, 0x00, 0x05, 1],
        ] {
            read_request_bytes(data);
        }
    }
}
