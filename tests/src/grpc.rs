//! A real gRPC upstream and client, built with tonic, for end-to-end tests.
//!
//! The service `strait.test.Stream` has one method of each kind:
//! `Unary` echoes a message, `Collect` (client streaming) counts what it
//! reads, optionally at a limited rate (a slow reader), `Emit` (server
//! streaming) sends `count` messages of `size` bytes, and `Ack` (bidi)
//! answers every message with its sequence number.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_stream::{Stream, StreamExt};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

use crate::tls::{client_config, server_config, LeafCert, Trust};

/// One message of any method: a sequence number and a payload.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Msg {
    #[prost(uint64, tag = "1")]
    pub seq: u64,
    #[prost(bytes = "bytes", tag = "2")]
    pub payload: Bytes,
}

/// What `Collect` read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(uint64, tag = "1")]
    pub count: u64,
    #[prost(uint64, tag = "2")]
    pub bytes: u64,
    #[prost(uint64, tag = "3")]
    pub last_seq: u64,
}

/// What `Emit` is asked to send.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EmitRequest {
    #[prost(uint64, tag = "1")]
    pub count: u64,
    #[prost(uint64, tag = "2")]
    pub size: u64,
    /// Let the server's task yield between messages, so each goes out in
    /// its own small DATA frame (else tonic batches ready messages).
    #[prost(bool, tag = "3")]
    pub spaced: bool,
}

pub const SERVICE: &str = "strait.test.Stream";

/// Shared state of the upstream: what it saw and how fast it reads.
#[derive(Debug, Default)]
pub struct State {
    /// `Collect` reads at most this many payload bytes a second (0: no limit).
    pub read_rate: AtomicU64,
    /// Calls started, any method: counted when the request's head arrives,
    /// so a call the client reset before sending its message counts too.
    pub calls: AtomicU64,
    /// `Unary` calls whose message arrived and was answered.
    pub unary_answered: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// `Ack` streams open now (their response stream not yet dropped).
    pub open_acks: AtomicU64,
}

/// Counts an `Ack` stream open while it lives.
struct OpenAck(Arc<State>);

impl OpenAck {
    fn new(state: Arc<State>) -> OpenAck {
        state.open_acks.fetch_add(1, Ordering::Relaxed);
        OpenAck(state)
    }
}

impl Drop for OpenAck {
    fn drop(&mut self) {
        self.0.open_acks.fetch_sub(1, Ordering::Relaxed);
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type MsgStream = Pin<Box<dyn Stream<Item = Result<Msg, Status>> + Send>>;

#[derive(Clone)]
struct StreamServer(Arc<State>);

impl NamedService for StreamServer {
    const NAME: &'static str = SERVICE;
}

struct Unary(Arc<State>);
struct Collect(Arc<State>);
struct Emit;
struct Ack(Arc<State>);

impl tonic::server::UnaryService<Msg> for Unary {
    type Response = Msg;
    type Future = BoxFuture<Result<Response<Msg>, Status>>;
    fn call(&mut self, request: Request<Msg>) -> Self::Future {
        self.0.unary_answered.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move { Ok(Response::new(request.into_inner())) })
    }
}

impl tonic::server::ClientStreamingService<Msg> for Collect {
    type Response = Summary;
    type Future = BoxFuture<Result<Response<Summary>, Status>>;
    fn call(&mut self, request: Request<Streaming<Msg>>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            let mut stream = request.into_inner();
            let mut summary = Summary::default();
            let started = Instant::now();
            while let Some(msg) = stream.message().await? {
                summary.count += 1;
                summary.bytes += msg.payload.len() as u64;
                summary.last_seq = msg.seq;
                let rate = state.read_rate.load(Ordering::Relaxed);
                if rate > 0 {
                    let due = started + Duration::from_secs_f64(summary.bytes as f64 / rate as f64);
                    tokio::time::sleep_until(due.into()).await;
                }
            }
            Ok(Response::new(summary))
        })
    }
}

