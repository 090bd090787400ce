//! An upstream's HTTP/1 response as Strait's client codec reads it: the head (httparse, the
//! status, framing and keep-alive rules, the relayed form), then the body its framing gives
//! (Content-Length, chunked with extensions and trailers, to close). None of it may panic on
//! any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strait_proxy::wire::h1_client::read_response_bytes(data);
});
