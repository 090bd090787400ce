//! Header maps as proxy-wasm sees them: the request's and response's
//! headers with their pseudo-headers (`:method`, `:path`, `:scheme`,
//! `:authority`; `:status`), and the ABI's map encoding (little-endian
//! `u32` count, `count` pairs of `u32` lengths, then each key and value
//! followed by a NUL byte).

use http::{HeaderMap, HeaderName, HeaderValue};

use super::status;
use crate::exchange::{Exchange, Phase};

pub(crate) const REQUEST_HEADERS: i32 = 0;
pub(crate) const RESPONSE_HEADERS: i32 = 2;
pub(crate) const CALL_RESPONSE_HEADERS: i32 = 6;

/// A field name in lower case, copied only when it has upper case.
fn lower(name: &str) -> std::borrow::Cow<'_, str> {
    match name.bytes().any(|b| b.is_ascii_uppercase()) {
        true => std::borrow::Cow::Owned(name.to_ascii_lowercase()),
        false => std::borrow::Cow::Borrowed(name),
    }
}

/// Whether the current callback has the map `map` names.
fn has(exchange: &Exchange, map: i32) -> bool {
    matches!(
        (map, exchange.phase),
        (REQUEST_HEADERS, Phase::RequestHeaders | Phase::CallResponse) | (RESPONSE_HEADERS, Phase::ResponseHeaders)
    )
}

/// The map `map` names to read, when the current callback has it (the
/// response's is made now if it was not yet).
fn readable(exchange: &mut Exchange, map: i32) -> Option<&HeaderMap> {
    match map {
        _ if !has(exchange, map) => None,
        REQUEST_HEADERS => Some(&exchange.request_headers),
        _ => Some(exchange.response_headers.headers()),
    }
}

/// The map `map` names to change, when the current callback has it.
fn headers(exchange: &mut Exchange, map: i32) -> Option<&mut HeaderMap> {
    match map {
        _ if !has(exchange, map) => None,
        REQUEST_HEADERS => Some(&mut exchange.request_headers),
        _ => Some(exchange.response_headers.headers_mut()),
    }
}

/// A pseudo-header's value.
fn pseudo(exchange: &Exchange, map: i32, name: &str) -> Option<Vec<u8>> {
    match (map, name) {
        (REQUEST_HEADERS, ":method") => Some(exchange.method.as_bytes().to_vec()),
        (REQUEST_HEADERS, ":path") => Some(exchange.path.as_bytes().to_vec()),
        (REQUEST_HEADERS, ":scheme") => Some(exchange.scheme.as_bytes().to_vec()),
        (REQUEST_HEADERS, ":authority") => exchange
            .request_headers
            .get(http::header::HOST)
            .map(|v| v.as_bytes().to_vec()),
        (RESPONSE_HEADERS, ":status") => Some(exchange.status.to_string().into_bytes()),
        _ => None,
    }
}

/// The answer to an HTTP call, in its callback.
fn call_response(exchange: &Exchange, map: i32) -> Option<&[(Vec<u8>, Vec<u8>)]> {
    (map == CALL_RESPONSE_HEADERS && exchange.phase == Phase::CallResponse)
        .then_some(exchange.call_response.headers.as_slice())
}

/// One header's value (the first, as the SDKs expect), or `None`.
pub(crate) fn get(exchange: &mut Exchange, map: i32, name: &str) -> Result<Option<Vec<u8>>, i32> {
    let name = lower(name);
    if let Some(pairs) = call_response(exchange, map) {
        return Ok(pairs.iter().find(|(k, _)| k == name.as_bytes()).map(|(_, v)| v.clone()));
    }
    if name.starts_with(':') {
        return match has(exchange, map) {
            true => Ok(pseudo(exchange, map, &name)),
            false => Err(status::NOT_FOUND),
        };
    }
    let map = readable(exchange, map).ok_or(status::NOT_FOUND)?;
    Ok(map.get(&*name).map(|v| v.as_bytes().to_vec()))
}

/// Every header, pseudo-headers first, encoded.
pub(crate) fn pairs(exchange: &mut Exchange, map: i32) -> Result<Vec<u8>, i32> {
    if let Some(pairs) = call_response(exchange, map) {
        return Ok(encode(pairs));
    }
    if !has(exchange, map) {
        return Err(status::NOT_FOUND);
    }
    let names: &[&str] = match map {
        REQUEST_HEADERS => &[":authority", ":method", ":path", ":scheme"],
        _ => &[":status"],
    };
    let mut list: Vec<(Vec<u8>, Vec<u8>)> = names
        .iter()
        .filter_map(|name| pseudo(exchange, map, name).map(|value| (name.as_bytes().to_vec(), value)))
        .collect();
    let headers = readable(exchange, map).ok_or(status::NOT_FOUND)?;
    list.extend(
        headers
            .iter()
            .map(|(name, value)| (name.as_str().as_bytes().to_vec(), value.as_bytes().to_vec())),
    );
    Ok(encode(&list))
}

/// The ABI's map encoding of `pairs`.
pub(crate) fn encode(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let size = 4 + pairs.iter().map(|(k, v)| 8 + k.len() + v.len() + 2).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (key, value) in pairs {
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    }
    for (key, value) in pairs {
        out.extend_from_slice(key);
        out.push(0);
        out.extend_from_slice(value);
        out.push(0);
    }
    out
}

