//! HTTP/1.1 framing shared by Strait's two HTTP/1.1 codecs: the upstream
//! client (h1_client.rs) and the client-facing server (h1_server.rs).
//!
//! Both read bodies the same way (RFC 9112 §6, §7): a known length, chunked
//! coding with trailers, or until the peer closes, straight off the bytes a
//! connection has buffered and then off its socket, and both write header
//! fields and chunks the same way.

use std::fmt::Write as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http_body::{Frame, SizeHint};
use tokio::io::AsyncRead;

use crate::pipeline::body::BoxError;

/// Bytes read from a socket at a time.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// Longest chunk-size line (size, extensions) accepted.
const MAX_CHUNK_LINE: usize = 4096;
/// Largest trailer section accepted.
const MAX_TRAILERS: usize = 64 * 1024;
/// Most trailer fields accepted.
const MAX_TRAILER_FIELDS: usize = 128;

/// How a body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyKind {
    Length(u64),
    Chunked,
    /// Chunked while a `Content-Length` was also given: read as chunked,
    /// and the connection is not used again.
    ChunkedOverLength,
    /// Until the peer closes.
    Close,
}

#[derive(Debug, Clone, Copy)]
enum ChunkState {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk: this many data bytes left.
    Data(u64),
    /// After a chunk's data: expecting CRLF.
    DataEnd,
    /// After the last chunk: trailer fields until an empty line.
    Trailers,
}

/// Reads one body off a connection's buffer and socket.
#[derive(Debug)]
pub(crate) struct Decoder {
    kind: BodyKind,
    chunk: ChunkState,
    done: bool,
    /// Whose body this is, for error messages: "upstream response",
    /// "client request".
    what: &'static str,
}

impl Decoder {
    pub(crate) fn new(kind: BodyKind, what: &'static str) -> Decoder {
        Decoder {
            kind,
            chunk: ChunkState::Size,
            done: kind == BodyKind::Length(0),
            what,
        }
    }

    /// The whole body was read.
    pub(crate) fn finished(&self) -> bool {
        self.done
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        match self.kind {
            BodyKind::Length(left) => SizeHint::with_exact(left),
            _ => SizeHint::default(),
        }
    }

