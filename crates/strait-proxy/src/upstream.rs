//! Connections to upstream servers: connect with timeout, optional TLS,
//! HTTP/1.1 or HTTP/2 handshakes, and a keep-alive pool per worker.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::body::ProxyBody;
use crate::error::{ErrorKind, ProxyError};

/// Most idle HTTP/1.1 connections kept per upstream address and worker.
const MAX_IDLE_PER_KEY: usize = 512;

/// Which wire protocol and security an upstream connection uses.
#[derive(Clone)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub http2: bool,
    /// TLS client configuration and the server name to send, when TLS.
    pub tls: Option<(Arc<ClientConfig>, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    host: String,
    port: u16,
    http2: bool,
    /// Identity of the TLS configuration (pointer) and SNI.
    tls: Option<(usize, String)>,
}

impl Endpoint {
    fn key(&self) -> PoolKey {
        PoolKey {
            host: self.host.clone(),
            port: self.port,
            http2: self.http2,
            tls: self
                .tls
                .as_ref()
                .map(|(config, sni)| (Arc::as_ptr(config) as usize, sni.clone())),
        }
    }
}

/// Keep-alive connections of one worker.
#[derive(Default)]
pub struct Pool {
    http1: Mutex<HashMap<PoolKey, Vec<http1::SendRequest<ProxyBody>>>>,
    http2: Mutex<HashMap<PoolKey, http2::SendRequest<ProxyBody>>>,
}

/// A connection checked out for one request.
pub struct Lease {
    key: PoolKey,
    sender: Sender,
    pooled: bool,
}

enum Sender {
    Http1(http1::SendRequest<ProxyBody>),
    Http2(http2::SendRequest<ProxyBody>),
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Pool {
    fn checkout(&self, key: &PoolKey) -> Option<Sender> {
        if key.http2 {
            let mut map = lock(&self.http2);
            match map.get(key) {
                Some(sender) if !sender.is_closed() => return Some(Sender::Http2(sender.clone())),
                Some(_) => {
                    map.remove(key);
                }
                None => {}
            }
            return None;
        }
        let mut map = lock(&self.http1);
        let list = map.get_mut(key)?;
        list.retain(|s| !s.is_closed());
        let ready = list.iter().position(|s| s.is_ready())?;
        Some(Sender::Http1(list.swap_remove(ready)))
    }

    fn checkin(&self, key: PoolKey, sender: Sender) {
        match sender {
            Sender::Http2(s) => {
                lock(&self.http2).insert(key, s);
            }
            Sender::Http1(s) => {
                let mut map = lock(&self.http1);
                let list = map.entry(key).or_default();
                if list.len() < MAX_IDLE_PER_KEY {
                    list.push(s);
                }
            }
        }
    }

    /// Number of pooled HTTP/1.1 connections (diagnostics).
    pub fn idle_http1(&self) -> usize {
        lock(&self.http1).values().map(Vec::len).sum()
    }

    /// A connection to `endpoint`: a ready pooled one, or a new one.
    pub async fn acquire(&self, endpoint: &Endpoint, connect_timeout: Duration) -> Result<Lease, ProxyError> {
        let key = endpoint.key();
        if let Some(sender) = self.checkout(&key) {
            return Ok(Lease {
                key,
                sender,
                pooled: true,
            });
        }
        let sender = connect(endpoint, connect_timeout).await?;
        Ok(Lease {
            key,
            sender,
            pooled: false,
        })
    }

    /// Send `request` on a leased connection. A request that never left
    /// because the pooled connection had just closed is resent once on a
    /// fresh connection.
    pub async fn dispatch(
        &self,
        lease: Lease,
        endpoint: &Endpoint,
        request: Request<ProxyBody>,
        connect_timeout: Duration,
        read_timeout: Duration,
    ) -> Result<Response<Incoming>, ProxyError> {
        let Lease { key, sender, pooled } = lease;
        let request = match self.try_send(key.clone(), sender, request, read_timeout).await? {
            Ok(response) => return Ok(response),
            Err(unsent) if pooled => unsent,
            Err(_) => {
                return Err(ProxyError::new(
                    ErrorKind::UpstreamInvalid,
                    "upstream connection closed",
                ))
            }
        };
        let sender = connect(endpoint, connect_timeout).await?;
        match self.try_send(key, sender, request, read_timeout).await? {
            Ok(response) => Ok(response),
            Err(_) => Err(ProxyError::new(
                ErrorKind::UpstreamInvalid,
                "fresh upstream connection closed",
            )),
        }
    }

    /// Ok(Ok(response)), Ok(Err(request)) when the request was not sent, or an error.
    async fn try_send(
        &self,
        key: PoolKey,
        sender: Sender,
        request: Request<ProxyBody>,
        read_timeout: Duration,
    ) -> Result<Result<Response<Incoming>, Request<ProxyBody>>, ProxyError> {
        let result = match sender {
            Sender::Http1(mut s) => {
                let future = s.try_send_request(request);
                self.checkin(key, Sender::Http1(s));
                timeout(read_timeout, future).await
            }
            Sender::Http2(mut s) => {
                let future = s.try_send_request(request);
                self.checkin(key, Sender::Http2(s));
                timeout(read_timeout, future).await
            }
        };
        match result {
            Err(_) => Err(ProxyError::new(
                ErrorKind::UpstreamTimeout,
                "no response headers within read_timeout",
            )),
            Ok(Ok(response)) => Ok(Ok(response)),
            Ok(Err(mut err)) => match err.take_message() {
                Some(unsent) => Ok(Err(unsent)),
                None => Err(ProxyError::new(
                    ErrorKind::UpstreamInvalid,
                    err.into_error().to_string(),
                )),
            },
        }
    }
}

async fn resolve(host: &str, port: u16) -> Result<SocketAddr, ProxyError> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    tokio::net::lookup_host((host, port))
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| ProxyError::new(ErrorKind::NameResolution, format!("could not resolve {host}")))
}

async fn connect(endpoint: &Endpoint, connect_timeout: Duration) -> Result<Sender, ProxyError> {
    let addr = resolve(&endpoint.host, endpoint.port).await?;
    let attempt = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| ProxyError::new(ErrorKind::UpstreamConnect, format!("connect {addr}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        match &endpoint.tls {
            None => handshake(TokioIo::new(tcp), endpoint.http2).await,
            Some((config, sni)) => {
                let name = ServerName::try_from(sni.clone()).map_err(|e| {
                    ProxyError::new(ErrorKind::UpstreamConnect, format!("invalid server name {sni}: {e}"))
                })?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| {
                        ProxyError::new(ErrorKind::UpstreamConnect, format!("TLS handshake with {addr}: {e}"))
                    })?;
                handshake(TokioIo::new(tls), endpoint.http2).await
            }
        }
    };
    match timeout(connect_timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(ProxyError::new(
            ErrorKind::UpstreamConnect,
            format!("connect {addr}: timed out"),
        )),
    }
}

async fn handshake<T>(io: TokioIo<T>, use_http2: bool) -> Result<Sender, ProxyError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let failed = |e: hyper::Error| ProxyError::new(ErrorKind::UpstreamConnect, format!("handshake: {e}"));
    if use_http2 {
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(io)
            .await
            .map_err(failed)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "upstream http2 connection ended");
            }
        });
        Ok(Sender::Http2(sender))
    } else {
        let (sender, connection) = http1::Builder::new().handshake(io).await.map_err(failed)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "upstream http1 connection ended");
            }
        });
        Ok(Sender::Http1(sender))
    }
}
