//! What the HTTP/1.1 request parser refuses beyond httparse's grammar, so that Strait is never
//! more lenient than nginx on a request two parsers could read differently (the differential
//! corpus, tests/differential/, compares every case with nginx; docs/security.md).

use http::header::{self, HeaderName};
use http::Uri;

use crate::pipeline::error::ErrorKind;

/// Method tokens nginx takes: upper-case letters, `_` and `-`. TRACE and CONNECT are refused
/// (405), as nginx does: neither can be proxied as an ordinary request.
pub(super) fn method(method: &[u8]) -> Result<(), ErrorKind> {
    if method.is_empty() || !method.iter().all(|&b| b.is_ascii_uppercase() || b == b'_' || b == b'-') {
        return Err(ErrorKind::BadRequest);
    }
    if method == b"TRACE" || method == b"CONNECT" {
        return Err(ErrorKind::MethodNotAllowed);
    }
    Ok(())
}

/// The request line and each header line at most `max_line` bytes (`ClientLimits::max_line_bytes`,
/// nginx's `large_client_header_buffers` size, 8k, as Kong ships it).
pub(super) fn line_lengths(head: &[u8], spans: &[super::Span], max_line: usize) -> Result<(), ErrorKind> {
    let request_line = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    if request_line > max_line {
        return Err(ErrorKind::UriTooLong);
    }
    if spans
        .iter()
        .any(|&(name, _, value, value_len)| value + value_len - name > max_line)
    {
        return Err(ErrorKind::HeadersTooLarge);
    }
    Ok(())
}

/// Framing and routing fields as nginx reads them, nothing more lenient: one `Host` on HTTP/1.1
/// (a valid host, optionally with a port), at most one `Content-Length` (digits only), at most
/// one `Transfer-Encoding` (exactly `chunked`), never both, and no tab between their name and
/// value. Fed each field as the parser names it (a name compare per field), then [`Fields::end`].
#[derive(Default)]
pub(super) struct Fields {
    hosts: u8,
    lengths: u8,
    codings: u8,
    /// The `Content-Length` value, parsed once here.
    length: u64,
}

/// How the request's body is framed, from the fields [`Fields`] accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    None,
    Length(u64),
    Chunked,
}

impl Fields {
    pub(super) fn field(&mut self, name: &HeaderName, head: &[u8], span: super::Span) -> Result<(), ErrorKind> {
        let (name_at, name_len, value, value_len) = span;
        let text = &head[value..value + value_len];
        if *name == header::HOST {
            self.hosts = self.hosts.saturating_add(1);
            if !valid_host(text) {
                return Err(ErrorKind::BadRequest);
            }
        } else if *name == header::CONTENT_LENGTH {
            self.lengths = self.lengths.saturating_add(1);
            // Digits only, and a length a file offset can hold (nginx's bound too).
            let digits = text.iter().all(u8::is_ascii_digit);
            match std::str::from_utf8(text).ok().and_then(|t| t.parse::<i64>().ok()) {
                Some(length) if digits => self.length = length as u64,
                _ => return Err(ErrorKind::BadRequest),
            }
        } else if *name == header::TRANSFER_ENCODING {
            self.codings = self.codings.saturating_add(1);
            if !text.eq_ignore_ascii_case(b"chunked") {
                return Err(ErrorKind::BadRequest);
            }
        } else {
            return Ok(());
        }
        // httparse drops the whitespace before a value; a tab there is not nginx's.
        if head[name_at + name_len..value].contains(&b'\t') {
            return Err(ErrorKind::BadRequest);
        }
        Ok(())
    }

    /// The counts' verdict, and the body's framing (RFC 9112 §6.3): `chunked` (never on
    /// HTTP/1.0), a length, or none.
    pub(super) fn end(&self, http11: bool) -> Result<Framing, ErrorKind> {
        let (hosts, lengths, codings) = (self.hosts, self.lengths, self.codings);
        if hosts > 1 || (http11 && hosts == 0) || lengths > 1 || codings > 1 || (lengths > 0 && codings > 0) {
            return Err(ErrorKind::BadRequest);
        }
        Ok(match (lengths, codings) {
            (_, 1) if !http11 => return Err(ErrorKind::BadRequest),
            (_, 1) => Framing::Chunked,
            (1, _) => Framing::Length(self.length),
            _ => Framing::None,
        })
    }
}

/// A `Host` value: a registered name or IPv4 address of letters, digits, `-`, `.` and `_`, or
/// a bracketed IPv6 literal, then an optional `:port` of digits.
fn valid_host(host: &[u8]) -> bool {
    let (name, port) = match host.first() {
        Some(b'[') => match host.iter().position(|&b| b == b']') {
            Some(end) => (&host[..=end], &host[end + 1..]),
            None => return false,
        },
        _ => match host.iter().position(|&b| b == b':') {
            Some(colon) => (&host[..colon], &host[colon..]),
            None => (host, &host[host.len()..]),
        },
    };
    let name_ok = if name.first() == Some(&b'[') {
        name.len() > 2
            && name[1..name.len() - 1]
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    } else {
        !name.is_empty()
            && !name.windows(2).any(|w| w == b"..")
            && name
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    };
    let port_ok = port.is_empty() || (port.len() > 1 && port[0] == b':' && port[1..].iter().all(u8::is_ascii_digit));
    name_ok && port_ok
}

/// An absolute-form target with userinfo (`http://user@host/`) is refused (RFC 9110 §4.2.4).
pub(super) fn target(uri: &Uri) -> Result<(), ErrorKind> {
    match uri.authority() {
        Some(authority) if authority.as_str().contains('@') => Err(ErrorKind::BadRequest),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        for good in [
            &b"a.test"[..],
            b"a.test:8080",
            b"[::1]",
            b"[::1]:80",
            b"10.0.0.1",
            b"a_b.test",
        ] {
            assert!(valid_host(good), "{}", String::from_utf8_lossy(good));
        }
        for bad in [
            &b""[..],
            b"a test",
            b"a/b",
            b"a,b",
            b"a@b",
            b"a:",
            b"a:x",
            b"[::1",
            b"a..b",
            b"a\x00b",
        ] {
            assert!(!valid_host(bad), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn methods() {
        assert!(method(b"GET").is_ok() && method(b"M-SEARCH").is_ok() && method(b"PROPFIND").is_ok());
        assert_eq!(method(b"get"), Err(ErrorKind::BadRequest));
        assert_eq!(method(b"G3T"), Err(ErrorKind::BadRequest));
        assert_eq!(method(b"TRACE"), Err(ErrorKind::MethodNotAllowed));
        assert_eq!(method(b"CONNECT"), Err(ErrorKind::MethodNotAllowed));
    }
}
