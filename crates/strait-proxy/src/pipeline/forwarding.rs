//! Kong's forwarding headers on an upstream request.
//!
//! Every proxied request carries `X-Forwarded-For`, `-Proto`, `-Host`,
//! `-Port`, `-Path` (and `-Prefix` when a prefix was stripped), `X-Real-IP`,
//! `Via` and, by default, `X-Kong-Request-Id`. Kong sets them with nginx's
//! `proxy_set_header`: they replace what the client sent under those names
//! (`Via` is added to the client's), after the plugins ran, and the request's
//! header map as plugins and balancers see it keeps the client's.
//!
//! [`Forwarding`] holds them beside the map. HTTP/1.1 upstreams get them from
//! the encoder (h1_client.rs), which skips the client's fields they replace:
//! nine header-map inserts, lookups and removals fewer on every request.
//! HTTP/2 upstreams get them inserted into the map ([`Forwarding::insert`]).
//! The host, path, stripped prefix and request id are borrowed from the
//! request, not copied into header values: three or four allocations fewer
//! per request.

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use strait_plugins::IdentityFields;

use crate::pipeline::handler::ConnInfo;
use crate::pipeline::kong_headers::RequestId;
use crate::wire::h1_codec::put_field;
use crate::VIA_VALUE;

const FIELDS: usize = 8;

/// What Strait sets, in the order it is written. All start with `x-`
/// ([`Forwarding::replaces`] relies on it).
static NAMES: [HeaderName; FIELDS] = [
    HeaderName::from_static("x-forwarded-for"),
    HeaderName::from_static("x-real-ip"),
    HeaderName::from_static("x-forwarded-proto"),
    HeaderName::from_static("x-forwarded-host"),
    HeaderName::from_static("x-forwarded-port"),
    HeaderName::from_static("x-forwarded-path"),
    HeaderName::from_static("x-forwarded-prefix"),
    crate::pipeline::handler::X_KONG_REQUEST_ID,
];
const FOR: usize = 0;
const REAL_IP: usize = 1;
const PROTO: usize = 2;
const HOST: usize = 3;
const PORT: usize = 4;
const PATH: usize = 5;
const PREFIX: usize = 6;
const REQUEST_ID: usize = 7;

/// One forwarding field's value: made for it, or borrowed from the request.
enum Value<'a> {
    Owned(HeaderValue),
    /// Checked as [`HeaderValue::from_str`] checks (see [`borrowed`]).
    Borrowed(&'a str),
    /// In a map, a sensitive value ([`RequestId::header_value`]).
    Id(&'a RequestId),
}

impl Value<'_> {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Value::Owned(value) => value.as_bytes(),
            Value::Borrowed(value) => value.as_bytes(),
            Value::Id(id) => id.as_bytes(),
        }
    }

    fn to_header_value(&self) -> HeaderValue {
        match self {
            Value::Owned(value) => value.clone(),
            Value::Borrowed(value) => HeaderValue::from_str(value).expect("checked by `borrowed`"),
            Value::Id(id) => id.header_value(),
        }
    }
}

/// `text` as a field value, when [`HeaderValue::from_str`] would take it
/// (visible ASCII, obs-text and tabs; no other control bytes).
fn borrowed(text: &str) -> Option<Value<'_>> {
    text.bytes()
        .all(|b| (b >= 32 && b != 127) || b == b'\t')
        .then_some(Value::Borrowed(text))
}

/// The forwarding headers of one upstream request.
pub(crate) struct Forwarding<'a> {
    /// `Some`: sent, replacing the client's field; `None` with the bit
    /// set in `replaced`: the client's field is dropped and none sent.
    values: [Option<Value<'a>>; FIELDS],
    /// Bit `i`: the client's field named `NAMES[i]` is not passed on.
    replaced: u8,
    /// Kong's identity fields the plugins set beside the map
    /// (strait-plugins identity.rs), written before the forwarding fields.
    identity: Option<&'a IdentityFields>,
}

