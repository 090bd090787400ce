//! HTTP/3 without a network, for fuzzing the request path
//! (fuzz/fuzz_targets/http3_request.rs): a QUIC connection held in memory
//! whose client opened one control stream and one request stream, each
//! holding given bytes and then its end. h3 reads them as it reads quinn's
//! streams; what the server writes is dropped.

use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};

/// The client's request stream (id 0) and its control stream (id 2).
pub(crate) struct Connection {
    request: Option<BidiStream>,
    control: Option<RecvStream>,
    opener: Opener,
}

impl Connection {
    pub(crate) fn new(request: Bytes, control: Bytes) -> Connection {
        Connection {
            request: Some(BidiStream {
                recv: RecvStream::new(0, request, true),
                send: SendStream(id(1)),
            }),
            control: Some(RecvStream::new(2, control, false)),
            opener: Opener(3),
        }
    }
}

/// A stream id; the ones made here are small, far below QUIC's 2^62 limit.
fn id(value: u64) -> StreamId {
    StreamId::try_from(value).expect("a stream id below 2^62")
}

fn closed() -> ConnectionErrorIncoming {
    ConnectionErrorIncoming::ApplicationClose { error_code: 0x100 }
}

impl quic::Connection<Bytes> for Connection {
    type RecvStream = RecvStream;
    type OpenStreams = Opener;

    fn poll_accept_recv(&mut self, _cx: &mut Context<'_>) -> Poll<Result<RecvStream, ConnectionErrorIncoming>> {
        match self.control.take() {
            Some(stream) => Poll::Ready(Ok(stream)),
            None => Poll::Pending,
        }
    }

    fn poll_accept_bidi(&mut self, _cx: &mut Context<'_>) -> Poll<Result<BidiStream, ConnectionErrorIncoming>> {
        match self.request.take() {
            Some(stream) => Poll::Ready(Ok(stream)),
            // One request: the client opens nothing more, and then goes.
            None => Poll::Ready(Err(closed())),
        }
    }

    fn opener(&self) -> Opener {
        self.opener.clone()
    }
}

impl quic::OpenStreams<Bytes> for Connection {
    type BidiStream = BidiStream;
    type SendStream = SendStream;

    fn poll_open_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<BidiStream, StreamErrorIncoming>> {
        self.opener.poll_open_bidi(cx)
    }

    fn poll_open_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<SendStream, StreamErrorIncoming>> {
        self.opener.poll_open_send(cx)
    }

    fn close(&mut self, _code: h3::error::Code, _reason: &[u8]) {}
}

/// Opens the server's streams (control, QPACK): writes go nowhere.
#[derive(Clone)]
pub(crate) struct Opener(u64);

impl quic::OpenStreams<Bytes> for Opener {
    type BidiStream = BidiStream;
    type SendStream = SendStream;

    fn poll_open_bidi(&mut self, _cx: &mut Context<'_>) -> Poll<Result<BidiStream, StreamErrorIncoming>> {
        Poll::Ready(Err(StreamErrorIncoming::ConnectionErrorIncoming {
            connection_error: closed(),
        }))
    }

    fn poll_open_send(&mut self, _cx: &mut Context<'_>) -> Poll<Result<SendStream, StreamErrorIncoming>> {
        self.0 += 4;
        Poll::Ready(Ok(SendStream(id(self.0))))
    }

    fn close(&mut self, _code: h3::error::Code, _reason: &[u8]) {}
}

/// A stream's bytes, handed over in pieces of at most [`PIECE`] (so frames
/// split across reads are exercised), then its end; a control stream never
/// ends (its end would close the connection, RFC 9114 §6.2.1).
pub(crate) struct RecvStream {
    id: StreamId,
    data: Bytes,
    ends: bool,
}

const PIECE: usize = 7;

impl RecvStream {
    fn new(value: u64, data: Bytes, ends: bool) -> RecvStream {
        RecvStream {
            id: id(value),
            data,
            ends,
        }
    }
}

impl quic::RecvStream for RecvStream {
    type Buf = Bytes;

    fn poll_data(&mut self, _cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        if self.data.is_empty() {
            return if self.ends {
                Poll::Ready(Ok(None))
            } else {
                Poll::Pending
            };
        }
        let take = self.data.len().min(PIECE);
        Poll::Ready(Ok(Some(self.data.split_to(take))))
    }

    fn stop_sending(&mut self, _error_code: u64) {
        self.data.clear();
    }

    fn recv_id(&self) -> StreamId {
        self.id
    }
}

pub(crate) struct SendStream(StreamId);

impl quic::SendStream<Bytes> for SendStream {
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        Poll::Ready(Ok(()))
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        let mut data = data.into();
        data.advance(data.remaining());
        Ok(())
    }

    fn poll_finish(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        Poll::Ready(Ok(()))
    }

    fn reset(&mut self, _reset_code: u64) {}

    fn send_id(&self) -> StreamId {
        self.0
    }
}

pub(crate) struct BidiStream {
    recv: RecvStream,
    send: SendStream,
}

impl quic::RecvStream for BidiStream {
    type Buf = Bytes;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code);
    }

    fn recv_id(&self) -> StreamId {
        self.recv.recv_id()
    }
}

impl quic::SendStream<Bytes> for BidiStream {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code);
    }

    fn send_id(&self) -> StreamId {
        self.send.send_id()
    }
}

impl quic::BidiStream<Bytes> for BidiStream {
    type SendStream = SendStream;
    type RecvStream = RecvStream;

    fn split(self) -> (SendStream, RecvStream) {
        (self.send, self.recv)
    }
}