impl tonic::server::ServerStreamingService<EmitRequest> for Emit {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = BoxFuture<Result<Response<MsgStream>, Status>>;
    fn call(&mut self, request: Request<EmitRequest>) -> Self::Future {
        let asked = request.into_inner();
        let payload = Bytes::from(vec![b'e'; asked.size as usize]);
        let spaced = asked.spaced;
        let stream = tokio_stream::iter(0..asked.count).then(move |seq| {
            let payload = payload.clone();
            async move {
                if spaced {
                    tokio::task::yield_now().await;
                }
                Ok(Msg { seq, payload })
            }
        });
        Box::pin(async move { Ok(Response::new(Box::pin(stream) as MsgStream)) })
    }
}

impl tonic::server::StreamingService<Msg> for Ack {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = BoxFuture<Result<Response<MsgStream>, Status>>;
    fn call(&mut self, request: Request<Streaming<Msg>>) -> Self::Future {
        let open = OpenAck::new(self.0.clone());
        let stream = request.into_inner().map(move |msg| {
            let _open = &open;
            msg.map(|msg| Msg {
                seq: msg.seq,
                payload: Bytes::new(),
            })
        });
        Box::pin(async move { Ok(Response::new(Box::pin(stream) as MsgStream)) })
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for StreamServer
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let state = self.0.clone();
        state.calls.fetch_add(1, Ordering::Relaxed);
        let method = request.uri().path().rsplit('/').next().unwrap_or("").to_string();
        Box::pin(async move {
            let response = match method.as_str() {
                "Unary" => {
                    let mut grpc = tonic::server::Grpc::new(ProstCodec::<Msg, Msg>::default());
                    grpc.unary(Unary(state), request).await
                }
                "Collect" => {
                    let mut grpc = tonic::server::Grpc::new(ProstCodec::<Summary, Msg>::default());
                    grpc.client_streaming(Collect(state), request).await
                }
                "Emit" => {
                    let mut grpc = tonic::server::Grpc::new(ProstCodec::<Msg, EmitRequest>::default());
                    grpc.server_streaming(Emit, request).await
                }
                "Ack" => {
                    let mut grpc = tonic::server::Grpc::new(ProstCodec::<Msg, Msg>::default());
                    grpc.streaming(Ack(state), request).await
                }
                _ => Status::unimplemented(method).into_http(),
            };
            Ok(response)
        })
    }
}

/// A tonic server for `strait.test.Stream`, over h2c or TLS (ALPN `h2`).
pub struct GrpcUpstream {
    pub addr: SocketAddr,
    pub state: Arc<State>,
    tls: bool,
    stop: Option<oneshot::Sender<()>>,
}

impl GrpcUpstream {
    /// Over h2c (prior knowledge), as `grpc://` services reach it.
    pub async fn start() -> GrpcUpstream {
        GrpcUpstream::start_with(None, None).await
    }

    /// Over h2c on `listener` (the lab's origin, `grpc-origin`).
    pub async fn serve(listener: TcpListener) -> GrpcUpstream {
        GrpcUpstream::serve_with(listener, None, None).await
    }