impl<'a> Forwarding<'a> {
    /// Kong's forwarding headers for a client that is not a trusted proxy.
    /// `headers` are the client's (its `X-Forwarded-For` is extended);
    /// `prefix` is the path prefix the route stripped; `request_id` is
    /// `X-Kong-Request-Id` when sent upstream.
    pub(crate) fn new(
        headers: &HeaderMap,
        conn: &ConnInfo,
        host: &'a str,
        port: u16,
        path: &'a str,
        prefix: Option<&'a str>,
        request_id: Option<&'a RequestId>,
    ) -> Forwarding<'a> {
        let mut forwarding = Forwarding {
            values: Default::default(),
            replaced: 0,
            identity: None,
        };
        let forwarded_for = match headers.get(&NAMES[FOR]).and_then(|v| v.to_str().ok()) {
            Some(existing) => HeaderValue::from_str(&format!("{existing}, {}", conn.client.ip())).ok(),
            None => Some(conn.client_ip.clone()),
        };
        forwarding.set(FOR, forwarded_for.map(Value::Owned));
        forwarding.set(REAL_IP, Some(Value::Owned(conn.client_ip.clone())));
        let proto = HeaderValue::from_static(if conn.tls { "https" } else { "http" });
        forwarding.set(PROTO, Some(Value::Owned(proto)));
        forwarding.set(HOST, borrowed(host));
        let port = if port == conn.local.port() {
            conn.local_port.clone()
        } else {
            crate::pipeline::kong_headers::number(u64::from(port))
        };
        forwarding.set(PORT, Some(Value::Owned(port)));
        forwarding.set(PATH, borrowed(path));
        match prefix {
            Some(prefix) => forwarding.set(PREFIX, borrowed(prefix)),
            None => forwarding.replaced |= 1 << PREFIX,
        }
        forwarding.set(REQUEST_ID, request_id.map(Value::Id));
        forwarding
    }

    /// With the identity fields the plugins held beside the map (an
    /// HTTP/1.1 upstream: the encoder writes them).
    pub(crate) fn with_identity(mut self, identity: &'a IdentityFields) -> Forwarding<'a> {
        self.identity = Some(identity);
        self
    }

    /// A value that could not be a header value (a host or path with bytes
    /// no field may carry) leaves the client's field as it was.
    fn set(&mut self, field: usize, value: Option<Value<'a>>) {
        if value.is_some() {
            self.replaced |= 1 << field;
            self.values[field] = value;
        }
    }

    /// Whether the client's field `name` gives way to Strait's.
    pub(crate) fn replaces(&self, name: &str) -> bool {
        if !name.starts_with("x-") {
            return false;
        }
        NAMES
            .iter()
            .enumerate()
            .any(|(at, ours)| self.replaced & (1 << at) != 0 && ours.as_str() == name)
    }

    /// The fields as HTTP/1.1 header lines: the identity fields, then the
    /// forwarding fields, `Via` last.
    pub(crate) fn encode(&self, out: &mut BytesMut) {
        if let Some(identity) = self.identity {
            for (name, value) in identity.iter() {
                put_field(name.as_str().as_bytes(), value.as_bytes(), out);
            }
            out.extend_from_slice(identity.added_lines());
        }
        for (name, value) in NAMES.iter().zip(&self.values) {
            if let Some(value) = value {
                put_field(name.as_str().as_bytes(), value.as_bytes(), out);
            }
        }
        put_field(b"via", VIA_VALUE.as_bytes(), out);
    }

    /// Put the fields into `headers` (HTTP/2 upstreams), as the encoder
    /// would have written them.
    pub(crate) fn insert(&self, headers: &mut HeaderMap) {
        for (at, (name, value)) in NAMES.iter().zip(&self.values).enumerate() {
            if self.replaced & (1 << at) == 0 {
                continue;
            }
            match value {
                Some(value) => {
                    headers.insert(name, value.to_header_value());
                }
                None => {
                    headers.remove(name);
                }
            }
        }
        headers.append(header::VIA, HeaderValue::from_static(VIA_VALUE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    fn conn() -> ConnInfo {
        ConnInfo {
            alt_svc: None,
            client: "192.0.2.9:50000".parse().unwrap(),
            client_ip: HeaderValue::from_static("192.0.2.9"),
            local: "127.0.0.1:8000".parse().unwrap(),
            local_port: HeaderValue::from_static("8000"),
            tls: false,
            sni: None,
            client_cert: None,
        }
    }

    fn client_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("x-forwarded-for", "203.0.113.1"),
            ("x-real-ip", "203.0.113.1"),
            ("x-forwarded-host", "spoofed"),
            ("x-forwarded-prefix", "/spoofed"),
            ("x-kong-request-id", "spoofed"),
            ("via", "1.1 client-proxy"),
            ("x-other", "kept"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        headers
    }

    /// The encoder's lines for `headers` and `forwarding`, as h1_client.rs writes them.
    fn encoded(headers: &HeaderMap, forwarding: &Forwarding) -> Vec<(String, String)> {
        let mut out = BytesMut::new();
        for (name, value) in headers {
            if !forwarding.replaces(name.as_str()) {
                out.put_slice(format!("{}: {}\r\n", name, value.to_str().unwrap()).as_bytes());
            }
        }
        forwarding.encode(&mut out);
        String::from_utf8(out.to_vec())
            .unwrap()
            .lines()
            .map(|line| {
                let (name, value) = line.split_once(": ").unwrap();
                (name.to_string(), value.to_string())
            })
            .collect()
    }

    fn sorted(mut fields: Vec<(String, String)>) -> Vec<(String, String)> {
        fields.sort();
        fields
    }

    #[test]
    fn the_client_fields_strait_sets_are_replaced_and_via_is_added() {
        let headers = client_headers();
        let request_id = RequestId::new();
        let forwarding = Forwarding::new(&headers, &conn(), "example.test", 8000, "/a/b", None, Some(&request_id));
        let fields = sorted(encoded(&headers, &forwarding));
        let expect: Vec<(String, String)> = [
            ("via", "1.1 client-proxy"),
            ("via", VIA_VALUE),
            ("x-forwarded-for", "203.0.113.1, 192.0.2.9"),
            ("x-forwarded-host", "example.test"),
            ("x-forwarded-path", "/a/b"),
            ("x-forwarded-port", "8000"),
            ("x-forwarded-proto", "http"),
            ("x-kong-request-id", request_id.as_str()),
            ("x-other", "kept"),
            ("x-real-ip", "192.0.2.9"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        assert_eq!(fields, sorted(expect));
    }

    #[test]
    fn the_encoder_and_the_map_agree() {
        for (prefix, request_id, port) in [
            (None, None, 8000),
            (Some("/api"), Some(RequestId::new()), 9443),
            (Some("bad\nprefix"), None, 8000),
        ] {
            let headers = client_headers();
            let forwarding = Forwarding::new(&headers, &conn(), "h", port, "/p", prefix, request_id.as_ref());
            let by_encoder = sorted(encoded(&headers, &forwarding));
            let mut map = headers.clone();
            Forwarding::new(&headers, &conn(), "h", port, "/p", prefix, request_id.as_ref()).insert(&mut map);
            // HPACK never indexes the id (kong_headers::RequestId::header_value).
            if let Some(id) = map.get("x-kong-request-id").filter(|_| request_id.is_some()) {
                assert!(id.is_sensitive());
            }
            let by_map: Vec<(String, String)> = map
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
                .collect();
            assert_eq!(by_encoder, sorted(by_map), "prefix {prefix:?}");
        }
    }

    #[test]
    fn a_borrowed_value_is_taken_where_a_header_value_would_be() {
        for text in [
            "/a/b",
            "",
            "h\tt",
            "/caf\u{e9}",
            "a\r\nb",
            "a\0b",
            "a\x7fb",
            "x\x1fy",
            "~!*",
        ] {
            assert_eq!(
                borrowed(text).is_some(),
                HeaderValue::from_str(text).is_ok(),
                "{text:?}"
            );
        }
        let headers = HeaderMap::new();
        let forwarding = Forwarding::new(&headers, &conn(), "h\u{e9}", 8000, "/p\u{e9}", Some("/p"), None);
        let mut map = HeaderMap::new();
        forwarding.insert(&mut map);
        assert_eq!(map["x-forwarded-host"].as_bytes(), "h\u{e9}".as_bytes());
        assert_eq!(map["x-forwarded-path"].as_bytes(), "/p\u{e9}".as_bytes());
        assert_eq!(map["x-forwarded-prefix"], "/p");
    }

    #[test]
    fn without_a_stripped_prefix_the_clients_is_dropped_and_an_invalid_one_leaves_it() {
        let headers = client_headers();
        let dropped = Forwarding::new(&headers, &conn(), "h", 8000, "/p", None, None);
        assert!(dropped.replaces("x-forwarded-prefix"));
        assert!(!encoded(&headers, &dropped)
            .iter()
            .any(|(n, _)| n == "x-forwarded-prefix"));
        let invalid = Forwarding::new(&headers, &conn(), "h", 8000, "/p", Some("a\r\nb"), None);
        assert!(!invalid.replaces("x-forwarded-prefix"));
        // Without an upstream request id, the client's passes as it came.
        assert!(!invalid.replaces("x-kong-request-id"));
        assert!(!invalid.replaces("host"));
    }
}
