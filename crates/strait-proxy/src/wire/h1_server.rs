//! Client HTTP/1.1 connections on Strait's own codec.
//!
//! hyper's server parsed each head into its own structures, handed the
//! request to a service through a dispatcher, armed a timer per request for
//! the header timeout and fed request bodies through a channel. Here the
//! connection's task does it all in order (docs/architecture.md#http1-codec-spike):
//! it parses the head with httparse into a request whose header values
//! share the bytes read, runs the proxy on it, and writes the response head
//! with the first body bytes in one write. One timer per connection covers
//! the header timeout: it is re-armed only when it fires early.
//!
//! A request without a body (most of them) leaves the connection with the
//! task. A request with one lends the connection to its body, which reads
//! straight from the socket (sending `100 Continue` first when the client
//! asked) while the task can still write the response on it. Once the
//! response is out the connection comes back, and carries the next request
//! only when the request body was read to its end.
//!
//! Framing follows RFC 9112 and hyper's choices, which the smuggling suite
//! pins: `Transfer-Encoding` must end in `chunked` (and is refused on
//! HTTP/1.0); beside a `Content-Length` it wins and the connection closes
//! after the response; lengths must be plain digits and agree; obs-fold,
//! bare CR and NUL in a head are refused with 400 and a closed connection.
//! Responses get `Content-Length` when their size is known, chunked coding
//! otherwise (close-delimited for HTTP/1.0 clients), trailers only for
//! clients that sent `TE: trailers`, a `Date`, and `Connection: close` when
//! the connection ends after them.

use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::{timeout, Sleep};

use crate::pipeline::body::{BoxError, ProxyBody};
use crate::pipeline::error::ErrorKind;
use crate::pipeline::handler::{handle, lists_token, ConnInfo};
use crate::pipeline::kong_headers::KongFields;
use crate::pipeline::relay::RelayedHead;
use crate::pipeline::tunnel::ClientUpgrade;
use crate::wire::conn::{jittered, ClientLimits};
use crate::wire::h1_codec::{
    list_tokens, put_chunk, put_chunk_size, put_field, put_fields, put_fields_except, put_last_chunk, ready_read,
    BodyKind, Decoder, LengthFields, Seen,
};
use crate::Shared;

mod encode;
mod strict;
use encode::encode_head;

/// Header fields parsed without a heap allocation for their slots.
const STACK_FIELDS: usize = 128;
/// Body data at least this long is written from its own buffer (one
/// vectored write with what precedes it) instead of being copied.
const COPY_LIMIT: usize = 4096;
/// Encoded response bytes gathered before they are written.
const WRITE_BATCH: usize = 64 * 1024;
/// Fields the proxy may add to a request's map on its way up (`Host`, a
/// framing field; the forwarding headers go beside it, forwarding.rs).
pub(crate) const ADDED_FIELDS: usize = 2;
/// Most bytes of an unread request body read and dropped to keep its
/// connection.
const DISCARD_LIMIT: usize = 64 * 1024;
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A client connection: its socket and the bytes read from it and not yet
/// used.
struct Conn<IO> {
    io: IO,
    buf: BytesMut,
}

/// A parsed request head and what it says about the connection.
struct Parsed {
    /// Boxed where it is parsed (handler.rs `BoxedRequest`): the request
    /// and the proxy's layers then pass a pointer on, not its 240 bytes.
    request: Box<Request<ProxyBody>>,
    kind: BodyKind,
    keep_alive: bool,
    expect_continue: bool,
    /// `TE: trailers`: the client takes trailers on a chunked response.
    trailers: bool,
    upgrade: bool,
}

/// What waiting for the next request head ended with.
enum Next {
    Request(Parsed),
    /// The client closed, went quiet, or Strait stops: close without a word.
    Close,
    /// Answer with this error, then close.
    Reject(ErrorKind),
}

/// How long an idle keep-alive connection waits for its next request once
/// a graceful stop began (`strait quit`, a hand-over to a new process).
const STOP_LINGER: Duration = Duration::from_millis(1000);

