//! Kong's informational headers as the proxy writes them, switched by the
//! `headers` / `headers_upstream` settings
//! ([`strait_core::header_switches`]), plus `X-Kong-Request-Id`.
//!
//! - `headers` (default `server_tokens, latency_tokens, X-Kong-Request-Id`):
//!   `server_tokens` is `Server` and `Via`; `latency_tokens` is
//!   `X-Kong-Proxy-Latency`, `X-Kong-Upstream-Latency`,
//!   `X-Kong-Response-Latency` and `X-Kong-Admin-Latency`; each of those and
//!   `X-Kong-Upstream-Status` and `X-Kong-Request-Id` may be named alone.
//! - `headers_upstream` (default `X-Kong-Request-Id`): only that header.
//!
//! As Kong parses them: entries split on commas and trimmed, names and the
//! two tokens case-insensitive, `off` (lower case) as the first entry turns
//! every header off and elsewhere is ignored, and any other entry is an error.

use http::HeaderValue;
use strait_runtime::random::next_u64;

pub use strait_core::header_switches::HeaderSwitches;

/// A request id as Kong writes `X-Kong-Request-Id`: 32 lower-case hex digits.
///
/// Kept as its digits: HTTP/1.1 writes them straight into the upstream
/// request and the response, so a header value (an allocation, a check of
/// every byte and a shared count) is made only where one goes into a map.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RequestId {
    digits: [u8; 32],
}

/// Each byte's two lower-case hex digits.
static HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut byte = 0;
    while byte < 256 {
        pairs[byte] = [HEX[byte >> 4], HEX[byte & 0xf]];
        byte += 1;
    }
    pairs
};

impl RequestId {
    pub fn new() -> RequestId {
        let mut digits = [0u8; 32];
        let bytes = [next_u64().to_be_bytes(), next_u64().to_be_bytes()];
        // Two digits per byte from a table: half the steps of a digit at a time.
        for (pair, byte) in digits.chunks_exact_mut(2).zip(bytes.as_flattened()) {
            pair.copy_from_slice(&HEX_PAIRS[usize::from(*byte)]);
        }
        RequestId { digits }
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written.
        std::str::from_utf8(&self.digits).unwrap_or_default()
    }

    /// The 32 digits, for an encoder: no UTF-8 check of them per request.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.digits
    }

    /// The id as a header value, marked sensitive: HTTP/2's HPACK then
    /// writes it as a never-indexed literal. A value unique to one request
    /// gains nothing from the dynamic table and, indexed, would push out the
    /// entries that repeat on every request (both on Strait's encoder and
    /// the peer's decoder).
    pub fn header_value(&self) -> HeaderValue {
        let mut value = HeaderValue::from_str(self.as_str()).expect("hex digits are a valid header value");
        value.set_sensitive(true);
        value
    }
}

/// Numbers below this come from [`number`] without an allocation.
const SMALL_NUMBERS: u64 = 1024;

/// `n` as a header value. Latencies in milliseconds and status codes are
/// small, and every proxied response carries two or three of them: those
/// below [`SMALL_NUMBERS`] are made once per process from static bytes, so
/// a clone neither allocates nor touches a shared reference count.
pub(crate) fn number(n: u64) -> HeaderValue {
    static SMALL: std::sync::LazyLock<Vec<HeaderValue>> = std::sync::LazyLock::new(|| {
        let digits: &'static str = Box::leak(
            (0..SMALL_NUMBERS)
                .map(|n| n.to_string())
                .collect::<String>()
                .into_boxed_str(),
        );
        let mut at = 0;
        (0..SMALL_NUMBERS)
            .map(|n| {
                let len = n.checked_ilog10().unwrap_or(0) as usize + 1;
                let text = &digits[at..at + len];
                at += len;
                HeaderValue::from_maybe_shared(bytes::Bytes::from_static(text.as_bytes())).expect("digits")
            })
            .collect()
    });
    match SMALL.get(n as usize) {
        Some(value) if n < SMALL_NUMBERS => value.clone(),
        _ => HeaderValue::from(n),
    }
}

/// Kong's fields on a proxied response, beside its header map.
///
/// On a response no plugin sees, the HTTP/1.1 encoder writes them after the
/// upstream's fields, skipping the upstream's of the same names
/// (h1_server.rs), and HTTP/2 inserts them ([`KongFields::insert`]): four
/// to six hashed map inserts fewer per request. Where plugins run they go
/// into the map before the plugins' header filters see it (handler.rs).
#[derive(Debug)]
pub(crate) struct KongFields {
    /// Upstream latency, proxy latency and upstream status, [`UNSET`] when
    /// not sent; kept as numbers, so the value that moves with every
    /// response stays small (its header values come from [`number`]).
    numbers: [u32; 3],
    /// `X-Kong-Request-Id`.
    request_id: Option<RequestId>,
    /// `Via`, added to the upstream's.
    pub via: bool,
    /// `Server`, when the upstream sent none.
    pub server: bool,
    /// The upstream head's lines, when it is passed on as it is (relay.rs):
    /// the response's map then holds only what Strait added.
    pub relayed: Option<Box<crate::pipeline::relay::RelayedHead>>,
    /// Fields a plugin's `access` asked for (rate-limiting's, ...) on a
    /// response no plugin filters (phases.rs): written after the upstream's,
    /// without a map in between.
    pub added: strait_plugins::AddedHeaders,
}

