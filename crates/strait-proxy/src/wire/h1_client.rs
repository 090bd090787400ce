//! Upstream HTTP/1.1 connections on Strait's own codec.
//!
//! hyper's client gives each connection a task of its own and reaches it
//! through a channel: every request is a message to that task and every
//! response a message back, two task wakes per request on top of the
//! socket's (docs/architecture.md#http1-codec-spike). Here a request's own
//! task does the exchange: it writes the head (and the first body bytes
//! when they are ready, in the same write), reads the response head while
//! it sends the rest of the body, and the response body reads straight from
//! the socket. When both bodies ended cleanly on a connection that may be
//! kept alive, the body hands the connection back to the worker's pool.
//!
//! Framing follows RFC 9112: requests are sent with `Content-Length` when
//! the length is known and chunked otherwise; responses to `HEAD` and
//! `1xx`/`204`/`304` have no body, `Transfer-Encoding` ending in `chunked`
//! beats `Content-Length` (and the connection is not reused), differing or
//! malformed lengths are an invalid response, and anything else is read
//! until the upstream closes. Informational responses other than `101` are
//! skipped; `101` hands the connection to a tunnel (tunnel.rs).

use std::future::{poll_fn, Future};
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{sleep_until, Instant, Sleep};

use crate::pipeline::body::{BoxError, ProxyBody};
use crate::pipeline::error::{ErrorKind, ProxyError};
use crate::pipeline::forwarding::Forwarding;
use crate::pipeline::handler::BoxedRequest;
use crate::pipeline::relay::{Relayed, RelayedHead};
use crate::upstream::Answer;
use crate::upstream::{Home, WriteTimeoutIo};
use crate::wire::h1_codec::{
    content_length, list_tokens, put_chunk, put_fields, put_fields_except, put_last_chunk, ready_read, BodyKind,
    Decoder, LengthFields,
};

/// Longest response head accepted from an upstream (nginx's
/// `proxy_buffer_size` is 4–8 KiB; hyper's limit is larger still).
const MAX_HEAD: usize = 64 * 1024;
/// Most header fields in an upstream response head.
const MAX_HEADERS: usize = 128;
/// Largest encoding buffer an idle connection keeps for its next request.
const KEPT_OUT: usize = 4096;

/// The socket under an upstream HTTP/1.1 connection.
pub(crate) enum Io {
    Plain(WriteTimeoutIo<TcpStream>),
    Tls(Box<tokio_rustls::client::TlsStream<WriteTimeoutIo<TcpStream>>>),
}

impl AsyncRead for Io {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_flush(cx),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One upstream HTTP/1.1 connection, idle or carrying one exchange.
pub struct H1Conn {
    io: Io,
    /// Bytes read and not yet parsed.
    buf: BytesMut,
    /// The last request's encoding buffer, kept for the next one when its
    /// body went out whole with the head (most requests): no allocation
    /// per request for it.
    out: BytesMut,
    /// The connection's one timer for `read_timeout` (see [`poll_deadline`]).
    timer: Option<Pin<Box<Sleep>>>,
    /// Where the last response head's fields were, reused for the next.
    spans: Spans,
    /// The exchange under way may keep its response head as lines to
    /// pass on (relay.rs).
    relay: bool,
}

/// A connection after a `101 Switching Protocols`: the socket and what was
/// read past the response head (tunnel.rs).
pub(crate) struct Switched {
    pub io: Io,
    pub read: Bytes,
}

/// The `101` response's hold on the switched connection, taken by the tunnel.
#[derive(Clone)]
pub(crate) struct SwitchedSlot(pub Arc<std::sync::Mutex<Option<Switched>>>);

impl H1Conn {
    pub(crate) fn new(io: Io) -> H1Conn {
        H1Conn {
            io,
            buf: BytesMut::new(),
            out: BytesMut::new(),
            timer: None,
            spans: Vec::new(),
            relay: false,
        }
    }

