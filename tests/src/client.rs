//! Test clients: one connection speaking HTTP/1.1, h2c (prior knowledge) or TLS with SNI and
//! ALPN, and a raw TCP connection for bytes no well-behaved client would send.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http::header::HOST;
use http::{HeaderMap, Request, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::tls::{client_config, Trust};

/// How long one request (connect excluded) may take, body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A complete response: head, whole body, trailers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub trailers: Option<HeaderMap>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}), status {}: {}", self.status, self.text()))
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    pub fn trailer(&self, name: &str) -> Option<String> {
        let trailers = self.trailers.as_ref()?;
        trailers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    /// `message` of a Kong-style JSON body, if any.
    pub fn message(&self) -> Option<String> {
        let value: Value = serde_json::from_slice(&self.body).ok()?;
        value.get("message")?.as_str().map(str::to_string)
    }
}

/// `GET path` with no body.
pub fn get(path: &str) -> Request<Full<Bytes>> {
    request("GET", path, &[], "")
}

/// `GET path` with a Host header.
pub fn get_host(path: &str, host: &str) -> Request<Full<Bytes>> {
    request("GET", path, &[("host", host)], "")
}

/// A request with a method, a path (or absolute URI), headers and a body.
pub fn request(method: &str, path: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    let mut builder = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Full::new(body.into())).expect("valid request")
}

/// TLS client options.
#[derive(Clone, Debug)]
pub struct TlsOptions {
    /// SNI to send; `None` sends no SNI (the server name becomes the IP address).
    pub sni: Option<String>,
    /// ALPN protocols offered, e.g. `vec![b"h2".to_vec()]`.
    pub alpn: Vec<Vec<u8>>,
    pub trust: Trust,
}

impl TlsOptions {
    pub fn new(sni: Option<&str>, alpn: &[&[u8]], trust: Trust) -> TlsOptions {
        TlsOptions {
            sni: sni.map(str::to_string),
            alpn: alpn.iter().map(|p| p.to_vec()).collect(),
            trust,
        }
    }
}

/// What the TLS handshake settled.
#[derive(Clone, Debug)]
pub struct TlsInfo {
    pub alpn: Option<Vec<u8>>,
    pub peer_certificates: Vec<CertificateDer<'static>>,
}

enum Sender {
    Http1(http1::SendRequest<Full<Bytes>>),
    Http2(http2::SendRequest<Full<Bytes>>),
}

/// One client connection; requests on it reuse it (keep-alive or HTTP/2 streams).
pub struct Conn {
    sender: Sender,
    scheme: &'static str,
    authority: String,
    pub tls: Option<TlsInfo>,
}

async fn connect_tcp(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| anyhow!("connect to {addr} timed out"))?
        .with_context(|| format!("connect to {addr}"))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A TLS connection after its handshake, for tests that write raw bytes over it.
pub async fn tls_stream(
    addr: SocketAddr,
    options: &TlsOptions,
) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = connect_tcp(addr).await?;
    let server_name = match &options.sni {
        Some(name) => ServerName::try_from(name.clone())?,
        None => ServerName::IpAddress(addr.ip().into()),
    };
    let connector = tokio_rustls::TlsConnector::from(client_config(&options.trust, &options.alpn));
    tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(server_name, tcp))
        .await
        .map_err(|_| anyhow!("TLS handshake with {addr} timed out"))?
        .context("TLS handshake")
}

impl Conn {
    /// Plain HTTP/1.1.
    pub async fn h1(addr: SocketAddr) -> anyhow::Result<Conn> {
        let io = TokioIo::new(connect_tcp(addr).await?);
        let (sender, connection) = http1::handshake(io).await?;
        tokio::spawn(connection);
        Ok(Conn {
            sender: Sender::Http1(sender),
            scheme: "http",
            authority: addr.to_string(),
            tls: None,
        })
    }

    /// Cleartext HTTP/2 with prior knowledge.
    pub async fn h2c(addr: SocketAddr) -> anyhow::Result<Conn> {
        let io = TokioIo::new(connect_tcp(addr).await?);
        let (sender, connection) = http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(connection);
        Ok(Conn {
            sender: Sender::Http2(sender),
            scheme: "http",
            authority: addr.to_string(),
            tls: None,
        })
    }

    /// TLS; speaks HTTP/2 when ALPN settles on `h2`, HTTP/1.1 otherwise.
    pub async fn tls(addr: SocketAddr, options: &TlsOptions) -> anyhow::Result<Conn> {
        let stream = tls_stream(addr, options).await?;
        let (_, session) = stream.get_ref();
        let info = TlsInfo {
            alpn: session.alpn_protocol().map(<[u8]>::to_vec),
            peer_certificates: session
                .peer_certificates()
                .map(|certs| certs.iter().map(|c| c.clone().into_owned()).collect())
                .unwrap_or_default(),
        };
        let authority = options.sni.clone().unwrap_or_else(|| addr.to_string());
        let io = TokioIo::new(stream);
        let sender = if info.alpn.as_deref() == Some(b"h2") {
            let (sender, connection) = http2::handshake(TokioExecutor::new(), io).await?;
            tokio::spawn(connection);
            Sender::Http2(sender)
        } else {
            let (sender, connection) = http1::handshake(io).await?;
            tokio::spawn(connection);
            Sender::Http1(sender)
        };
        Ok(Conn {
            sender,
            scheme: "https",
            authority,
            tls: Some(info),
        })
    }

