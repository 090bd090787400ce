//! A response head as HTTP/1.1 bytes: the status line, the fields from
//! the map or relayed as the upstream wrote them (relay.rs), Kong's fields,
//! and the framing and `Connection` the body and the client call for.

use super::*;

/// Encode the status line and header fields, settling the framing and the
/// `Connection` field.
pub(super) fn encode_head(
    status: StatusCode,
    headers: &mut HeaderMap,
    fields: Option<&KongFields>,
    body: &ProxyBody,
    meta: &Meta,
    keep_alive: &mut bool,
    out: &mut BytesMut,
) -> Framing {
    if let Some(fields) = fields {
        if let Some(relayed) = fields.relayed.as_deref() {
            // h1_client.rs relays only heads this holds for; anything else
            // goes through the map.
            let simple = meta.version == Version::HTTP_11
                && !meta.head
                && !status.is_informational()
                && status != StatusCode::NO_CONTENT
                && status != StatusCode::NOT_MODIFIED;
            if simple {
                return encode_relayed(status, relayed, headers, fields, *keep_alive, out);
            }
            relayed.unfold_into(headers);
        }
    }
    let seen = FramingFields::of(headers);
    if seen.close {
        *keep_alive = false;
    }
    let framing = if status.is_informational() || status == StatusCode::NO_CONTENT {
        if seen.length.present() {
            headers.remove(header::CONTENT_LENGTH);
        }
        if seen.has_coding {
            headers.remove(header::TRANSFER_ENCODING);
        }
        Framing::Empty
    } else if meta.head || status == StatusCode::NOT_MODIFIED {
        Framing::Empty
    } else {
        if seen.has_coding {
            headers.remove(header::TRANSFER_ENCODING);
        }
        match seen.length.value() {
            Some(length) => Framing::Length(length),
            None => {
                if seen.length.present() {
                    headers.remove(header::CONTENT_LENGTH);
                }
                match body.size_hint().exact() {
                    Some(length) => {
                        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
                        Framing::Length(length)
                    }
                    None if meta.version == Version::HTTP_11 => {
                        headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
                        Framing::Chunked
                    }
                    None => {
                        *keep_alive = false;
                        Framing::Close
                    }
                }
            }
        }
    };
    if status != StatusCode::SWITCHING_PROTOCOLS {
        if meta.version == Version::HTTP_10 {
            if *keep_alive && !seen.keep_alive {
                headers.append(header::CONNECTION, HeaderValue::from_static("keep-alive"));
            }
        } else if !*keep_alive && !seen.close {
            headers.append(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
    if !seen.has_date {
        headers.insert(header::DATE, crate::wire::h2_server::http_date());
    }
    let version: &[u8] = if meta.version == Version::HTTP_10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    };
    put_status_line(version, status, out);
    match fields {
        None => put_fields(headers, out),
        Some(fields) => {
            put_fields_except(headers, |name| fields.replaces(name), out);
            fields.encode(headers, out);
            out.extend_from_slice(b"\r\n");
        }
    }
    framing
}

/// The head of a response relayed as the upstream wrote it (relay.rs): its
/// lines, what Strait added to the (otherwise empty) map, the fields the
/// map's encoder would add (`Connection: close`, `Date`), Kong's.
fn encode_relayed(
    status: StatusCode,
    relayed: &RelayedHead,
    headers: &HeaderMap,
    fields: &KongFields,
    keep_alive: bool,
    out: &mut BytesMut,
) -> Framing {
    put_status_line(b"HTTP/1.1 ", status, out);
    relayed.put_lines(out);
    put_fields_except(headers, |name| fields.replaces(name), out);
    if !keep_alive {
        put_field(b"connection", b"close", out);
    }
    if !relayed.has_date {
        put_field(b"date", crate::wire::h2_server::http_date().as_bytes(), out);
    }
    fields.encode(headers, out);
    out.extend_from_slice(b"\r\n");
    Framing::Length(relayed.length)
}

fn put_status_line(version: &[u8], status: StatusCode, out: &mut BytesMut) {
    out.put_slice(version);
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.put_slice(b"\r\n");
}

/// What a response's framing and connection depend on, taken in one pass
/// over its fields: four lookups by name (each hashing the name) cost more
/// than comparing every name of a usual response with four.
#[derive(Default)]
struct FramingFields {
    length: LengthFields,
    has_coding: bool,
    has_date: bool,
    /// `Connection` lists `close`, or `keep-alive`.
    close: bool,
    keep_alive: bool,
}

impl FramingFields {
    fn of(headers: &HeaderMap) -> FramingFields {
        let mut fields = FramingFields::default();
        for (name, value) in headers {
            if name == header::CONTENT_LENGTH {
                fields.length.add(value.as_bytes());
            } else if name == header::TRANSFER_ENCODING {
                fields.has_coding = true;
            } else if name == header::DATE {
                fields.has_date = true;
            } else if name == header::CONNECTION {
                for token in list_tokens(value.as_bytes()) {
                    fields.close |= token.eq_ignore_ascii_case(b"close");
                    fields.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            }
        }
        fields
    }
}
