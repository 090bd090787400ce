//! The HTTP/1 request head as the proxy front reads it: the preread decision (HTTP/1, HTTP/2
//! preface, refusal), then hyper's parser (httparse) on an accepted head, then the path
//! normalization routing sees. None of it may panic on any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strait_proxy::conn::{examine_head, HeadDecision};
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
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut request = httparse::Request::new(&mut headers);
    if let Ok(httparse::Status::Complete(_)) = request.parse(data) {
        if let Some(path) = request.path {
            let raw = path.split('?').next().unwrap_or(path);
            let _ = strait_router::normalize_path(raw);
        }
    }
});
