//! HTTP/2 streams' bodies, both directions and both sides (client streams
//! served by h2_server.rs, upstream streams opened by h2_client.rs).
//!
//! A stream's DATA frames leave the `h2` codec as soon as they arrive, into
//! the stream's [`Inbox`]: small frames are copied together into one buffer,
//! large ones kept as they came. The flow-control window is given back only
//! when the proxy takes the bytes on (into the other side's stream or
//! connection), so what a stream can make Strait hold is its window, in
//! bytes, however small the frames, and the sender only gets more window
//! when the receiver on the far side accepted what it sent.
//!
//! Without this, frames waited inside the codec one queue entry each, and
//! `h2` guards that queue with a budget of small frames: a gRPC stream of
//! small messages to a slow or busy reader got its whole connection closed
//! with GOAWAY(ENHANCE_YOUR_CALM, `too_many_data_frames`).
//!
//! The other way, [`send_body`] reads a body only while the stream has send
//! capacity, and what waits for the peer's window is bounded by
//! [`SEND_BUFFER`] per stream.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use strait_runtime::stats::HTTP2_BUFFERED_BYTES;

use bytes::{Bytes, BytesMut};
use h2::{FlowControl, Ping, PingPong, Reason, RecvStream, SendStream};
use http::header::{HeaderMap, CONTENT_LENGTH};
use http_body::{Body, Frame, SizeHint};
use tokio::time::sleep_until;

use crate::pipeline::body::BoxError;
use crate::wire::conn::Http2Settings;

/// Bytes one stream may have waiting for the peer's window before its
/// source body is read again.
pub const SEND_BUFFER: usize = 256 * 1024;

/// Frames under this many bytes are copied into the stream's inbox buffer
/// rather than kept one by one.
pub(crate) const COALESCE_BELOW: usize = 1024;

/// The largest window adaptive flow control grows to (as hyper's).
const ADAPTIVE_WINDOW_LIMIT: u32 = 16 << 20;

/// The codec's budget for small DATA frames queued inside it, in its units
/// (a frame of `n < 256` bytes costs `256 - n`). Frames wait there only
/// until their stream's task runs, but on a loaded machine that task can
/// lag a burst read from the socket. So the budget covers a whole
/// connection window of 8-byte frames: a client whose DATA frames carry 8
/// bytes or more (a gRPC message frame alone is 5) cannot reach it within
/// its flow-control window, however late the task runs, while a flood of
/// empty frames (which take no window) still meets it. At the default
/// 1 MiB window that is 131,072 frames, about 16 MiB of queue entries in
/// the worst case, against the codec's own default of about 2,000.
pub fn data_frame_budget(connection_window: u32) -> usize {
    (connection_window as usize / 8).max(100) * 256
}

// ---------------------------------------------------------------------------
// Received bodies: the stream's inbox.

/// What a stream's task moved out of the codec and the proxy has not taken yet.
struct Inbox {
    /// Large frames, as they arrived, oldest first; they precede `tail`.
    chunks: VecDeque<Bytes>,
    /// Small frames that arrived after the last large one, copied together.
    tail: BytesMut,
    buffered: usize,
    end: End,
    /// The task reading the body (the upstream side), waiting for data.
    reader: Option<Waker>,
    /// The stream's task, waiting in the codec (woken when the body is dropped).
    pump: Option<Waker>,
    reader_gone: bool,
}

enum End {
    Open,
    Trailers(Option<HeaderMap>),
    Failed(h2::Error),
    Done,
}

impl Inbox {
    fn new() -> Inbox {
        Inbox {
            chunks: VecDeque::new(),
            tail: BytesMut::new(),
            buffered: 0,
            end: End::Open,
            reader: None,
            pump: None,
            reader_gone: false,
        }
    }

    fn push(&mut self, data: Bytes) {
        self.buffered += data.len();
        if data.len() < COALESCE_BELOW {
            self.tail.extend_from_slice(&data);
        } else {
            if !self.tail.is_empty() {
                let small = self.tail.split().freeze();
                self.chunks.push_back(small);
            }
            self.chunks.push_back(data);
        }
    }

