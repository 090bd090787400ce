//! Upstream test servers on real sockets (127.0.0.1:0): HTTP/1.1, h2c, auto-detected, or TLS with
//! ALPN. Handlers are chosen by path:
//!
//! - `/trailers` — a body then trailers `grpc-status: 0`, `x-trailer: yes`;
//! - `/slow?ms=N` — waits N ms, then echoes;
//! - `/hang` — never answers;
//! - `/reset` — headers (content-length 100000) and 1000 bytes, then aborts the connection/stream;
//! - `/status/<code>` — answers `<code>` with `{"status":<code>}`;
//! - `/big?bytes=N` — streams N bytes of `x`;
//! - anything else (`/echo...`) — 200 JSON `{method, path, authority, headers, body, version}`;
//!   each request header `x-respond-with-<name>: <value>` becomes response header `<name>`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Version};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::tls::{mutual_server_config, server_config, LeafCert, TestCa};

type TestBody = BoxBody<Bytes, std::io::Error>;

/// ALPN protocols a TLS upstream offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alpn {
    H2,
    Http1,
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamKind {
    /// HTTP/1.1 only.
    Http1,
    /// HTTP/2 prior knowledge only.
    H2c,
    /// HTTP/1.1 or h2c, detected from the preface.
    Auto,
    /// TLS with a certificate for `localhost`/`127.0.0.1` from a CA of its own; protocol by ALPN.
    Tls(Alpn),
}

/// A running upstream server; stops accepting when dropped.
pub struct Upstream {
    kind: UpstreamKind,
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    seen: Seen,
    accept_task: JoinHandle<()>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// Turned true by [`Upstream::kill`]: every open connection drops.
    killed: tokio::sync::watch::Sender<bool>,
    /// What the test may change while the upstream runs.
    knobs: Arc<Knobs>,
    /// Connections accepted, and those still open.
    accepted: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
    /// The certificate served by a TLS upstream (for `localhost` and `127.0.0.1` by default).
    pub cert: Option<LeafCert>,
    /// The PEM of the CA that issued `cert` (never trusted by the gateway unless configured).
    pub ca_pem: Option<String>,
}

/// An address where nothing listens (a connection to it is refused).
pub fn refusing_addr() -> SocketAddr {
    crate::local(crate::free_port())
}

/// Behaviour a test can change while the upstream runs.
#[derive(Default)]
struct Knobs {
    /// Milliseconds every response waits first ([`Upstream::set_delay`]).
    delay_ms: AtomicU64,
    /// [`Upstream::set_grpc_serving`].
    grpc_not_serving: std::sync::atomic::AtomicBool,
}

/// What every connection of one upstream shares.
#[derive(Clone)]
struct Shared {
    kind: UpstreamKind,
    hits: Arc<AtomicUsize>,
    seen: Seen,
    tls: Option<tokio_rustls::TlsAcceptor>,
    killed: tokio::sync::watch::Receiver<bool>,
    knobs: Arc<Knobs>,
    accepted: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
}

fn spawn_accept(listener: TcpListener, shared: Shared) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let shared = shared.clone();
            shared.accepted.fetch_add(1, Ordering::SeqCst);
            shared.open.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut killed = shared.killed.clone();
                let open = shared.open.clone();
                let connection = async move {
                    let Shared {
                        kind,
                        hits,
                        seen,
                        tls,
                        knobs,
                        ..
                    } = shared;
                    match tls {
                        None => serve(kind, TokioIo::new(tcp), hits, seen, knobs).await,
                        Some(acceptor) => {
                            let Ok(stream) = acceptor.accept(tcp).await else { return };
                            let negotiated = match stream.get_ref().1.alpn_protocol() {
                                Some(b"h2") => UpstreamKind::H2c,
                                Some(_) => UpstreamKind::Http1,
                                None => UpstreamKind::Auto,
                            };
                            serve(negotiated, TokioIo::new(stream), hits, seen, knobs).await
                        }
                    }
                };
                tokio::select! {
                    _ = connection => {}
                    _ = killed.wait_for(|k| *k) => {}
                }
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    })
}

impl Upstream {
    pub async fn start(kind: UpstreamKind) -> Upstream {
        Upstream::start_named(kind, &["localhost", "127.0.0.1"]).await
    }

    /// [`Upstream::start`] whose TLS certificate is for `names` (DNS names, IP addresses or
    /// URIs) instead of `localhost` and `127.0.0.1`.
    pub async fn start_named(kind: UpstreamKind, names: &[&str]) -> Upstream {
        Upstream::start_with(kind, names, None).await
    }

