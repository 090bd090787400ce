//! Kong's gRPC transcoding plugins: `grpc-web` (gRPC-Web and gRPC-Web-text
//! clients, binary or JSON messages, to a gRPC upstream) and `grpc-gateway`
//! (REST/JSON to gRPC by a `.proto` file's `google.api.http` annotations).
//! Both read the `.proto` file once, when the plugin is built ([`proto`]).

pub mod proto;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// A gRPC message frame: flags, big-endian length, payload.
pub(crate) fn frame(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + payload.len());
    out.put_u8(flags);
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

/// Splits a byte stream into gRPC frames as pieces of it arrive.
#[derive(Debug, Default)]
pub(crate) struct Unframer {
    held: BytesMut,
}

impl Unframer {
    pub fn push(&mut self, data: &[u8]) {
        self.held.extend_from_slice(data);
    }

    /// The next whole frame (flags, payload), if one is held.
    pub fn next_frame(&mut self) -> Option<(u8, Bytes)> {
        if self.held.len() < 5 {
            return None;
        }
        let length = u32::from_be_bytes([self.held[1], self.held[2], self.held[3], self.held[4]]) as usize;
        if self.held.len() < 5 + length {
            return None;
        }
        let flags = self.held[0];
        self.held.advance(5);
        Some((flags, self.held.split_to(length).freeze()))
    }

    /// Bytes of an unfinished frame.
    pub fn pending(&self) -> usize {
        self.held.len()
    }
}

/// Whether a response (by its head) is a gRPC answer, the only kind the
/// transcoders rewrite: errors Strait produces are left to become gRPC
/// statuses or Kong's JSON as usual.
pub(crate) fn is_grpc_answer(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// Kong's HTTP status for a gRPC status (google.rpc.Code's mapping).
pub(crate) fn http_status_of(grpc_status: u32) -> u16 {
    match grpc_status {
        0 => 200,
        1 => 499,
        3 | 9 | 11 => 400,
        4 => 504,
        5 => 404,
        6 | 10 => 409,
        7 => 403,
        8 => 429,
        14 => 503,
        16 => 401,
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_across_pieces_come_out_whole() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&frame(0, b"hello"));
        stream.extend_from_slice(&frame(0x80, b"grpc-status:0\r\n"));
        let mut unframer = Unframer::default();
        let mut out = Vec::new();
        for byte in stream {
            unframer.push(&[byte]);
            while let Some(frame) = unframer.next_frame() {
                out.push(frame);
            }
        }
        assert_eq!(
            out,
            vec![
                (0, Bytes::from_static(b"hello")),
                (0x80, Bytes::from_static(b"grpc-status:0\r\n"))
            ]
        );
        assert_eq!(unframer.pending(), 0);
    }

    #[test]
    fn grpc_statuses_map_to_kongs_http_statuses() {
        assert_eq!(http_status_of(0), 200);
        assert_eq!(http_status_of(5), 404);
        assert_eq!(http_status_of(12), 500);
        assert_eq!(http_status_of(14), 503);
        assert_eq!(http_status_of(16), 401);
        assert_eq!(http_status_of(99), 500);
    }
}
