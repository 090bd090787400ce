//! `application/x-www-form-urlencoded` text (query strings and form bodies):
//! decoding pairs and encoding them back. Malformed escapes decode as
//! written, never fail.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// Decodes `+` as a space and `%XX` escapes (invalid escapes stay as written).
pub fn decode(text: &str) -> Cow<'_, str> {
    if !text.contains(['%', '+']) {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            other => out.push(other),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

fn hex(byte: Option<&u8>) -> Option<u8> {
    let b = *byte?;
    (b as char).to_digit(16).map(|d| d as u8)
}

/// The `key=value` pairs of a query string or form body, decoded. A key
/// without `=` has an empty value.
pub fn pairs(text: &str) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(pair), Cow::Borrowed("")),
        })
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn encode(text: &str) -> Cow<'_, str> {
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
    if text.bytes().all(unreserved) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if unreserved(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Cow::Owned(out)
}

/// Encodes pairs as `k=v&k2=v2`.
pub fn serialize<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(&encode(k));
        out.push('=');
        out.push_str(&encode(v));
    }
    out
}

/// Kong's `kong.request.get_query()`: a bare key is `true`, a repeated key
/// an array.
pub fn query_object(query: &str) -> Map<String, Value> {
    let mut out = Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = match pair.split_once('=') {
            Some((k, v)) => (decode(k).into_owned(), Value::String(decode(v).into_owned())),
            None => (decode(pair).into_owned(), Value::Bool(true)),
        };
        match out.get_mut(&key) {
            Some(Value::Array(values)) => values.push(value),
            Some(existing) => {
                let first = existing.take();
                *existing = Value::Array(vec![first, value]);
            }
            None => {
                out.insert(key, value);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes_plus_and_bad_escapes() {
        assert_eq!(decode("a+b%20c"), "a b c");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz%4"), "%zz%4");
        let got: Vec<_> = pairs("a=1&b&&c=x%3Dy")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        assert_eq!(
            got,
            [
                ("a".into(), "1".into()),
                ("b".into(), "".into()),
                ("c".into(), "x=y".into())
            ]
        );
    }

    #[test]
    fn serializes_with_escapes() {
        assert_eq!(serialize([("a b", "x&y"), ("k", "v")]), "a%20b=x%26y&k=v");
    }
}