    /// Over h2c, allowing `streams` concurrent streams per connection
    /// (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub async fn start_limited(streams: u32) -> GrpcUpstream {
        GrpcUpstream::start_with(None, Some(streams)).await
    }

    /// Over TLS with a self-signed certificate, as `grpcs://` services reach it.
    pub async fn start_tls() -> GrpcUpstream {
        GrpcUpstream::start_with(Some(LeafCert::self_signed(&["localhost", "127.0.0.1"])), None).await
    }

    async fn start_with(leaf: Option<LeafCert>, max_streams: Option<u32>) -> GrpcUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind gRPC upstream");
        GrpcUpstream::serve_with(listener, leaf, max_streams).await
    }

    async fn serve_with(listener: TcpListener, leaf: Option<LeafCert>, max_streams: Option<u32>) -> GrpcUpstream {
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let service = StreamServer(state.clone());
        let tls = leaf.is_some();
        let acceptor = leaf.map(|leaf| tokio_rustls::TlsAcceptor::from(server_config(&leaf, &[b"h2"])));
        let counted = state.clone();
        tokio::spawn(async move {
            let accepted = tokio_stream::wrappers::TcpListenerStream::new(listener).map(move |tcp| {
                counted.connections.fetch_add(1, Ordering::Relaxed);
                // As gRPC servers do: a small message goes out at once, not
                // after the peer's delayed ACK (Nagle).
                if let Ok(tcp) = &tcp {
                    let _ = tcp.set_nodelay(true);
                }
                tcp
            });
            let server = tonic::transport::Server::builder()
                .max_concurrent_streams(max_streams)
                .add_service(service);
            let signal = async {
                let _ = stopped.await;
            };
            let result = match acceptor {
                None => server.serve_with_incoming_shutdown(accepted, signal).await,
                Some(acceptor) => {
                    let handshakes = accepted
                        .filter_map(|tcp| tcp.ok())
                        .then(move |tcp| {
                            let acceptor = acceptor.clone();
                            async move { acceptor.accept(tcp).await }
                        })
                        .filter(|tls| tls.is_ok());
                    server.serve_with_incoming_shutdown(handshakes, signal).await
                }
            };
            if let Err(error) = result {
                eprintln!("gRPC upstream stopped: {error}");
            }
        });
        GrpcUpstream {
            addr,
            state,
            tls,
            stop: Some(stop),
        }
    }

    /// The service URL for the gateway (`grpc://` or `grpcs://`).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "grpcs" } else { "grpc" };
        format!("{scheme}://{}", self.addr)
    }

    /// Make `Collect` read at most `bytes_per_second` of payload.
    pub fn set_read_rate(&self, bytes_per_second: u64) {
        self.state.read_rate.store(bytes_per_second, Ordering::Relaxed);
    }

    pub fn calls(&self) -> u64 {
        self.state.calls.load(Ordering::Relaxed)
    }

    /// `Unary` calls whose message arrived and was answered.
    pub fn unary_answered(&self) -> u64 {
        self.state.unary_answered.load(Ordering::Relaxed)
    }

    /// `Ack` streams the upstream still serves.
    pub fn open_acks(&self) -> u64 {
        self.state.open_acks.load(Ordering::Relaxed)
    }

    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::Relaxed)
    }
}

impl Drop for GrpcUpstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Opens TLS connections (ALPN `h2`, any server certificate) for tonic.
#[derive(Clone)]
struct TlsConnector(SocketAddr);

impl tonic::codegen::Service<http::Uri> for TlsConnector {
    type Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = BoxFuture<Result<Self::Response, std::io::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let addr = self.0;
        Box::pin(async move {
            let tcp = TcpStream::connect(addr).await?;
            let config = client_config(&Trust::Anything, &[b"h2".to_vec()]);
            let name = rustls::pki_types::ServerName::try_from("localhost").expect("server name");
            let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
            Ok(TokioIo::new(tls))
        })
    }
}

/// A tonic client of `strait.test.Stream`.
#[derive(Clone)]
pub struct GrpcClient {
    grpc: tonic::client::Grpc<Channel>,
}

fn path(method: &str) -> PathAndQuery {
    PathAndQuery::try_from(format!("/{SERVICE}/{method}")).expect("path")
}