    /// Whether an idle connection can carry a request: the upstream has
    /// neither closed it nor sent anything unasked (checked without waiting).
    pub(crate) fn is_usable(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut scratch = [0u8; 64];
        let mut read = ReadBuf::new(&mut scratch);
        matches!(Pin::new(&mut self.io).poll_read(&mut cx, &mut read), Poll::Pending)
    }

    /// Send `request` and return the response head with its body.
    /// Ok(Err(request)) when the head could not be written at all (the
    /// connection had closed), so it can go out on another connection.
    pub(crate) async fn send(
        mut self: Box<Self>,
        mut request: BoxedRequest,
        home: Home,
        send: crate::upstream::SendOptions<'_>,
    ) -> Result<Result<Answer, BoxedRequest>, ProxyError> {
        let crate::upstream::SendOptions {
            forwarding,
            read_timeout,
            relay,
        } = send;
        // No response head by then is a 504, counted from here as a timeout
        // around the whole exchange would count it (a limit of a second or
        // more from the coarse clock: never early, at most two ticks late).
        let deadline = Instant::from_std(crate::wire::deadline::deadline_after(read_timeout));
        // The body goes to the writer; the head is encoded from the box.
        let body = std::mem::replace(request.body_mut(), crate::pipeline::body::empty());
        let head_request = request.method() == Method::HEAD;
        // A HEAD's response keeps a length its empty body does not have:
        // the map's encoder handles that.
        self.relay = relay && !head_request;
        let framing = request_framing(request.headers_mut(), &body);
        let mut out = std::mem::take(&mut self.out);
        crate::wire::h1_codec::rewind(&mut out);
        out.reserve(512);
        encode_head(request.method(), request.uri(), request.headers(), forwarding, &mut out);
        let mut writer = Writer {
            body: Some(body),
            framing,
            out,
            done: false,
            taken: None,
            failed: None,
            consumed: false,
        };
        // The head goes out before anything else is awaited, so a
        // connection found closed hands the request back untouched. When the
        // body's first bytes are already here they share the write.
        writer.take_ready_frame();
        let first = poll_fn(|cx| Pin::new(&mut self.io).poll_write(cx, &writer.out)).await;
        match first {
            Ok(n) if n > 0 => {
                writer.out.advance(n);
                writer.taken = None;
                // The head is encoded and the request can no longer be handed
                // back: its map is kept for the next head, its box freed.
                crate::wire::h1_codec::recycle(std::mem::take(request.headers_mut()));
                drop(request);
            }
            _ => {
                let Some(body) = writer.hand_back() else {
                    return Err(match first {
                        Err(error) => io_failure(error),
                        Ok(_) => invalid("upstream connection closed while the request was sent"),
                    });
                };
                *request.body_mut() = body;
                return Ok(Err(request));
            }
        }
        // A write the upstream refused (it answered early and closed, a 413
        // say) still lets its response through.
        let mut write_failed: Option<ProxyError> = None;
        let parsed = poll_fn(|cx| {
            if !writer.done {
                if let Poll::Ready(Err(failure)) = writer.poll_send(&mut self.io, cx) {
                    // The client's body failing, or a write blocked past
                    // write_timeout, ends the exchange.
                    if matches!(failure.kind, ErrorKind::BadRequest | ErrorKind::UpstreamTimeout) {
                        return Poll::Ready(Err(failure));
                    }
                    writer.done = true;
                    write_failed = Some(failure);
                }
            }
            match self.poll_head(cx) {
                Poll::Ready(Err(error)) => Poll::Ready(Err(write_failed.take().unwrap_or(error))),
                Poll::Pending => match poll_deadline(&mut self.timer, deadline, cx) {
                    Poll::Ready(()) => Poll::Ready(Err(ProxyError::new(
                        ErrorKind::UpstreamTimeout,
                        "no response headers within read_timeout",
                    ))),
                    Poll::Pending => Poll::Pending,
                },
                ready => ready,
            }
        })
        .await?;
        Ok(Ok(self.answer(
            parsed,
            writer,
            head_request,
            write_failed.is_some(),
            home,
        )))
    }

