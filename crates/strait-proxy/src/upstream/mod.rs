//! Connections to upstream servers: connect with timeout, optional TLS,
//! HTTP/1.1 or HTTP/2 handshakes, and a keep-alive pool per worker.

pub mod dns;
pub mod health_check;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Response;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::pipeline::body::BoxError;
use crate::pipeline::error::{ErrorKind, ProxyError};
use crate::pipeline::forwarding::Forwarding;
use crate::pipeline::handler::BoxedRequest;
use crate::wire::h1_client::{H1Body, H1Conn, Io};
use crate::wire::h2_body::StreamBody;
use crate::wire::h2_client::H2Conn;

/// An upstream response's body: read from the connection for HTTP/1.1
/// (h1_client.rs), the stream's inbox for HTTP/2 (h2_body.rs), nothing
/// when the head ended the stream, or the whole of it when it arrived with
/// the head (its connection is back in the pool already).
/// A response from an upstream, and its head's lines to pass on as they
/// are when it was parsed for that (relay.rs; its map is then empty).
pub(crate) type Answer = (Response<UpstreamBody>, Option<Box<crate::pipeline::relay::RelayedHead>>);

/// How one request is sent on an upstream connection.
#[derive(Clone, Copy)]
pub(crate) struct SendOptions<'a> {
    /// The forwarding headers, written by the HTTP/1.1 encoder beside the
    /// request's map (forwarding.rs); HTTP/2 has them in the map.
    pub forwarding: Option<&'a Forwarding<'a>>,
    /// Longest wait for the response head.
    pub read_timeout: Duration,
    /// Pass an HTTP/1.1 response head on in its own bytes when it can
    /// (relay.rs).
    pub relay: bool,
}

pub enum UpstreamBody {
    Http1(Box<H1Body>),
    Http2(StreamBody),
    Empty,
    Whole(Option<bytes::Bytes>),
}

impl UpstreamBody {
    /// All of the body is here: nothing is left to wait for.
    pub(crate) fn is_whole(&self) -> bool {
        matches!(self, UpstreamBody::Whole(_) | UpstreamBody::Empty)
    }
}