impl GrpcClient {
    /// Over h2c (prior knowledge).
    pub async fn h2c(addr: SocketAddr) -> GrpcClient {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("gRPC connect");
        GrpcClient {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    /// Over TLS (ALPN `h2`), trusting any certificate.
    pub async fn tls(addr: SocketAddr) -> GrpcClient {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect_with_connector(TlsConnector(addr))
            .await
            .expect("gRPC TLS connect");
        GrpcClient {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    async fn ready(&mut self) -> Result<(), Status> {
        self.grpc
            .ready()
            .await
            .map_err(|error| Status::unavailable(format!("not ready: {error}")))
    }

    pub async fn unary(&mut self, msg: Msg) -> Result<Msg, Status> {
        self.ready().await?;
        let codec = ProstCodec::<Msg, Msg>::default();
        Ok(self
            .grpc
            .unary(Request::new(msg), path("Unary"), codec)
            .await?
            .into_inner())
    }

    pub async fn collect(&mut self, msgs: impl Stream<Item = Msg> + Send + 'static) -> Result<Summary, Status> {
        self.ready().await?;
        let codec = ProstCodec::<Msg, Summary>::default();
        Ok(self
            .grpc
            .client_streaming(Request::new(msgs), path("Collect"), codec)
            .await?
            .into_inner())
    }

    pub async fn emit(&mut self, count: u64, size: u64) -> Result<Streaming<Msg>, Status> {
        self.ready().await?;
        let codec = ProstCodec::<EmitRequest, Msg>::default();
        Ok(self
            .grpc
            .server_streaming(
                Request::new(EmitRequest {
                    count,
                    size,
                    spaced: false,
                }),
                path("Emit"),
                codec,
            )
            .await?
            .into_inner())
    }

    pub async fn ack(&mut self, msgs: impl Stream<Item = Msg> + Send + 'static) -> Result<Streaming<Msg>, Status> {
        self.ack_within(msgs, None).await
    }

    /// `Ack` with a `grpc-timeout` of `deadline` (tonic sends the header and
    /// leaves enforcing it to the server side: here, the gateway).
    pub async fn ack_within(
        &mut self,
        msgs: impl Stream<Item = Msg> + Send + 'static,
        deadline: Option<Duration>,
    ) -> Result<Streaming<Msg>, Status> {
        self.ready().await?;
        let codec = ProstCodec::<Msg, Msg>::default();
        let mut request = Request::new(msgs);
        if let Some(deadline) = deadline {
            request.set_timeout(deadline);
        }
        Ok(self.grpc.streaming(request, path("Ack"), codec).await?.into_inner())
    }

    /// A bidirectional call of `method` (a `/package.Service/Method` path)
    /// with any message types.
    pub async fn bidi<Req, Resp>(
        &mut self,
        method: &str,
        msgs: impl Stream<Item = Req> + Send + 'static,
    ) -> Result<Streaming<Resp>, Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.ready().await?;
        let codec = ProstCodec::<Req, Resp>::default();
        let path = PathAndQuery::try_from(method).expect("path");
        Ok(self.grpc.streaming(Request::new(msgs), path, codec).await?.into_inner())
    }
}

/// An `EmitRequest` as a framed gRPC message.
pub fn emit_request(count: u64, size: u64, spaced: bool) -> Bytes {
    let encoded = prost::Message::encode_to_vec(&EmitRequest { count, size, spaced });
    framed(&encoded)
}

fn framed(encoded: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(5 + encoded.len());
    framed.push(0);
    framed.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    framed.extend_from_slice(encoded);
    Bytes::from(framed)
}

/// One gRPC message as it goes on the wire: uncompressed flag, length, bytes.
pub fn frame(msg: &Msg) -> Bytes {
    framed(&prost::Message::encode_to_vec(msg))
}

/// Decode one `Summary` from a unary gRPC response body.
pub fn summary_of(body: &[u8]) -> Option<Summary> {
    let length = u32::from_be_bytes(body.get(1..5)?.try_into().ok()?) as usize;
    prost::Message::decode(body.get(5..5 + length)?).ok()
}

/// Whether a failed call was never processed by the server, so a gRPC client may send it
/// again (gRFC A6, "transparent retry"; tonic leaves that to its caller): hyper cancelled it
/// unsent (queued for a connection that closed after a GOAWAY), or the server's GOAWAY named
/// a last stream below it (h2 fails such a stream with the GOAWAY's NO_ERROR).
pub fn unprocessed(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(hyper) = error.downcast_ref::<hyper::Error>() {
            if hyper.is_canceled() {
                return true;
            }
        }
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            return h2.is_go_away() && h2.is_remote() && h2.reason() == Some(h2::Reason::NO_ERROR);
        }
        source = error.source();
    }
    false
}
