//! Body types: the boxed body the proxy sends both ways, and a wrapper that
//! enforces the upstream read timeout between body frames.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use strait_runtime::health::InFlight;
use tokio::time::{sleep, Sleep};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
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

/// Fails the body if no frame arrives within `timeout` of the previous one.
pub struct IdleTimeoutBody<B> {
    inner: Pin<Box<B>>,
    timeout: Duration,
    timer: Pin<Box<Sleep>>,
    /// Counts the request in flight to its target until the body is done
    /// or dropped (least-connections and latency balancing read it).
    _in_flight: Option<InFlight>,
}

impl<B> IdleTimeoutBody<B> {
    pub fn new(inner: B, timeout: Duration) -> IdleTimeoutBody<B> {
        IdleTimeoutBody {
            inner: Box::pin(inner),
            timeout,
            timer: Box::pin(sleep(timeout)),
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
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.inner.as_mut().poll_frame(cx) {
            Poll::Ready(frame) => {
                let deadline = tokio::time::Instant::now() + self.timeout;
                self.timer.as_mut().reset(deadline);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(self.timeout))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

use std::future::Future;