impl http_body::Body for UpstreamBody {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, BoxError>>> {
        match self.get_mut() {
            UpstreamBody::Http1(body) => Pin::new(body.as_mut()).poll_frame(cx),
            UpstreamBody::Http2(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            UpstreamBody::Empty => Poll::Ready(None),
            UpstreamBody::Whole(data) => Poll::Ready(data.take().map(|data| Ok(http_body::Frame::data(data)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Http1(body) => body.is_end_stream(),
            UpstreamBody::Http2(body) => body.is_end_stream(),
            UpstreamBody::Empty => true,
            UpstreamBody::Whole(data) => data.is_none(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            UpstreamBody::Http1(body) => body.size_hint(),
            UpstreamBody::Http2(body) => body.size_hint(),
            UpstreamBody::Empty => http_body::SizeHint::with_exact(0),
            UpstreamBody::Whole(data) => http_body::SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
        }
    }
}

/// Which wire protocol and security an upstream connection uses.
#[derive(Clone)]
pub struct Endpoint {
    /// Longest a write to the upstream may stay blocked (service `write_timeout`).
    pub write_timeout: Duration,
    /// The target's address, resolved (dns.rs); keep-alive connections are
    /// kept per address, so a name that moves leaves its old connections.
    pub addr: SocketAddr,
    pub http2: bool,
    /// TLS client configuration and the server name to send, when TLS.
    pub tls: Option<(Arc<ClientConfig>, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    write_timeout: Duration,
    addr: SocketAddr,
    http2: bool,
    /// Identity of the TLS configuration (pointer) and SNI.
    tls: Option<(usize, String)>,
}

impl Endpoint {
    fn key(&self) -> PoolKey {
        PoolKey {
            write_timeout: self.write_timeout,
            addr: self.addr,
            http2: self.http2,
            tls: self
                .tls
                .as_ref()
                .map(|(config, sni)| (Arc::as_ptr(config) as usize, sni.clone())),
        }
    }
}

/// Kong's `upstream_keepalive_*` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle connections kept per upstream address (and TLS identity) and
    /// worker; 0 keeps none (every request opens a connection).
    pub pool_size: usize,
    /// Requests one connection carries before it is closed (0: no limit).
    pub max_requests: u32,
    /// An idle connection not reused for this long is closed (zero: never).
    pub idle_timeout: Duration,
}

impl Default for Keepalive {
    /// Kong's defaults.
    fn default() -> Keepalive {
        Keepalive {
            pool_size: 512,
            max_requests: 10_000,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Idle connections by endpoint. foldhash, not std's SipHash: every
/// proxied request looks its endpoint up twice (checkout, and checkin by
/// its response body), and the keys come from the configuration, not from
/// clients.
type PoolMap<V> = HashMap<PoolKey, V, foldhash::fast::RandomState>;

/// Sweeps per idle timeout: a connection is closed after idling between
/// the timeout and 5/4 of it.
const SWEEPS_PER_TIMEOUT: u64 = 4;

/// A pooled connection, the requests it carried and the sweep it was last
/// used in (a counter, not a clock read per request).
struct Idle<S> {
    sender: S,
    uses: u32,
    epoch: u64,
}

/// Idle HTTP/1.1 connections of one worker, shared with the response
/// bodies that hand their connection back when they end.
pub(crate) struct Http1Idle {
    keepalive: Keepalive,
    map: Mutex<PoolMap<Vec<Idle<Box<H1Conn>>>>>,
    /// Advanced by [`Pool::sweep`].
    epoch: std::sync::atomic::AtomicU64,
}

impl Http1Idle {
    fn now(&self) -> u64 {
        self.epoch.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The connection carried as many requests as it may.
    fn spent(&self, uses: u32) -> bool {
        self.keepalive.max_requests != 0 && uses >= self.keepalive.max_requests
    }
}

/// Where an HTTP/1.1 connection goes back once its exchange ended cleanly.
pub(crate) struct Home {
    idle: Arc<Http1Idle>,
    key: PoolKey,
    /// Requests the connection carried, this one included.
    uses: u32,
}

impl Home {
    /// Keep `conn` for reuse, if the limits allow.
    pub(crate) fn checkin(self, conn: Box<H1Conn>) {
        let idle = &self.idle;
        if idle.keepalive.pool_size == 0 || idle.spent(self.uses) {
            return;
        }
        let epoch = idle.now();
        let mut map = lock(&idle.map);
        let list = map.entry(self.key).or_default();
        if list.len() < idle.keepalive.pool_size {
            list.push(Idle {
                sender: conn,
                uses: self.uses,
                epoch,
            });
        }
    }
}

/// Keep-alive connections of one worker.
pub struct Pool {
    keepalive: Keepalive,
    /// Flow control, framing and pings of HTTP/2 upstream connections
    /// (the `upstream_http2_*` settings; the reset limits do not apply).
    http2_settings: crate::wire::conn::Http2Settings,
    http1: Arc<Http1Idle>,
    /// HTTP/2 connections per upstream: requests share the first with a
    /// free stream; another opens when all are at the upstream's
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    http2: Mutex<PoolMap<Vec<Idle<H2Conn>>>>,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::new(Keepalive::default(), crate::wire::conn::Http2Settings::default())
    }
}

/// A request that failed; `unsent` holds it when none of it left.
pub struct DispatchFailure {
    pub error: ProxyError,
    pub unsent: Option<BoxedRequest>,
}

/// A connection checked out for one request.
pub struct Lease {
    key: PoolKey,
    sender: Sender,
    pooled: bool,
    /// Requests the connection carried before this one.
    uses: u32,
}

impl Lease {
    /// The connection was kept alive from an earlier request.
    pub fn reused(&self) -> bool {
        self.pooled
    }
}

enum Sender {
    /// Boxed: a lease, and the connection in it, moves through several
    /// futures on every request; a pointer is cheaper to move than the
    /// connection's buffers and socket.
    Http1(Box<H1Conn>),
    Http2(H2Conn),
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Pool {
    pub fn new(keepalive: Keepalive, http2_settings: crate::wire::conn::Http2Settings) -> Pool {
        Pool {
            keepalive,
            http2_settings,
            http1: Arc::new(Http1Idle {
                keepalive,
                map: Mutex::default(),
                epoch: std::sync::atomic::AtomicU64::new(0),
            }),
            http2: Mutex::default(),
        }
    }

    /// How often [`Pool::sweep`] should run; `None` when idle connections never expire.
    pub fn sweep_interval(&self) -> Option<Duration> {
        let timeout = self.keepalive.idle_timeout;
        (!timeout.is_zero()).then(|| (timeout / SWEEPS_PER_TIMEOUT as u32).max(Duration::from_millis(50)))
    }

    /// Close idle connections not used for `idle_timeout` (dropping a
    /// sender closes its connection once no request is in flight on it).
    pub fn sweep(&self) {
        let epoch = self.http1.epoch.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let fresh = |used: u64| epoch.saturating_sub(used) <= SWEEPS_PER_TIMEOUT;
        let mut http1 = lock(&self.http1.map);
        for list in http1.values_mut() {
            list.retain_mut(|idle| fresh(idle.epoch) && idle.sender.is_usable());
        }
        http1.retain(|_, list| !list.is_empty());
        drop(http1);
        let mut http2 = lock(&self.http2);
        for list in http2.values_mut() {
            list.retain(|idle| !idle.sender.is_closed() && fresh(idle.epoch));
        }
        http2.retain(|_, list| !list.is_empty());
    }

    fn now(&self) -> u64 {
        self.http1.now()
    }

    fn checkout(&self, key: &PoolKey) -> Option<(Sender, u32)> {
        if key.http2 {
            let mut map = lock(&self.http2);
            let list = map.get_mut(key)?;
            list.retain(|idle| !idle.sender.is_closed());
            let at = list.iter().position(|idle| idle.sender.has_room())?;
            let idle = &mut list[at];
            let uses = idle.uses;
            idle.uses += 1;
            idle.epoch = self.now();
            let sender = idle.sender.clone();
            if self.spent(idle.uses) {
                // New streams go to another connection; this one ends with its streams.
                list.swap_remove(at);
            }
            return Some((Sender::Http2(sender), uses));
        }
        let mut map = lock(&self.http1.map);
        let list = map.get_mut(key)?;
        // The most recently used first; one the upstream closed (or that
        // has bytes nobody asked for) is dropped on the way.
        while let Some(mut idle) = list.pop() {
            if idle.sender.is_usable() {
                return Some((Sender::Http1(idle.sender), idle.uses));
            }
        }
        None
    }

    /// The connection carried as many requests as it may.
    fn spent(&self, uses: u32) -> bool {
        self.http1.spent(uses)
    }

    /// Keep `sender` (which has now carried `uses` requests) for reuse, if
    /// the limits allow.
    fn checkin(&self, key: PoolKey, sender: Sender, uses: u32) {
        if self.keepalive.pool_size == 0 || self.spent(uses) {
            return;
        }
        let epoch = self.now();
        match sender {
            Sender::Http2(sender) => {
                let mut map = lock(&self.http2);
                let list = map.entry(key).or_default();
                if !list.iter().any(|idle| idle.sender.same(&sender)) && list.len() < self.keepalive.pool_size {
                    list.push(Idle { sender, uses, epoch });
                }
            }
            // Handed back by its response body when the exchange ended (Home).
            Sender::Http1(_) => {}
        }
    }

    /// Number of pooled HTTP/1.1 connections (diagnostics).
    pub fn idle_http1(&self) -> usize {
        lock(&self.http1.map).values().map(Vec::len).sum()
    }

    /// A connection to `endpoint`: a ready pooled one, or a new one.
    pub async fn acquire(&self, endpoint: &Endpoint, connect_timeout: Duration) -> Result<Lease, ProxyError> {
        let key = endpoint.key();
        if let Some((sender, uses)) = self.checkout(&key) {
            return Ok(Lease {
                key,
                sender,
                pooled: true,
                uses,
            });
        }
        let sender = connect(endpoint, connect_timeout, &self.http2_settings).await?;
        Ok(Lease {
            key,
            sender,
            pooled: false,
            uses: 0,
        })
    }

    /// Send `request` on a leased connection. A request that never left
    /// because the pooled connection had just closed is resent once on a
    /// fresh connection. A failure hands back the request when none of it
    /// was sent, so a retry can send it elsewhere. With `relay`, an HTTP/1.1
    /// response head that can go to the client as the upstream wrote it
    /// comes back as its lines beside an empty map (relay.rs).
    pub(crate) async fn dispatch(
        &self,
        lease: Lease,
        endpoint: &Endpoint,
        request: BoxedRequest,
        send: SendOptions<'_>,
        connect_timeout: Duration,
    ) -> Result<Answer, DispatchFailure> {
        let lost = |error| DispatchFailure { error, unsent: None };
        let Lease {
            key,
            sender,
            pooled,
            uses,
        } = lease;
        // An HTTP/1.1 connection (most requests) is sent on here, not through
        // `try_send`: one future fewer for the request to be moved into.
        let first = match sender {
            Sender::Http1(conn) => conn.send(request, self.home(key.clone(), uses), send).await,
            sender => self.try_send(key.clone(), sender, uses, request, send).await,
        };
        let request = match first.map_err(lost)? {
            Ok(response) => return Ok(response),
            Err(unsent) if pooled => unsent,
            Err(unsent) => {
                return Err(DispatchFailure {
                    error: ProxyError::new(ErrorKind::UpstreamConnect, "upstream connection closed"),
                    unsent: Some(unsent),
                })
            }
        };
        let sender = match connect(endpoint, connect_timeout, &self.http2_settings).await {
            Ok(sender) => sender,
            Err(error) => {
                return Err(DispatchFailure {
                    error,
                    unsent: Some(request),
                })
            }
        };
        match self.try_send(key, sender, 0, request, send).await.map_err(lost)? {
            Ok(response) => Ok(response),
            Err(unsent) => Err(DispatchFailure {
                error: ProxyError::new(ErrorKind::UpstreamConnect, "fresh upstream connection closed"),
                unsent: Some(unsent),
            }),
        }
    }

    /// Where an HTTP/1.1 connection that has carried `uses` requests before
    /// this one goes back to.
    fn home(&self, key: PoolKey, uses: u32) -> Home {
        Home {
            idle: self.http1.clone(),
            key,
            uses: uses + 1,
        }
    }

    /// Ok(Ok(response)), Ok(Err(request)) when the request was not sent, or an error.
    async fn try_send(
        &self,
        key: PoolKey,
        sender: Sender,
        uses: u32,
        request: BoxedRequest,
        send: SendOptions<'_>,
    ) -> Result<Result<Answer, BoxedRequest>, ProxyError> {
        let timed_out = || ProxyError::new(ErrorKind::UpstreamTimeout, "no response headers within read_timeout");
        match sender {
            // The read timeout is the connection's own timer (h1_client.rs).
            Sender::Http1(conn) => conn.send(request, self.home(key, uses), send).await,
            Sender::Http2(conn) => {
                self.checkin(key, Sender::Http2(conn.clone()), uses + 1);
                match timeout(send.read_timeout, conn.send(*request)).await {
                    Err(_) => Err(timed_out()),
                    Ok(Ok(Ok(response))) => Ok(Ok((
                        response.map(|body| body.map_or(UpstreamBody::Empty, UpstreamBody::Http2)),
                        None,
                    ))),
                    Ok(Ok(Err(unsent))) => Ok(Err(Box::new(unsent))),
                    Ok(Err(error)) => Err(error),
                }
            }
        }
    }
}

/// A new connection to `endpoint`. Boxed: connecting is the rare path (most
/// requests reuse a pooled connection), and its future (a TLS handshake
/// among others) is kilobytes that every request's future would otherwise
/// carry and copy.
fn connect<'a>(
    endpoint: &'a Endpoint,
    connect_timeout: Duration,
    http2: &'a crate::wire::conn::Http2Settings,
) -> Pin<Box<dyn Future<Output = Result<Sender, ProxyError>> + Send + 'a>> {
    Box::pin(open_connection(endpoint, connect_timeout, http2))
}

async fn open_connection(
    endpoint: &Endpoint,
    connect_timeout: Duration,
    http2: &crate::wire::conn::Http2Settings,
) -> Result<Sender, ProxyError> {
    let addr = endpoint.addr;
    let attempt = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| ProxyError::new(ErrorKind::UpstreamConnect, format!("connect {addr}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let tcp = WriteTimeoutIo::new(tcp, endpoint.write_timeout);
        let Some((config, sni)) = &endpoint.tls else {
            return if endpoint.http2 {
                Ok(Sender::Http2(crate::wire::h2_client::handshake(tcp, http2).await?))
            } else {
                Ok(Sender::Http1(Box::new(H1Conn::new(Io::Plain(tcp)))))
            };
        };
        let name = ServerName::try_from(sni.clone())
            .map_err(|e| ProxyError::new(ErrorKind::UpstreamConnect, format!("invalid server name {sni}: {e}")))?;
        let tls = tokio_rustls::TlsConnector::from(config.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| ProxyError::new(ErrorKind::UpstreamConnect, format!("TLS handshake with {addr}: {e}")))?;
        if endpoint.http2 {
            Ok(Sender::Http2(crate::wire::h2_client::handshake(tls, http2).await?))
        } else {
            Ok(Sender::Http1(Box::new(H1Conn::new(Io::Tls(Box::new(tls))))))
        }
    };
    match timeout(connect_timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(ProxyError::new(
            ErrorKind::UpstreamConnectTimeout,
            format!("connect {addr}: timed out"),
        )),
    }
}

/// Fails a write that stays blocked (the upstream not reading) for longer
/// than the service's `write_timeout`, as Kong's `proxy_send_timeout` does.
pub(crate) struct WriteTimeoutIo<T> {
    inner: T,
    timeout: Duration,
    pending_since: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteTimeoutIo<T> {
    pub(crate) fn new(inner: T, timeout: Duration) -> WriteTimeoutIo<T> {
        WriteTimeoutIo {
            inner,
            timeout,
            pending_since: None,
        }
    }

    /// Called when a write returned Pending: arm the timer, or fail if it fired.
    fn check_stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let timeout = self.timeout;
        let timer = self
            .pending_since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, "upstream write timed out")),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeoutIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeoutIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(result) => {
                self.pending_since = None;
                Poll::Ready(result)
            }
            Poll::Pending => self.check_stalled(cx).map(Err),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(result) => {
                self.pending_since = None;
                Poll::Ready(result)
            }
            Poll::Pending => self.check_stalled(cx).map(Err),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
