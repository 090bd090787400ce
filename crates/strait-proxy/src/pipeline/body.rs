//! Body types: the boxed body the proxy sends both ways, and a wrapper that
//! enforces the upstream read timeout between body frames.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use strait_runtime::health::InFlight;
use tokio::time::{sleep_until, Sleep};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

pub fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// A body whose error is already the proxy's, boxed as it is: no `map_err` layer, which
/// would move it once more and add a call to every poll (most of the proxy's own bodies).
pub fn boxed_as_is<B>(body: B) -> ProxyBody
where
    B: Body<Data = Bytes, Error = BoxError> + Send + 'static,
{
    ProxyBody::new(body)
}

pub fn boxed<B>(body: B) -> ProxyBody
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

#[derive(Debug, thiserror::Error)]
#[error("upstream body read timed out after {0:?}")]
pub struct BodyTimeout(pub Duration);

/// Fails the body if no frame arrives within `timeout` of starting to wait
/// for it (nginx's `proxy_read_timeout`: between two reads, not counting
/// the time the client took to take the previous frame).
///
/// The timer is made and set only when a poll finds no frame ready, so a
/// body whose frames are all there when asked for (most small responses)
/// costs no timer and no clock read.
pub struct IdleTimeoutBody<B> {
    /// Held inline (the bodies it wraps are `Unpin`): no allocation of its own.
    inner: B,
    timeout: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    /// The timer is set for the current wait.
    armed: bool,
    /// Counts the request in flight to its target until the body is done
    /// or dropped (least-connections and latency balancing read it).
    _in_flight: Option<InFlight>,
}

impl<B> IdleTimeoutBody<B> {
    pub fn new(inner: B, timeout: Duration) -> IdleTimeoutBody<B> {
        IdleTimeoutBody {
            inner,
            timeout,
            timer: None,
            armed: false,
            _in_flight: None,
        }
    }

    /// Keep `in_flight` until the body is dropped.
    pub fn holding(mut self, in_flight: Option<InFlight>) -> IdleTimeoutBody<B> {
        self._in_flight = in_flight;
        self
    }
}

impl<B> Body for IdleTimeoutBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.armed = false;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let deadline = || tokio::time::Instant::now() + this.timeout;
                let timer = match &mut this.timer {
                    Some(timer) => {
                        if !this.armed {
                            timer.as_mut().reset(deadline());
                        }
                        timer
                    }
                    None => this.timer.insert(Box::pin(sleep_until(deadline()))),
                };
                this.armed = true;
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Bytes [`BlockBody`] gathers before passing data on: one nginx proxy
/// buffer (`proxy_buffers 8 8k`).
pub const RESPONSE_BLOCK: usize = 8 * 1024;

/// Kong's `response_buffering = true` (nginx's `proxy_buffering on`): the
/// upstream's data is passed on in blocks of [`RESPONSE_BLOCK`] bytes, or
/// when the body ends, instead of write by write. Small writes (server-sent
/// events) wait for the block to fill; routes that stream set
/// `response_buffering = false`, or the upstream sends
/// `X-Accel-Buffering: no`. A frame already as big as a block, or the last
/// one with nothing held, passes without a copy.
pub struct BlockBody<B> {
    /// Held inline (the bodies it wraps are `Unpin`): no allocation of its own.
    inner: B,
    held: bytes::BytesMut,
    /// Trailers that arrived while data was held: sent after it.
    trailers: Option<Frame<Bytes>>,
    /// The body's error, reported after the data held when it came (what
    /// arrived before an upstream broke off still reaches the client).
    failed: Option<BoxError>,
    ended: bool,
}

impl<B> BlockBody<B> {
    pub fn new(inner: B) -> BlockBody<B> {
        BlockBody {
            inner,
            held: bytes::BytesMut::new(),
            trailers: None,
            failed: None,
            ended: false,
        }
    }

    fn release(&mut self) -> Frame<Bytes> {
        Frame::data(self.held.split().freeze())
    }
}

