//! Header names as the HTTP/1.1 codecs read them from a head httparse has
//! parsed: the names most heads carry are recognised by length and one
//! 128-bit comparison; any other goes through `HeaderName::from_bytes`.
//!
//! `from_bytes` lower-cases a name through a table into a buffer, then
//! matches it against every standard name: about 140 instructions a field,
//! 8 fields a proxied request (its `Host`, `User-Agent` and `Accept`, and
//! a usual response's `Server`, `Date`, `Content-Type`, `Content-Length`
//! and `Connection`), 4% of the request's instructions
//! (docs/benchmarks.md#counted-instructions-2026-11-24). Here a common name
//! costs about 30.

use http::header::{HeaderName, InvalidHeaderName};

/// Longest name [`BY_LENGTH`] holds.
const LONGEST: usize = 16;

/// `name`'s bytes as one little-endian number, zero past its end.
const fn word(name: &[u8]) -> u128 {
    let mut word = 0u128;
    let mut at = 0;
    while at < name.len() {
        word |= (name[at] as u128) << (8 * at);
        at += 1;
    }
    word
}

/// For each length, 0x20 in each of that many low bytes (a table: a
/// variable 128-bit shift costs a dozen instructions).
static CASE_BITS: [u128; LONGEST + 1] = {
    let mut bits = [0u128; LONGEST + 1];
    let mut len = 1;
    while len <= LONGEST {
        bits[len] = bits[len - 1] | (0x20 << (8 * (len - 1)));
        len += 1;
    }
    bits
};

macro_rules! common {
    ($($name:literal),* $(,)?) => {
        [$((word($name.as_bytes()), HeaderName::from_static($name))),*]
    };
}

// Statics each: a name holds `Bytes`, whose temporaries cannot be borrowed
// for the whole program.
static LENGTH_2: [(u128, HeaderName); 1] = common!["te"];
static LENGTH_3: [(u128, HeaderName); 2] = common!["via", "age"];
static LENGTH_4: [(u128, HeaderName); 4] = common!["host", "date", "etag", "vary"];
static LENGTH_5: [(u128, HeaderName); 2] = common!["range", "allow"];
static LENGTH_6: [(u128, HeaderName); 6] = common!["server", "accept", "cookie", "origin", "pragma", "expect"];
static LENGTH_7: [(u128, HeaderName); 4] = common!["upgrade", "referer", "expires", "trailer"];
static LENGTH_8: [(u128, HeaderName); 3] = common!["location", "if-match", "if-range"];
static LENGTH_9: [(u128, HeaderName); 1] = common!["x-real-ip"];
static LENGTH_10: [(u128, HeaderName); 5] =
    common!["user-agent", "connection", "set-cookie", "keep-alive", "x-trace-id"];
static LENGTH_11: [(u128, HeaderName); 2] = common!["grpc-status", "retry-after"];
static LENGTH_12: [(u128, HeaderName); 4] = common!["content-type", "grpc-message", "x-request-id", "grpc-timeout"];
static LENGTH_13: [(u128, HeaderName); 6] = common![
    "authorization",
    "cache-control",
    "last-modified",
    "if-none-match",
    "accept-ranges",
    "content-range",
];
static LENGTH_14: [(u128, HeaderName); 2] = common!["content-length", "accept-charset"];
static LENGTH_15: [(u128, HeaderName); 3] = common!["accept-encoding", "accept-language", "x-forwarded-for"];
static LENGTH_16: [(u128, HeaderName); 6] = common![
    "content-encoding",
    "content-language",
    "content-location",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-path",
];

/// Common names by length: requests' and responses' most frequent fields,
/// and those Strait's own peers send (nginx, Kong, gRPC).
static BY_LENGTH: [&[(u128, HeaderName)]; LONGEST + 1] = [
    &[],
    &[],
    &LENGTH_2,
    &LENGTH_3,
    &LENGTH_4,
    &LENGTH_5,
    &LENGTH_6,
    &LENGTH_7,
    &LENGTH_8,
    &LENGTH_9,
    &LENGTH_10,
    &LENGTH_11,
    &LENGTH_12,
    &LENGTH_13,
    &LENGTH_14,
    &LENGTH_15,
    &LENGTH_16,
];

