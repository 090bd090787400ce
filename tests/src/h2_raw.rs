//! Hand-made HTTP/2 frames over h2c prior knowledge, for requests no compliant client library
//! will send (upper-case or connection-specific header fields, a `content-length` that the DATA
//! frames contradict). Header blocks use HPACK literals without indexing and without Huffman
//! coding, which every decoder must accept.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;

pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// HTTP/2 error code PROTOCOL_ERROR.
pub const PROTOCOL_ERROR: u32 = 0x1;

/// One frame: 9-byte header and payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = payload.len() as u32;
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&length.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK integer with an `prefix`-bit prefix, the first byte's high bits set to `high`.
fn hpack_integer(out: &mut Vec<u8>, high: u8, prefix: u32, value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(high | value as u8);
        return;
    }
    out.push(high | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// A header block of literal fields (never indexed, raw strings), in order, bytes as given.
pub fn header_block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0x00);
        hpack_integer(&mut out, 0, 7, name.len());
        out.extend_from_slice(name.as_bytes());
        hpack_integer(&mut out, 0, 7, value.len());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// HTTP/2 error code REFUSED_STREAM.
pub const REFUSED_STREAM: u32 = 0x7;

/// What the server did with a stream.
#[derive(Debug, PartialEq, Eq)]
pub enum StreamOutcome {
    /// A response HEADERS frame; the status when it is an indexed static-table status.
    Response(Option<u16>),
    /// RST_STREAM with this error code.
    Reset(u32),
    /// GOAWAY with this error code.
    GoAway(u32),
    /// The connection closed with no answer for the stream.
    Closed,
    /// Nothing within the wait.
    Silent,
}

/// The (id, value) parameters of a SETTINGS frame's payload.
pub fn settings_params(payload: &[u8]) -> Vec<(u16, u32)> {
    payload
        .chunks_exact(6)
        .map(|p| {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
            )
        })
        .collect()
}

/// A raw h2c connection that has sent the preface and an empty SETTINGS frame.
pub struct RawH2 {
    stream: TcpStream,
}

impl RawH2 {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<RawH2> {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        stream.write_all(PREFACE).await?;
        stream.write_all(&frame(SETTINGS, 0, 0, &[])).await?;
        Ok(RawH2 { stream })
    }

    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// The parameters (id, value) of the server's first SETTINGS frame, and the increment of
    /// its WINDOW_UPDATE on stream 0 if one follows within `wait` (the connection window past
    /// the protocol's 65,535 bytes).
    pub async fn server_settings(&mut self, wait: Duration) -> (Vec<(u16, u32)>, Option<u32>) {
        let deadline = tokio::time::Instant::now() + wait;
        let mut settings = Vec::new();
        let mut window = None;
        while window.is_none() {
            let mut head = [0u8; 9];
            if !matches!(
                tokio::time::timeout_at(deadline, self.stream.read_exact(&mut head)).await,
                Ok(Ok(_))
            ) {
                break;
            }
            let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; length];
            if !matches!(
                tokio::time::timeout_at(deadline, self.stream.read_exact(&mut payload)).await,
                Ok(Ok(_))
            ) {
                break;
            }
            match kind {
                SETTINGS if flags & 0x1 == 0 && settings.is_empty() => {
                    settings = settings_params(&payload);
                    let _ = self.stream.write_all(&frame(SETTINGS, 0x1, 0, &[])).await;
                }
                WINDOW_UPDATE if stream == 0 && payload.len() == 4 => {
                    window = Some(u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff);
                }
                _ => {}
            }
        }
        (settings, window)
    }

    /// Reads frames until the server answers stream 1, resets it, goes away, or closes.
    /// Server SETTINGS are acknowledged as they arrive.
    pub async fn outcome(&mut self, wait: Duration) -> StreamOutcome {
        self.outcome_of(1, wait).await
    }

    /// As [`RawH2::outcome`], for stream `id`; frames of other streams are passed over.
    pub async fn outcome_of(&mut self, id: u32, wait: Duration) -> StreamOutcome {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut head = [0u8; 9];
            match tokio::time::timeout_at(deadline, self.stream.read_exact(&mut head)).await {
                Err(_) => return StreamOutcome::Silent,
                Ok(Err(_)) => return StreamOutcome::Closed,
                Ok(Ok(_)) => {}
            }
            let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; length];
            match tokio::time::timeout_at(deadline, self.stream.read_exact(&mut payload)).await {
                Err(_) => return StreamOutcome::Silent,
                Ok(Err(_)) => return StreamOutcome::Closed,
                Ok(Ok(_)) => {}
            }
            let code = |at: usize| {
                payload
                    .get(at..at + 4)
                    .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            };
            match kind {
                SETTINGS if flags & 0x1 == 0 => {
                    let _ = self.stream.write_all(&frame(SETTINGS, 0x1, 0, &[])).await;
                }
                HEADERS if stream == id => return StreamOutcome::Response(indexed_status(&payload, flags)),
                RST_STREAM if stream == id => return StreamOutcome::Reset(code(0)),
                GOAWAY => return StreamOutcome::GoAway(code(4)),
                _ => {}
            }
        }
    }
}

/// The status of a header block that starts with an indexed `:status` from the static table.
fn indexed_status(payload: &[u8], flags: u8) -> Option<u16> {
    let padded = flags & 0x8 != 0;
    let priority = flags & 0x20 != 0;
    let skip = usize::from(padded) + if priority { 5 } else { 0 };
    let first = *payload.get(skip)?;
    match first {
        0x88 => Some(200),
        0x89 => Some(204),
        0x8a => Some(206),
        0x8b => Some(304),
        0x8c => Some(400),
        0x8d => Some(404),
        0x8e => Some(500),
        _ => None,
    }
}