/// Serve one client HTTP/1.1 connection; `read` holds what the protocol
/// sniffing read already (at least the first request's head).
pub(crate) async fn serve<IO>(
    io: IO,
    read: BytesMut,
    info: ConnInfo,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = shared.limits();
    let limits: &ClientLimits = &limits;
    let age = limits.max_connection_age.map(|age| Instant::now() + jittered(age));
    let mut stopping = shutdown.clone();
    let mut session = Session {
        info: &info,
        shared: &shared,
        limits,
        clock: HeadClock::new(limits.header_timeout),
        stop: Box::pin(async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        }),
        stopped: false,
        linger: None,
        shutdown,
        age,
        aged: age.map(|at| Box::pin(tokio::time::sleep_until(at.into()))),
        served: 0,
        spans: Vec::new(),
        out: BytesMut::with_capacity(4096),
    };
    let mut conn = Conn { io, buf: read };
    loop {
        match session.exchange(conn).await {
            Some(next) => conn = next,
            None => return,
        }
    }
}

/// Where header fields lie in a head: name start and length, value start
/// and length.
type Span = (usize, usize, usize, usize);

/// One connection's state between requests.
struct Session<'a> {
    info: &'a ConnInfo,
    shared: &'a Shared,
    limits: &'a ClientLimits,
    clock: HeadClock,
    /// Resolves when Strait stops.
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    stopped: bool,
    /// After a graceful stop: how long an idle connection still waits for
    /// its next request.
    linger: Option<Pin<Box<Sleep>>>,
    shutdown: watch::Receiver<bool>,
    /// When the connection should go (`max_connection_age`, jittered).
    age: Option<Instant>,
    aged: Option<Pin<Box<Sleep>>>,
    served: u64,
    spans: Vec<Span>,
    out: BytesMut,
}