    /// A TLS upstream (HTTP/1.1, certificate for `localhost`/`127.0.0.1`) that refuses
    /// handshakes without a client certificate issued by `client_ca`.
    pub async fn start_mutual(client_ca: &TestCa) -> Upstream {
        Upstream::start_with(
            UpstreamKind::Tls(Alpn::Http1),
            &["localhost", "127.0.0.1"],
            Some(client_ca),
        )
        .await
    }

    /// An HTTP/1.1 upstream listening on `addr` (e.g. another loopback address, `127.0.0.2:<port>`).
    pub async fn start_at(addr: SocketAddr) -> Upstream {
        Upstream::start_with_at(UpstreamKind::Http1, &[], None, addr).await
    }

    /// A TLS upstream (HTTP/1.1) whose certificate, for `localhost`/`127.0.0.1`, is issued by
    /// `intermediates` intermediate CAs below a root; it presents them all. `ca_pem` is the root.
    pub async fn start_chained(intermediates: usize) -> Upstream {
        let root = TestCa::new("upstream root ca");
        let mut issuers = vec![];
        for level in 0..intermediates {
            let parent = issuers.last().unwrap_or(&root);
            let next = parent.intermediate(&format!("upstream intermediate {level}"));
            issuers.push(next);
        }
        let leaf = issuers.last().unwrap_or(&root).issue(&["localhost", "127.0.0.1"]);
        let chain: Vec<_> = issuers.iter().rev().map(TestCa::cert_der).collect();
        let config = crate::tls::chain_server_config(&leaf, &chain, &[b"http/1.1"]);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let mut up = Upstream::serve(listener, UpstreamKind::Tls(Alpn::Http1), Some(acceptor));
        up.cert = Some(leaf);
        up.ca_pem = Some(root.cert_pem());
        up
    }

    /// Serve `kind` on `listener` (over TLS with `tls`).
    fn serve(listener: TcpListener, kind: UpstreamKind, tls: Option<tokio_rustls::TlsAcceptor>) -> Upstream {
        let addr = listener.local_addr().expect("upstream addr");
        let (killed, killed_rx) = tokio::sync::watch::channel(false);
        let shared = Shared {
            kind,
            hits: Arc::new(AtomicUsize::new(0)),
            seen: Seen::default(),
            tls: tls.clone(),
            killed: killed_rx,
            knobs: Arc::new(Knobs::default()),
            accepted: Arc::new(AtomicUsize::new(0)),
            open: Arc::new(AtomicUsize::new(0)),
        };
        Upstream {
            kind,
            addr,
            hits: shared.hits.clone(),
            seen: shared.seen.clone(),
            knobs: shared.knobs.clone(),
            accepted: shared.accepted.clone(),
            open: shared.open.clone(),
            accept_task: spawn_accept(listener, shared),
            tls,
            killed,
            cert: None,
            ca_pem: None,
        }
    }

    async fn start_with(kind: UpstreamKind, names: &[&str], client_ca: Option<&TestCa>) -> Upstream {
        Upstream::start_with_at(kind, names, client_ca, "127.0.0.1:0".parse().expect("address")).await
    }

    async fn start_with_at(
        kind: UpstreamKind,
        names: &[&str],
        client_ca: Option<&TestCa>,
        bind: SocketAddr,
    ) -> Upstream {
        let listener = TcpListener::bind(bind).await.expect("bind upstream");
        let (cert, ca_pem) = match kind {
            UpstreamKind::Tls(_) => {
                let ca = TestCa::new("upstream test ca");
                (Some(ca.issue(names)), Some(ca.cert_pem()))
            }
            _ => (None, None),
        };
        let tls = match (kind, &cert) {
            (UpstreamKind::Tls(alpn), Some(cert)) => {
                let protocols: &[&[u8]] = match alpn {
                    Alpn::H2 => &[b"h2"],
                    Alpn::Http1 => &[b"http/1.1"],
                    Alpn::Both => &[b"h2", b"http/1.1"],
                };
                let config = match client_ca {
                    Some(ca) => mutual_server_config(cert, ca, protocols),
                    None => server_config(cert, protocols),
                };
                Some(tokio_rustls::TlsAcceptor::from(config))
            }
            _ => None,
        };
        let mut up = Upstream::serve(listener, kind, tls);
        up.cert = cert;
        up.ca_pem = ca_pem;
        up
    }

    /// Stop as a crashed server would: the port refuses connections and
    /// every open connection is dropped.
    pub fn kill(&mut self) {
        self.accept_task.abort();
        let _ = self.killed.send(true);
    }