impl<B> Body for BlockBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if self.ended {
                if !self.held.is_empty() {
                    return Poll::Ready(Some(Ok(self.release())));
                }
                if let Some(error) = self.failed.take() {
                    return Poll::Ready(Some(Err(error)));
                }
                return Poll::Ready(self.trailers.take().map(Ok));
            }
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.ended = true;
                    continue;
                }
                Poll::Ready(Some(Err(error))) if !self.held.is_empty() => {
                    self.failed = Some(error.into());
                    self.ended = true;
                    continue;
                }
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error.into()))),
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            match frame.into_data() {
                Ok(data) => {
                    let last = self.inner.is_end_stream();
                    if self.held.is_empty() && (last || data.len() >= RESPONSE_BLOCK) {
                        self.ended = last;
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    self.held.extend_from_slice(&data);
                    if last {
                        self.ended = true;
                    } else if self.held.len() >= RESPONSE_BLOCK {
                        return Poll::Ready(Some(Ok(self.release())));
                    }
                }
                Err(trailers) => {
                    self.trailers = Some(trailers);
                    self.ended = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.held.is_empty() && self.trailers.is_none() && self.failed.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        if self.ended && self.failed.is_none() {
            return SizeHint::with_exact(self.held.len() as u64);
        }
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + self.held.len() as u64);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + self.held.len() as u64);
        }
        hint
    }
}

/// A body whose first bytes were already read (request buffering past its
/// limit): those bytes, then the rest as it arrives.
pub struct PrefixedBody {
    prefix: Option<Bytes>,
    /// Trailers read while buffering, sent after the prefix.
    trailers: Option<Frame<Bytes>>,
    rest: ProxyBody,
}

impl PrefixedBody {
    pub fn new(prefix: Bytes, trailers: Option<Frame<Bytes>>, rest: ProxyBody) -> PrefixedBody {
        PrefixedBody {
            prefix: Some(prefix).filter(|p| !p.is_empty()),
            trailers,
            rest,
        }
    }
}

impl Body for PrefixedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.trailers.is_none() && self.rest.is_end_stream()
    }
}

/// What request buffering read of a body.
pub enum Buffered {
    /// The whole body.
    Whole(Bytes),
    /// What was read (more than the limit, or up to trailers); the rest streams.
    Partial(PrefixedBody),
}

/// Read `body` until it ends or holds more than `limit` bytes. A body the
/// client broke off is its error (400).
pub async fn buffer_up_to(mut body: ProxyBody, limit: usize) -> Result<Buffered, BoxError> {
    use http_body_util::BodyExt as _;
    let mut held = bytes::BytesMut::new();
    let mut single: Option<Bytes> = None;
    while let Some(frame) = body.frame().await {
        let data = match frame?.into_data() {
            Ok(data) => data,
            Err(trailers) => {
                let prefix = single.take().unwrap_or_else(|| held.split().freeze());
                return Ok(Buffered::Partial(PrefixedBody::new(prefix, Some(trailers), body)));
            }
        };
        // One frame (the usual small body) is kept without a copy.
        match single.take() {
            None if held.is_empty() => single = Some(data),
            Some(first) => {
                held.extend_from_slice(&first);
                held.extend_from_slice(&data);
            }
            None => held.extend_from_slice(&data),
        }
        let size = single.as_ref().map_or(held.len(), Bytes::len);
        if size > limit {
            let prefix = single.take().unwrap_or_else(|| held.split().freeze());
            return Ok(Buffered::Partial(PrefixedBody::new(prefix, None, body)));
        }
    }
    Ok(Buffered::Whole(single.unwrap_or_else(|| held.freeze())))
}