    /// The response head with its body: a `101`'s connection handed over,
    /// a body that came whole with its head taken at once (the connection
    /// back in the pool before the response is written), else the
    /// connection read on as the body.
    fn answer(
        mut self: Box<Self>,
        parsed: Parsed,
        mut writer: Writer,
        head_request: bool,
        write_failed: bool,
        home: Home,
    ) -> Answer {
        let Parsed {
            mut response,
            kind,
            keep_alive,
            relayed,
        } = parsed;
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let read = self.buf.split().freeze();
            let slot = SwitchedSlot(Arc::new(std::sync::Mutex::new(Some(Switched { io: self.io, read }))));
            response.extensions_mut().insert(slot);
            return (response.map(|()| crate::upstream::UpstreamBody::Empty), relayed);
        }
        if writer.done && writer.out.is_empty() && writer.out.capacity() <= KEPT_OUT {
            self.out = std::mem::take(&mut writer.out);
        }
        let kind = if head_request { BodyKind::Length(0) } else { kind };
        let reusable = reusable(kind) && keep_alive && !write_failed;
        // A body that came whole with its head (most small responses) is
        // taken now, and the connection goes back to the pool before the
        // response is written: no body to box and poll through its layers.
        if let BodyKind::Length(length) = kind {
            if length > 0 && writer.done && self.buf.len() as u64 >= length {
                let whole = self.buf.split_to(length as usize).freeze();
                if reusable && self.buf.is_empty() {
                    home.checkin(self);
                }
                return (
                    response.map(|()| crate::upstream::UpstreamBody::Whole(Some(whole))),
                    relayed,
                );
            }
        }
        let body = H1Body {
            conn: Some(self),
            decoder: Decoder::new(kind, "upstream response"),
            writer: (!writer.done).then_some(writer),
            reusable,
            home: Some(home),
        };
        let body = if body.decoder.finished() {
            body.release();
            crate::upstream::UpstreamBody::Empty
        } else {
            crate::upstream::UpstreamBody::Http1(Box::new(body))
        };
        (response.map(|()| body), relayed)
    }

