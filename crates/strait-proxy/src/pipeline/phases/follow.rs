//! The response body followed by the plugins' `body_filter` (per chunk,
//! or once whole when a header filter asked for it) and `log` (once the
//! body ended or was dropped), with what the log phase reports.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};
use strait_plugins::{BodyChunk, Followers, LogRecord, ResponseSource};

use super::{PhaseState, MAX_BUFFERED_BODY};
use crate::pipeline::body::{BoxError, ProxyBody};

/// How the response was produced, for the log phase.
pub(super) struct Outcome {
    pub status: StatusCode,
    pub source: ResponseSource,
    pub upstream_ms: Option<u64>,
}

/// A response body passed through the body filters of the request's
/// plugins, calling their log phase once it ends (or is dropped).
pub(super) struct FollowedBody {
    inner: ProxyBody,
    plugins: Followers,
    /// Some plugin filters the body (else only `log` follows it).
    filters: bool,
    buffers: bool,
    buffer: BytesMut,
    /// The request's phase state: what the filters share, and what the log
    /// phase reports.
    state: Box<PhaseState>,
    outcome: Outcome,
    started: Instant,
    sent: u64,
    done: bool,
    logged: bool,
    /// Trailers to send after the data the last filter produced.
    pending: Option<Frame<Bytes>>,
}

impl FollowedBody {
    pub(super) fn new(
        inner: ProxyBody,
        plugins: Followers,
        state: Box<PhaseState>,
        outcome: Outcome,
        started: Instant,
    ) -> FollowedBody {
        FollowedBody {
            inner,
            buffers: state.shared.get::<strait_plugins::BufferResponseBody>().is_some(),
            filters: plugins.iter().any(|p| p.filters_body()),
            plugins,
            buffer: BytesMut::new(),
            state,
            outcome,
            started,
            sent: 0,
            done: false,
            logged: false,
            pending: None,
        }
    }

    fn filter(&mut self, data: Bytes, end: bool) -> Bytes {
        self.filter_last(data, end, None).0
    }

    /// Filters a piece, the last one with the body's trailers; returns what
    /// the filters left of both.
    fn filter_last(
        &mut self,
        data: Bytes,
        end: bool,
        trailers: Option<http::HeaderMap>,
    ) -> (Bytes, Option<http::HeaderMap>) {
        if !self.filters {
            self.sent += data.len() as u64;
            return (data, trailers);
        }
        let mut chunk = BodyChunk { data, end, trailers };
        for plugin in self.plugins.iter().filter(|p| p.filters_body()) {
            plugin.body_filter(&mut self.state.shared, &mut chunk);
        }
        self.sent += chunk.data.len() as u64;
        (chunk.data, chunk.trailers)
    }

    /// Runs the log phase once.
    fn finish(&mut self) {
        if std::mem::replace(&mut self.logged, true) {
            return;
        }
        let state = &mut *self.state;
        let details = state.details.take().map(|mut details| {
            details.trace_id = state
                .shared
                .get::<strait_plugins::bundled::opentelemetry::TraceContext>()
                .map(|trace| trace.trace_id_hex());
            details
        });
        let record = LogRecord {
            request: &state.summary,
            status: self.outcome.status.as_u16(),
            response_bytes: self.sent,
            total_ms: self.started.elapsed().as_millis() as u64,
            source: self.outcome.source,
            upstream_ms: self.outcome.upstream_ms,
            request_bytes: state.request_bytes,
            details,
            entities: state.entities.as_deref().map(|d| d as &dyn strait_plugins::Directory),
        };
        for plugin in self.plugins.iter().filter(|p| p.logs()) {
            plugin.log(&record, &state.shared);
        }
    }
}

impl Drop for FollowedBody {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Body for FollowedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(this.pending.take().map(Ok));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(error))) => {
                    this.done = true;
                    this.finish();
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    let frame = match frame.into_data() {
                        Ok(data) if this.buffers => {
                            if this.buffer.len() + data.len() > MAX_BUFFERED_BODY {
                                this.done = true;
                                this.finish();
                                return Poll::Ready(Some(Err("response body larger than the plugin buffer".into())));
                            }
                            this.buffer.extend_from_slice(&data);
                            continue;
                        }
                        Ok(data) => Frame::data(this.filter(data, false)),
                        Err(trailers) => {
                            // Trailers end the body: flush what was held first.
                            if this.buffers && !this.buffer.is_empty() {
                                let held = this.buffer.split().freeze();
                                let data = this.filter(held, true);
                                this.done = true;
                                this.finish();
                                // Trailers after a buffered body are dropped:
                                // the buffering plugins rewrote the body.
                                let _ = trailers;
                                return Poll::Ready(Some(Ok(Frame::data(data))));
                            }
                            // The body's end: the filters see the trailers.
                            let trailers = trailers.into_trailers().unwrap_or_default();
                            let (data, trailers) = this.filter_last(Bytes::new(), true, Some(trailers));
                            this.done = true;
                            this.finish();
                            this.pending = trailers.map(Frame::trailers);
                            if data.is_empty() {
                                return Poll::Ready(this.pending.take().map(Ok));
                            }
                            Frame::data(data)
                        }
                    };
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    let held = this.buffer.split().freeze();
                    let data = this.filter(held, true);
                    this.finish();
                    if data.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
