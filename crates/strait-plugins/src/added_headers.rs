//! [`AddedHeaders`]: the response header fields a plugin's `access` phase
//! asks for, kept as HTTP/1.1 lines (`name: value` + CRLF).
//!
//! Most requests through plugins get these fields on a response no plugin
//! filters: the proxy then writes the lines after the upstream's head as
//! they are (one copy), where a header map would have hashed each name in,
//! allocated each value and walked the map again to write it. When a header
//! filter does run, the lines are put into the response's map first
//! ([`AddedHeaders::append_to`]), so the filter sees them as before.

use bytes::{BufMut, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// One field as its finished line, made once (when a plugin is built) for
/// a value that does not change between requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLine(Box<[u8]>);

impl FieldLine {
    pub fn new(name: &HeaderName, value: &HeaderValue) -> FieldLine {
        let mut line = AddedHeaders::default();
        line.push(name, value);
        FieldLine(line.lines.to_vec().into_boxed_slice())
    }
}

/// Finished lines and the start of one more field (`name: `), made once
/// when a plugin is built: a value pushed after it
/// ([`AddedHeaders::push_int_after`]) completes the last field, so a line
/// whose value changes per request costs one copy of what does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldStart(Box<[u8]>);

impl FieldStart {
    pub fn new<'a>(lines: impl IntoIterator<Item = &'a FieldLine>, name: &HeaderName) -> FieldStart {
        let mut start = Vec::new();
        for line in lines {
            start.extend_from_slice(&line.0);
        }
        start.extend_from_slice(name.as_str().as_bytes());
        start.extend_from_slice(b": ");
        FieldStart(start.into_boxed_slice())
    }
}

/// Response header fields to add, in the order they were pushed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddedHeaders {
    lines: BytesMut,
}

impl AddedHeaders {
    pub fn push(&mut self, name: &HeaderName, value: &HeaderValue) {
        self.push_bytes(name, value.as_bytes());
    }

    /// A value as bytes: a valid header value's (no CR, LF or other
    /// control byte but tab), which a [`HeaderValue`] or a number is.
    fn push_bytes(&mut self, name: &HeaderName, value: &[u8]) {
        debug_assert!(HeaderValue::from_bytes(value).is_ok(), "{value:?}");
        self.lines.reserve(name.as_str().len() + value.len() + 4);
        self.lines.put_slice(name.as_str().as_bytes());
        self.lines.put_slice(b": ");
        self.lines.put_slice(value);
        self.lines.put_slice(b"\r\n");
    }

    /// Finished lines the caller made: each `name: value` and CRLF, the
    /// name a lower-case header name, the value a valid header value.
    pub fn push_lines(&mut self, lines: &[u8]) {
        debug_assert!(lines.is_empty() || lines.ends_with(b"\r\n"), "{lines:?}");
        self.lines.extend_from_slice(lines);
    }

    pub fn push_line(&mut self, line: &FieldLine) {
        self.lines.extend_from_slice(&line.0);
    }

    /// An integer, written without an allocation.
    pub fn push_int(&mut self, name: &HeaderName, value: i64) {
        self.push_bytes(name, itoa::Buffer::new().format(value).as_bytes());
    }

    /// `start`, then `value` ending its last field.
    pub fn push_int_after(&mut self, start: &FieldStart, value: i64) {
        let mut digits = itoa::Buffer::new();
        self.push_after_bytes(start, digits.format(value).as_bytes());
    }

    /// `start`, then `value` ending its last field.
    pub fn push_after(&mut self, start: &FieldStart, value: &HeaderValue) {
        self.push_after_bytes(start, value.as_bytes());
    }

    fn push_after_bytes(&mut self, start: &FieldStart, value: &[u8]) {
        debug_assert!(HeaderValue::from_bytes(value).is_ok(), "{value:?}");
        self.lines.reserve(start.0.len() + value.len() + 2);
        self.lines.extend_from_slice(&start.0);
        self.lines.extend_from_slice(value);
        self.lines.extend_from_slice(b"\r\n");
    }

    /// Room for about `fields` more fields, so pushing them does not grow
    /// the buffer one by one.
    pub fn reserve(&mut self, fields: usize) {
        self.lines.reserve(fields * 40);
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The fields as HTTP/1.1 header lines, each ending in CRLF.
    pub fn as_lines(&self) -> &[u8] {
        &self.lines
    }

    /// Each field: its name (lower case, as [`HeaderName`]s are) and value.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        let mut rest: &[u8] = &self.lines;
        std::iter::from_fn(move || {
            let end = rest.windows(2).position(|pair| pair == b"\r\n")?;
            let line = &rest[..end];
            rest = &rest[end + 2..];
            let colon = line.iter().position(|&b| b == b':')?;
            // Pushed from a `HeaderName`: ASCII, so valid UTF-8.
            let name = std::str::from_utf8(&line[..colon]).ok()?;
            Some((name, &line[colon + 2..]))
        })
    }