    fn fail(&self, problem: &str) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(Some(Err(format!("{}: {problem}", self.what).into())))
    }

    /// The body's next frame: data (what is buffered, up to the body's
    /// end), trailers, or its end.
    pub(crate) fn poll_frame<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        buf: &mut BytesMut,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        loop {
            match self.kind {
                BodyKind::Length(left) => {
                    if !buf.is_empty() {
                        let take = (buf.len() as u64).min(left) as usize;
                        let data = buf.split_to(take).freeze();
                        let left = left - take as u64;
                        self.kind = BodyKind::Length(left);
                        self.done = left == 0;
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                BodyKind::Close => {
                    if !buf.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(buf.split().freeze()))));
                    }
                }
                BodyKind::Chunked | BodyKind::ChunkedOverLength => match self.chunk {
                    ChunkState::Size => {
                        if let Some(end) = find_crlf(buf) {
                            let Some(size) = parse_chunk_size(&buf[..end]) else {
                                return self.fail("invalid chunk size");
                            };
                            buf.advance(end + 2);
                            self.chunk = if size == 0 {
                                ChunkState::Trailers
                            } else {
                                ChunkState::Data(size)
                            };
                            continue;
                        }
                        if buf.len() > MAX_CHUNK_LINE {
                            return self.fail("chunk size line too long");
                        }
                    }
                    ChunkState::Data(left) => {
                        if !buf.is_empty() {
                            let take = (buf.len() as u64).min(left) as usize;
                            let data = buf.split_to(take).freeze();
                            let left = left - take as u64;
                            self.chunk = if left == 0 {
                                ChunkState::DataEnd
                            } else {
                                ChunkState::Data(left)
                            };
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                    }
                    ChunkState::DataEnd => {
                        if buf.len() >= 2 {
                            if &buf[..2] != b"\r\n" {
                                return self.fail("chunk not ended by CRLF");
                            }
                            buf.advance(2);
                            self.chunk = ChunkState::Size;
                            continue;
                        }
                    }
                    ChunkState::Trailers => {
                        if buf.starts_with(b"\r\n") {
                            buf.advance(2);
                            self.done = true;
                            return Poll::Ready(None);
                        }
                        if let Some(end) = find_double_crlf(buf) {
                            let trailers = parse_trailers(&buf[..end + 4]);
                            buf.advance(end + 4);
                            self.done = true;
                            return match trailers {
                                Some(trailers) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
                                None => self.fail("invalid trailers"),
                            };
                        }
                        if buf.len() > MAX_TRAILERS {
                            return self.fail("trailers too large");
                        }
                    }
                },
            }
            match ready_read(io, buf, cx) {
                Poll::Ready(Ok(0)) => {
                    if self.kind == BodyKind::Close {
                        self.done = true;
                        return Poll::Ready(None);
                    }
                    return self.fail("connection closed before the body's end");
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(error)) => return Poll::Ready(Some(Err(Box::new(error)))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Empty `buf` and move it back to the front of its allocation when nothing
/// else holds bytes of it (the last head or body chunk split off it was
/// dropped; written bytes were advanced over). A kept connection then reads
/// and encodes every message in the same few cache lines instead of sliding
/// through the whole allocation, a cold line every 64 bytes.
pub(crate) fn rewind(buf: &mut BytesMut) {
    buf.clear();
    // More than the spare capacity can only be had by moving back to the
    // front; false (nothing done, nothing allocated) while a split-off part
    // is still alive, or when it is at the front already.
    let _ = buf.try_reclaim(buf.capacity() + 1);
}

/// Read what the socket has into `buf`, at its front when it is empty
/// ([`rewind`]).
pub(crate) fn ready_read<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if buf.is_empty() {
        rewind(buf);
    }
    if buf.capacity() - buf.len() < READ_CHUNK / 4 {
        buf.reserve(READ_CHUNK);
    }
    tokio_util::io::poll_read_buf(Pin::new(io), cx, buf)
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

pub(crate) fn find_double_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// A chunk-size line: hex digits, then optional `;extensions`.
fn parse_chunk_size(line: &[u8]) -> Option<u64> {
    // No control byte anywhere on the line (a bare LF or CR in an extension
    // would end the line for another parser).
    if line.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return None;
    }
    let digits = line.split(|&b| b == b';').next()?;
    let digits = digits.strip_suffix(b" ").unwrap_or(digits);
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

fn parse_trailers(block: &[u8]) -> Option<HeaderMap> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_TRAILER_FIELDS];
    match httparse::parse_headers(block, &mut fields) {
        Ok(httparse::Status::Complete((_, fields))) => {
            let mut trailers = HeaderMap::with_capacity(fields.len());
            for field in fields {
                let name = HeaderName::from_bytes(field.name.as_bytes()).ok()?;
                let value = HeaderValue::from_bytes(field.value).ok()?;
                trailers.append(name, value);
            }
            Some(trailers)
        }
        _ => None,
    }
}

/// The single `Content-Length` value (equal repeats allowed, also within
/// one comma-separated field), if every value is plain digits.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    let mut length = LengthFields::default();
    for value in headers.get_all(header::CONTENT_LENGTH) {
        length.add(value.as_bytes());
    }
    length.value()
}

/// The comma-separated items of a list field (`Connection`, `TE`,
/// `Content-Length`), trimmed; empty items included.
pub(crate) fn list_tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|b| *b == b',').map(<[u8]>::trim_ascii)
}

/// [`content_length`] taken one field at a time, as a head is parsed (no
/// lookup in the map afterwards).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LengthFields {
    found: Option<u64>,
    invalid: bool,
    present: bool,
}

impl LengthFields {
    pub(crate) fn add(&mut self, value: &[u8]) {
        self.present = true;
        for part in list_tokens(value) {
            let number = (!part.is_empty())
                .then(|| {
                    part.iter().try_fold(0u64, |n, d| {
                        let digit = d.checked_sub(b'0').filter(|d| *d < 10)?;
                        n.checked_mul(10)?.checked_add(u64::from(digit))
                    })
                })
                .flatten();
            match number {
                Some(n) if self.found.is_none_or(|f| f == n) => self.found = Some(n),
                _ => {
                    self.invalid = true;
                    return;
                }
            }
        }
    }

