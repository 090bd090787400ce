//! One Admin API request as the handlers see it: method, decoded path
//! segments, query arguments, content type and the whole body.

use bytes::Bytes;
use http::Method;

/// Decoded `key=value` pairs of a query string or form body, in order.
#[derive(Debug, Default, Clone)]
pub struct Query {
    pub pairs: Vec<(String, String)>,
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let Some(raw) = raw else { return Query::default() };
        Query {
            pairs: form_pairs(raw.as_bytes())
                .into_iter()
                .map(|(k, v)| (lossy(&k), lossy(&v)))
                .collect(),
        }
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub struct AdminRequest {
    pub method: Method,
    pub query: Query,
    /// The query string as received (`/config` reads its flags from it).
    pub raw_query: Option<String>,
    /// Lower-cased media type without parameters; empty when absent.
    pub media_type: String,
    /// The whole `Content-Type` header (multipart needs its boundary).
    pub content_type: String,
    pub body: Bytes,
}

/// Percent-decodes `input` (`+` is a space, as in forms).
pub fn percent_decode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < input.len() => {
                let hex = std::str::from_utf8(&input[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    out
}

/// Decodes a path segment (`+` stays a plus there).
pub fn decode_segment(segment: &str) -> String {
    let protected = segment.replace('+', "%2B");
    lossy(&percent_decode(protected.as_bytes()))
}

/// `a=1&b=2` pairs, percent-decoded.
pub fn form_pairs(body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    body.split(|b| *b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let mut parts = pair.splitn(2, |b| *b == b'=');
            let key = percent_decode(parts.next().unwrap_or_default());
            let value = percent_decode(parts.next().unwrap_or_default());
            (key, value)
        })
        .collect()
}

/// Percent-encodes a query value.
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(byte as char),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_queries_and_segments() {
        let query = Query::parse(Some("tags=a%2Cb&size=2&x"));
        assert_eq!(query.get("tags"), Some("a,b"));
        assert_eq!(query.get("size"), Some("2"));
        assert_eq!(query.get("x"), Some(""));
        assert_eq!(decode_segment("a%20b+c"), "a b+c");
        assert_eq!(percent_decode(b"100%"), b"100%".to_vec());
        assert_eq!(escape("a/b c"), "a%2Fb%20c");
    }
}
