//! Server-sent events read as they arrive: the bytes of one response
//! chunk are fed in, whole events come out, and what is left of an event
//! cut by the chunk's end waits for the next one. The buffer holds one
//! event at most (bounded by [`MAX_EVENT`]) and is reused, so a stream of
//! any length holds flat memory.

use bytes::BytesMut;

/// The longest event held while its end has not arrived.
pub const MAX_EVENT: usize = 1 << 20;

/// One event: its `event:` name (empty when none) and its `data:` lines
/// joined with `\n`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Event {
    pub name: String,
    pub data: String,
}

/// An event longer than [`MAX_EVENT`] without its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTooLong;

/// Splits a byte stream into events (the WHATWG `text/event-stream`
/// rules: lines end with `\n`, `\r\n` or `\r`; a blank line ends an
/// event; `:` starts a comment; a field without `:` has an empty value;
/// one space after the colon is dropped).
#[derive(Debug, Default)]
pub struct EventReader {
    pending: BytesMut,
    /// How far `pending` was searched for an event's end.
    searched: usize,
}

impl EventReader {
    /// Adds `bytes` and calls `each` with every event they complete.
    pub fn feed(&mut self, bytes: &[u8], mut each: impl FnMut(Event)) -> Result<(), EventTooLong> {
        self.pending.extend_from_slice(bytes);
        loop {
            let Some((end, next)) = event_end(&self.pending, self.searched) else {
                self.searched = self.pending.len().saturating_sub(3);
                if self.pending.len() > MAX_EVENT {
                    return Err(EventTooLong);
                }
                return Ok(());
            };
            let block = self.pending.split_to(next);
            self.searched = 0;
            if let Some(event) = parse_event(&block[..end]) {
                each(event);
            }
        }
    }

    /// The end of the stream: an event the stream ended without its blank
    /// line is dispatched as browsers do not, but as most SDKs do (the
    /// last `data:` of a stream cut mid-way is still counted).
    pub fn finish(&mut self, mut each: impl FnMut(Event)) {
        let block = self.pending.split();
        self.searched = 0;
        if let Some(event) = parse_event(&block) {
            each(event);
        }
    }

    /// Bytes waiting for their event's end.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// The end of the first event in `buf` (searched from `from`): where its
/// last line ends and where the next event starts.
fn event_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while i < buf.len() {
        let (line_end, after) = match buf[i] {
            b'\n' => (i, i + 1),
            b'\r' if buf.get(i + 1) == Some(&b'\n') => (i, i + 2),
            // A lone `\r` at the buffer's end may be half of `\r\n`.
            b'\r' if i + 1 == buf.len() => return None,
            b'\r' => (i, i + 1),
            _ => {
                i += 1;
                continue;
            }
        };
        // A line break directly followed by another: the blank line.
        match buf.get(after) {
            Some(b'\n') => return Some((line_end, after + 1)),
            Some(b'\r') if buf.get(after + 1) == Some(&b'\n') => return Some((line_end, after + 2)),
            Some(b'\r') if after + 1 == buf.len() => return None,
            Some(b'\r') => return Some((line_end, after + 1)),
            // The event starts with its blank line (a stray one).
            _ if i == 0 => return Some((0, after)),
            _ => i = after,
        }
    }
    None
}

/// The event in one block of lines, `None` when it has no data (a
/// comment, or an empty block), as the specification dispatches none.
fn parse_event(block: &[u8]) -> Option<Event> {
    let mut event = Event::default();
    let mut has_data = false;
    for line in block.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || line[0] == b':' {
            continue;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"data" => {
                if has_data {
                    event.data.push('\n');
                }
                event.data.push_str(&value);
                has_data = true;
            }
            b"event" => event.name = value.into_owned(),
            _ => {}
        }
    }
    has_data.then_some(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<Event> {
        let mut reader = EventReader::default();
        let mut out = Vec::new();
        for chunk in chunks {
            reader.feed(chunk, |e| out.push(e)).unwrap();
        }
        reader.finish(|e| out.push(e));
        out
    }

    fn ev(name: &str, data: &str) -> Event {
        Event {
            name: name.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_split_anywhere_come_out_whole() {
        let stream = b"event: message_start\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: x\ndata: y\n\ndata: [DONE]\n\n";
        let whole = events(&[stream]);
        assert_eq!(
            whole,
            vec![ev("message_start", "{\"a\":1}"), ev("", "x\ny"), ev("", "[DONE]")]
        );
        for cut in 0..stream.len() {
            assert_eq!(events(&[&stream[..cut], &stream[cut..]]), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytes), whole);
    }

    #[test]
    fn every_line_ending_ends_lines_and_events() {
        let crlf = b"data: a\r\n\r\ndata: b\r\rdata: c\n\r\n";
        let expect = vec![ev("", "a"), ev("", "b"), ev("", "c")];
        assert_eq!(events(&[crlf]), expect);
        for cut in 0..crlf.len() {
            assert_eq!(events(&[&crlf[..cut], &crlf[cut..]]), expect, "cut at {cut}");
        }
    }

    #[test]
    fn a_stream_cut_mid_event_still_gives_its_data_at_the_end() {
        assert_eq!(events(&[b"data: one\n\ndata: tw"]), vec![ev("", "one"), ev("", "tw")]);
        assert_eq!(events(&[b"data:no-space\n\n"]), vec![ev("", "no-space")]);
        assert_eq!(events(&[b": only a comment\n\n"]), vec![]);
    }

    #[test]
    fn an_endless_event_is_refused_and_memory_stays_flat() {
        let mut reader = EventReader::default();
        let chunk = [b'a'; 4096];
        let mut refused = false;
        for _ in 0..(MAX_EVENT / chunk.len() + 2) {
            if reader.feed(&chunk, |_| {}).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused);
        let mut reader = EventReader::default();
        for i in 0..10_000 {
            let mut n = 0;
            reader.feed(format!("data: {i}\n\n").as_bytes(), |_| n += 1).unwrap();
            assert_eq!(n, 1);
            assert_eq!(reader.pending(), 0);
        }
    }
}