    pub fn is_http2(&self) -> bool {
        matches!(self.sender, Sender::Http2(_))
    }

    /// Sends `req` and reads the whole response, trailers included, within [`REQUEST_TIMEOUT`].
    /// A relative URI is completed from the Host header (or the connection's authority).
    pub async fn send(&mut self, req: Request<Full<Bytes>>) -> anyhow::Result<Reply> {
        self.send_within(req, REQUEST_TIMEOUT).await
    }

    /// [`Conn::send`] with a wait of the caller's: for a request whose
    /// answer takes long in a debug build (a bulk configuration).
    pub async fn send_within(&mut self, req: Request<Full<Bytes>>, wait: Duration) -> anyhow::Result<Reply> {
        tokio::time::timeout(wait, self.send_unbounded(req))
            .await
            .map_err(|_| anyhow!("request timed out after {wait:?}"))?
    }

    async fn send_unbounded(&mut self, mut req: Request<Full<Bytes>>) -> anyhow::Result<Reply> {
        let host = match req.headers().get(HOST) {
            Some(value) => value.to_str()?.to_string(),
            None => self.authority.clone(),
        };
        let response = match &mut self.sender {
            Sender::Http1(sender) => {
                req.headers_mut().insert(HOST, host.parse()?);
                sender.ready().await.context("connection not ready")?;
                sender.send_request(req).await.context("send request")?
            }
            Sender::Http2(sender) => {
                if req.uri().scheme().is_none() {
                    let path = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
                    let uri: Uri = format!("{}://{}{}", self.scheme, host, path).parse()?;
                    *req.uri_mut() = uri;
                }
                req.headers_mut().remove(HOST);
                *req.version_mut() = Version::HTTP_2;
                sender.ready().await.context("connection not ready")?;
                sender.send_request(req).await.context("send request")?
            }
        };
        let (parts, body) = response.into_parts();
        let collected = body.collect().await.context("read response body")?;
        let trailers = collected.trailers().cloned();
        Ok(Reply {
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            body: collected.to_bytes(),
            trailers,
        })
    }
}

/// One request on a fresh HTTP/1.1 connection.
pub async fn send_h1(addr: SocketAddr, req: Request<Full<Bytes>>) -> anyhow::Result<Reply> {
    Conn::h1(addr).await?.send(req).await
}

/// One request on a fresh h2c connection.
pub async fn send_h2c(addr: SocketAddr, req: Request<Full<Bytes>>) -> anyhow::Result<Reply> {
    Conn::h2c(addr).await?.send(req).await
}

/// A raw TCP connection: write any bytes, read whatever comes back.
pub struct RawConn {
    stream: TcpStream,
}

/// What a raw connection received before it was closed (or the wait ran out).
#[derive(Debug)]
pub struct RawReply {
    pub bytes: Vec<u8>,
    /// The peer closed (EOF or reset) within the wait.
    pub closed: bool,
}

impl RawReply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// The status code of the first response line, if one arrived.
    pub fn status(&self) -> Option<u16> {
        let text = self.text();
        let line = text.lines().next()?;
        let mut parts = line.split(' ');
        if !parts.next()?.starts_with("HTTP/1.") {
            return None;
        }
        parts.next()?.parse().ok()
    }
}

impl RawConn {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<RawConn> {
        Ok(RawConn {
            stream: connect_tcp(addr).await?,
        })
    }

    /// The connection itself, for reads a test frames on its own.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Writes all of `bytes`; a peer that already closed is not an error here (the reply, if
    /// any, is still readable), so the write error is returned for the caller to judge.
    pub async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        tokio::time::timeout(REQUEST_TIMEOUT, self.stream.write_all(bytes))
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("write timed out")))
    }

    /// Reads until the peer closes or `wait` passes.
    pub async fn read_until_close(&mut self, wait: Duration) -> RawReply {
        let deadline = tokio::time::Instant::now() + wait;
        let mut bytes = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut buf)).await {
                Err(_) => return RawReply { bytes, closed: false },
                Ok(Ok(0)) | Ok(Err(_)) => return RawReply { bytes, closed: true },
                Ok(Ok(n)) => bytes.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// Reads until a complete response head (`\r\n\r\n`) arrived, the peer closed, or `wait`.
    pub async fn read_head(&mut self, wait: Duration) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        while !bytes.windows(4).any(|w| w == b"\r\n\r\n") {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut buf)).await {
                Err(_) => bail!(
                    "no response head within {wait:?}: {:?}",
                    String::from_utf8_lossy(&bytes)
                ),
                Ok(Ok(0)) => bail!("closed before a response head: {:?}", String::from_utf8_lossy(&bytes)),
                Ok(Err(e)) => bail!("read error {e} after {:?}", String::from_utf8_lossy(&bytes)),
                Ok(Ok(n)) => bytes.extend_from_slice(&buf[..n]),
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Writes `bytes` as they are on a new connection and reads until the
/// gateway closes it (send `Connection: close`); 10 s at most.
pub async fn send_h1_raw(addr: SocketAddr, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream.write_all(bytes).await.expect("write");
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    };
    crate::within(std::time::Duration::from_secs(10), "raw HTTP/1.1 exchange", exchange).await
}