impl Session<'_> {
    /// Read, run and answer one request; the connection back when it can
    /// carry another.
    async fn exchange<IO>(&mut self, mut conn: Conn<IO>) -> Option<Conn<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let parsed = match self.next_head(&mut conn).await {
            Next::Request(parsed) => parsed,
            Next::Close => {
                close(conn).await;
                return None;
            }
            Next::Reject(kind) => {
                crate::wire::conn::refuse(&mut conn.io, kind, self.shared).await;
                return None;
            }
        };
        let Parsed {
            mut request,
            kind,
            keep_alive,
            expect_continue,
            trailers,
            upgrade,
        } = parsed;
        self.served += 1;
        let meta = Meta {
            version: request.version(),
            head: request.method() == Method::HEAD,
            trailers,
        };
        let handover = upgrade.then(|| {
            let (slot, handover) = ClientUpgrade::new();
            request.extensions_mut().insert(slot);
            handover
        });
        // A body borrows the connection; without one it stays here (and the
        // request keeps the empty body it was parsed with).
        let mut lent = if kind == BodyKind::Length(0) {
            Lent::Home(conn)
        } else {
            let link = Arc::new(Mutex::new(Link {
                conn: Some(conn),
                decoder: Decoder::new(kind, "client request"),
                send_continue: expect_continue,
                continue_sent: 0,
            }));
            *request.body_mut() = crate::pipeline::body::boxed(RequestBody { link: link.clone() });
            Lent::Out(link)
        };
        // The request's handling is a future of kilobytes: boxed, it is
        // written once instead of being moved into each future around it.
        let handling = crate::pipeline::handler::pin_in_place(|| handle(request, self.info, self.shared));
        let watched = watch_client(handling, &mut lent, self.limits.max_header_bytes);
        let response = match self.age {
            // Past its age, what is in flight has the grace to finish.
            Some(age) => {
                let limit = age + self.limits.max_connection_age_grace;
                tokio::time::timeout_at(limit.into(), watched).await.ok().flatten()
            }
            None => watched.await,
        };
        // Without a response the client left (or the grace ran out): what
        // was in flight, its upstream request included, is dropped.
        let (response, fields) = response?;
        let switching = response.status() == StatusCode::SWITCHING_PROTOCOLS;
        let mut keep_alive = keep_alive
            && kind != BodyKind::ChunkedOverLength
            && !self.stopping()
            && self.age.is_none_or(|age| Instant::now() < age)
            && (self.limits.max_requests_per_connection == 0 || self.served < self.limits.max_requests_per_connection)
            && lent.body_read();
        let written = {
            let mut sink = lent.sink();
            write_response(
                &mut sink,
                response,
                fields.as_ref(),
                &meta,
                &mut keep_alive,
                &mut self.out,
            )
            .await
        };
        crate::wire::h1_codec::rewind(&mut self.out);
        let conn = lent.take_back()?;
        if switching {
            if let (Ok(true), Some(handover)) = (written, handover) {
                handover.complete(conn.io, conn.buf.freeze());
            }
            return None;
        }
        match written {
            Ok(true) if keep_alive => Some(conn),
            _ => {
                close(conn).await;
                None
            }
        }
    }

    fn stopping(&mut self) -> bool {
        self.stopped || *self.shutdown.borrow()
    }

    /// Wait for the next complete request head.
    async fn next_head<IO: AsyncRead + Unpin>(&mut self, conn: &mut Conn<IO>) -> Next {
        let mut waiting = false;
        loop {
            if !conn.buf.is_empty() {
                // The route lookup's slot is fetched while the head is parsed.
                crate::pipeline::prefetch::route_for(&self.shared.snapshot.load(), &conn.buf);
                match parse_request(&mut conn.buf, self.limits, &mut self.spans) {
                    Ok(Some(parsed)) => return Next::Request(parsed),
                    Ok(None) if conn.buf.len() > self.limits.max_header_bytes => {
                        return Next::Reject(ErrorKind::HeadersTooLarge)
                    }
                    Ok(None) => {}
                    Err(kind) => return Next::Reject(kind),
                }
            }
            if !waiting {
                waiting = true;
                self.clock.start();
            }
            let Session {
                clock,
                stop,
                stopped,
                linger,
                aged,
                ..
            } = self;
            let event = poll_fn(|cx| {
                if let Poll::Ready(read) = ready_read(&mut conn.io, &mut conn.buf, cx) {
                    return Poll::Ready(Wait::Read(read));
                }
                if !*stopped && stop.as_mut().poll(cx).is_ready() {
                    *stopped = true;
                    if crate::stopping_now() {
                        return Poll::Ready(Wait::Done);
                    }
                    // A keep-alive client may be sending its next request
                    // right now: closing at once would lose it (a reset
                    // the client cannot tell from a failure). It is served,
                    // with `Connection: close`, if it comes soon.
                    *linger = Some(Box::pin(tokio::time::sleep(STOP_LINGER)));
                }
                if let Some(wait) = linger.as_mut() {
                    if wait.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Wait::Done);
                    }
                }
                if let Some(aged) = aged.as_mut() {
                    if aged.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Wait::Done);
                    }
                }
                if clock.poll_expired(cx) {
                    return Poll::Ready(Wait::TimedOut);
                }
                Poll::Pending
            })
            .await;
            match event {
                Wait::Read(Ok(n)) if n > 0 => {}
                Wait::Read(_) | Wait::Done => return Next::Close,
                Wait::TimedOut if conn.buf.is_empty() => return Next::Close,
                Wait::TimedOut => return Next::Reject(ErrorKind::RequestTimeout),
            }
        }
    }
}

/// Run `handling` while watching a connection that is not lent to a body:
/// None when the client closes it first (hyper's servers did the same, and
/// the upstream request is cancelled with it). What a client pipelines
/// meanwhile is read ahead, up to `read_ahead` bytes.
async fn watch_client<IO, F, T>(handling: F, lent: &mut Lent<IO>, read_ahead: usize) -> Option<T>
where
    IO: AsyncRead + Unpin,
    F: Future<Output = T> + Unpin,
{
    let mut handling = handling;
    let Lent::Home(conn) = lent else {
        return Some(handling.await);
    };
    let mut watching = true;
    poll_fn(|cx| {
        if let Poll::Ready(response) = Pin::new(&mut handling).poll(cx) {
            return Poll::Ready(Some(response));
        }
        while watching && conn.buf.len() < read_ahead {
            match ready_read(&mut conn.io, &mut conn.buf, cx) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(None),
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => break,
            }
        }
        if conn.buf.len() >= read_ahead {
            watching = false;
        }
        Poll::Pending
    })
    .await
}

