//! A provider's event stream followed chunk by chunk: each response chunk
//! is split into events ([`EventReader`]), each event translated into
//! OpenAI's chunks (or, on a `preserve` route, only counted), and the
//! chunk replaced by what the events made. Nothing holds more than one
//! event and one chunk's output, reused chunk after chunk.

use bytes::Bytes;

use super::providers::StreamTranslator;
use super::sse::EventReader;
use super::Analytics;

/// Kong's last frame when a stream cannot be read.
pub const UNREADABLE: &[u8] =
    b"data: {\"error\": true, \"message\": \"empty or unsupported transformer response\"}\n\n";

/// The most of a stream's output kept for `log_payloads`.
pub const MAX_LOGGED: usize = 1 << 20;

/// How the provider frames its stream.
#[derive(Debug)]
enum Framing {
    Sse(EventReader),
    Aws(super::providers::bedrock::FrameReader),
    Lines(LineReader),
}

/// Newline-delimited JSON: each non-empty line an event.
#[derive(Debug, Default)]
struct LineReader {
    pending: Vec<u8>,
    /// How far `pending` was searched for a line's end.
    searched: usize,
}

impl LineReader {
    fn feed(&mut self, bytes: &[u8], mut each: impl FnMut(super::sse::Event)) -> Result<(), super::sse::EventTooLong> {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        let mut from = self.searched;
        while let Some(end) = self.pending[from..]
            .iter()
            .position(|b| *b == b'\n')
            .map(|at| from + at - start)
        {
            let line = &self.pending[start..start + end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !line.is_empty() {
                each(super::sse::Event {
                    name: String::new(),
                    data: String::from_utf8_lossy(line).into_owned(),
                });
            }
            start += end + 1;
            from = start;
        }
        self.pending.drain(..start);
        self.searched = self.pending.len();
        match self.pending.len() > super::sse::MAX_EVENT {
            true => Err(super::sse::EventTooLong),
            false => Ok(()),
        }
    }

    fn finish(&mut self, mut each: impl FnMut(super::sse::Event)) {
        let rest = std::mem::take(&mut self.pending);
        self.searched = 0;
        if !rest.trim_ascii().is_empty() {
            each(super::sse::Event {
                name: String::new(),
                data: String::from_utf8_lossy(&rest).into_owned(),
            });
        }
    }
}

impl Framing {
    fn feed(&mut self, bytes: &[u8], each: impl FnMut(super::sse::Event)) -> Result<(), super::sse::EventTooLong> {
        match self {
            Framing::Sse(reader) => reader.feed(bytes, each),
            Framing::Aws(reader) => reader.feed(bytes, each),
            Framing::Lines(reader) => reader.feed(bytes, each),
        }
    }

    fn finish(&mut self, each: impl FnMut(super::sse::Event)) {
        match self {
            Framing::Sse(reader) => reader.finish(each),
            Framing::Lines(reader) => reader.finish(each),
            Framing::Aws(_) => {}
        }
    }

    #[cfg(test)]
    fn pending(&self) -> usize {
        match self {
            Framing::Sse(reader) => reader.pending(),
            Framing::Aws(reader) => reader.pending(),
            Framing::Lines(reader) => reader.pending.len(),
        }
    }
}

#[derive(Debug)]
pub struct StreamState {
    reader: Framing,
    translator: StreamTranslator,
    /// The events are counted, the bytes passed on as they came.
    pass_through: bool,
    /// Set by the header filter: the provider answered 200 with a stream.
    pub active: bool,
    out: Vec<u8>,
    failed: bool,
}

impl StreamState {
    pub fn new(translator: StreamTranslator, pass_through: bool) -> StreamState {
        StreamState {
            reader: match (translator.aws_framing(), translator.line_framing()) {
                (true, _) => Framing::Aws(Default::default()),
                (_, true) => Framing::Lines(LineReader::default()),
                _ => Framing::Sse(EventReader::default()),
            },
            translator,
            pass_through,
            active: false,
            out: Vec::new(),
            failed: false,
        }
    }

    /// One response chunk: returns what goes to the client instead (`None`:
    /// the chunk as it is).
    pub fn chunk(&mut self, data: &[u8], end: bool, analytics: &mut Analytics) -> Option<Bytes> {
        if self.failed {
            return Some(Bytes::new());
        }
        self.out.clear();
        let (translator, out) = (&mut self.translator, &mut self.out);
        let fed = self.reader.feed(data, |event| translator.event(&event, out, analytics));
        if fed.is_err() {
            self.failed = true;
            analytics.finish();
            return Some(match self.pass_through {
                true => Bytes::copy_from_slice(data),
                false => Bytes::from_static(UNREADABLE),
            });
        }
        if end {
            self.reader.finish(|event| translator.event(&event, out, analytics));
            translator.end(out, analytics);
            analytics.finish();
        }
        if analytics.log_payloads {
            let logged = analytics.response_payload.get_or_insert_with(String::new);
            let shown: &[u8] = if self.pass_through { data } else { &self.out };
            if logged.len() + shown.len() <= MAX_LOGGED {
                logged.push_str(&String::from_utf8_lossy(shown));
            }
        }
        if self.pass_through {
            return None;
        }
        let capacity = self.out.capacity();
        Some(Bytes::from(std::mem::replace(
            &mut self.out,
            Vec::with_capacity(capacity),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ai::providers::openai;

    #[test]
    fn a_stream_of_ten_thousand_chunks_holds_flat_memory() {
        let mut state = StreamState::new(StreamTranslator::OpenAi(openai::Stream::default()), false);
        state.active = true;
        let mut analytics = Analytics::new("openai", "m".into());
        let piece = r#"data: {"choices":[{"index":0,"delta":{"content":"x"}}]}"#;
        let mut capacity = 0;
        for i in 0..10_000 {
            // Each event split across two chunks.
            let event = format!("{piece}\n\n");
            let (a, b) = event.as_bytes().split_at(17);
            let first = state.chunk(a, false, &mut analytics).unwrap();
            assert!(first.is_empty());
            let second = state.chunk(b, false, &mut analytics).unwrap();
            assert_eq!(second.as_ref(), event.as_bytes());
            if i == 10 {
                capacity = state.out.capacity() + state.reader.pending();
            }
        }
        assert_eq!(state.out.capacity() + state.reader.pending(), capacity);
        let last = state.chunk(b"data: [DONE]\n\n", true, &mut analytics).unwrap();
        assert_eq!(last.as_ref(), b"data: [DONE]\n\n");
        assert_eq!(analytics.completion(), 10_000);
        assert!(analytics.complete);
    }
}
