//! An HTTP/3 request as Strait's QUIC listener reads it, without a network: the first byte
//! says how many of the following bytes go on the client's control stream (after its stream
//! type and an empty SETTINGS frame), the rest is the request stream: frames, QPACK header
//! fields, DATA, trailers. h3 reads them; Strait turns the request into the pipeline's
//! (version, Content-Length checks, the body read to its end). None of it may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strait_proxy::wire::h3_server::read_request_bytes(data);
});
