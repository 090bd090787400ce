//! Upstream response heads passed on to an HTTP/1.1 client in the
//! upstream's own bytes, without a header map in between.
//!
//! Most proxied responses reach an HTTP/1.1 client through no plugin, and
//! for them the map an upstream head was parsed into was only walked again
//! to write it out: a name lookup, a shared value and a hashed insert per
//! field, a second pass for framing, then the drop. For such a head
//! (h1_client.rs asks for it only then) the lines to pass on are kept as up
//! to [`MAX_RUNS`] ranges of the head's bytes, and the encoder
//! (h1_server.rs) copies them, then writes Kong's fields after them.
//!
//! A head is relayed only when that gives the bytes the map would have
//! given, so anything unusual takes the map: a status of 1xx, 204 or 304, a
//! HEAD request, no single valid `Content-Length` or any
//! `Transfer-Encoding` (the body is framed anew), a `Connection` naming
//! other fields (they are removed), an `X-Kong-*` field (Strait's replace
//! it) or `X-Accel-Buffering` (read and removed), a value outside ASCII,
//! or a line not written `name: value` + CRLF. Hop-by-hop fields (handler.rs `HOP_BY_HOP`)
//! are left out as the map leaves them out; `close` and `keep-alive` in
//! `Connection` still decide whether the upstream connection is kept.
//! [`RelayedHead::fields`] gives the map the same head would have given
//! (what a consumer that needs one falls back to; the tests compare them).

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::wire::h1_codec::{list_tokens, LengthFields};

/// Ranges of kept lines a relayed head may have: a run ends at each line
/// left out, and a usual head leaves out one (`Connection`) or none.
pub(crate) const MAX_RUNS: usize = 4;

/// The header lines of an upstream response head to pass on as they are.
#[derive(Debug, Clone)]
pub(crate) struct RelayedHead {
    head: Bytes,
    /// Start and end (after its CRLF) of each run of kept lines in `head`.
    runs: [(u32, u32); MAX_RUNS],
    count: u8,
    /// The body's length (the head's one valid `Content-Length`).
    pub length: u64,
    /// The upstream sent `Server` (Kong's is added only without one).
    pub has_server: bool,
    /// The upstream sent `Date` (the encoder adds one without it).
    pub has_date: bool,
}

/// What framing and the upstream connection need of a relayed head.
#[derive(Debug)]
pub(crate) struct Relayed {
    pub head: RelayedHead,
    pub length: LengthFields,
    /// `Connection: close` from the upstream.
    pub close: bool,
    /// `Connection: keep-alive` from the upstream.
    pub keep_alive: bool,
}

/// What a header line is to the relay.
enum Line {
    Keep,
    Server,
    Date,
    Length,
    /// Hop-by-hop: left out.
    Drop,
    Connection,
    /// Only the map handles it.
    Refuse,
}

/// `name` (as httparse found it) classified without making a
/// `HeaderName` for it: a common name through h1_names.rs's table (a
/// standard name then compares as an integer), any other by its text.
fn classify(name: &[u8]) -> Line {
    if let Some(common) = crate::wire::h1_names::common_name(name) {
        return if common == header::CONTENT_LENGTH {
            Line::Length
        } else if common == header::DATE {
            Line::Date
        } else if common == header::SERVER {
            Line::Server
        } else if common == header::CONNECTION {
            Line::Connection
        } else if crate::pipeline::handler::is_hop_by_hop(common) {
            Line::Drop
        } else {
            Line::Keep
        };
    }
    let is = |text: &str| name.eq_ignore_ascii_case(text.as_bytes());
    match name.len() {
        // Hop-by-hop names the table may not hold.
        10 if is("keep-alive") => Line::Drop,
        16 if is("proxy-connection") => Line::Drop,
        17 if is("transfer-encoding") || is("x-accel-buffering") => Line::Refuse,
        len if len > 7 && name[..7].eq_ignore_ascii_case(b"x-kong-") => Line::Refuse,
        _ => Line::Keep,
    }
}