const UNSET: u32 = u32::MAX;

impl Default for KongFields {
    fn default() -> KongFields {
        KongFields {
            numbers: [UNSET; 3],
            request_id: None,
            via: false,
            server: false,
            relayed: None,
            added: strait_plugins::AddedHeaders::default(),
        }
    }
}

/// All start with `x-kong-` ([`KongFields::replaces`] relies on it).
static KONG_NAMES: [http::HeaderName; 4] = [
    http::HeaderName::from_static("x-kong-upstream-latency"),
    http::HeaderName::from_static("x-kong-proxy-latency"),
    http::HeaderName::from_static("x-kong-upstream-status"),
    crate::pipeline::handler::X_KONG_REQUEST_ID,
];

impl KongFields {
    pub fn set_upstream_latency(&mut self, ms: u64) {
        self.numbers[0] = ms.min(u64::from(UNSET - 1)) as u32;
    }

    pub fn set_proxy_latency(&mut self, ms: u64) {
        self.numbers[1] = ms.min(u64::from(UNSET - 1)) as u32;
    }

    pub fn set_upstream_status(&mut self, status: u16) {
        self.numbers[2] = u32::from(status);
    }

    pub fn set_request_id(&mut self, id: &RequestId) {
        self.request_id = Some(*id);
    }

    /// Each field set, with its value.
    fn each(&self) -> impl Iterator<Item = (&'static http::HeaderName, HeaderValue)> + '_ {
        let numbers = self
            .numbers
            .iter()
            .zip(&KONG_NAMES)
            .filter(|(n, _)| **n != UNSET)
            .map(|(n, name)| (name, number(u64::from(*n))));
        let id = self.request_id.map(|id| (&KONG_NAMES[3], id.header_value()));
        numbers.chain(id)
    }

    /// Whether the upstream's field `name` gives way to Strait's.
    pub fn replaces(&self, name: &str) -> bool {
        if !name.starts_with("x-kong-") {
            return false;
        }
        let set = |at: usize| {
            if at == 3 {
                self.request_id.is_some()
            } else {
                self.numbers[at] != UNSET
            }
        };
        KONG_NAMES
            .iter()
            .enumerate()
            .any(|(at, ours)| set(at) && ours.as_str() == name)
    }

    /// Whether the upstream's response (its relayed lines or `headers`)
    /// has a `Server`.
    fn upstream_has_server(&self, headers: &http::HeaderMap) -> bool {
        self.relayed.as_ref().is_some_and(|relayed| relayed.has_server) || headers.contains_key(http::header::SERVER)
    }

    /// The fields as HTTP/1.1 header lines; `headers` is the map they go
    /// with (`Server` only when neither it nor the relayed lines have one).
    pub fn encode(&self, headers: &http::HeaderMap, out: &mut bytes::BytesMut) {
        use crate::wire::h1_codec::put_field;
        out.extend_from_slice(self.added.as_lines());
        if self.via {
            put_field(b"via", crate::VIA_VALUE.as_bytes(), out);
        }
        for (at, &n) in self.numbers.iter().enumerate() {
            if n != UNSET {
                put_field(KONG_NAMES[at].as_str().as_bytes(), number(u64::from(n)).as_bytes(), out);
            }
        }
        if let Some(id) = &self.request_id {
            put_field(KONG_NAMES[3].as_str().as_bytes(), id.as_bytes(), out);
        }
        if self.server && !self.upstream_has_server(headers) {
            put_field(b"server", crate::SERVER_HEADER.as_bytes(), out);
        }
    }

    /// How many fields [`KongFields::put_into`] would leave in `headers`
    /// (the fields Strait added to the response, kept beside them).
    pub fn count(&self, headers: &http::HeaderMap) -> usize {
        let relayed = self.relayed.as_ref().map_or(0, |relayed| relayed.line_count());
        let added = self.added.as_lines().windows(2).filter(|w| w == b"\r\n").count();
        let server = self.server && !self.upstream_has_server(headers);
        headers.len()
            + relayed
            + added
            + usize::from(self.via)
            + self.numbers.iter().filter(|n| **n != UNSET).count()
            + usize::from(self.request_id.is_some())
            + usize::from(server)
    }

    /// Put the fields into `headers`, as the encoder would have written them
    /// (relayed lines first, as the map they would otherwise have been).
    pub fn insert(self, headers: &mut http::HeaderMap) {
        self.put_into(headers);
    }

    /// [`KongFields::insert`], the fields kept.
    pub fn put_into(&self, headers: &mut http::HeaderMap) {
        if let Some(relayed) = &self.relayed {
            relayed.unfold_into(headers);
        }
        self.added.append_to(headers);
        if self.via {
            headers.append(http::header::VIA, HeaderValue::from_static(crate::VIA_VALUE));
        }
        for (name, value) in self.each() {
            headers.insert(name, value);
        }
        if self.server && !headers.contains_key(http::header::SERVER) {
            headers.insert(http::header::SERVER, HeaderValue::from_static(crate::SERVER_HEADER));
        }
    }
}

impl Default for RequestId {
    fn default() -> RequestId {
        RequestId::new()
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_is_never_indexed_by_hpack() {
        let id = RequestId::new();
        let value = id.header_value();
        assert!(value.is_sensitive());
        assert_eq!(value.to_str().unwrap(), id.as_str());
    }

    #[test]
    fn numbers_are_their_decimal_digits_on_both_sides_of_the_table() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            200,
            504,
            999,
            1000,
            1023,
            1024,
            1025,
            65535,
            u64::MAX,
        ] {
            assert_eq!(number(n).to_str().unwrap(), n.to_string(), "{n}");
        }
    }

