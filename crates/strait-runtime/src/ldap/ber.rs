//! The few LDAPv3 messages a simple bind needs, in BER (RFC 4511): a bind
//! request, the StartTLS extended request, and the result both answer with.

/// `tag`, its length (short or long form), then `content`.
fn put(out: &mut Vec<u8>, tag: u8, content: &[u8]) {
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len() - 1);
        out.push(0x80 | (bytes.len() - first) as u8);
        out.extend_from_slice(&bytes[first..]);
    }
    out.extend_from_slice(content);
}

fn integer(value: u32) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let mut first = bytes.iter().position(|b| *b != 0).unwrap_or(3);
    // A leading byte with its high bit set would read as negative.
    if bytes[first] & 0x80 != 0 {
        first -= 1;
    }
    let mut out = Vec::new();
    put(&mut out, 0x02, &bytes[first..]);
    out
}

/// `LDAPMessage ::= SEQUENCE { messageID, protocolOp }`.
fn message(id: u32, op: &[u8]) -> Vec<u8> {
    let mut content = integer(id);
    content.extend_from_slice(op);
    let mut out = Vec::new();
    put(&mut out, 0x30, &content);
    out
}

/// `BindRequest ::= [APPLICATION 0] { version 3, name, simple [0] password }`.
pub(crate) fn bind_request(id: u32, dn: &str, password: &str) -> Vec<u8> {
    let mut content = integer(3);
    put(&mut content, 0x04, dn.as_bytes());
    put(&mut content, 0x80, password.as_bytes());
    let mut op = Vec::new();
    put(&mut op, 0x60, &content);
    message(id, &op)
}

/// `ExtendedRequest ::= [APPLICATION 23] { requestName [0] StartTLS's OID }`.
pub(crate) fn start_tls_request(id: u32) -> Vec<u8> {
    let mut content = Vec::new();
    put(&mut content, 0x80, b"1.3.6.1.4.1.1466.20037");
    let mut op = Vec::new();
    put(&mut op, 0x77, &content);
    message(id, &op)
}

/// The application tag of a bind response and of an extended response.
pub(crate) const BIND_RESPONSE: u8 = 0x61;
pub(crate) const EXTENDED_RESPONSE: u8 = 0x78;

/// An `LDAPResult`: the operation's tag, its code and diagnostic message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LdapResult {
    pub op: u8,
    pub code: u32,
    pub diagnostic: String,
}

/// One element at the start of `input`: its tag, content and the rest.
fn element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), String> {
    let (&tag, rest) = input.split_first().ok_or("truncated element")?;
    let (&first, rest) = rest.split_first().ok_or("truncated length")?;
    let (len, rest) = match first {
        n if n < 0x80 => (n as usize, rest),
        n => {
            let count = (n & 0x7f) as usize;
            if count == 0 || count > 4 || rest.len() < count {
                return Err("bad length".into());
            }
            let len = rest[..count].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
            (len, &rest[count..])
        }
    };
    if rest.len() < len {
        return Err("truncated content".into());
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

/// The length of the message whose first bytes are `head` (tag and the
/// length's first byte): `Ok(None)` when more length bytes are needed.
pub(crate) fn message_len(head: &[u8]) -> Result<Option<usize>, String> {
    if head.len() < 2 {
        return Ok(None);
    }
    if head[0] != 0x30 {
        return Err(format!("not an LDAP message (tag {:#04x})", head[0]));
    }
    let first = head[1];
    if first < 0x80 {
        return Ok(Some(2 + first as usize));
    }
    let count = (first & 0x7f) as usize;
    if count == 0 || count > 4 {
        return Err("bad message length".into());
    }
    if head.len() < 2 + count {
        return Ok(None);
    }
    let len = head[2..2 + count]
        .iter()
        .fold(0usize, |acc, b| (acc << 8) | *b as usize);
    Ok(Some(2 + count + len))
}

/// The result in a whole response message.
pub(crate) fn parse_result(message: &[u8]) -> Result<LdapResult, String> {
    let (tag, body, _) = element(message)?;
    if tag != 0x30 {
        return Err("not an LDAP message".into());
    }
    let (tag, _id, rest) = element(body)?;
    if tag != 0x02 {
        return Err("no message id".into());
    }
    let (op, result, _) = element(rest)?;
    let (tag, code, result) = element(result)?;
    if tag != 0x0a || code.is_empty() || code.len() > 4 {
        return Err("no result code".into());
    }
    let code = code.iter().fold(0u32, |acc, b| (acc << 8) | *b as u32);
    let (_, _matched, result) = element(result)?;
    let (_, diagnostic, _) = element(result)?;
    Ok(LdapResult {
        op,
        code,
        diagnostic: String::from_utf8_lossy(diagnostic).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_request_is_rfc4511s_encoding() {
        let packet = bind_request(1, "cn=a", "pw");
        assert_eq!(
            packet,
            [
                0x30, 0x12, 0x02, 0x01, 0x01, 0x60, 0x0d, 0x02, 0x01, 0x03, 0x04, 0x04, b'c', b'n', b'=', b'a', 0x80,
                0x02, b'p', b'w'
            ]
        );
        // A long name takes the long form of the length.
        let long = bind_request(300, &"x".repeat(200), "pw");
        assert_eq!(&long[..2], &[0x30, 0x81]);
        assert_eq!(message_len(&long[..3]), Ok(Some(long.len())));
        assert_eq!(&long[2..7], &[long.len() as u8 - 3, 0x02, 0x02, 0x01, 0x2c]);
    }

    #[test]
    fn results_are_read_with_their_code_and_message() {
        // What slapd answers a wrong password with.
        let answer = [
            0x30, 0x0c, 0x02, 0x01, 0x01, 0x61, 0x07, 0x0a, 0x01, 0x31, 0x04, 0x00, 0x04, 0x00,
        ];
        assert_eq!(message_len(&answer[..2]), Ok(Some(answer.len())));
        assert_eq!(
            parse_result(&answer),
            Ok(LdapResult {
                op: BIND_RESPONSE,
                code: 49,
                diagnostic: String::new()
            })
        );
        assert!(parse_result(&answer[..8]).is_err());
        assert!(message_len(&[0x04, 0x00]).is_err());
    }
}