enum Wait {
    Read(io::Result<usize>),
    /// Strait stops or the connection reached its age.
    Done,
    TimedOut,
}

/// The header timeout on one timer per connection: each wait for a head
/// notes its deadline, and the timer, armed once, is moved on only when it
/// fires before the current wait's deadline. A deadline of a second or more
/// comes from the coarse clock (`deadline.rs`): never early, at most two
/// ticks late, and no precise clock read per request.
struct HeadClock {
    limit: Duration,
    deadline: Instant,
    timer: Option<Pin<Box<Sleep>>>,
}

impl HeadClock {
    fn new(limit: Duration) -> HeadClock {
        HeadClock {
            limit,
            deadline: crate::wire::deadline::deadline_after(limit),
            timer: None,
        }
    }

    fn start(&mut self) {
        self.deadline = crate::wire::deadline::deadline_after(self.limit);
    }

    fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = self.deadline;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline.into())));
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            if Instant::now() >= deadline {
                return true;
            }
            timer.as_mut().reset(deadline.into());
        }
    }
}

async fn close<IO: AsyncWrite + Unpin>(mut conn: Conn<IO>) {
    let _ = timeout(Duration::from_secs(1), conn.io.shutdown()).await;
}

/// The request a head parses into, as the HTTP/1.1 server reads it (the
/// fuzz target's entry): None while incomplete, else the request or the
/// error it is refused with.
pub fn parse_request_head(bytes: &[u8], limits: &ClientLimits) -> Result<Option<Request<()>>, ErrorKind> {
    let mut buf = BytesMut::from(bytes);
    parse_request(&mut buf, limits, &mut Vec::new()).map(|parsed| parsed.map(|parsed| (*parsed.request).map(|_| ())))
}

/// Parse a request head off the front of `buf`: None while incomplete, the
/// error to answer with when it is invalid.
fn parse_request(
    buf: &mut BytesMut,
    limits: &ClientLimits,
    spans: &mut Vec<Span>,
) -> Result<Option<Parsed>, ErrorKind> {
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_FIELDS];
    let mut heap = Vec::new();
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if limits.max_headers <= STACK_FIELDS {
        &mut stack[..limits.max_headers]
    } else {
        heap.resize_with(limits.max_headers, MaybeUninit::uninit);
        &mut heap
    };
    let mut parsed = httparse::Request::new(&mut []);
    let length = match parsed.parse_with_uninit_headers(buf, slots) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ErrorKind::HeadersTooLarge),
        Err(_) => return Err(ErrorKind::BadRequest),
    };
    if length > limits.max_header_bytes {
        return Err(ErrorKind::HeadersTooLarge);
    }
    let method_bytes = parsed.method.unwrap_or_default().as_bytes();
    strict::method(method_bytes)?;
    let method = Method::from_bytes(method_bytes).map_err(|_| ErrorKind::BadRequest)?;
    let version = if parsed.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    // Offsets into the head, so the target and the values can share its
    // bytes once it is split off.
    let base = buf.as_ptr() as usize;
    let target = parsed.path.unwrap_or_default();
    let target = (target.as_ptr() as usize - base, target.len());
    spans.clear();
    spans.extend(parsed.headers.iter().map(|field| {
        (
            field.name.as_ptr() as usize - base,
            field.name.len(),
            field.value.as_ptr() as usize - base,
            field.value.len(),
        )
    }));
    let head = buf.split_to(length).freeze();
    strict::line_lengths(&head, spans, limits.max_line_bytes)?;
    let uri = Uri::from_maybe_shared(head.slice(target.0..target.0 + target.1)).map_err(|_| ErrorKind::BadRequest)?;
    strict::target(&uri)?;
    // Made in its box: the fields are written where they stay.
    let mut request = Box::new(Request::new(crate::pipeline::body::empty()));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    // Room for the forwarding headers the proxy adds, so the map is not
    // grown (re-hashed) while they go in.
    let headers = request.headers_mut();
    *headers = crate::wire::h1_codec::header_map(spans.len() + ADDED_FIELDS);
    let mut seen = Seen::default();
    let mut fields = strict::Fields::default();
    for &(name, name_len, value, value_len) in spans.iter() {
        let span = (name, name_len, value, value_len);
        let name = crate::wire::h1_names::name_parsed_by_httparse(&head[name..name + name_len])
            .map_err(|_| ErrorKind::BadRequest)?;
        fields.field(&name, &head, span)?;
        let value =
            crate::wire::h1_codec::value_parsed_by_httparse(&head, value, value_len).ok_or(ErrorKind::BadRequest)?;
        seen.note(&name);
        headers.append(name, value);
    }
    let kind = match fields.end(version == Version::HTTP_11)? {
        strict::Framing::Chunked => BodyKind::Chunked,
        strict::Framing::Length(length) => BodyKind::Length(length),
        strict::Framing::None => BodyKind::Length(0),
    };
    let keep_alive = match (version == Version::HTTP_10, seen.connection) {
        (true, false) => false,
        (false, false) => true,
        (true, true) => lists_token(headers, &header::CONNECTION, "keep-alive"),
        (false, true) => !lists_token(headers, &header::CONNECTION, "close"),
    };
    let expect_continue = version == Version::HTTP_11
        && seen.expect
        && headers
            .get(header::EXPECT)
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let trailers = seen.te && lists_token(headers, &header::TE, "trailers");
    let upgrade = version == Version::HTTP_11 && seen.upgrade;
    Ok(Some(Parsed {
        request,
        kind,
        keep_alive,
        expect_continue,
        trailers,
        upgrade,
    }))
}