    #[test]
    fn kong_fields_encoded_are_kong_fields_inserted() {
        let mut upstream = http::HeaderMap::new();
        upstream.insert("x-kong-upstream-latency", HeaderValue::from_static("999"));
        upstream.insert("x-kong-request-id", HeaderValue::from_static("upstream's"));
        upstream.insert("via", HeaderValue::from_static("1.1 other"));
        upstream.insert("x-kong-other", HeaderValue::from_static("kept"));
        for (server_sent, request_id) in [(false, true), (true, false)] {
            let mut upstream = upstream.clone();
            if server_sent {
                upstream.insert("server", HeaderValue::from_static("origin"));
            }
            let id = RequestId::new();
            let make = || {
                let mut fields = KongFields {
                    via: true,
                    server: true,
                    ..KongFields::default()
                };
                fields.set_upstream_latency(7);
                fields.set_proxy_latency(1);
                fields.set_upstream_status(201);
                if request_id {
                    fields.set_request_id(&id);
                }
                fields
            };
            let fields = make();
            let mut out = bytes::BytesMut::new();
            for (name, value) in &upstream {
                if !fields.replaces(name.as_str()) {
                    crate::wire::h1_codec::put_field(name.as_str().as_bytes(), value.as_bytes(), &mut out);
                }
            }
            fields.encode(&upstream, &mut out);
            let mut encoded: Vec<(String, String)> = String::from_utf8(out.to_vec())
                .unwrap()
                .lines()
                .map(|l| l.split_once(": ").unwrap())
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            let mut map = upstream.clone();
            make().insert(&mut map);
            let mut inserted: Vec<(String, String)> = map
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
                .collect();
            encoded.sort();
            inserted.sort();
            assert_eq!(encoded, inserted);
            assert!(encoded.contains(&("x-kong-upstream-latency".into(), "7".into())));
            assert!(encoded.contains(&("x-kong-other".into(), "kept".into())));
            assert_eq!(encoded.iter().filter(|(n, _)| n == "via").count(), 2);
            assert_eq!(encoded.iter().filter(|(n, _)| n == "server").count(), 1);
            // Without an id of its own, the upstream's passes.
            assert_eq!(fields.replaces("x-kong-request-id"), request_id);
            let sent = if request_id { id.as_str() } else { "upstream's" };
            assert!(encoded.contains(&("x-kong-request-id".into(), sent.into())));
            // Strait's id goes into a map (HTTP/2 clients) never indexed by HPACK.
            assert_eq!(map["x-kong-request-id"].is_sensitive(), request_id);
        }
    }

    #[test]
    fn request_ids_are_32_hex_digits_and_differ() {
        let ids: Vec<RequestId> = (0..1000).map(|_| RequestId::new()).collect();
        for id in &ids {
            assert_eq!(id.as_str().len(), 32);
            assert!(id
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        }
        let distinct: std::collections::HashSet<&str> = ids.iter().map(RequestId::as_str).collect();
        assert_eq!(distinct.len(), ids.len());
        assert_eq!(&HEX_PAIRS[0x00], b"00");
        assert_eq!(&HEX_PAIRS[0xa5], b"a5");
        assert_eq!(&HEX_PAIRS[0xff], b"ff");
    }
}
