//! Upstream HTTP/2 connections on the `h2` codec directly, so response
//! bodies leave the codec the way client request bodies do (h2_body.rs): a
//! server streaming small messages to a slow client fills the stream's
//! inbox, in bytes, up to its window, and no longer gets the whole upstream
//! connection closed with GOAWAY `too_many_data_frames`.
//!
//! The request's own task sends the request body as the upstream's window
//! allows and waits for the response head. What is left of the exchange
//! then (the response body's frames to move out of the codec until the
//! stream ends or nobody reads it, a request body still being sent) runs
//! in a task of its own, unless it already finished: a unary gRPC call's
//! message and trailers usually arrive with its head.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::client::SendRequest;
use http::{Request, Response};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::pipeline::body::ProxyBody;
use crate::pipeline::error::{ErrorKind, ProxyError};
use crate::pipeline::handler::strip_hop_by_hop;
use crate::wire::coalesce::{coalesced, Flushing};
use crate::wire::conn::Http2Settings;
use crate::wire::h2_body::{data_frame_budget, inbox, send_body, PingEvent, Pinger, Pump, StreamBody, SEND_BUFFER};

/// What one upstream HTTP/2 connection's requests share.
#[derive(Debug, Default)]
struct State {
    closed: AtomicBool,
    /// Streams open on it (requests whose task has not ended).
    streams: AtomicUsize,
    /// DATA bytes received, for adaptive windows.
    received: Arc<AtomicU64>,
}

/// A handle on one upstream HTTP/2 connection (cheap to clone).
#[derive(Clone)]
pub struct H2Conn {
    send: SendRequest<Bytes>,
    state: Arc<State>,
}

/// Open an HTTP/2 connection over `io` with Strait's `upstream_http2_*` settings.
pub async fn handshake<T>(io: T, settings: &Http2Settings) -> Result<H2Conn, ProxyError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = h2::client::Builder::new();
    builder
        .initial_window_size(settings.initial_stream_window)
        .initial_connection_window_size(settings.initial_connection_window)
        .max_frame_size(settings.max_frame_size)
        .max_send_buffer_size(SEND_BUFFER)
        .enable_push(false)
        .data_frame_budget(data_frame_budget(settings.initial_connection_window));
    // What the codec writes in a turn goes out in one write (coalesce.rs).
    let (io, flusher) = coalesced(io);
    let (send, mut connection) = Flushing::new(builder.handshake::<_, Bytes>(io), flusher.clone())
        .await
        .map_err(|e| ProxyError::new(ErrorKind::UpstreamConnect, format!("handshake: {e}")))?;
    let state = Arc::new(State::default());
    let mut pinger = connection
        .ping_pong()
        .map(|pong| Pinger::new(pong, settings, state.received.clone()));
    let driven = state.clone();
    tokio::spawn(Flushing::new(
        async move {
            loop {
                tokio::select! {
                    ended = &mut connection => {
                        if let Err(error) = ended {
                            tracing::debug!(%error, "upstream http2 connection ended");
                        }
                        break;
                    }
                    event = poll_fn(|cx| pinger.as_mut().map_or(Poll::Pending, |p| p.poll_event(cx))) => match event {
                        PingEvent::TimedOut => {
                            tracing::debug!("upstream keep-alive ping not answered; closing");
                            break;
                        }
                        PingEvent::Window(window) => {
                            connection.set_target_window_size(window);
                            let _ = connection.set_initial_window_size(window);
                        }
                    },
                }
            }
            driven.closed.store(true, Ordering::Relaxed);
        },
        flusher,
    ));
    Ok(H2Conn { send, state })
}