    /// Read until a final response head is parsed; informational heads
    /// other than `101` are skipped.
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Result<Parsed, ProxyError>> {
        loop {
            if !self.buf.is_empty() {
                match parse_head(&mut self.buf, &mut self.spans, self.relay)? {
                    Some(parsed)
                        if parsed.response.status().is_informational()
                            && parsed.response.status() != StatusCode::SWITCHING_PROTOCOLS =>
                    {
                        continue
                    }
                    Some(parsed) => return Poll::Ready(Ok(parsed)),
                    None if self.buf.len() >= MAX_HEAD => {
                        return Poll::Ready(Err(invalid("upstream response head too large")))
                    }
                    None => {}
                }
            }
            match ready_read(&mut self.io, &mut self.buf, cx) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(invalid("upstream closed the connection before a response")))
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(error)) => return Poll::Ready(Err(io_failure(error))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Ready once `deadline` has passed. A connection keeps one timer across
/// its requests instead of arming one per request: it is moved only when it
/// would fire after the deadline, or when it fires before it (it was left
/// set by an earlier request, and fires at most once per `read_timeout`).
fn poll_deadline(timer: &mut Option<Pin<Box<Sleep>>>, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
    let timer = timer.get_or_insert_with(|| Box::pin(sleep_until(deadline)));
    if timer.deadline() > deadline {
        timer.as_mut().reset(deadline);
    }
    loop {
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        if Instant::now() >= deadline {
            return Poll::Ready(());
        }
        timer.as_mut().reset(deadline);
    }
}

/// How a request body goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body.
    None,
    /// `Content-Length`: this many bytes still to send.
    Length(u64),
    Chunked,
}

/// Set the request's framing headers as hyper's client does: an ended body
/// has none; a given `Content-Length` is kept; else the body's exact size;
/// else chunked.
fn request_framing(headers: &mut HeaderMap, body: &ProxyBody) -> Framing {
    if body.is_end_stream() {
        headers.remove(header::TRANSFER_ENCODING);
        return Framing::None;
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
        headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        return Framing::Chunked;
    }
    if let Some(length) = content_length(headers) {
        return Framing::Length(length);
    }
    match body.size_hint().exact() {
        Some(length) => {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            Framing::Length(length)
        }
        None => {
            headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
            Framing::Chunked
        }
    }
}

fn encode_head(
    method: &Method,
    uri: &http::Uri,
    headers: &HeaderMap,
    forwarding: Option<&Forwarding<'_>>,
    out: &mut BytesMut,
) {
    out.put_slice(method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    let Some(forwarding) = forwarding else {
        put_fields(headers, out);
        return;
    };
    put_fields_except(headers, |name| forwarding.replaces(name), out);
    forwarding.encode(out);
    out.extend_from_slice(b"\r\n");
}

/// The request body on its way up.
struct Writer {
    body: Option<ProxyBody>,
    framing: Framing,
    /// Encoded bytes not yet written.
    out: BytesMut,
    done: bool,
    /// The first frame, when the whole body was taken into the first
    /// write (kept until that write succeeds, so the request can be sent
    /// again on another connection).
    taken: Option<Bytes>,
    /// The body failed while its first frame was taken.
    failed: Option<ProxyError>,
    /// Some of the body was taken from it.
    consumed: bool,
}

impl Writer {
    /// The request body as it was before anything was written, when it
    /// can still be had: untouched, or taken whole into the first write.
    fn hand_back(&mut self) -> Option<ProxyBody> {
        if let Some(whole) = self.taken.take() {
            return Some(crate::pipeline::body::full(whole));
        }
        if self.framing == Framing::None {
            return Some(crate::pipeline::body::empty());
        }
        if self.consumed {
            return None;
        }
        self.body.take()
    }

    /// Append the body's first frame when it is ready now, so it leaves
    /// with the head. A body that is one frame (a buffered request body)
    /// is kept until that write succeeds, so the request can still be
    /// sent again on another connection.
    fn take_ready_frame(&mut self) {
        if self.framing == Framing::None {
            // Done once the head is out: poll_send writes what the first
            // write left (a head larger than the socket's buffer).
            self.body = None;
            return;
        }
        let Some(body) = self.body.as_mut() else {
            return;
        };
        // A body not ready yet is polled again, with the task's waker, by poll_send.
        let mut cx = Context::from_waker(Waker::noop());
        let polled = match Pin::new(&mut *body).poll_frame(&mut cx) {
            Poll::Ready(polled) => polled,
            Poll::Pending => return,
        };
        let whole = body.is_end_stream();
        if let Some(Ok(frame)) = &polled {
            if let (Some(data), true) = (frame.data_ref(), whole) {
                if self.framing == Framing::Length(data.len() as u64) {
                    self.taken = Some(data.clone());
                }
            }
        }
        if let Err(error) = self.encode(polled) {
            self.failed = Some(error);
        }
    }

    /// Poll the body for its next frame and encode it; Ready(Ok) once
    /// something was appended or the body ended.
    fn next_frame(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        match Pin::new(body).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(polled) => Poll::Ready(self.encode(polled)),
        }
    }

    /// Encode what the body gave: data (within its length, or as a chunk),
    /// trailers (chunked only), or its end.
    fn encode(&mut self, polled: Option<Result<Frame<Bytes>, BoxError>>) -> Result<(), ProxyError> {
        self.consumed = true;
        let frame = match polled {
            None => {
                self.body = None;
                if let Framing::Length(left) = self.framing {
                    if left > 0 {
                        return Err(ProxyError::new(
                            ErrorKind::BadRequest,
                            "request body: shorter than its content-length",
                        ));
                    }
                }
                if self.framing == Framing::Chunked {
                    put_last_chunk(None, &mut self.out);
                }
                return Ok(());
            }
            Some(Err(error)) => {
                self.body = None;
                return Err(ProxyError::new(ErrorKind::BadRequest, format!("request body: {error}")));
            }
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(data) if data.is_empty() => {}
            Ok(data) => match &mut self.framing {
                Framing::Length(left) => {
                    if data.len() as u64 > *left {
                        self.body = None;
                        return Err(ProxyError::new(
                            ErrorKind::BadRequest,
                            "request body: longer than its content-length",
                        ));
                    }
                    *left -= data.len() as u64;
                    self.out.put_slice(&data);
                }
                Framing::Chunked => put_chunk(&data, &mut self.out),
                Framing::None => {}
            },
            Err(frame) => {
                // Trailers: sent with a chunked body, dropped otherwise
                // (HTTP/1.1 has nowhere else to put them); the body ends.
                if let (Ok(trailers), Framing::Chunked) = (frame.into_trailers(), self.framing) {
                    put_last_chunk(Some(&trailers), &mut self.out);
                    self.body = None;
                }
            }
        }
        Ok(())
    }

    /// Write what is encoded and read on; Ready(Ok) when the whole body is
    /// out, Pending while waiting for the socket or the body.
    fn poll_send(&mut self, io: &mut Io, cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        if let Some(error) = self.failed.take() {
            return Poll::Ready(Err(error));
        }
        loop {
            while !self.out.is_empty() {
                match Pin::new(&mut *io).poll_write(cx, &self.out) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(invalid("upstream connection closed while the request was sent")))
                    }
                    Poll::Ready(Ok(n)) => self.out.advance(n),
                    Poll::Ready(Err(error)) => return Poll::Ready(Err(io_failure(error))),
                    Poll::Pending => return Poll::Pending,
                }
            }
            // TLS holds written bytes in its own buffer until flushed.
            match Pin::new(&mut *io).poll_flush(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(error)) => return Poll::Ready(Err(io_failure(error))),
                Poll::Pending => return Poll::Pending,
            }
            if self.body.is_none() {
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            match self.next_frame(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Whether a connection can carry another exchange after a body of this kind.
fn reusable(kind: BodyKind) -> bool {
    matches!(kind, BodyKind::Length(_) | BodyKind::Chunked)
}

struct Parsed {
    response: Response<()>,
    kind: BodyKind,
    /// The upstream lets the connection carry another request.
    keep_alive: bool,
    /// The head's lines to pass on as they are (relay.rs); the map is then
    /// empty.
    relayed: Option<Box<RelayedHead>>,
}

/// Offsets and lengths of a head's header names and values.
type Spans = Vec<(usize, usize, usize, usize)>;

/// An upstream's response as the client codec reads it (fuzz/fuzz_targets/http1_response.rs):
/// the head, as a map and as relayed lines, then the body its framing gives, read to its end
/// or its error from the bytes after the head. None of it may panic on any bytes.
pub fn read_response_bytes(data: &[u8]) {
    for relay in [false, true] {
        let mut buf = BytesMut::from(data);
        let Ok(Some(parsed)) = parse_head(&mut buf, &mut Vec::new(), relay) else {
            continue;
        };
        let mut decoder = crate::wire::h1_codec::Decoder::new(parsed.kind, "fuzzed response");
        let mut rest: &[u8] = &[];
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(Some(Ok(_))) = decoder.poll_frame(&mut rest, &mut buf, &mut cx) {}
    }
}

/// Parse a response head off the front of `buf`; None when incomplete.
/// With `relay`, a head that can be passed on as it is (relay.rs) is kept
/// as its lines instead of a map.
fn parse_head(buf: &mut BytesMut, spans: &mut Spans, relay: bool) -> Result<Option<Parsed>, ProxyError> {
    // Slots left uninitialized: zeroing 128 of them (4 KiB) cost more than
    // parsing a head.
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let length =
        match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut parsed, buf, &mut fields) {
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(error) => return Err(invalid(&format!("invalid upstream response head: {error}"))),
        };
    let code = parsed.code.unwrap_or(0);
    let status = StatusCode::from_u16(code).map_err(|_| invalid("invalid upstream status code"))?;
    let version = if parsed.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    // Offsets of each name and value in the head, so the values can share
    // its bytes instead of being copied.
    let base = buf.as_ptr() as usize;
    spans.clear();
    spans.extend(parsed.headers.iter().map(|h| {
        let name = h.name.as_ptr() as usize - base;
        let value = h.value.as_ptr() as usize - base;
        (name, h.name.len(), value, h.value.len())
    }));
    let head = buf.split_to(length).freeze();
    // 1xx, 204 and 304 heads lose or keep framing fields by rules the map's
    // encoder applies.
    let relay =
        relay && !status.is_informational() && status != StatusCode::NO_CONTENT && status != StatusCode::NOT_MODIFIED;
    let mut fields = match relay.then(|| RelayedHead::scan(&head, spans)).flatten() {
        Some(relayed) => ResponseFields::relayed(relayed),
        None => ResponseFields::read(&head, spans, status == StatusCode::SWITCHING_PROTOCOLS)?,
    };
    let kind = if status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        BodyKind::Length(0)
    } else {
        fields.body_kind()?
    };
    let keep_alive = !fields.close && (version != Version::HTTP_10 || fields.keep_alive);
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = version;
    *response.headers_mut() = fields.map;
    Ok(Some(Parsed {
        response,
        kind,
        keep_alive,
        relayed: fields.relayed,
    }))
}