    fn take(&mut self) -> Option<Bytes> {
        let chunk = match self.chunks.pop_front() {
            Some(chunk) => chunk,
            None if !self.tail.is_empty() => self.tail.split().freeze(),
            None => return None,
        };
        self.buffered -= chunk.len();
        Some(chunk)
    }

    fn wake_reader(&mut self) {
        if let Some(waker) = self.reader.take() {
            waker.wake();
        }
    }
}

/// A received body as the proxy reads it; the window goes back to the
/// sender as it does.
pub struct StreamBody {
    inbox: Arc<Mutex<Inbox>>,
    flow: FlowControl,
    remaining: Option<u64>,
}

/// Moves DATA frames from the codec into the inbox; polled by the stream's
/// task next to the request's handling.
pub struct Pump {
    recv: RecvStream,
    inbox: Arc<Mutex<Inbox>>,
    received: Arc<AtomicU64>,
}

fn lock(inbox: &Mutex<Inbox>) -> std::sync::MutexGuard<'_, Inbox> {
    inbox.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The body of a stream whose head (`headers`) arrived: `None` when the
/// head ended the stream, else the body the proxy reads and the pump its
/// stream's task polls.
pub(crate) fn inbox(
    recv: RecvStream,
    headers: &HeaderMap,
    received: Arc<AtomicU64>,
) -> (Option<StreamBody>, Option<Pump>) {
    if recv.is_end_stream() {
        return (None, None);
    }
    let length = headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
    let inbox = Arc::new(Mutex::new(Inbox::new()));
    let mut recv = recv;
    let flow = recv.flow_control().clone();
    let body = StreamBody {
        inbox: inbox.clone(),
        flow,
        remaining: length,
    };
    let pump = Pump { recv, inbox, received };
    (Some(body), Some(pump))
}

impl Drop for Pump {
    /// A stream's task that ends before its body did (its exchange is over:
    /// the response went out, or the caller gave up) cancels what the body's
    /// reader waits for, so the reader fails instead of waiting forever.
    fn drop(&mut self) {
        let mut inbox = lock(&self.inbox);
        if matches!(inbox.end, End::Open) {
            inbox.end = End::Failed(h2::Error::from(Reason::CANCEL));
            inbox.wake_reader();
        }
    }
}

impl Pump {
    /// Whether the body's reader dropped it before its end.
    pub(crate) fn reader_gone(&self) -> bool {
        lock(&self.inbox).reader_gone
    }

