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

use crate::body::{BoxError, ProxyBody};
use crate::error::{ErrorKind, ProxyError};
use crate::forwarding::Forwarding;
use crate::h1_codec::{
    content_length, list_tokens, put_chunk, put_fields, put_fields_except, put_last_chunk, ready_read, BodyKind,
    Decoder, LengthFields,
};
use crate::handler::BoxedRequest;
use crate::relay::{Relayed, RelayedHead};
use crate::upstream::Answer;
use crate::upstream::{Home, WriteTimeoutIo};

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
        forwarding: Option<&Forwarding<'_>>,
        read_timeout: std::time::Duration,
        relay: bool,
    ) -> Result<Result<Answer, BoxedRequest>, ProxyError> {
        // No response head by then is a 504, counted from here as a timeout
        // around the whole exchange would count it (a limit of a second or
        // more from the coarse clock: never early, at most two ticks late).
        let deadline = Instant::from_std(crate::deadline::deadline_after(read_timeout));
        // The body goes to the writer; the head is encoded from the box.
        let body = std::mem::replace(request.body_mut(), crate::body::empty());
        let head_request = request.method() == Method::HEAD;
        // A HEAD's response keeps a length its empty body does not have:
        // the map's encoder handles that.
        self.relay = relay && !head_request;
        let framing = request_framing(request.headers_mut(), &body);
        let mut out = std::mem::take(&mut self.out);
        crate::h1_codec::rewind(&mut out);
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
                crate::h1_codec::recycle(std::mem::take(request.headers_mut()));
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
            return Ok(Ok((response.map(|()| crate::upstream::UpstreamBody::Empty), relayed)));
        }
        if writer.done && writer.out.is_empty() && writer.out.capacity() <= KEPT_OUT {
            self.out = std::mem::take(&mut writer.out);
        }
        let kind = if head_request { BodyKind::Length(0) } else { kind };
        let reusable = reusable(kind) && keep_alive && write_failed.is_none();
        // A body that came whole with its head (most small responses) is
        // taken now, and the connection goes back to the pool before the
        // response is written: no body to box and poll through its layers.
        if let BodyKind::Length(length) = kind {
            if length > 0 && writer.done && self.buf.len() as u64 >= length {
                let whole = self.buf.split_to(length as usize).freeze();
                if reusable && self.buf.is_empty() {
                    home.checkin(self);
                }
                return Ok(Ok((
                    response.map(|()| crate::upstream::UpstreamBody::Whole(Some(whole))),
                    relayed,
                )));
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
        Ok(Ok((response.map(|()| body), relayed)))
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
            return Some(crate::body::full(whole));
        }
        if self.framing == Framing::None {
            return Some(crate::body::empty());
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
            map: crate::h1_codec::header_map(spans.len() + 6),
            relayed: None,
            length: LengthFields::default(),
            chunked: None,
            close: false,
            keep_alive: false,
        };
        let mut named: Vec<HeaderName> = Vec::new();
        for &(name, name_len, value, value_len) in spans {
            let name = crate::h1_names::name_parsed_by_httparse(&head[name..name + name_len])
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
            if !switching && crate::handler::is_hop_by_hop(&name) {
                continue;
            }
            let value = crate::h1_codec::value_parsed_by_httparse(head, value, value_len)
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
                    if !crate::handler::is_hop_by_hop(&name) {
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
mod tests {
    use super::*;
    use crate::h1_codec::find_double_crlf;
    use http::Request;

    fn head(bytes: &[u8]) -> Result<Option<Parsed>, ProxyError> {
        parse_head(&mut BytesMut::from(bytes), &mut Vec::new(), false)
    }

    /// Each field of a map in order, as text.
    fn listed(map: &HeaderMap) -> Vec<(String, String)> {
        map.iter()
            .map(|(name, value)| (name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            .collect()
    }

    #[test]
    fn a_relayed_head_holds_the_fields_and_framing_the_map_would() {
        let relayed = [
            &b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sat, 28 Nov 2026 03:30:00 GMT\r\n\
               Content-Type: application/octet-stream\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n"[..],
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\n\
              Keep-Alive: timeout=5\r\nConnection: Keep-Alive\r\nVIA: 1.1 edge\r\n\r\n",
            b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\nx-a: spaced  value\r\nX_Odd.Name~!: 1\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n",
            b"HTTP/1.0 201 Created\r\nConnection: keep-alive\r\nContent-Length: 3\r\nLocation: /x\r\n\r\n",
            b"HTTP/1.1 299 Whatever\r\nTE: x\r\nContent-Length: 1\r\nUpgrade: x\r\nProxy-Connection: y\r\n\r\n",
        ];
        for bytes in relayed {
            let text = String::from_utf8_lossy(bytes);
            let by_map = parse_head(&mut BytesMut::from(bytes), &mut Vec::new(), false)
                .unwrap()
                .unwrap();
            let mut buf = BytesMut::from(bytes);
            let by_relay = parse_head(&mut buf, &mut Vec::new(), true).unwrap().unwrap();
            let lines = by_relay
                .relayed
                .as_ref()
                .unwrap_or_else(|| panic!("not relayed: {text}"));
            assert!(by_relay.response.headers().is_empty(), "{text}");
            assert!(by_map.relayed.is_none());
            assert_eq!(listed(&lines.fields()), listed(by_map.response.headers()), "{text}");
            assert_eq!(by_relay.kind, by_map.kind, "{text}");
            assert_eq!(by_relay.keep_alive, by_map.keep_alive, "{text}");
            assert_eq!(by_relay.response.status(), by_map.response.status());
            assert_eq!(
                Some(lines.length),
                match by_map.kind {
                    BodyKind::Length(n) => Some(n),
                    _ => None,
                }
            );
            assert!(buf.is_empty(), "the head is taken off the buffer");
        }
        // Heads whose status, framing or fields only the map handles.
        for bytes in [
            &b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"[..],
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nConnection: X-Secret\r\nX-Secret: 1\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-Kong-Proxy-Latency: 1\r\nContent-Length: 0\r\n\r\n",
            // httparse leaves whitespace around a value out of it: the line is
            // not the field's bytes.
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nx-a: \tb\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nx-a: b \r\n\r\n",
        ] {
            let parsed = parse_head(&mut BytesMut::from(bytes), &mut Vec::new(), true)
                .unwrap()
                .unwrap();
            assert!(parsed.relayed.is_none(), "{}", String::from_utf8_lossy(bytes));
        }
    }

    #[test]
    fn framing_of_response_heads() {
        let kind = |bytes: &[u8]| head(bytes).unwrap().unwrap().kind;
        assert_eq!(
            kind(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n"),
            BodyKind::Length(12)
        );
        assert_eq!(
            kind(b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\n"),
            BodyKind::Length(5)
        );
        assert_eq!(
            kind(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"),
            BodyKind::Chunked
        );
        assert_eq!(
            kind(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n"),
            BodyKind::ChunkedOverLength
        );
        assert_eq!(
            kind(b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n"),
            BodyKind::Close
        );
        assert_eq!(kind(b"HTTP/1.1 200 OK\r\n\r\n"), BodyKind::Close);
        assert_eq!(
            kind(b"HTTP/1.1 204 No Content\r\ncontent-length: 3\r\n\r\n"),
            BodyKind::Length(0)
        );
        assert_eq!(kind(b"HTTP/1.1 304 Not Modified\r\n\r\n"), BodyKind::Length(0));
        assert!(head(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n").is_err());
        assert!(head(b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n").is_err());
        assert!(head(b"HTTP/1.1 200 OK\r\ncontent-length: 0x5\r\n\r\n").is_err());
        assert!(head(b"HTTP/1.1 200 OK\r\ncontent-le").unwrap().is_none());
        assert!(head(b"HTTP/1.1 2000 OK\r\n\r\n").is_err());
    }

    #[test]
    fn hop_by_hop_fields_stay_out_of_the_map_and_still_decide_the_connection() {
        let parsed = head(
            b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\nX-Secret: 1\r\n\
              Proxy-Connection: x\r\nTE: trailers\r\nUpgrade: h2c\r\nX-Kept: yes\r\ncontent-length: 2\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        let mut names: Vec<&str> = parsed.response.headers().keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["content-length", "x-kept"]);
        assert!(parsed.keep_alive);
        assert_eq!(parsed.kind, BodyKind::Length(2));
        let keep_alive = |bytes: &[u8]| head(bytes).unwrap().unwrap().keep_alive;
        assert!(!keep_alive(b"HTTP/1.1 200 OK\r\nConnection: Close\r\n\r\n"));
        assert!(keep_alive(b"HTTP/1.1 200 OK\r\n\r\n"));
        assert!(!keep_alive(b"HTTP/1.0 200 OK\r\n\r\n"));
        assert!(keep_alive(b"HTTP/1.0 200 OK\r\nconnection: Keep-Alive\r\n\r\n"));
        // Chunked framing is read from the field that is left out.
        let chunked = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(chunked.kind, BodyKind::Chunked);
        assert!(chunked.response.headers().is_empty());
        // A 101 keeps them all: the tunnel reads its `Upgrade`.
        let switching = head(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(switching.response.headers()[header::UPGRADE], "websocket");
        assert_eq!(switching.response.headers()[header::CONNECTION], "upgrade");
    }

    #[test]
    fn head_values_keep_their_bytes_and_what_follows_stays() {
        let mut buf =
            BytesMut::from(&b"HTTP/1.1 201 Created\r\nX-A: one\r\nx-a: two\r\ncontent-length: 2\r\n\r\nhi"[..]);
        let parsed = parse_head(&mut buf, &mut Vec::new(), false).unwrap().unwrap();
        assert_eq!(parsed.response.status(), 201);
        let values: Vec<_> = parsed.response.headers().get_all("x-a").iter().collect();
        assert_eq!(values, ["one", "two"]);
        assert_eq!(&buf[..], b"hi");
    }

    #[test]
    fn request_framing_as_hyper_sets_it() {
        let mut headers = HeaderMap::new();
        assert_eq!(request_framing(&mut headers, &crate::body::empty()), Framing::None);
        assert!(headers.is_empty());
        let mut headers = HeaderMap::new();
        let body = crate::body::full(Bytes::from_static(b"abc"));
        assert_eq!(request_framing(&mut headers, &body), Framing::Length(3));
        assert_eq!(headers[header::CONTENT_LENGTH], "3");
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("7"));
        assert_eq!(request_framing(&mut headers, &body), Framing::Length(7));
    }

    /// A raw origin: answers each request on a connection with the next
    /// canned response; returns how many connections it accepted.
    async fn origin(responses: Vec<&'static [u8]>) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            let mut responses = responses.into_iter();
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut seen = Vec::new();
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    // One response per request head (the bodies here are tiny).
                    while let Some(end) = find_double_crlf(&seen) {
                        let head = String::from_utf8_lossy(&seen[..end]).to_lowercase();
                        let body = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                        if seen.len() < end + 4 + body {
                            break;
                        }
                        seen.drain(..end + 4 + body);
                        let Some(response) = responses.next() else { return };
                        socket.write_all(response).await.unwrap();
                    }
                }
            }
        });
        (addr, accepted)
    }

    /// `request` sent to `addr` through `pool`, with a 5 s connect and
    /// write timeout and `read_timeout` for the head.
    async fn dispatch(
        pool: &crate::upstream::Pool,
        addr: std::net::SocketAddr,
        request: Request<ProxyBody>,
        read_timeout: std::time::Duration,
    ) -> Result<Response<crate::upstream::UpstreamBody>, ProxyError> {
        let five = std::time::Duration::from_secs(5);
        let endpoint = crate::upstream::Endpoint {
            write_timeout: five,
            addr,
            http2: false,
            tls: None,
        };
        let lease = pool.acquire(&endpoint, five).await.unwrap();
        pool.dispatch(lease, &endpoint, Box::new(request), None, five, read_timeout, false)
            .await
            .map(|(response, _)| response)
            .map_err(|f| f.error)
    }

    async fn exchange(
        pool: &crate::upstream::Pool,
        addr: std::net::SocketAddr,
        request: Request<ProxyBody>,
    ) -> (StatusCode, Bytes, Option<HeaderMap>) {
        use http_body_util::BodyExt;
        let response = dispatch(pool, addr, request, std::time::Duration::from_secs(5))
            .await
            .unwrap();
        let status = response.status();
        let collected = response.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned();
        (status, collected.to_bytes(), trailers)
    }

    #[tokio::test]
    async fn chunked_bodies_trailers_and_informational_heads_then_the_connection_is_reused() {
        let (addr, accepted) = origin(vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nx-t: 1\r\n\r\n",
            b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok",
            b"HTTP/1.1 204 No Content\r\n\r\n",
        ])
        .await;
        let pool = crate::upstream::Pool::default();
        let get = || Request::get("/a").body(crate::body::empty()).unwrap();
        let (status, body, trailers) = exchange(&pool, addr, get()).await;
        assert_eq!(status, 200);
        assert_eq!(&body[..], b"abcde");
        assert_eq!(trailers.unwrap()["x-t"], "1");
        let post = Request::post("/b")
            .body(crate::body::full(Bytes::from_static(b"hello")))
            .unwrap();
        let (status, body, _) = exchange(&pool, addr, post).await;
        assert_eq!((status, &body[..]), (StatusCode::CREATED, &b"ok"[..]));
        let (status, body, _) = exchange(&pool, addr, get()).await;
        assert_eq!((status, body.len()), (StatusCode::NO_CONTENT, 0));
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one kept-alive connection"
        );
        assert_eq!(pool.idle_http1(), 1);
    }

    /// One kept-alive connection's requests, answered after the given delays.
    async fn slow_origin(delays: Vec<u64>) -> std::net::SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            for delay in delays {
                let end = loop {
                    if let Some(end) = find_double_crlf(&seen) {
                        break end;
                    }
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                };
                seen.drain(..end + 4);
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            }
            let _ = socket.read(&mut buf).await;
        });
        addr
    }

    async fn timed(
        pool: &crate::upstream::Pool,
        addr: std::net::SocketAddr,
        read_timeout_ms: u64,
    ) -> Result<(), ProxyError> {
        use http_body_util::BodyExt;
        let request = Request::get("/").body(crate::body::empty()).unwrap();
        let response = dispatch(pool, addr, request, std::time::Duration::from_millis(read_timeout_ms)).await?;
        response.into_body().collect().await.unwrap();
        Ok(())
    }

    #[tokio::test]
    async fn the_read_timeout_counts_per_request_on_a_kept_connection() {
        // Answered at once under a short timeout (its timer stays set on the
        // connection), then slower than that timeout under a longer one (the
        // early timer must not end it), then slower than its own timeout.
        let addr = slow_origin(vec![0, 400, 2_000]).await;
        let pool = crate::upstream::Pool::default();
        timed(&pool, addr, 150).await.expect("answered at once");
        let started = std::time::Instant::now();
        timed(&pool, addr, 3_000).await.expect("within its own read_timeout");
        assert!(started.elapsed() >= std::time::Duration::from_millis(400));
        let started = std::time::Instant::now();
        let error = timed(&pool, addr, 300).await.expect_err("slower than its read_timeout");
        assert_eq!(error.kind, ErrorKind::UpstreamTimeout);
        let waited = started.elapsed();
        assert!(
            waited >= std::time::Duration::from_millis(300) && waited < std::time::Duration::from_millis(1_500),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn a_body_that_came_with_its_head_frees_the_connection_before_it_is_read() {
        use http_body_util::BodyExt;
        let (addr, accepted) = origin(vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nbye",
        ])
        .await;
        let pool = crate::upstream::Pool::default();
        for expect in [&b"hello"[..], &b"bye"[..]] {
            let request = Request::get("/").body(crate::body::empty()).unwrap();
            let response = dispatch(&pool, addr, request, std::time::Duration::from_secs(5))
                .await
                .unwrap();
            // Back in the pool with the head: the body was all there.
            assert_eq!(pool.idle_http1(), 1);
            let body = response.into_body();
            assert!(body.is_whole());
            assert_eq!(body.size_hint().exact(), Some(expect.len() as u64));
            assert_eq!(&body.collect().await.unwrap().to_bytes()[..], expect);
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_head_larger_than_the_socket_takes_is_sent_whole() {
        let (addr, _) = origin(vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na",
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nb",
        ])
        .await;
        let pool = crate::upstream::Pool::default();
        // Far more than loopback's socket buffers take in one write.
        let big = "x".repeat(4 << 20);
        let request = Request::get("/big")
            .header("x-big", big.as_str())
            .body(crate::body::empty())
            .unwrap();
        let (status, body, _) =
            tokio::time::timeout(std::time::Duration::from_secs(20), exchange(&pool, addr, request))
                .await
                .expect("the whole head reached the origin");
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"a"[..]));
        let small = Request::get("/small").body(crate::body::empty()).unwrap();
        let (status, body, _) = exchange(&pool, addr, small).await;
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"b"[..]));
    }

    #[tokio::test]
    async fn a_response_read_to_the_close_is_not_kept_and_the_next_request_opens_a_connection() {
        let (addr, accepted) = origin(vec![
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\nx",
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\ny",
        ])
        .await;
        let pool = crate::upstream::Pool::default();
        let get = || Request::get("/").body(crate::body::empty()).unwrap();
        assert_eq!(&exchange(&pool, addr, get()).await.1[..], b"x");
        assert_eq!(pool.idle_http1(), 0);
        assert_eq!(&exchange(&pool, addr, get()).await.1[..], b"y");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