/// A response head's fields, and what framing and the connection need of
/// them, noted on the way rather than looked up again.
///
/// Hop-by-hop fields (handler.rs `HOP_BY_HOP`, and those `Connection`
/// names) are read but not put in the map: they would be removed before
/// the response goes on anyway, and finding and removing them there cost
/// more than the rest of the response's handling. A `101` keeps them: the
/// tunnel reads its `Upgrade`.
struct ResponseFields {
    map: HeaderMap,
    /// Instead of `map`: the lines to pass on as they are.
    relayed: Option<Box<RelayedHead>>,
    length: LengthFields,
    /// The last `Transfer-Encoding` ends in `chunked`; None without one.
    chunked: Option<bool>,
    close: bool,
    keep_alive: bool,
}

impl ResponseFields {
    /// A head relay.rs passes on: an empty map beside its lines.
    fn relayed(relayed: Relayed) -> ResponseFields {
        ResponseFields {
            map: HeaderMap::new(),
            relayed: Some(Box::new(relayed.head)),
            length: relayed.length,
            chunked: None,
            close: relayed.close,
            keep_alive: relayed.keep_alive,
        }
    }

    fn read(head: &Bytes, spans: &Spans, switching: bool) -> Result<ResponseFields, ProxyError> {
        // Room for Kong's response headers (`Via`, the latencies, the
        // request id, `Server`), so the map is not grown while they go in.
        let mut fields = ResponseFields {
            map: crate::wire::h1_codec::header_map(spans.len() + 6),
            relayed: None,
            length: LengthFields::default(),
            chunked: None,
            close: false,
            keep_alive: false,
        };
        let mut named: Vec<HeaderName> = Vec::new();
        for &(name, name_len, value, value_len) in spans {
            let name = crate::wire::h1_names::name_parsed_by_httparse(&head[name..name + name_len])
                .map_err(|_| invalid("invalid upstream header name"))?;
            let bytes = &head[value..value + value_len];
            if name == header::CONTENT_LENGTH {
                fields.length.add(bytes);
            } else if name == header::TRANSFER_ENCODING {
                let last = bytes.rsplit(|b| *b == b',').next().unwrap_or_default();
                fields.chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            } else if name == header::CONNECTION {
                fields.connection_tokens(bytes, &mut named);
            }
            if !switching && crate::pipeline::handler::is_hop_by_hop(&name) {
                continue;
            }
            let value = crate::wire::h1_codec::value_parsed_by_httparse(head, value, value_len)
                .ok_or_else(|| invalid("invalid upstream header value"))?;
            fields.map.append(name, value);
        }
        if !switching {
            for name in &named {
                fields.map.remove(name);
            }
        }
        Ok(fields)
    }