    /// Ready when the body has ended or nobody reads it any more.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match self.recv.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let length = data.len();
                    self.received.fetch_add(length as u64, Ordering::Relaxed);
                    let mut inbox = lock(&self.inbox);
                    if inbox.reader_gone {
                        drop(inbox);
                        let _ = self.recv.flow_control().release_capacity(length);
                        return Poll::Ready(());
                    }
                    inbox.push(data);
                    HTTP2_BUFFERED_BYTES.fetch_add(length as u64, Ordering::Relaxed);
                    inbox.wake_reader();
                }
                Poll::Ready(Some(Err(error))) => {
                    let mut inbox = lock(&self.inbox);
                    inbox.end = End::Failed(error);
                    inbox.wake_reader();
                    return Poll::Ready(());
                }
                Poll::Ready(None) => {
                    let end = match self.recv.poll_trailers(cx) {
                        Poll::Ready(Ok(trailers)) => End::Trailers(trailers),
                        Poll::Ready(Err(error)) => End::Failed(error),
                        Poll::Pending => return Poll::Pending,
                    };
                    let mut inbox = lock(&self.inbox);
                    inbox.end = end;
                    inbox.wake_reader();
                    return Poll::Ready(());
                }
                Poll::Pending => {
                    let mut inbox = lock(&self.inbox);
                    if inbox.reader_gone {
                        return Poll::Ready(());
                    }
                    if !inbox.pump.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        inbox.pump = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Body for StreamBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        let mut inbox = lock(&this.inbox);
        if let Some(chunk) = inbox.take() {
            drop(inbox);
            let length = chunk.len();
            HTTP2_BUFFERED_BYTES.fetch_sub(length as u64, Ordering::Relaxed);
            // The client may send this much more: the proxy has taken it on.
            let _ = this.flow.release_capacity(length);
            if let Some(remaining) = this.remaining.as_mut() {
                *remaining = remaining.saturating_sub(length as u64);
            }
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        match std::mem::replace(&mut inbox.end, End::Done) {
            End::Open => {
                inbox.end = End::Open;
                if !inbox.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    inbox.reader = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            End::Trailers(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            End::Trailers(None) | End::Done => Poll::Ready(None),
            End::Failed(error) => Poll::Ready(Some(Err(error))),
        }
    }

    fn is_end_stream(&self) -> bool {
        let inbox = lock(&self.inbox);
        inbox.buffered == 0 && matches!(inbox.end, End::Done | End::Trailers(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(remaining) => SizeHint::with_exact(remaining),
            None => SizeHint::default(),
        }
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        let mut inbox = lock(&self.inbox);
        inbox.reader_gone = true;
        let held = inbox.buffered;
        inbox.chunks.clear();
        inbox.tail.clear();
        inbox.buffered = 0;
        if let Some(waker) = inbox.pump.take() {
            waker.wake();
        }
        drop(inbox);
        if held > 0 {
            HTTP2_BUFFERED_BYTES.fetch_sub(held as u64, Ordering::Relaxed);
            // The connection's window must not shrink by what nobody reads.
            let _ = self.flow.release_capacity(held);
        }
    }
}

/// Copy `body` into `send`, reading the body only while the stream has
/// send capacity; stops when the peer resets the stream. False when the
/// body itself failed (the stream is then reset).
pub async fn send_body<B>(body: B, mut send: SendStream<Bytes>) -> bool
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut body = pin!(body);
    poll_fn(|cx| loop {
        if let Poll::Ready(reason) = send.poll_reset(cx) {
            tracing::debug!(?reason, "stream reset by the peer while sending its body");
            return Poll::Ready(true);
        }
        // Room for at least one byte, then the whole next chunk (the codec
        // holds what exceeds the window, up to SEND_BUFFER per stream).
        send.reserve_capacity(1);
        while send.capacity() == 0 {
            match send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(true),
                Poll::Pending => return Poll::Pending,
            }
        }
        match body.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    let end = body.is_end_stream();
                    if data.is_empty() && !end {
                        continue;
                    }
                    if send.send_data(data, end).is_err() || end {
                        return Poll::Ready(true);
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        let _ = send.send_trailers(trailers);
                    }
                    return Poll::Ready(true);
                }
            },
            Poll::Ready(Some(Err(error))) => {
                let error: BoxError = error.into();
                tracing::debug!(%error, "body failed while sending it");
                send.send_reset(Reason::INTERNAL_ERROR);
                return Poll::Ready(false);
            }
            Poll::Ready(None) => {
                let _ = send.send_data(Bytes::new(), true);
                return Poll::Ready(true);
            }
            Poll::Pending => return Poll::Pending,
        }
    })
    .await
}

// ---------------------------------------------------------------------------
// Pings: keep-alive and adaptive windows.

pub(crate) enum PingEvent {
    /// A keep-alive ping went unanswered past `http2_keepalive_timeout`.
    TimedOut,
    /// Adaptive flow control measured a larger bandwidth-delay product.
    Window(u32),
}