/// [`word`] of up to [`LONGEST`] bytes at run time, read as two
/// overlapping loads of a fixed size (a copy of unknown length into a
/// zeroed array is a call to `memcpy`, on every field of every head).
fn loaded_word(raw: &[u8]) -> u128 {
    let n = raw.len();
    debug_assert!(n <= LONGEST);
    let u64_at = |at: usize| raw[at..at + 8].try_into().map_or(0, u64::from_le_bytes);
    let u32_at = |at: usize| raw[at..at + 4].try_into().map_or(0, u32::from_le_bytes);
    if n >= 8 {
        // The second load ends at the last byte; shifted down, it holds
        // only the bytes past the first eight.
        let high = if n == 8 { 0 } else { u64_at(n - 8) >> ((16 - n) * 8) };
        u128::from(u64_at(0)) | u128::from(high) << 64
    } else if n >= 4 {
        let high = if n == 4 { 0 } else { u32_at(n - 4) >> ((8 - n) * 8) };
        u128::from(u32_at(0)) | u128::from(high) << 32
    } else {
        raw.iter().rev().fold(0, |word, &b| word << 8 | u128::from(b))
    }
}

/// The name of a field httparse read (so `raw` holds token characters
/// only). Among those, setting bit 5 changes only upper-case letters (to
/// lower case) and `^` (to `~`, in no common name), so a name equals a
/// common one, case aside, exactly when their words do once bit 5 is set
/// in each of its bytes.
pub(crate) fn name_parsed_by_httparse(raw: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
    match common_name(raw) {
        Some(name) => Ok(name.clone()),
        None => HeaderName::from_bytes(raw),
    }
}

/// The common name a field httparse read has, case aside; None for any
/// other (no `HeaderName` is made for it).
pub(crate) fn common_name(raw: &[u8]) -> Option<&'static HeaderName> {
    let candidates = BY_LENGTH.get(raw.len()).filter(|c| !c.is_empty())?;
    let lower = loaded_word(raw) | CASE_BITS[raw.len()];
    candidates.iter().find(|(word, _)| *word == lower).map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loaded_word_is_the_word_at_every_length() {
        let text = b"abcdefghijklmnop";
        for n in 0..=LONGEST {
            assert_eq!(loaded_word(&text[..n]), word(&text[..n]), "length {n}");
        }
    }

    #[test]
    fn every_common_name_sits_at_its_length_and_is_found_in_any_case() {
        for (len, names) in BY_LENGTH.iter().enumerate() {
            for (word_of, name) in names.iter() {
                let text = name.as_str();
                assert_eq!(text.len(), len, "{text}");
                assert_eq!(*word_of, word(text.as_bytes()));
                assert_eq!(CASE_BITS[len], word(&vec![0x20; len]));
                let upper = text.to_ascii_uppercase();
                let title: String = text
                    .split('-')
                    .map(|part| part[..1].to_ascii_uppercase() + &part[1..])
                    .collect::<Vec<_>>()
                    .join("-");
                for spelling in [text, upper.as_str(), title.as_str()] {
                    assert_eq!(name_parsed_by_httparse(spelling.as_bytes()).unwrap(), *name);
                }
            }
        }
    }

    #[test]
    fn other_names_read_as_http_reads_them() {
        for raw in [
            &b"X-Custom"[..],
            b"x-forwarded-prot",
            b"Hosts",
            b"hos",
            b"a",
            b"X-A-Name-Longer-Than-Sixteen",
            b"content-lengtH",
            b"CONTENT~TYPE",
            b"x-forwarded~for",
        ] {
            assert_eq!(
                name_parsed_by_httparse(raw).ok(),
                HeaderName::from_bytes(raw).ok(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        assert!(name_parsed_by_httparse(b"").is_err());
        assert!(name_parsed_by_httparse(b"bad name").is_err());
    }
}