    /// `close` and `keep-alive` from a `Connection` value; the other
    /// fields it names go in `named` (handler.rs `strip_hop_by_hop`).
    fn connection_tokens(&mut self, value: &[u8], named: &mut Vec<HeaderName>) {
        let text = value
            .iter()
            .all(|b| b.is_ascii() && !b.is_ascii_control() || *b == b'\t');
        for token in list_tokens(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if text && !token.is_empty() {
                if let Ok(name) = HeaderName::from_bytes(token) {
                    if !crate::pipeline::handler::is_hop_by_hop(&name) {
                        named.push(name);
                    }
                }
            }
        }
    }

    /// How the body is delimited (the status allowing one).
    fn body_kind(&mut self) -> Result<BodyKind, ProxyError> {
        if let Some(chunked) = self.chunked {
            if self.length.present() {
                self.map.remove(header::CONTENT_LENGTH);
                return Ok(if chunked {
                    BodyKind::ChunkedOverLength
                } else {
                    BodyKind::Close
                });
            }
            return Ok(if chunked { BodyKind::Chunked } else { BodyKind::Close });
        }
        if self.length.present() {
            return match self.length.value() {
                Some(length) => Ok(BodyKind::Length(length)),
                None => Err(invalid("invalid upstream content-length")),
            };
        }
        Ok(BodyKind::Close)
    }
}