pub(crate) struct Pinger {
    pong: PingPong,
    keepalive: Option<(Duration, Duration)>,
    /// The current window, when adaptive flow control is on.
    adaptive: Option<u32>,
    /// DATA bytes the connection's streams received (their tasks count).
    received: Arc<AtomicU64>,
    /// `received` when the last measurement ended.
    measured: u64,
    /// The bytes received when the ping in flight was sent.
    in_flight: Option<u64>,
    /// When the next keep-alive ping is due, or the one in flight times out.
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Pinger {
    pub(crate) fn new(pong: PingPong, settings: &Http2Settings, received: Arc<AtomicU64>) -> Pinger {
        let window = settings.initial_stream_window;
        let keepalive = settings
            .keepalive_interval
            .map(|every| (every, settings.keepalive_timeout));
        let first = keepalive.map_or(Duration::from_secs(86400 * 365), |(every, _)| every);
        Pinger {
            pong,
            keepalive,
            adaptive: settings.adaptive_window.then_some(window),
            received,
            measured: 0,
            in_flight: None,
            timer: Box::pin(sleep_until(tokio::time::Instant::now() + first)),
        }
    }

    fn send(&mut self) -> bool {
        if self.pong.send_ping(Ping::opaque()).is_err() {
            return false;
        }
        self.in_flight = Some(self.received.load(Ordering::Relaxed));
        if let Some((_, wait)) = self.keepalive {
            self.timer.as_mut().reset(tokio::time::Instant::now() + wait);
        }
        true
    }

    pub(crate) fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<PingEvent> {
        loop {
            if let Some(bytes_then) = self.in_flight {
                match self.pong.poll_pong(cx) {
                    Poll::Ready(Ok(_)) => {
                        self.in_flight = None;
                        let now = self.received.load(Ordering::Relaxed);
                        self.measured = now;
                        if let Some((every, _)) = self.keepalive {
                            self.timer.as_mut().reset(tokio::time::Instant::now() + every);
                        }
                        if let Some(window) = self.adaptive {
                            // A round trip carried most of the window: the
                            // link could use more (hyper's rule, simplified).
                            let bytes = now - bytes_then;
                            if bytes >= u64::from(window) * 2 / 3 && window < ADAPTIVE_WINDOW_LIMIT {
                                let grown = bytes.saturating_mul(2).min(u64::from(ADAPTIVE_WINDOW_LIMIT)) as u32;
                                if grown > window {
                                    self.adaptive = Some(grown);
                                    return Poll::Ready(PingEvent::Window(grown));
                                }
                            }
                        }
                        continue;
                    }
                    // The connection is closing; the accept loop ends it.
                    Poll::Ready(Err(_)) => return Poll::Pending,
                    Poll::Pending => {
                        if self.keepalive.is_some() && self.timer.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(PingEvent::TimedOut);
                        }
                        return Poll::Pending;
                    }
                }
            }
            // No ping in flight: measure when data arrived since the last
            // measurement and the window can still grow, or keep the
            // connection alive when due.
            let growing = self.adaptive.is_some_and(|window| window < ADAPTIVE_WINDOW_LIMIT);
            if growing && self.received.load(Ordering::Relaxed) > self.measured && self.send() {
                continue;
            }
            if self.keepalive.is_some() && self.timer.as_mut().poll(cx).is_ready() {
                if self.send() {
                    continue;
                }
                return Poll::Ready(PingEvent::TimedOut);
            }
            return Poll::Pending;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_frames_are_copied_together_and_order_is_kept() {
        let mut inbox = Inbox::new();
        for byte in [b'a', b'b', b'c'] {
            inbox.push(Bytes::from(vec![byte; 10]));
        }
        let large = Bytes::from(vec![b'L'; COALESCE_BELOW]);
        inbox.push(large.clone());
        inbox.push(Bytes::from_static(b"zz"));
        assert_eq!(inbox.buffered, 30 + COALESCE_BELOW + 2);
        let mut taken = Vec::new();
        while let Some(chunk) = inbox.take() {
            taken.push(chunk);
        }
        assert_eq!(taken.len(), 3, "three small frames became one chunk");
        assert_eq!(&taken[0][..], [vec![b'a'; 10], vec![b'b'; 10], vec![b'c'; 10]].concat());
        assert_eq!(taken[1], large, "a large frame is kept as it came");
        assert_eq!(&taken[2][..], b"zz");
        assert_eq!(inbox.buffered, 0);
    }
}