    /// Whether any `Content-Length` field was added.
    pub(crate) fn present(&self) -> bool {
        self.present
    }

    /// The length, None when there was none or the fields were invalid.
    pub(crate) fn value(&self) -> Option<u64> {
        if self.invalid {
            return None;
        }
        self.found
    }
}

/// The value of a field httparse read in `head` at `at..at + len`,
/// sharing the head's bytes.
///
/// httparse admits in a value exactly the bytes a `HeaderValue` may hold
/// (tab, 0x20–0x7e and 0x80–0xff), and `HeaderValue::from_maybe_shared`
/// would check each byte again: about 1.3% of a proxied request's
/// instructions. An all-ASCII value skips that check; any other is checked
/// as before. Only for spans httparse validated.
#[allow(unsafe_code)]
pub(crate) fn value_parsed_by_httparse(head: &Bytes, at: usize, len: usize) -> Option<HeaderValue> {
    let bytes = head.slice(at..at + len);
    if bytes.is_ascii() {
        // SAFETY: the contract is that `bytes` is valid UTF-8, which ASCII
        // is. (And httparse let through no ASCII control byte but tab, so
        // the value is one `from_maybe_shared` would have accepted.)
        return Some(unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) });
    }
    HeaderValue::from_maybe_shared(bytes).ok()
}

/// Maps a worker keeps for the next heads it parses.
const KEPT_MAPS: usize = 64;
/// Slots of a kept map: requests and responses of up to this many fields
/// never grow one. Larger maps are not kept.
const MAP_SLOTS: usize = 24;

thread_local! {
    static MAPS: std::cell::RefCell<Vec<HeaderMap>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An empty header map for a head of `fields` fields: one this worker
/// parsed an earlier head into when there is one, so the two allocations a
/// new map costs are paid once per worker, not once per request and
/// response.
pub(crate) fn header_map(fields: usize) -> HeaderMap {
    if fields <= MAP_SLOTS {
        if let Some(map) = MAPS.with(|maps| maps.borrow_mut().pop()) {
            return map;
        }
        return HeaderMap::with_capacity(MAP_SLOTS);
    }
    HeaderMap::with_capacity(fields)
}

/// Give back a map whose head was written ([`header_map`]).
pub(crate) fn recycle(mut map: HeaderMap) {
    // A map grown for a large head (or holding many repeated fields) is
    // dropped rather than kept at that size.
    if map.capacity() < MAP_SLOTS || map.capacity() > 2 * MAP_SLOTS || map.len() > 2 * MAP_SLOTS {
        return;
    }
    map.clear();
    MAPS.with(|maps| {
        let mut maps = maps.borrow_mut();
        if maps.len() < KEPT_MAPS {
            maps.push(map);
        }
    });
}

/// Header (or trailer) fields, then the empty line that ends them.
pub(crate) fn put_fields(fields: &HeaderMap, out: &mut BytesMut) {
    put_fields_except(fields, |_| false, out);
    out.extend_from_slice(b"\r\n");
}

/// Header fields without the empty line, leaving out those `replaced`
/// names (Strait writes its own after them: forwarding.rs,
/// `kong_headers::KongFields`). The predicate gets the name as text, which
/// the line needs anyway (a standard name's text is a table lookup).
pub(crate) fn put_fields_except(fields: &HeaderMap, replaced: impl Fn(&str) -> bool, out: &mut BytesMut) {
    for (name, value) in fields {
        let name = name.as_str();
        if !replaced(name) {
            put_field(name.as_bytes(), value.as_bytes(), out);
        }
    }
}

/// Which of the fields framing and the connection depend on a head
/// carries, noted while it is parsed: most heads carry few of them, and
/// then none is looked up afterwards.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Seen {
    pub length: bool,
    pub coding: bool,
    pub connection: bool,
    pub expect: bool,
    pub te: bool,
    pub upgrade: bool,
}

