//! `Upgrade` requests (WebSocket and any other HTTP/1.1 upgrade) proxied as
//! a byte tunnel.
//!
//! An HTTP/1.1 request whose `Connection` lists `upgrade` and that carries
//! an `Upgrade` header keeps both when it goes upstream (they are hop-by-hop
//! and otherwise stripped). When the upstream answers `101 Switching
//! Protocols`, the client gets the 101 with the upstream's `Upgrade`, and
//! both connections, once the 101 is written to the client, are joined: bytes are
//! copied both ways until either side closes, or until nothing moved either
//! way for the service's `read_timeout` (nginx closes an idle WebSocket
//! after `proxy_read_timeout`, which Kong sets from the same field). Any
//! other answer goes to the client as a normal response, and the client's
//! connection stays HTTP. The upstream connection of a tunnel (handed over
//! by h1_client.rs with whatever it read past the 101) is never pooled
//! again. HTTP/2 clients cannot upgrade (HTTP/2 has no `Upgrade`).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use crate::wire::conn::Rewind;
use crate::wire::h1_client::{Switched, SwitchedSlot};

/// A client's request to switch protocols.
pub(crate) struct Upgrade {
    /// The client's `Upgrade` header (`websocket`).
    protocol: HeaderValue,
    /// Resolves to the client's connection once the 101 is written.
    client: oneshot::Receiver<Upgraded>,
}

/// A client connection after the `101` went out on it: what was read past
/// the request's head, then the socket.
pub(crate) type Upgraded = Rewind<Box<dyn Stream>>;

/// A socket of any kind.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// The request's hold on its connection once switched, put on requests that
/// carry `Upgrade` by the HTTP/1.1 server (h1_server.rs).
#[derive(Clone)]
pub(crate) struct ClientUpgrade(Arc<std::sync::Mutex<Option<oneshot::Receiver<Upgraded>>>>);

/// The server's side of a [`ClientUpgrade`].
pub(crate) struct Handover(oneshot::Sender<Upgraded>);

impl ClientUpgrade {
    pub(crate) fn new() -> (ClientUpgrade, Handover) {
        let (sender, receiver) = oneshot::channel();
        (
            ClientUpgrade(Arc::new(std::sync::Mutex::new(Some(receiver)))),
            Handover(sender),
        )
    }
}

impl Handover {
    /// The 101 is written: the connection goes to the tunnel.
    pub(crate) fn complete<T: Stream + 'static>(self, io: T, read: bytes::Bytes) {
        let _ = self.0.send(Rewind::new(read, Box::new(io)));
    }
}

/// The upgrade a request asks for, taken from it (HTTP/1.1 only).
pub(crate) fn requested<B>(request: &mut Request<B>) -> Option<Upgrade> {
    if request.version() != Version::HTTP_11 {
        return None;
    }
    // Most requests have no `Upgrade`: one lookup and done.
    let protocol = request.headers().get(header::UPGRADE)?.clone();
    if !crate::pipeline::handler::lists_token(request.headers(), &header::CONNECTION, "upgrade") {
        return None;
    }
    let slot = request.extensions_mut().remove::<ClientUpgrade>()?;
    let client = slot
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()?;
    Some(Upgrade { protocol, client })
}

impl Upgrade {
    /// Put back the headers hop-by-hop stripping removed.
    pub(crate) fn restore(&self, headers: &mut HeaderMap) {
        set_headers(headers, self.protocol.clone());
    }

    /// When the upstream switched protocols, start the tunnel (it runs once
    /// the 101 has gone out on the client connection) and return the `Upgrade`
    /// value to answer the client with; `None` for any other response.
    pub(crate) fn start<B>(self, response: &mut Response<B>, idle: Duration) -> Option<HeaderValue> {
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            return None;
        }
        let protocol = response
            .headers()
            .get(header::UPGRADE)
            .cloned()
            .unwrap_or(self.protocol);
        let slot = response.extensions_mut().remove::<SwitchedSlot>()?;
        let upstream = slot
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        tokio::spawn(run(self.client, upstream, idle));
        Some(protocol)
    }
}

/// `Connection: upgrade` and `Upgrade: protocol`, after hop-by-hop
/// stripping removed them (the request upstream, the 101 to the client).
pub(crate) fn set_headers(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, protocol);
}

async fn run(client: oneshot::Receiver<Upgraded>, upstream: Switched, idle: Duration) {
    let Ok(client) = client.await else {
        tracing::debug!("upgrade not completed: the 101 did not reach the client");
        return;
    };
    let upstream = Rewind::new(upstream.read, upstream.io);
    let started = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let mut client = Active::new(client, started, last.clone());
    let mut upstream = Active::new(upstream, started, last.clone());
    let copy = tokio::io::copy_bidirectional(&mut client, &mut upstream);
    tokio::pin!(copy);
    loop {
        let quiet_since = started + Duration::from_millis(last.load(Ordering::Relaxed));
        tokio::select! {
            result = copy.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "tunnel ended");
                }
                return;
            }
            _ = tokio::time::sleep_until((quiet_since + idle).into()) => {
                let quiet_since = started + Duration::from_millis(last.load(Ordering::Relaxed));
                if quiet_since.elapsed() >= idle {
                    tracing::debug!(idle_ms = idle.as_millis() as u64, "tunnel closed after its idle timeout");
                    return;
                }
            }
        }
    }
}

/// A stream that records when bytes last moved (ms since `started`).
struct Active<T> {
    inner: T,
    started: Instant,
    last: Arc<AtomicU64>,
}

impl<T> Active<T> {
    fn new(inner: T, started: Instant, last: Arc<AtomicU64>) -> Active<T> {
        Active { inner, started, last }
    }

    fn moved(&self) {
        self.last
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Active<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.moved();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Active<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.moved();
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