impl RelayedHead {
    /// The lines of `head` to relay, from httparse's spans (name start and
    /// length, value start and length); None when the head must take the
    /// map (see the module's list; the status and method are the caller's).
    pub(crate) fn scan(head: &Bytes, spans: &[(usize, usize, usize, usize)]) -> Option<Relayed> {
        if head.len() > u32::MAX as usize {
            return None;
        }
        let mut relayed = Relayed {
            head: RelayedHead {
                head: head.clone(),
                runs: [(0, 0); MAX_RUNS],
                count: 0,
                length: 0,
                has_server: false,
                has_date: false,
            },
            length: LengthFields::default(),
            close: false,
            keep_alive: false,
        };
        for &(name, name_len, value, value_len) in spans {
            let name_bytes = &head[name..name + name_len];
            let value_bytes = &head[value..value + value_len];
            let line_end = value + value_len + 2;
            // `name: value` + CRLF exactly, so the line's bytes are the
            // field's; the value ASCII, which with httparse's checks is
            // visible characters, spaces and tabs, as the map takes it
            // without a second check (h1_codec.rs `value_parsed_by_httparse`).
            // (Any name httparse accepts is one the map accepts.)
            let plain = head.get(name + name_len..value) == Some(&b": "[..])
                && head.get(value + value_len..line_end) == Some(&b"\r\n"[..])
                && value_bytes.is_ascii();
            if !plain {
                return None;
            }
            let kept = &mut relayed.head;
            match classify(name_bytes) {
                Line::Refuse => return None,
                Line::Drop => continue,
                Line::Connection => {
                    for token in list_tokens(value_bytes) {
                        if token.eq_ignore_ascii_case(b"close") {
                            relayed.close = true;
                        } else if token.eq_ignore_ascii_case(b"keep-alive") {
                            relayed.keep_alive = true;
                        } else if !token.is_empty() {
                            return None;
                        }
                    }
                    continue;
                }
                Line::Length => relayed.length.add(value_bytes),
                Line::Server => kept.has_server = true,
                Line::Date => kept.has_date = true,
                Line::Keep => {}
            }
            let (start, end) = (name as u32, line_end as u32);
            match kept.count {
                0 => {}
                n if kept.runs[n as usize - 1].1 == start => {
                    kept.runs[n as usize - 1].1 = end;
                    continue;
                }
                n if n as usize == MAX_RUNS => return None,
                _ => {}
            }
            kept.runs[kept.count as usize] = (start, end);
            kept.count += 1;
        }
        relayed.head.length = relayed.length.value()?;
        Some(relayed)
    }

    /// The kept lines, each with its CRLF.
    pub(crate) fn put_lines(&self, out: &mut BytesMut) {
        for &(start, end) in &self.runs[..self.count as usize] {
            out.put_slice(&self.head[start as usize..end as usize]);
        }
    }

    /// The kept fields as the map an upstream head is otherwise parsed
    /// into holds them (in order; values sharing the head's bytes).
    pub(crate) fn fields(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        for &(start, end) in &self.runs[..self.count as usize] {
            let mut at = start as usize;
            let end = end as usize;
            while at < end {
                let line = &self.head[at..end];
                let colon = line.iter().position(|b| *b == b':').unwrap_or(0);
                let eol = line.windows(2).position(|w| w == b"\r\n").unwrap_or(line.len());
                let name = HeaderName::from_bytes(&line[..colon]);
                let value = HeaderValue::from_maybe_shared(self.head.slice(at + colon + 2..at + eol));
                // Every line was checked as it was scanned: neither fails.
                if let (Ok(name), Ok(value)) = (name, value) {
                    map.append(name, value);
                }
                at += eol + 2;
            }
        }
        map
    }

    /// How many lines are passed on (the fields of [`RelayedHead::fields`]).
    pub(crate) fn line_count(&self) -> usize {
        self.runs[..self.count as usize]
            .iter()
            .map(|&(start, end)| {
                self.head[start as usize..end as usize]
                    .windows(2)
                    .filter(|w| w == b"\r\n")
                    .count()
            })
            .sum()
    }

    /// Make `headers` the map the head would have been parsed into, with
    /// what Strait added to it since (a balancer's `Set-Cookie`, say)
    /// after the upstream's fields, as it would have been appended there.
    pub(crate) fn unfold_into(&self, headers: &mut HeaderMap) {
        let mut map = self.fields();
        let mut name: Option<HeaderName> = None;
        for (next, value) in std::mem::take(headers) {
            // The map's iterator names a field's first value only.
            if next.is_some() {
                name = next;
            }
            if let Some(name) = &name {
                map.append(name.clone(), value);
            }
        }
        *headers = map;
    }
}

/// `head` parsed as h1_client.rs parses an upstream head, then scanned
/// (tests of the codecs that use a relayed head).
#[cfg(test)]
pub(crate) fn scan_head(head: &[u8]) -> Option<Relayed> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut fields);
    let Ok(httparse::Status::Complete(length)) = response.parse(head) else {
        return None;
    };
    let base = head.as_ptr() as usize;
    let spans: Vec<_> = response
        .headers
        .iter()
        .map(|h| {
            let name = h.name.as_ptr() as usize - base;
            (name, h.name.len(), h.value.as_ptr() as usize - base, h.value.len())
        })
        .collect();
    RelayedHead::scan(&Bytes::copy_from_slice(&head[..length]), &spans)
}

#[cfg(test)]
mod tests;