impl Seen {
    pub(crate) fn note(&mut self, name: &HeaderName) {
        // Standard names compare as their enum: one integer comparison each.
        self.length |= name == header::CONTENT_LENGTH;
        self.coding |= name == header::TRANSFER_ENCODING;
        self.connection |= name == header::CONNECTION;
        self.expect |= name == header::EXPECT;
        self.te |= name == header::TE;
        self.upgrade |= name == header::UPGRADE;
    }
}

/// One `name: value` line, with one capacity check and two copies of the
/// name's and the value's length ([`copy_short`]; the separators are
/// stores of known size). A head's
/// fields are a good part of the instructions a proxied request takes:
/// `extend_from_slice` four times cost a capacity check, a length update
/// and a `memcpy` call each, about 60 instructions a field beyond the
/// copying (counted: docs/benchmarks.md#counted-instructions-2026-11-24).
#[inline]
#[allow(unsafe_code)]
pub(crate) fn put_field(name: &[u8], value: &[u8], out: &mut BytesMut) {
    let len = name.len() + value.len() + 4;
    out.reserve(len);
    let spare = &mut out.spare_capacity_mut()[..len];
    let (name_part, rest) = spare.split_at_mut(name.len());
    copy_short(name_part, name);
    let (separator, rest) = rest.split_at_mut(2);
    separator.write_copy_of_slice(b": ");
    let (value_part, end) = rest.split_at_mut(value.len());
    copy_short(value_part, value);
    end.write_copy_of_slice(b"\r\n");
    // SAFETY: the `len` bytes after the current length are within the
    // capacity just reserved, and every one of them was written above
    // (the four parts split `spare`, which is exactly `len` long).
    unsafe { out.set_len(out.len() + len) };
}

/// `src` into `dst`, which is as long. Most field names and values are 32
/// bytes or shorter: those are copied as two overlapping copies of a fixed
/// size, a few moves, not a call to `memcpy` (about 13 instructions, and
/// the two heads of a proxied request with a handful of fields make 34).
#[inline(always)]
fn copy_short(dst: &mut [std::mem::MaybeUninit<u8>], src: &[u8]) {
    let n = src.len();
    let dst = &mut dst[..n];
    if n > 32 {
        dst.write_copy_of_slice(src);
    } else if n >= 16 {
        dst[..16].write_copy_of_slice(&src[..16]);
        dst[n - 16..].write_copy_of_slice(&src[n - 16..]);
    } else if n >= 8 {
        dst[..8].write_copy_of_slice(&src[..8]);
        dst[n - 8..].write_copy_of_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].write_copy_of_slice(&src[..4]);
        dst[n - 4..].write_copy_of_slice(&src[n - 4..]);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            d.write(*s);
        }
    }
}