/// The connection during one exchange: here, or lent to the request body.
enum Lent<IO> {
    Home(Conn<IO>),
    Out(Arc<Mutex<Link<IO>>>),
    Gone,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Lent<IO> {
    /// The request body was read to its end (or there was none). A body
    /// nobody holds any more (a plugin answered without reading it) is
    /// read to its end here when the rest has already arrived, up to
    /// `DISCARD_LIMIT` bytes, so the connection can carry the next request
    /// (nginx's discarded request body); never while something still
    /// holds the body and may read it.
    fn body_read(&self) -> bool {
        let link = match self {
            Lent::Home(_) => return true,
            Lent::Out(link) => link,
            Lent::Gone => return false,
        };
        let unheld = Arc::strong_count(link) == 1;
        let mut guard = lock(link);
        let link = &mut *guard;
        if link.decoder.finished() || !unheld {
            return link.decoder.finished();
        }
        let Some(conn) = link.conn.as_mut() else {
            return false;
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut discarded = 0;
        while !link.decoder.finished() && discarded <= DISCARD_LIMIT {
            match link.decoder.poll_frame(&mut conn.io, &mut conn.buf, &mut cx) {
                Poll::Ready(Some(Ok(frame))) => discarded += frame.data_ref().map_or(0, Bytes::len),
                _ => break,
            }
        }
        link.decoder.finished()
    }

    fn sink(&mut self) -> Sink<'_, IO> {
        match self {
            Lent::Home(conn) => Sink::Own(&mut conn.io),
            Lent::Out(link) => {
                let mut guard = lock(link);
                if guard.send_continue && guard.continue_sent > 0 {
                    // Half a `100 Continue` is out: nothing can follow it.
                    return Sink::Gone;
                }
                // A response on its way: no `100 Continue` after it.
                guard.send_continue = false;
                drop(guard);
                Sink::Lent(link)
            }
            Lent::Gone => Sink::Gone,
        }
    }

    fn take_back(&mut self) -> Option<Conn<IO>> {
        match std::mem::replace(self, Lent::Gone) {
            Lent::Home(conn) => Some(conn),
            Lent::Out(link) => lock(&link).conn.take(),
            Lent::Gone => None,
        }
    }
}

fn lock<IO>(link: &Mutex<Link<IO>>) -> std::sync::MutexGuard<'_, Link<IO>> {
    link.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The connection lent to a request body.
struct Link<IO> {
    conn: Option<Conn<IO>>,
    decoder: Decoder,
    /// The client waits for `100 Continue` before it sends the body.
    send_continue: bool,
    continue_sent: usize,
}

/// A request body read straight from the client's connection.
struct RequestBody<IO> {
    link: Arc<Mutex<Link<IO>>>,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Body for RequestBody<IO> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut guard = lock(&self.link);
        let link = &mut *guard;
        if link.decoder.finished() {
            return Poll::Ready(None);
        }
        let Some(conn) = link.conn.as_mut() else {
            return Poll::Ready(Some(Err(
                "client request: the response was sent before the body's end".into()
            )));
        };
        if link.send_continue {
            while link.continue_sent < CONTINUE.len() {
                match ready!(Pin::new(&mut conn.io).poll_write(cx, &CONTINUE[link.continue_sent..])) {
                    Ok(0) => return Poll::Ready(Some(Err("client request: connection closed".into()))),
                    Ok(n) => link.continue_sent += n,
                    Err(error) => return Poll::Ready(Some(Err(Box::new(error)))),
                }
            }
            if let Err(error) = ready!(Pin::new(&mut conn.io).poll_flush(cx)) {
                return Poll::Ready(Some(Err(Box::new(error))));
            }
            link.send_continue = false;
        }
        link.decoder.poll_frame(&mut conn.io, &mut conn.buf, cx)
    }