/// A response body read straight from the connection.
pub struct H1Body {
    conn: Option<Box<H1Conn>>,
    decoder: Decoder,
    /// The request body, when the response started before it was all sent.
    writer: Option<Writer>,
    reusable: bool,
    home: Option<Home>,
}

impl H1Body {
    /// The body ended: the connection goes back to the pool when it can
    /// carry another request.
    fn release(mut self) {
        self.give_back();
    }

    fn give_back(&mut self) {
        let writer_done = self.writer.as_ref().is_none_or(|w| w.done);
        if let (Some(conn), Some(home)) = (self.conn.take(), self.home.take()) {
            if self.reusable && writer_done && conn.buf.is_empty() {
                home.checkin(conn);
            }
        }
    }
}

impl Body for H1Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        // The request body still going up (the upstream answered early)
        // moves on whenever the response is read.
        if let (Some(writer), Some(conn)) = (this.writer.as_mut(), this.conn.as_mut()) {
            if !writer.done {
                if let Poll::Ready(Err(error)) = writer.poll_send(&mut conn.io, cx) {
                    tracing::debug!(cause = %error.cause, "request body not sent after the response began");
                    writer.done = true;
                    this.reusable = false;
                }
            }
        }
        let polled = match this.conn.as_mut() {
            Some(conn) => this.decoder.poll_frame(&mut conn.io, &mut conn.buf, cx),
            None => Poll::Ready(None),
        };
        if this.decoder.finished() {
            this.give_back();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.finished()
    }

    fn size_hint(&self) -> SizeHint {
        self.decoder.size_hint()
    }
}

fn invalid(message: &str) -> ProxyError {
    ProxyError::new(ErrorKind::UpstreamInvalid, message.to_string())
}

/// 504 for a write that timed out (`write_timeout`), else 502.
fn io_failure(error: io::Error) -> ProxyError {
    if error.kind() == io::ErrorKind::TimedOut {
        return ProxyError::new(ErrorKind::UpstreamTimeout, error.to_string());
    }
    ProxyError::new(ErrorKind::UpstreamInvalid, error.to_string())
}

#[cfg(test)]
mod tests;
