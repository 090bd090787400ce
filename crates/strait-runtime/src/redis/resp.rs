//! RESP2, the Redis wire protocol: commands out as arrays of bulk strings,
//! replies parsed incrementally from a read buffer.

use bytes::{Buf, BytesMut};

/// A reply from Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Nil,
    Int(i64),
    /// A simple string (`+OK`).
    Status(String),
    Bulk(Vec<u8>),
    Array(Vec<Value>),
    /// An error reply (`-ERR ...`), kept as Redis wrote it.
    Error(String),
}

impl Value {
    /// The reply as an integer: an integer reply, or a bulk string of digits.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            Value::Bulk(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
            _ => None,
        }
    }
}

/// Append one command (an array of bulk strings) to `out`.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    push_number(out, args.len());
    for arg in args {
        out.push(b'$');
        push_number(out, arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

fn push_number(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The reply stream broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed reply from Redis: {0}")]
pub struct ProtocolError(pub &'static str);

/// Replies nested deeper than this are refused (Redis sends at most a few
/// levels; the limit keeps a hostile peer from exhausting the stack).
const MAX_DEPTH: usize = 32;

/// Take one complete reply off the front of `buf`; `Ok(None)` when the
/// buffer holds only part of one (nothing is consumed then).
pub fn parse(buf: &mut BytesMut) -> Result<Option<Value>, ProtocolError> {
    let mut at = 0;
    match parse_at(buf, &mut at, 0)? {
        Some(value) => {
            buf.advance(at);
            Ok(Some(value))
        }
        None => Ok(None),
    }
}

/// The line starting at `*at` (without CRLF), moving `*at` past it.
fn line<'a>(buf: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let rest = &buf[*at..];
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    *at += end + 2;
    Some(&rest[..end])
}

fn number(text: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or(ProtocolError("a length or integer is not a number"))
}

fn parse_at(buf: &[u8], at: &mut usize, depth: usize) -> Result<Option<Value>, ProtocolError> {
    if depth > MAX_DEPTH {
        return Err(ProtocolError("reply nested too deeply"));
    }
    let Some(&kind) = buf.get(*at) else {
        return Ok(None);
    };
    *at += 1;
    let Some(head) = line(buf, at) else {
        return Ok(None);
    };
    let text = || String::from_utf8_lossy(head).into_owned();
    Ok(Some(match kind {
        b'+' => Value::Status(text()),
        b'-' => Value::Error(text()),
        b':' => Value::Int(number(head)?),
        b'$' => {
            let len = number(head)?;
            if len < 0 {
                return Ok(Some(Value::Nil));
            }
            let len = usize::try_from(len).map_err(|_| ProtocolError("bulk length"))?;
            if buf.len() < *at + len + 2 {
                return Ok(None);
            }
            if &buf[*at + len..*at + len + 2] != b"\r\n" {
                return Err(ProtocolError("bulk string without CRLF"));
            }
            let bytes = buf[*at..*at + len].to_vec();
            *at += len + 2;
            Value::Bulk(bytes)
        }
        b'*' => {
            let len = number(head)?;
            if len < 0 {
                return Ok(Some(Value::Nil));
            }
            let mut items = Vec::with_capacity((len as usize).min(1024));
            for _ in 0..len {
                match parse_at(buf, at, depth + 1)? {
                    Some(item) => items.push(item),
                    None => return Ok(None),
                }
            }
            Value::Array(items)
        }
        _ => return Err(ProtocolError("unknown reply type")),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&mut out, &[b"SET", b"key", b""]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$0\r\n\r\n");
    }

    #[test]
    fn replies_parse_whole_or_not_at_all() {
        let whole = b"*3\r\n:1\r\n$5\r\nhello\r\n*2\r\n+OK\r\n$-1\r\n-ERR x\r\n";
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..cut]);
            if let Some(value) = parse(&mut buf).unwrap() {
                assert!(cut >= whole.len() - 8, "a reply parsed from {cut} bytes: {value:?}");
            } else {
                assert_eq!(buf.len(), cut, "nothing consumed");
            }
        }
        let mut buf = BytesMut::from(&whole[..]);
        assert_eq!(
            parse(&mut buf).unwrap(),
            Some(Value::Array(vec![
                Value::Int(1),
                Value::Bulk(b"hello".to_vec()),
                Value::Array(vec![Value::Status("OK".into()), Value::Nil]),
            ]))
        );
        assert_eq!(parse(&mut buf).unwrap(), Some(Value::Error("ERR x".into())));
        assert!(buf.is_empty());
    }

    #[test]
    fn broken_replies_are_errors() {
        for bad in [&b"?x\r\n"[..], b":abc\r\n", b"$3\r\nabcde\r\n"] {
            assert!(parse(&mut BytesMut::from(bad)).is_err(), "{bad:?}");
        }
        let mut deep = Vec::new();
        for _ in 0..100 {
            deep.extend_from_slice(b"*1\r\n");
        }
        assert!(parse(&mut BytesMut::from(&deep[..])).is_err());
    }
}