use std::future::Future;

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::collections::VecDeque;

    /// A body that yields `frames` one per poll.
    struct Frames(VecDeque<Frame<Bytes>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
    }

    fn frames(parts: Vec<Frame<Bytes>>) -> ProxyBody {
        boxed(Frames(parts.into()))
    }

    #[tokio::test]
    async fn buffering_keeps_a_small_body_whole_and_streams_the_rest_of_a_big_one() {
        let small = frames(vec![
            Frame::data(Bytes::from_static(b"ab")),
            Frame::data(Bytes::from_static(b"cd")),
        ]);
        match buffer_up_to(small, 10).await.expect("read") {
            Buffered::Whole(bytes) => assert_eq!(&bytes[..], b"abcd"),
            Buffered::Partial(_) => panic!("4 bytes fit in 10"),
        }
        let big = frames(vec![
            Frame::data(Bytes::from_static(b"0123")),
            Frame::data(Bytes::from_static(b"4567")),
            Frame::data(Bytes::from_static(b"89")),
        ]);
        let Buffered::Partial(rest) = buffer_up_to(big, 5).await.expect("read") else {
            panic!("8 bytes do not fit in 5");
        };
        let all = rest.collect().await.expect("rest").to_bytes();
        assert_eq!(&all[..], b"0123456789", "nothing lost or reordered");
    }

    /// A body that yields `left` frames, each after `gap` of silence.
    struct Paced {
        left: usize,
        gap: Duration,
        wait: Option<Pin<Box<Sleep>>>,
    }

    impl Body for Paced {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            if self.left == 0 {
                return Poll::Ready(None);
            }
            let gap = self.gap;
            let wait = self.wait.get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
            std::task::ready!(wait.as_mut().poll(cx));
            self.wait = None;
            self.left -= 1;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    fn paced(left: usize, gap: Duration) -> ProxyBody {
        boxed(Paced { left, gap, wait: None })
    }

    #[tokio::test]
    async fn an_idle_body_times_out_and_a_steady_one_does_not() {
        // Five frames 20 ms apart, 90 ms allowed between two: all arrive,
        // though together they take longer than a single gap may.
        let steady = IdleTimeoutBody::new(paced(5, Duration::from_millis(20)), Duration::from_millis(90));
        let all = steady.collect().await.expect("no timeout").to_bytes();
        assert_eq!(&all[..], b"xxxxx");
        // A frame 500 ms late is past a 50 ms timeout.
        let late = IdleTimeoutBody::new(paced(2, Duration::from_millis(500)), Duration::from_millis(50));
        let error = late.collect().await.expect_err("timed out");
        assert!(error.downcast_ref::<BodyTimeout>().is_some(), "{error}");
    }

    #[tokio::test]
    async fn blocks_gather_small_writes_and_keep_trailers_last() {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-t", http::HeaderValue::from_static("1"));
        let body = frames(vec![
            Frame::data(Bytes::from_static(b"a")),
            Frame::data(Bytes::from_static(b"b")),
            Frame::trailers(trailers),
        ]);
        let mut blocks = BlockBody::new(body);
        let first = blocks.frame().await.expect("frame").expect("ok");
        assert_eq!(first.into_data().expect("data"), Bytes::from_static(b"ab"));
        let second = blocks.frame().await.expect("frame").expect("ok");
        assert!(second.is_trailers());
        assert!(blocks.frame().await.is_none());
    }

    /// An upstream that breaks off mid-body: what arrived before the break
    /// still reaches the client, then the error.
    #[tokio::test]
    async fn blocks_pass_on_what_they_hold_before_an_upstream_error() {
        struct Broken(VecDeque<Result<Frame<Bytes>, BoxError>>);
        impl Body for Broken {
            type Data = Bytes;
            type Error = BoxError;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
                Poll::Ready(self.0.pop_front())
            }
        }
        let body = Broken(
            vec![
                Ok(Frame::data(Bytes::from_static(b"data: 1\n\n"))),
                Ok(Frame::data(Bytes::from_static(b"data: 2\n\n"))),
                Err("connection closed before the body's end".into()),
            ]
            .into(),
        );
        let mut blocks = BlockBody::new(body);
        let held = blocks.frame().await.expect("frame").expect("the data held");
        assert_eq!(
            held.into_data().expect("data"),
            Bytes::from_static(b"data: 1\n\ndata: 2\n\n")
        );
        assert!(!blocks.is_end_stream());
        let error = blocks.frame().await.expect("frame").expect_err("then the error");
        assert!(error.to_string().contains("closed"), "{error}");
        assert!(blocks.frame().await.is_none());
    }
}