/// One chunk of a chunked body (`data` must not be empty: an empty chunk
/// is the body's end).
pub(crate) fn put_chunk(data: &[u8], out: &mut BytesMut) {
    put_chunk_size(data.len(), out);
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// A chunk's size line; its data and CRLF follow.
pub(crate) fn put_chunk_size(len: usize, out: &mut BytesMut) {
    // Writing into a BytesMut cannot fail.
    let _ = write!(out, "{len:x}\r\n");
}

/// The last chunk, with trailers when there are any.
pub(crate) fn put_last_chunk(trailers: Option<&HeaderMap>, out: &mut BytesMut) {
    out.put_slice(b"0\r\n");
    match trailers {
        Some(trailers) => put_fields(trailers, out),
        None => out.put_slice(b"\r\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_buffer_is_encoded_into_again_from_its_front() {
        let mut out = BytesMut::with_capacity(4096);
        let front = out.as_ptr();
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
        out.advance(10);
        out.advance(out.len());
        rewind(&mut out);
        assert_eq!(out.as_ptr(), front);
        assert_eq!(out.capacity(), 4096);
        out.extend_from_slice(b"next");
        assert_eq!(&out[..], b"next");
    }

    #[tokio::test]
    async fn an_emptied_read_buffer_starts_again_at_its_front_once_its_parts_are_dropped() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let mut buf = BytesMut::new();
        async fn fill(server: &mut tokio::net::TcpStream, buf: &mut BytesMut, want: usize) {
            while buf.len() < want {
                std::future::poll_fn(|cx| ready_read(server, buf, cx)).await.unwrap();
            }
        }
        client.write_all(b"first message").await.unwrap();
        fill(&mut server, &mut buf, 13).await;
        let front = buf.as_ptr();
        let first = buf.split_to(13).freeze();
        // A part still held: the buffer goes on after it, the part intact.
        client.write_all(b"second").await.unwrap();
        fill(&mut server, &mut buf, 6).await;
        assert_eq!(buf.as_ptr(), front.wrapping_add(13));
        assert_eq!(&first[..], b"first message");
        let second = buf.split_to(6).freeze();
        drop((first, second));
        // Nothing held: the next read lands at the front again.
        client.write_all(b"third").await.unwrap();
        fill(&mut server, &mut buf, 5).await;
        assert_eq!(buf.as_ptr(), front);
        assert_eq!(&buf[..], b"third");
    }

    #[test]
    fn a_field_line_holds_its_name_and_value_at_every_length() {
        // copy_short takes a different path below 4, 8, 16 and above 32 bytes.
        let text: Vec<u8> = (0..70u8).map(|i| b'a' + i % 26).collect();
        for n in 0..text.len() {
            let (name, value) = (&text[..n], &text[text.len() - n..]);
            let mut out = BytesMut::from(&b"HTTP/1.1 200 OK\r\n"[..]);
            put_field(name, value, &mut out);
            let mut expect = b"HTTP/1.1 200 OK\r\n".to_vec();
            expect.extend_from_slice(name);
            expect.extend_from_slice(b": ");
            expect.extend_from_slice(value);
            expect.extend_from_slice(b"\r\n");
            assert_eq!(&out[..], &expect[..], "length {n}");
        }
    }

    #[test]
    fn parsed_values_share_the_head_and_keep_their_bytes() {
        let head = Bytes::from_static(b"x: plain\tvalue\r\ny: caf\xc3\xa9\r\nz: \xff\r\n");
        let plain = value_parsed_by_httparse(&head, 3, 11).unwrap();
        assert_eq!(plain.as_bytes(), b"plain\tvalue");
        assert_eq!(plain.to_str().unwrap(), "plain\tvalue");
        let utf8 = value_parsed_by_httparse(&head, 19, 5).unwrap();
        assert_eq!(utf8.as_bytes(), "café".as_bytes());
        assert!(utf8.to_str().is_err());
        let obs = value_parsed_by_httparse(&head, 29, 1).unwrap();
        assert_eq!(obs.as_bytes(), b"\xff");
    }

    #[test]
    fn a_field_line_is_name_separator_value_crlf_whatever_the_room_left() {
        let mut out = BytesMut::new();
        put_field(b"x-a", b"1", &mut out);
        put_field(b"", b"", &mut out);
        assert_eq!(&out[..], b"x-a: 1\r\n: \r\n");
        // A buffer with some room but not enough: it grows, and what was
        // there stays.
        let mut out = BytesMut::with_capacity(8);
        out.extend_from_slice(b"HTTP/1.1");
        let value = vec![b'v'; 300];
        put_field(b"long", &value, &mut out);
        assert_eq!(out.len(), 8 + 4 + 2 + 300 + 2);
        assert!(out.starts_with(b"HTTP/1.1long: vvv"));
        assert!(out.ends_with(b"vvv\r\n"));
    }

    #[test]
    fn a_recycled_map_comes_back_empty_and_a_grown_one_is_not_kept() {
        std::thread::spawn(|| {
            let mut map = header_map(3);
            map.append("x-a", HeaderValue::from_static("1"));
            map.append("x-a", HeaderValue::from_static("2"));
            let kept = map.capacity();
            recycle(map);
            let again = header_map(5);
            assert!(again.is_empty() && again.capacity() == kept);
            assert_eq!(MAPS.with(|maps| maps.borrow().len()), 0);
            // Grown past twice the slots (a head of 100 fields): dropped.
            let mut big = header_map(100);
            for n in 0..100 {
                big.append(
                    HeaderName::from_bytes(format!("x-{n}").as_bytes()).unwrap(),
                    HeaderValue::from_static("v"),
                );
            }
            recycle(big);
            assert_eq!(MAPS.with(|maps| maps.borrow().len()), 0);
            recycle(again);
            assert_eq!(MAPS.with(|maps| maps.borrow().len()), 1);
        })
        .join()
        .unwrap();
    }

    fn decode_all(kind: BodyKind, input: &[u8]) -> Result<(Vec<u8>, Option<HeaderMap>), String> {
        let mut io: &[u8] = &[];
        let mut buf = BytesMut::from(input);
        let mut decoder = Decoder::new(kind, "test body");
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut data = Vec::new();
        let mut trailers = None;
        loop {
            match decoder.poll_frame(&mut io, &mut buf, &mut cx) {
                Poll::Ready(None) => return Ok((data, trailers)),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(bytes) => data.extend_from_slice(&bytes),
                    Err(frame) => trailers = frame.into_trailers().ok(),
                },
                Poll::Ready(Some(Err(error))) => return Err(error.to_string()),
                Poll::Pending => return Err("pending".into()),
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_with_extensions_and_trailers() {
        let (data, trailers) =
            decode_all(BodyKind::Chunked, b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nx-sum: 9\r\n\r\n").expect("decodes");
        assert_eq!(data, b"abcde");
        assert_eq!(trailers.expect("trailers")["x-sum"], "9");
        let (data, trailers) = decode_all(BodyKind::Chunked, b"1\r\nz\r\n0\r\n\r\nnext").expect("decodes");
        assert_eq!((data.as_slice(), trailers.is_none()), (&b"z"[..], true));
    }

    #[test]
    fn broken_chunked_bodies_and_short_lengths_are_errors() {
        let error = decode_all(BodyKind::Chunked, b"3x\r\nabc\r\n0\r\n\r\n").unwrap_err();
        assert_eq!(error, "test body: invalid chunk size");
        let error = decode_all(BodyKind::Chunked, b"3\r\nabcd\r\n0\r\n\r\n").unwrap_err();
        assert_eq!(error, "test body: chunk not ended by CRLF");
        let error = decode_all(BodyKind::Chunked, b"ffffffffffffffffffff\r\n").unwrap_err();
        assert_eq!(error, "test body: invalid chunk size");
        let error = decode_all(BodyKind::Length(5), b"abc").unwrap_err();
        assert_eq!(error, "test body: connection closed before the body's end");
        let (data, _) = decode_all(BodyKind::Length(2), b"abc").expect("decodes");
        assert_eq!(data, b"ab", "a length body stops at its length");
        let (data, _) = decode_all(BodyKind::Close, b"until close").expect("decodes");
        assert_eq!(data, b"until close");
    }

    #[test]
    fn chunk_sizes() {
        assert_eq!(parse_chunk_size(b"1a"), Some(26));
        assert_eq!(parse_chunk_size(b"0"), Some(0));
        assert_eq!(parse_chunk_size(b"A;name=value"), Some(10));
        assert_eq!(parse_chunk_size(b""), None);
        assert_eq!(parse_chunk_size(b"-1"), None);
        assert_eq!(parse_chunk_size(b"+1"), None);
        assert_eq!(parse_chunk_size(b"fffffffffffffffff"), None);
    }

    #[test]
    fn content_lengths_must_be_digits_and_agree() {
        let lengths = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(header::CONTENT_LENGTH, HeaderValue::from_str(value).expect("value"));
            }
            content_length(&headers)
        };
        assert_eq!(lengths(&["3"]), Some(3));
        assert_eq!(lengths(&["3", "3"]), Some(3));
        assert_eq!(lengths(&["3, 3"]), Some(3));
        assert_eq!(lengths(&["3", "40"]), None);
        assert_eq!(lengths(&["+3"]), None);
        assert_eq!(lengths(&["-1"]), None);
        assert_eq!(lengths(&["1 0"]), None);
        assert_eq!(lengths(&["3,"]), None);
        assert_eq!(lengths(&["18446744073709551615"]), Some(u64::MAX));
        assert_eq!(lengths(&["18446744073709551616"]), None);
        assert_eq!(lengths(&[]), None);
    }
}