    /// Keeps the fields `keep` says yes to (by name).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let mut kept = AddedHeaders::default();
        for (name, value) in self.iter() {
            if keep(name) {
                kept.lines.put_slice(name.as_bytes());
                kept.lines.put_slice(b": ");
                kept.lines.put_slice(value);
                kept.lines.put_slice(b"\r\n");
            }
        }
        *self = kept;
    }

    /// Appends the fields to `headers` (a response a header filter will see).
    pub fn append_to(&self, headers: &mut HeaderMap) {
        for (name, value) in self.iter() {
            if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value)) {
                headers.append(name, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_back_as_they_were_pushed_as_lines_and_into_a_map() {
        let mut added = AddedHeaders::default();
        assert!(added.is_empty());
        added.push(
            &HeaderName::from_static("x-ratelimit-limit-second"),
            &HeaderValue::from_static("5"),
        );
        added.push_int(&HeaderName::from_static("ratelimit-reset"), -12);
        for n in [
            0,
            7,
            10,
            99,
            100,
            101,
            5309,
            999_999_999_999,
            1_000_000_000_000,
            i64::MAX,
            i64::MIN,
            -1,
            -10,
        ] {
            let mut one = AddedHeaders::default();
            one.push_int(&HeaderName::from_static("n"), n);
            assert_eq!(one.as_lines(), format!("n: {n}\r\n").as_bytes());
        }
        added.push(&HeaderName::from_static("x-note"), &HeaderValue::from_static("a: b, c"));
        added.push(
            &HeaderName::from_static("x-ratelimit-limit-second"),
            &HeaderValue::from_static("7"),
        );
        assert_eq!(
            added.as_lines(),
            b"x-ratelimit-limit-second: 5\r\nratelimit-reset: -12\r\nx-note: a: b, c\r\nx-ratelimit-limit-second: 7\r\n"
        );
        let fields: Vec<_> = added.iter().collect();
        assert_eq!(
            fields,
            [
                ("x-ratelimit-limit-second", &b"5"[..]),
                ("ratelimit-reset", b"-12"),
                ("x-note", b"a: b, c"),
                ("x-ratelimit-limit-second", b"7")
            ]
        );
        let mut map = HeaderMap::new();
        map.insert("x-ratelimit-limit-second", HeaderValue::from_static("1"));
        added.append_to(&mut map);
        let values: Vec<_> = map.get_all("x-ratelimit-limit-second").iter().collect();
        assert_eq!(values, ["1", "5", "7"]);
        assert_eq!(map["x-note"], "a: b, c");
        assert_eq!(map["ratelimit-reset"], "-12");
        let line = FieldLine::new(
            &HeaderName::from_static("ratelimit-limit"),
            &HeaderValue::from_static("60"),
        );
        let mut lines = AddedHeaders::default();
        lines.push_line(&line);
        lines.push_line(&line);
        assert_eq!(lines.as_lines(), b"ratelimit-limit: 60\r\nratelimit-limit: 60\r\n");
        added.retain(|name| name != "x-ratelimit-limit-second");
        assert_eq!(added.as_lines(), b"ratelimit-reset: -12\r\nx-note: a: b, c\r\n");
    }

    #[test]
    fn a_field_start_is_finished_by_the_value_pushed_after_it() {
        let limit = FieldLine::new(
            &HeaderName::from_static("x-ratelimit-limit-hour"),
            &HeaderValue::from_static("60"),
        );
        let start = FieldStart::new([&limit], &HeaderName::from_static("x-ratelimit-remaining-hour"));
        let bare = FieldStart::new(None, &HeaderName::from_static("ratelimit-reset"));
        let mut added = AddedHeaders::default();
        added.push_int_after(&start, 59);
        added.push_after(&start, &HeaderValue::from_static("2.5"));
        added.push_int_after(&bare, -3);
        assert_eq!(
            added.as_lines(),
            b"x-ratelimit-limit-hour: 60\r\nx-ratelimit-remaining-hour: 59\r\n\
              x-ratelimit-limit-hour: 60\r\nx-ratelimit-remaining-hour: 2.5\r\nratelimit-reset: -3\r\n"
        );
        let fields: Vec<_> = added.iter().map(|(name, value)| (name, value.to_vec())).collect();
        assert_eq!(fields.len(), 5);
        assert_eq!(fields[4], ("ratelimit-reset", b"-3".to_vec()));
    }
}