    /// Listen again on the same port after [`Upstream::kill`] (hits keep counting).
    pub async fn revive(&mut self) {
        let listener = TcpListener::bind(self.addr).await.expect("rebind upstream");
        let (killed, killed_rx) = tokio::sync::watch::channel(false);
        self.killed = killed;
        let shared = Shared {
            kind: self.kind,
            hits: self.hits.clone(),
            seen: self.seen.clone(),
            tls: self.tls.clone(),
            killed: killed_rx,
            knobs: self.knobs.clone(),
            accepted: self.accepted.clone(),
            open: self.open.clone(),
        };
        self.accept_task = spawn_accept(listener, shared);
    }

    /// Connections accepted so far.
    pub fn connections_accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn connections_open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Answer `grpc.health.v1.Health/Check` with SERVING (true, the default) or NOT_SERVING.
    pub fn set_grpc_serving(&self, serving: bool) {
        self.knobs.grpc_not_serving.store(!serving, Ordering::SeqCst);
    }

    /// Make every response wait `delay` first.
    pub fn set_delay(&self, delay: Duration) {
        self.knobs.delay_ms.store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `<scheme>://127.0.0.1:<port>`.
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.addr.port())
    }

    /// Every request received so far, as `METHOD path?query`, in arrival order.
    pub fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many requests have been received so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn hit_counter(&self) -> Arc<AtomicUsize> {
        self.hits.clone()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.accept_task.abort();
        let _ = self.killed.send(true);
    }
}

/// The requests an upstream received (`METHOD path?query`).
type Seen = Arc<std::sync::Mutex<Vec<String>>>;

async fn serve<I>(kind: UpstreamKind, io: TokioIo<I>, hits: Arc<AtomicUsize>, seen: Seen, knobs: Arc<Knobs>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("{} {target}", req.method()));
        let hits = hits.clone();
        let delay = Duration::from_millis(knobs.delay_ms.load(Ordering::SeqCst));
        let knobs = knobs.clone();
        async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            handle(req, hits, knobs).await
        }
    });
    let _ = match kind {
        UpstreamKind::Http1 => hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await
            .map_err(|e| e.to_string()),
        UpstreamKind::H2c => hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(io, service)
            .await
            .map_err(|e| e.to_string()),
        UpstreamKind::Auto | UpstreamKind::Tls(_) => hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
            .serve_connection(io, service)
            .await
            .map_err(|e| e.to_string()),
    };
}

fn query_number(req: &Request<Incoming>, key: &str) -> Option<u64> {
    req.uri().query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        if k == key {
            v.parse().ok()
        } else {
            None
        }
    })
}

async fn handle(
    req: Request<Incoming>,
    hits: Arc<AtomicUsize>,
    knobs: Arc<Knobs>,
) -> Result<Response<TestBody>, Infallible> {
    hits.fetch_add(1, Ordering::SeqCst);
    let path = req.uri().path().to_string();
    let response = if path == "/trailers" {
        trailers_response(req).await
    } else if path == "/grpc.health.v1.Health/Check" {
        let serving = !knobs.grpc_not_serving.load(Ordering::SeqCst);
        grpc_health_response(req, serving).await
    } else if path == "/slow" {
        let ms = query_number(&req, "ms").unwrap_or(1000);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        echo(req).await
    } else if path == "/hang" {
        std::future::pending::<Response<TestBody>>().await
    } else if path == "/reset" {
        reset_response()
    } else if let Some(code) = path.strip_prefix("/status/") {
        let code = code.parse::<u16>().ok().and_then(|c| StatusCode::from_u16(c).ok());
        let code = code.unwrap_or(StatusCode::BAD_REQUEST);
        json_response(code, &json!({ "status": code.as_u16() }))
    } else if path == "/big" {
        big_response(query_number(&req, "bytes").unwrap_or(1 << 20))
    } else {
        echo(req).await
    };
    Ok(response)
}

fn full(bytes: impl Into<Bytes>) -> TestBody {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

fn json_response(status: StatusCode, value: &Value) -> Response<TestBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(value.to_string()))
        .expect("response")
}

fn version_name(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "unknown",
    }
}

/// Headers as a JSON object; repeated headers are joined with ", ".
fn headers_json(headers: &HeaderMap) -> Value {
    let mut map = Map::new();
    for name in headers.keys() {
        let values: Vec<String> = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        map.insert(name.as_str().to_string(), Value::String(values.join(", ")));
    }
    Value::Object(map)
}