    fn is_end_stream(&self) -> bool {
        lock(&self.link).decoder.finished()
    }

    fn size_hint(&self) -> SizeHint {
        lock(&self.link).decoder.size_hint()
    }
}

/// Where a response is written: the connection, or the connection lent to
/// the request body (locked for each write, so the body can read between).
enum Sink<'a, IO> {
    Own(&'a mut IO),
    Lent(&'a Mutex<Link<IO>>),
    Gone,
}

/// `bufs` on `io`: one slice as a plain write, which a socket takes with
/// `send(2)`, more with a vectored one (`writev(2)`, which goes through the
/// VFS layer and imports the iovec array first: about 0.1 µs more a call in
/// the profile pairs, docs/benchmarks.md).
fn poll_write_slices<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    match bufs {
        [one] => Pin::new(io).poll_write(cx, one),
        _ => Pin::new(io).poll_write_vectored(cx, bufs),
    }
}

impl<IO: AsyncWrite + Unpin> Sink<'_, IO> {
    fn poll_write(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        match self {
            Sink::Own(io) => poll_write_slices(&mut **io, cx, bufs),
            Sink::Lent(link) => match lock(link).conn.as_mut() {
                Some(conn) => poll_write_slices(&mut conn.io, cx, bufs),
                None => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            },
            Sink::Gone => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Sink::Own(io) => Pin::new(&mut **io).poll_flush(cx),
            Sink::Lent(link) => match lock(link).conn.as_mut() {
                Some(conn) => Pin::new(&mut conn.io).poll_flush(cx),
                None => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            },
            Sink::Gone => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    /// Write `out`, then `data`, all of both, and flush.
    async fn write_all(&mut self, out: &mut BytesMut, mut data: Option<Bytes>) -> io::Result<()> {
        poll_fn(|cx| {
            loop {
                let rest = data.as_ref().map_or(&[][..], |d| &d[..]);
                if out.is_empty() && rest.is_empty() {
                    break;
                }
                // One slice when the other is empty: an empty one still costs
                // the kernel an iovec to import and walk.
                let n = if out.is_empty() {
                    ready!(self.poll_write(cx, &[IoSlice::new(rest)]))?
                } else if rest.is_empty() {
                    ready!(self.poll_write(cx, &[IoSlice::new(out)]))?
                } else {
                    ready!(self.poll_write(cx, &[IoSlice::new(out), IoSlice::new(rest)]))?
                };
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                let from_out = n.min(out.len());
                out.advance(from_out);
                if let Some(data) = data.as_mut() {
                    data.advance(n - from_out);
                }
            }
            self.poll_flush(cx)
        })
        .await
    }
}

/// What the request decides about its response.
#[derive(Debug)]
struct Meta {
    version: Version,
    head: bool,
    trailers: bool,
}

/// How a response body goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (HEAD, 1xx, 204, 304).
    Empty,
    Length(u64),
    Chunked,
    /// Until the connection closes (HTTP/1.0 clients, unknown length).
    Close,
}

