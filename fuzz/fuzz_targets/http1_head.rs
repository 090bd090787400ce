//! The HTTP/1 request head as the proxy front reads it: the preread decision (HTTP/1, HTTP/2
//! preface, refusal), then Strait's HTTP/1.1 server codec on an accepted head (httparse, the
//! request it builds and its framing rules), then the path normalization routing sees. None of
//! it may panic on any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strait_proxy::wire::conn::{examine_head, HeadDecision};
use strait_proxy::ClientLimits;

fuzz_target!(|data: &[u8]| {
    let limits = ClientLimits::default();
    // Every prefix, as bytes arrive one read at a time.
    for end in [1, data.len() / 2, data.len()] {
        let _ = examine_head(&data[..end.min(data.len())], &limits);
    }
    if examine_head(data, &limits) != Some(HeadDecision::Http1) {
        return;
    }
    if let Ok(Some(request)) = strait_proxy::parse_request_head(data, &limits) {
        let _ = strait_router::normalize_path(request.uri().path());
    }
});