/// Decrements the connection's open streams when a request's task ends.
struct Open(Arc<State>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

impl H2Conn {
    pub fn is_closed(&self) -> bool {
        self.state.closed.load(Ordering::Relaxed)
    }

    /// The upstream's SETTINGS_MAX_CONCURRENT_STREAMS leaves room for one more.
    pub fn has_room(&self) -> bool {
        self.state.streams.load(Ordering::Relaxed) < self.send.current_max_send_streams()
    }

    pub fn same(&self, other: &H2Conn) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// Send `request`: Ok(Ok(response head)), Ok(Err(request)) when the
    /// connection closed before any of it was sent, or an error.
    ///
    /// The caller's task sends the request body and waits for the response
    /// head. What is left then (a body still being sent, response frames
    /// still to come) gets a task of its own; a unary gRPC call, whose
    /// message and trailers arrive with the head, usually needs none.
    pub async fn send(
        &self,
        request: Request<ProxyBody>,
    ) -> Result<Result<Response<Option<StreamBody>>, Request<ProxyBody>>, ProxyError> {
        let mut send = match self.send.clone().ready().await {
            Ok(send) => send,
            Err(_) => return Ok(Err(request)),
        };
        let (mut parts, body) = request.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let end = body.is_end_stream();
        let (mut response, stream) = match send.send_request(Request::from_parts(parts, ()), end) {
            Ok(sent) => sent,
            Err(error) => return Err(upstream_error(&error, false)),
        };
        self.state.streams.fetch_add(1, Ordering::Relaxed);
        let open = Open(self.state.clone());
        let mut pipe = (!end).then(|| {
            let pipe: Pipe = Box::pin(send_body(body, stream));
            pipe
        });
        let mut piped: Option<bool> = None;
        let head = poll_fn(|cx| {
            if let Some(running) = pipe.as_mut() {
                if let Poll::Ready(clean) = running.as_mut().poll(cx) {
                    piped = Some(clean);
                    pipe = None;
                }
            }
            Pin::new(&mut response).poll(cx)
        })
        .await;
        let head = match head {
            Ok(head) => head,
            Err(error) => return Err(upstream_error(&error, piped == Some(false))),
        };
        let (parts, recv) = head.into_parts();
        let (body, pump) = inbox(recv, &parts.headers, self.state.received.clone());
        let mut rest = Rest {
            pipe,
            pump,
            _open: open,
        };
        // Move what already arrived; only an exchange still going on needs a task.
        if poll_fn(|cx| Poll::Ready(rest.step(cx).is_pending())).await {
            tokio::spawn(rest);
        }

        Ok(Ok(Response::from_parts(parts, body)))
    }
}

/// A request body on its way upstream; `false` when it failed.
type Pipe = Pin<Box<dyn Future<Output = bool> + Send>>;

/// What is left of an exchange once the response head is out: the request
/// body still being sent, and the response body's frames still to be moved
/// out of the codec until the stream ends or nobody reads it.
struct Rest {
    pipe: Option<Pipe>,
    pump: Option<Pump>,
    /// The stream counts as open until the exchange is over.
    _open: Open,
}

impl Rest {
    fn step(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(running) = self.pump.as_mut() {
            if running.poll(cx).is_ready() {
                // The proxy dropped the response before its end (the client
                // went away, or its deadline passed): the request body is
                // for nobody either. Dropping both halves makes h2 reset the
                // stream with CANCEL, so the upstream stops the call.
                if running.reader_gone() {
                    self.pipe = None;
                    self.pump = None;
                    return Poll::Ready(());
                }
                self.pump = None;
            }
        }
        if let Some(running) = self.pipe.as_mut() {
            if running.as_mut().poll(cx).is_ready() {
                self.pipe = None;
            }
        }
        if self.pump.is_none() && self.pipe.is_none() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Future for Rest {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.step(cx)
    }
}

/// 400 when the client's own request body failed while it was sent (its
/// error, not the upstream's); 504 for a write that timed out; else 502.
fn upstream_error(error: &h2::Error, body_failed: bool) -> ProxyError {
    if body_failed {
        return ProxyError::new(ErrorKind::BadRequest, format!("request body: {error}"));
    }
    if let Some(io) = error.get_io() {
        if io.kind() == std::io::ErrorKind::TimedOut {
            return ProxyError::new(ErrorKind::UpstreamTimeout, error.to_string());
        }
    }
    ProxyError::new(ErrorKind::UpstreamInvalid, error.to_string())
}