/// The pairs of an encoded map; `None` when it is malformed.
pub(crate) fn decode(bytes: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    if bytes.len() <= 1 {
        return Some(Vec::new());
    }
    let word = |at: usize| -> Option<usize> {
        let raw = bytes.get(at..at + 4)?;
        Some(u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize)
    };
    let count = word(0)?;
    let mut data = 4usize.checked_add(count.checked_mul(8)?)?;
    let mut out = Vec::with_capacity(count.min(1024));
    for index in 0..count {
        let key_len = word(4 + index * 8)?;
        let value_len = word(8 + index * 8)?;
        let key = bytes.get(data..data.checked_add(key_len)?)?.to_vec();
        data += key_len + 1;
        let value = bytes.get(data..data.checked_add(value_len)?)?.to_vec();
        data += value_len + 1;
        out.push((key, value));
    }
    Some(out)
}

/// Adds (`replace` false) or sets one header; a pseudo-header changes the
/// request line or the status.
pub(crate) fn put(exchange: &mut Exchange, map: i32, name: &str, value: &[u8], replace: bool) -> i32 {
    let lower = lower(name);
    if !has(exchange, map) {
        return status::NOT_FOUND;
    }
    if lower.starts_with(':') {
        return put_pseudo(exchange, map, &lower, value);
    }
    let (Ok(name), Ok(value)) = (HeaderName::from_bytes(lower.as_bytes()), HeaderValue::from_bytes(value)) else {
        return status::BAD_ARGUMENT;
    };
    let Some(headers) = headers(exchange, map) else {
        return status::NOT_FOUND;
    };
    match replace {
        true => {
            headers.insert(name, value);
        }
        false => {
            headers.append(name, value);
        }
    }
    status::OK
}

fn put_pseudo(exchange: &mut Exchange, map: i32, name: &str, value: &[u8]) -> i32 {
    let Ok(text) = std::str::from_utf8(value) else {
        return status::BAD_ARGUMENT;
    };
    match (map, name) {
        (REQUEST_HEADERS, ":method") if http::Method::from_bytes(value).is_ok() => {
            exchange.method.clear();
            exchange.method.push_str(text);
            exchange.method_changed = true;
        }
        (REQUEST_HEADERS, ":path") if text.starts_with('/') => {
            exchange.path.clear();
            exchange.path.push_str(text);
            exchange.path_changed = true;
        }
        (REQUEST_HEADERS, ":authority") => match HeaderValue::from_bytes(value) {
            Ok(value) => {
                exchange.request_headers.insert(http::header::HOST, value);
            }
            Err(_) => return status::BAD_ARGUMENT,
        },
        (RESPONSE_HEADERS, ":status") => match text.parse::<u16>() {
            Ok(code) if (100..=999).contains(&code) => exchange.status = code,
            _ => return status::BAD_ARGUMENT,
        },
        _ => return status::BAD_ARGUMENT,
    }
    status::OK
}

/// Removes every value of one header.
pub(crate) fn remove(exchange: &mut Exchange, map: i32, name: &str) -> i32 {
    let lower = lower(name);
    let Ok(name) = HeaderName::from_bytes(lower.as_bytes()) else {
        return match has(exchange, map) {
            true => status::OK,
            false => status::NOT_FOUND,
        };
    };
    // Removing a field the head does not have leaves it as it was.
    match readable(exchange, map).map(|headers| headers.contains_key(&name)) {
        None => status::NOT_FOUND,
        Some(false) => status::OK,
        Some(true) => {
            if let Some(headers) = headers(exchange, map) {
                headers.remove(name);
            }
            status::OK
        }
    }
}

/// Replaces the whole map with `pairs`.
pub(crate) fn replace_all(exchange: &mut Exchange, map: i32, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> i32 {
    match headers(exchange, map) {
        Some(headers) => headers.clear(),
        None => return status::NOT_FOUND,
    }
    for (name, value) in pairs {
        let name = String::from_utf8_lossy(&name).into_owned();
        let outcome = put(exchange, map, &name, &value, false);
        if outcome != status::OK {
            return outcome;
        }
    }
    status::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_encode_and_decode_as_the_abi_says() {
        let pairs = vec![(b"a".to_vec(), b"one".to_vec()), (b"bb".to_vec(), Vec::new())];
        let bytes = encode(&pairs);
        assert_eq!(&bytes[..4], &2u32.to_le_bytes());
        assert_eq!(&bytes[4..8], &1u32.to_le_bytes());
        assert_eq!(&bytes[8..12], &3u32.to_le_bytes());
        assert_eq!(&bytes[20..], b"a\0one\0bb\0\0");
        assert_eq!(decode(&bytes), Some(pairs));
        assert_eq!(decode(&[]), Some(Vec::new()));
        assert_eq!(decode(&[5, 0, 0, 0, 1]), None);
    }

    #[test]
    fn pseudo_headers_change_the_request_line() {
        let mut exchange = Exchange {
            phase: Phase::RequestHeaders,
            method: "GET".into(),
            path: "/a?b=1".into(),
            scheme: "http",
            ..Exchange::default()
        };
        assert_eq!(
            get(&mut exchange, REQUEST_HEADERS, ":Path"),
            Ok(Some(b"/a?b=1".to_vec()))
        );
        assert_eq!(put(&mut exchange, REQUEST_HEADERS, ":path", b"/c", true), status::OK);
        assert!(exchange.path_changed);
        assert_eq!(
            put(&mut exchange, REQUEST_HEADERS, ":path", b"c", true),
            status::BAD_ARGUMENT
        );
        assert_eq!(put(&mut exchange, REQUEST_HEADERS, "X-One", b"1", false), status::OK);
        assert_eq!(get(&mut exchange, REQUEST_HEADERS, "x-one"), Ok(Some(b"1".to_vec())));
        assert_eq!(get(&mut exchange, RESPONSE_HEADERS, "x-one"), Err(status::NOT_FOUND));
        let decoded = decode(&pairs(&mut exchange, REQUEST_HEADERS).unwrap()).unwrap();
        assert_eq!(decoded.len(), 4, "method, path, scheme, x-one (no host: no :authority)");
    }
}
