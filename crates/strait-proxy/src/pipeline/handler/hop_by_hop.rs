//! Hop-by-hop fields: the ones a proxy never passes on (RFC 9110 7.6.1,
//! and those a `Connection` field names), and the comma lists that name
//! them.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

const HOPS: usize = 6;
/// `TE` last: [`strip_hop_by_hop`] treats it apart. A `static`, not a
/// `const`: a const array of names is made and dropped at each use.
pub(super) static HOP_BY_HOP: [HeaderName; HOPS] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::TE,
];

/// Remove hop-by-hop headers (and those named by `Connection`), keeping `te: trailers`.
/// Allocates only for names a `Connection` header lists (every request
/// passes here twice, and with many routes an allocation is a cache miss).
/// Most messages carry none of them, or only gRPC's `te: trailers`: one
/// pass over the names tells, and nothing is removed or re-inserted.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    strip_hop_by_hop_keeping(headers, true);
}

/// [`strip_hop_by_hop`]; `TE` goes whole unless `keep_trailers` (a
/// response's `TE` means nothing downstream).
pub(crate) fn strip_hop_by_hop_keeping(headers: &mut HeaderMap, keep_trailers: bool) {
    // Which of the fixed names are present, in one pass: only those are
    // removed (most upstreams send `Connection` and nothing else of them).
    let mut present = [false; HOPS];
    for name in headers.keys() {
        if let Some(at) = hop_index(name) {
            present[at] = true;
        }
    }
    let te = HOPS - 1;
    let only_te = present[..te].iter().all(|p| !p);
    if only_te && present[te] && keep_trailers {
        let mut values = headers.get_all(header::TE).iter();
        if values.next().is_some_and(|v| v.as_bytes() == b"trailers") && values.next().is_none() {
            return;
        }
    }
    if only_te && !present[te] {
        return;
    }
    // Names beyond the fixed set, parsed only for a token that is not one
    // of them: `Connection: keep-alive` (what most upstreams send)
    // allocates nothing.
    let mut named: Vec<HeaderName> = Vec::new();
    for token in headers
        .get_all(header::CONNECTION)
        .iter()
        .filter(|v| v.to_str().is_ok())
        .flat_map(|v| crate::wire::h1_codec::list_tokens(v.as_bytes()))
        .filter(|v| !v.is_empty())
    {
        if HOP_BY_HOP
            .iter()
            .any(|h| token.eq_ignore_ascii_case(h.as_str().as_bytes()))
        {
            continue;
        }
        if let Ok(name) = HeaderName::from_bytes(token) {
            named.push(name);
        }
    }
    let keeps_trailers = keep_trailers && present[te] && lists_token(headers, &header::TE, "trailers");
    for (name, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, present)| *present) {
        headers.remove(name);
    }
    for name in &named {
        headers.remove(name);
    }
    if keeps_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// Whether `name` is one of [`HOP_BY_HOP`].
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    hop_index(name).is_some()
}

/// Where `name` is in [`HOP_BY_HOP`]: standard names compared as such (an
/// integer each), the two others by their text.
pub(super) fn hop_index(name: &HeaderName) -> Option<usize> {
    if name == header::CONNECTION {
        Some(0)
    } else if name == header::TRANSFER_ENCODING {
        Some(3)
    } else if name == header::UPGRADE {
        Some(4)
    } else if name == header::TE {
        Some(5)
    } else {
        match name.as_str() {
            "keep-alive" => Some(1),
            "proxy-connection" => Some(2),
            _ => None,
        }
    }
}

/// Whether a comma-separated header (`Connection`, `TE`) lists `token`.
pub(crate) fn lists_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    // Split as bytes: every response's `Connection` passes here, and a
    // `str` split with trimming cost more than the rest of the check.
    headers.get_all(name).iter().any(|value| {
        crate::wire::h1_codec::list_tokens(value.as_bytes()).any(|part| part.eq_ignore_ascii_case(token.as_bytes()))
    })
}
