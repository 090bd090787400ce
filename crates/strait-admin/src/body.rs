//! Admin API response bodies: a ready buffer, or text sent while it is
//! written.
//!
//! A `POST /config` answer carries every entity: 16 MB of JSON for the
//! 10k/10k set; a `/metrics` scrape with 10,000 routes that saw traffic,
//! 57 MB of text. Rendered whole, such a buffer sat on top of everything
//! else (for a push: the posted body, the memo, the new snapshot). [`written`]
//! renders on a blocking thread into [`CHUNK`]-sized pieces, at most
//! [`QUEUED`] of them ahead of the socket: the peak is about a megabyte
//! whatever the size of the configuration or the series. An answer that fits one piece
//! goes out whole, with its `Content-Length`, as before; so does every
//! answer to an HTTP/1.0 client ([`gathered`]), which has no chunked
//! framing to tell a cut answer from a whole one.

use std::convert::Infallible;
use std::fmt;
use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::{mpsc, Semaphore, SemaphorePermit};

use crate::response::{internal_error, json_text_response, AdminResponse};

/// What one piece of a written answer holds at most (past a write that
/// crosses it). Each piece is a hand-over between two threads, and on one
/// core a context switch: 64 KiB pieces made a 57 MB scrape 15% slower
/// than rendering it whole; ahead of the socket 1 MB is still nothing.
pub const CHUNK: usize = 256 * 1024;
/// Pieces written ahead of what the socket took.
pub const QUEUED: usize = 4;

/// The body of an Admin API response.
pub enum AdminBody {
    Whole(Full<Bytes>),
    Written(Written),
}

impl AdminBody {
    pub fn whole(bytes: impl Into<Bytes>) -> AdminBody {
        AdminBody::Whole(Full::new(bytes.into()))
    }
}

/// A written answer's renderer stopped before its end (it failed): the
/// connection is closed.
#[derive(Debug)]
pub struct AnswerCut;

impl fmt::Display for AnswerCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the answer's writer stopped before its end")
    }
}

impl std::error::Error for AnswerCut {}

impl Body for AdminBody {
    type Data = Bytes;
    type Error = AnswerCut;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, AnswerCut>>> {
        match self.get_mut() {
            AdminBody::Whole(full) => Pin::new(full)
                .poll_frame(cx)
                .map(|frame| frame.map(|frame| frame.map_err(|never: Infallible| match never {}))),
            AdminBody::Written(written) => written.poll_piece(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            AdminBody::Whole(full) => full.is_end_stream(),
            AdminBody::Written(written) => written.ended && written.first.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            AdminBody::Whole(full) => full.size_hint(),
            AdminBody::Written(_) => SizeHint::default(),
        }
    }
}

/// One piece from the writer: more to come, or the last.
enum Piece {
    More(Bytes),
    Last(Bytes),
}

/// The receiving end of [`json_written`], past its first piece.
pub struct Written {
    first: Option<Bytes>,
    pieces: mpsc::Receiver<Piece>,
    ended: bool,
}

impl Written {
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, AnswerCut>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        match self.pieces.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Piece::More(bytes))) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
            Poll::Ready(Some(Piece::Last(bytes))) => {
                self.ended = true;
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            // The writer gave up without its last piece.
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(Some(Err(AnswerCut)))
            }
        }
    }
}

/// The writer [`json_written`] hands its renderer.
pub struct PieceWriter {
    buffer: Vec<u8>,
    pieces: mpsc::Sender<Piece>,
}

impl PieceWriter {
    fn send(&mut self, piece: Piece) -> io::Result<()> {
        // Parks this (blocking) thread while QUEUED pieces wait; the socket
        // taking one wakes it. A client that stops reading is cut off by the
        // connection's send timeout (`short_writes`), which drops the answer:
        // the send fails, and the renderer stops.
        self.pieces
            .blocking_send(piece)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the answer was dropped"))
    }