async fn echo(req: Request<Incoming>) -> Response<TestBody> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => Bytes::from(format!("<body error: {e}>")),
    };
    let value = json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"),
        "authority": parts.uri.authority().map(|a| a.as_str()),
        "headers": headers_json(&parts.headers),
        "body": String::from_utf8_lossy(&body),
        "version": version_name(parts.version),
    });
    let mut response = json_response(StatusCode::OK, &value);
    for (name, value) in &parts.headers {
        let asked = name.as_str().strip_prefix("x-respond-with-");
        if let Some(name) = asked.and_then(|n| http::HeaderName::from_bytes(n.as_bytes()).ok()) {
            response.headers_mut().insert(name, value.clone());
        }
    }
    response
}

/// A body fed by a channel, so handlers can stream, add trailers, or fail midway.
struct ChannelBody {
    frames: mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>,
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.frames.poll_recv(cx)
    }
}

fn channel_body() -> (mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>, TestBody) {
    let (tx, rx) = mpsc::channel(4);
    (tx, ChannelBody { frames: rx }.boxed())
}

async fn trailers_response(req: Request<Incoming>) -> Response<TestBody> {
    let te = req.headers().get("te").cloned();
    let _ = req.into_body().collect().await;
    let (tx, body) = channel_body();
    tokio::spawn(async move {
        let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"trailers body")))).await;
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        trailers.insert("x-trailer", HeaderValue::from_static("yes"));
        let _ = tx.send(Ok(Frame::trailers(trailers))).await;
    });
    let mut builder = Response::builder()
        .status(200)
        .header("content-type", "application/grpc");
    if let Some(te) = te {
        builder = builder.header("x-received-te", te);
    }
    builder.body(body).expect("response")
}

/// `grpc.health.v1.Health/Check`: a HealthCheckResponse with status SERVING (1) or
/// NOT_SERVING (2), `grpc-status: 0` in the trailers.
async fn grpc_health_response(req: Request<Incoming>, serving: bool) -> Response<TestBody> {
    let _ = req.into_body().collect().await;
    let (tx, body) = channel_body();
    tokio::spawn(async move {
        let status = if serving { 1 } else { 2 };
        let message = Bytes::from(vec![0, 0, 0, 0, 2, 0x08, status]);
        let _ = tx.send(Ok(Frame::data(message))).await;
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let _ = tx.send(Ok(Frame::trailers(trailers))).await;
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(body)
        .expect("response")
}

fn reset_response() -> Response<TestBody> {
    let (tx, body) = channel_body();
    tokio::spawn(async move {
        let _ = tx.send(Ok(Frame::data(Bytes::from(vec![b'r'; 1000])))).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = tx.send(Err(std::io::Error::other("upstream reset on purpose"))).await;
    });
    Response::builder()
        .status(200)
        .header("content-length", "100000")
        .body(body)
        .expect("response")
}

fn big_response(total: u64) -> Response<TestBody> {
    let (tx, body) = channel_body();
    tokio::spawn(async move {
        let mut left = total;
        while left > 0 {
            let n = left.min(64 * 1024);
            if tx
                .send(Ok(Frame::data(Bytes::from(vec![b'x'; n as usize]))))
                .await
                .is_err()
            {
                return;
            }
            left -= n;
        }
    });
    Response::builder()
        .status(200)
        .header("content-type", "text/plain")
        .body(body)
        .expect("response")
}

/// An upstream that answers every request on a connection with one fixed
/// head, its names in mixed case, and a 2-byte body.
pub async fn fixed_upstream() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let head = b"HTTP/1.1 200 OK\r\nX-Upstream-Case: Kept\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
                        if stream.write_all(head).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, task)
}

/// The field lines of a raw HTTP/1.1 reply's head (status line left out).
pub fn head_lines(reply: &str) -> Vec<String> {
    let head = reply.split("\r\n\r\n").next().unwrap_or_default();
    head.lines().skip(1).map(str::to_string).collect()
}

/// Checks a raw reply is [`fixed_upstream`]'s 200 with its head passed on
/// in the upstream's own bytes (names in its case, its `Content-Length`);
/// the head's field lines.
pub fn assert_relayed(reply: &str) -> Vec<String> {
    assert!(
        reply.starts_with("HTTP/1.1 200 OK\r\n") && reply.ends_with("\r\n\r\nok"),
        "{reply}"
    );
    let lines = head_lines(reply);
    assert!(
        lines.contains(&"X-Upstream-Case: Kept".to_string()),
        "relayed: {lines:?}"
    );
    assert!(lines.contains(&"Content-Length: 2".to_string()), "{lines:?}");
    lines
}