/// Write `response`: Ok(true) when it went out whole, so the connection may
/// carry another request (when `keep_alive` still says so).
async fn write_response<IO: AsyncWrite + Unpin>(
    sink: &mut Sink<'_, IO>,
    response: Response<ProxyBody>,
    fields: Option<&KongFields>,
    meta: &Meta,
    keep_alive: &mut bool,
    out: &mut BytesMut,
) -> io::Result<bool> {
    let (mut parts, body) = response.into_parts();
    let mut framing = encode_head(parts.status, &mut parts.headers, fields, &body, meta, keep_alive, out);
    crate::wire::h1_codec::recycle(std::mem::take(&mut parts.headers));
    let mut body = std::pin::pin!(body);
    let whole = loop {
        if framing == Framing::Empty || body.is_end_stream() {
            break finish(framing, out);
        }
        // The next frame, when it is ready now; else what is encoded goes
        // out while it comes.
        let polled = match poll_fn(|cx| Poll::Ready(body.as_mut().poll_frame(cx))).await {
            Poll::Ready(polled) => polled,
            Poll::Pending if out.is_empty() => poll_fn(|cx| body.as_mut().poll_frame(cx)).await,
            Poll::Pending => {
                sink.write_all(out, None).await?;
                continue;
            }
        };
        let data = match polled {
            None => break finish(framing, out),
            Some(Err(error)) => {
                tracing::debug!(%error, "response body failed; closing the client connection");
                break false;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(frame) => {
                    // Trailers end the body: written on a chunked response
                    // to a client that takes them, else dropped.
                    if framing == Framing::Chunked {
                        let trailers = frame.into_trailers().ok().filter(|_| meta.trailers);
                        put_last_chunk(trailers.as_ref(), out);
                        break true;
                    }
                    break finish(framing, out);
                }
            },
        };
        if data.is_empty() {
            continue;
        }
        match &mut framing {
            Framing::Length(left) if data.len() as u64 > *left => {
                tracing::debug!("response body longer than its content-length; cut there");
                out.put_slice(&data[..*left as usize]);
                break false;
            }
            Framing::Length(left) => {
                *left -= data.len() as u64;
                put_data(sink, data, out).await?;
            }
            Framing::Chunked if data.len() < COPY_LIMIT => put_chunk(&data, out),
            Framing::Chunked => {
                put_chunk_size(data.len(), out);
                sink.write_all(out, Some(data)).await?;
                out.put_slice(b"\r\n");
            }
            _ => put_data(sink, data, out).await?,
        }
        if out.len() >= WRITE_BATCH {
            sink.write_all(out, None).await?;
        }
    };
    sink.write_all(out, None).await?;
    Ok(whole)
}

/// The body ended: the last chunk, or whether a length was met.
fn finish(framing: Framing, out: &mut BytesMut) -> bool {
    match framing {
        Framing::Chunked => {
            put_last_chunk(None, out);
            true
        }
        Framing::Length(left) => left == 0,
        Framing::Empty | Framing::Close => true,
    }
}

/// Body bytes: copied after what is encoded when short, else written from
/// their own buffer.
async fn put_data<IO: AsyncWrite + Unpin>(sink: &mut Sink<'_, IO>, data: Bytes, out: &mut BytesMut) -> io::Result<()> {
    if data.len() < COPY_LIMIT {
        out.put_slice(&data);
        return Ok(());
    }
    sink.write_all(out, Some(data)).await
}

#[cfg(test)]
mod tests;
