//! Log sinks on real sockets for the logging plugins' tests: an HTTP
//! collector (records every request; can fail the first N or never answer),
//! a TCP line collector, a UDP datagram collector, and a Unix datagram
//! socket standing for `/dev/log`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncBufReadExt;
use tokio::net::{TcpListener, UdpSocket, UnixDatagram};
use tokio::task::JoinHandle;

/// One request an [`HttpCollector`] received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

#[derive(Default)]
struct CollectorState {
    received: Mutex<Vec<Received>>,
    /// Requests still to answer 500 before answering 200.
    fail_first: AtomicUsize,
    /// Never answer (hold every request).
    hang: AtomicBool,
    attempts: AtomicUsize,
}

/// An HTTP/1.1 server recording what log shippers send it.
pub struct HttpCollector {
    addr: SocketAddr,
    state: Arc<CollectorState>,
    task: JoinHandle<()>,
}

impl HttpCollector {
    pub async fn start() -> HttpCollector {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind collector");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(CollectorState::default());
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(answer(&state, request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        HttpCollector { addr, state, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answer 500 to the next `n` requests.
    pub fn fail_first(&self, n: usize) {
        self.state.fail_first.store(n, Ordering::SeqCst);
    }

    /// Hold every request without answering (or stop holding).
    pub fn hang(&self, on: bool) {
        self.state.hang.store(on, Ordering::SeqCst);
    }

    /// Requests answered 200, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().expect("lock").clone()
    }

    /// Every request that arrived, answered or not.
    pub fn attempts(&self) -> usize {
        self.state.attempts.load(Ordering::SeqCst)
    }
}

impl Drop for HttpCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(state: &CollectorState, request: Request<Incoming>) -> Response<Full<Bytes>> {
    state.attempts.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    if state.hang.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    let failing = state
        .fail_first
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if failing {
        let mut response = Response::new(Full::new(Bytes::from_static(b"try again")));
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        return response;
    }
    state.received.lock().expect("lock").push(Received {
        method: parts.method.to_string(),
        path: parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        headers: parts.headers,
        body,
    });
    Response::new(Full::new(Bytes::from_static(b"ok")))
}

/// A TCP server collecting `\n`-ended lines from every connection.
pub struct TcpCollector {
    pub addr: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl TcpCollector {
    pub async fn start() -> TcpCollector {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind tcp collector");
        let addr = listener.local_addr().expect("addr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (into, count) = (lines.clone(), connections.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                let into = into.clone();
                tokio::spawn(async move {
                    let mut reader = tokio::io::BufReader::new(stream).lines();
                    while let Ok(Some(line)) = reader.next_line().await {
                        into.lock().expect("lock").push(line);
                    }
                });
            }
        });
        TcpCollector {
            addr,
            lines,
            connections,
            task,
        }
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lock").clone()
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for TcpCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Datagrams received on a UDP or Unix datagram socket.
pub struct DatagramCollector {
    datagrams: Arc<Mutex<Vec<Vec<u8>>>>,
    task: JoinHandle<()>,
    pub udp: Option<SocketAddr>,
    pub path: Option<PathBuf>,
}

/// Either kind of datagram socket a collector reads.
enum DatagramSocket {
    Udp(UdpSocket),
    Unix(UnixDatagram),
}

impl DatagramSocket {
    async fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            DatagramSocket::Udp(socket) => socket.recv(buf).await,
            DatagramSocket::Unix(socket) => socket.recv(buf).await,
        }
    }
}

impl DatagramCollector {
    pub async fn udp() -> DatagramCollector {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind udp collector");
        let addr = socket.local_addr().expect("addr");
        let mut collector = DatagramCollector::collect(DatagramSocket::Udp(socket));
        collector.udp = Some(addr);
        collector
    }

    /// A Unix datagram socket at `path` (a stand-in for `/dev/log`).
    pub fn unix(path: &Path) -> DatagramCollector {
        let _ = std::fs::remove_file(path);
        let socket = UnixDatagram::bind(path).expect("bind unix datagram socket");
        let mut collector = DatagramCollector::collect(DatagramSocket::Unix(socket));
        collector.path = Some(path.to_path_buf());
        collector
    }

    fn collect(socket: DatagramSocket) -> DatagramCollector {
        let datagrams = Arc::new(Mutex::new(Vec::new()));
        let into = datagrams.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            while let Ok(n) = socket.recv(&mut buf).await {
                into.lock().expect("lock").push(buf[..n].to_vec());
            }
        });
        DatagramCollector {
            datagrams,
            task,
            udp: None,
            path: None,
        }
    }

    pub fn datagrams(&self) -> Vec<Vec<u8>> {
        self.datagrams.lock().expect("lock").clone()
    }
}

impl Drop for DatagramCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}