    fn finish(mut self) -> io::Result<()> {
        let rest = std::mem::take(&mut self.buffer);
        self.send(Piece::Last(Bytes::from(rest)))
    }
}

impl Write for PieceWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= CHUNK {
            let full = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK + CHUNK / 4));
            self.send(Piece::More(Bytes::from(full)))?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A JSON answer that `render` writes on a blocking thread while it is
/// sent (see [`written`]).
pub async fn json_written<F>(status: StatusCode, render: F) -> AdminResponse
where
    F: FnOnce(&mut PieceWriter) -> io::Result<()> + Send + 'static,
{
    written(render, |body| {
        let mut response = json_text_response(status, Bytes::new());
        *response.body_mut() = body;
        response
    })
    .await
}

/// An answer that `render` writes on a blocking thread while it is sent,
/// its head made by `respond`. One that ends within the first piece is
/// answered whole (with its length); a longer one is sent as it comes
/// (chunked), at most [`QUEUED`] pieces ahead of the socket. A renderer
/// that fails before its first piece gives a 500; after it, the connection
/// is closed mid-body.
pub async fn written<F, R>(render: F, respond: R) -> AdminResponse
where
    F: FnOnce(&mut PieceWriter) -> io::Result<()> + Send + 'static,
    R: FnOnce(AdminBody) -> AdminResponse,
{
    written_holding(None, render, respond).await
}

/// [`written`], when fewer than `limit`'s permits are held by answers still
/// being written; else `busy()`. Each answer being written holds a blocking
/// thread and up to about a megabyte until its client took it, or its
/// connection's send timeout cut it off: a limit keeps clients that do not
/// read from taking every blocking thread.
pub async fn written_within<F, R>(
    limit: &'static Semaphore,
    busy: impl FnOnce() -> AdminResponse,
    render: F,
    respond: R,
) -> AdminResponse
where
    F: FnOnce(&mut PieceWriter) -> io::Result<()> + Send + 'static,
    R: FnOnce(AdminBody) -> AdminResponse,
{
    match limit.try_acquire() {
        Ok(permit) => written_holding(Some(permit), render, respond).await,
        Err(_) => busy(),
    }
}

async fn written_holding<F, R>(permit: Option<SemaphorePermit<'static>>, render: F, respond: R) -> AdminResponse
where
    F: FnOnce(&mut PieceWriter) -> io::Result<()> + Send + 'static,
    R: FnOnce(AdminBody) -> AdminResponse,
{
    let (sender, mut pieces) = mpsc::channel(QUEUED);
    tokio::task::spawn_blocking(move || {
        // Held until the last piece is queued or the answer is dropped.
        let _permit = permit;
        let mut writer = PieceWriter {
            buffer: Vec::with_capacity(CHUNK + CHUNK / 4),
            pieces: sender,
        };
        let written = render(&mut writer).and_then(|()| writer.finish());
        if let Err(error) = written {
            tracing::debug!(%error, "admin answer cut off");
        }
    });
    match pieces.recv().await {
        Some(Piece::Last(bytes)) => respond(AdminBody::whole(bytes)),
        Some(Piece::More(first)) => respond(AdminBody::Written(Written {
            first: Some(first),
            pieces,
            ended: false,
        })),
        None => internal_error("the answer's renderer failed before its first byte"),
    }
}

/// `response` with its body whole, for a client that cannot take it in
/// chunks (HTTP/1.0): sent as it is written, its end would be the
/// connection's, and a cut answer would look complete. A renderer that
/// fails before the end gives a 500.
pub async fn gathered(response: AdminResponse) -> AdminResponse {
    let (parts, body) = response.into_parts();
    match body {
        AdminBody::Whole(_) => AdminResponse::from_parts(parts, body),
        written => match http_body_util::BodyExt::collect(written).await {
            Ok(collected) => AdminResponse::from_parts(parts, AdminBody::whole(collected.to_bytes())),
            Err(AnswerCut) => internal_error("the answer's renderer failed before its end"),
        },
    }
}

#[cfg(test)]
mod tests;
