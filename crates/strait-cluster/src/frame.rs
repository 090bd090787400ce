//! The wire protocol between a control plane and its data planes: one
//! long-lived TLS connection per data plane, carrying frames of a 4-byte
//! big-endian header followed by the payload: a [`Message`] as JSON. The
//! header's top bit says the payload is deflated (payloads of
//! [`COMPRESS_OVER`] bytes or more, when that makes them smaller); the
//! other 31 bits are the payload's length. docs/hybrid.md describes the
//! exchange.

use serde::{Deserialize, Serialize};
use std::io::Read as _;
use strait_core::ConfigChange;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame either side accepts (a whole configuration of a
/// million consumers is a few hundred MB of JSON).
pub const MAX_FRAME: usize = 1 << 30;

/// Payloads from this size on are sent deflated.
pub const COMPRESS_OVER: usize = 64 << 10;
const DEFLATED: u32 = 1 << 31;

/// The protocol's version, sent in [`Message::Hello`]; a control plane
/// refuses a data plane that speaks another.
pub const PROTOCOL: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)]
pub enum Message {
    /// First frame of a data plane: who it is and what it serves.
    Hello {
        protocol: u32,
        node_id: String,
        hostname: String,
        /// Strait's version.
        version: String,
        /// Every plugin this build has.
        plugins: Vec<String>,
        config_version: u64,
        config_hash: String,
    },
    /// What changed from `base` to `version`: each entity touched once, as
    /// it stands at `version`; `hash`: the configuration's at `version`.
    Changes {
        base: u64,
        version: u64,
        hash: String,
        changes: Vec<ConfigChange>,
    },
    /// The whole configuration (a data plane that is new, too far behind,
    /// or ahead of the control plane), in parts: `full_start`,
    /// `full_batch`es of at most 20,000 entities (services, routes and
    /// plugins together in the last), then `full_end`. The data plane adds
    /// each batch to a snapshot it builds beside the running one, and never
    /// holds the configuration twice.
    FullStart {
        version: u64,
        hash: String,
        entities: u64,
    },
    FullBatch {
        entities: Vec<strait_core::Entity>,
    },
    FullEnd {
        version: u64,
    },
    /// A data plane serves `version` (its snapshot's `hash`).
    Ack {
        version: u64,
        hash: String,
    },
    /// The configuration uses something this data plane lacks; it keeps
    /// serving what it has. `sync_status` is Kong's word for it.
    Incompatible {
        sync_status: String,
        reason: String,
    },
    Ping,
    Pong,
}

fn too_large(what: &str, length: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{what} of {length} bytes is over the limit of {MAX_FRAME}"),
    )
}

/// One frame's bytes: header and payload, deflated when large.
pub fn encode(message: &Message) -> std::io::Result<Vec<u8>> {
    let body = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(too_large("a frame", body.len()));
    }
    if body.len() >= COMPRESS_OVER {
        use std::io::Write as _;
        let mut deflater =
            flate2::write::DeflateEncoder::new(Vec::with_capacity(body.len() / 4), flate2::Compression::fast());
        deflater.write_all(&body)?;
        let packed = deflater.finish()?;
        if packed.len() < body.len() {
            let mut frame = Vec::with_capacity(4 + packed.len());
            frame.extend_from_slice(&(packed.len() as u32 | DEFLATED).to_be_bytes());
            frame.extend_from_slice(&packed);
            return Ok(frame);
        }
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Write one frame; the number of bytes sent.
pub async fn write<W: AsyncWrite + Unpin>(writer: &mut W, message: &Message) -> std::io::Result<usize> {
    let frame = encode(message)?;
    writer.write_all(&frame).await?;
    writer.flush().await?;
    Ok(frame.len())
}

/// Read one frame; `Ok(None)` when the peer closed between frames.
pub async fn read<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<Option<Message>> {
    let mut header = [0u8; 4];
    match reader.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let header = u32::from_be_bytes(header);
    let length = (header & !DEFLATED) as usize;
    if length > MAX_FRAME {
        return Err(too_large("a frame", length));
    }
    let mut payload = vec![0u8; length];
    reader.read_exact(&mut payload).await?;
    if header & DEFLATED == 0 {
        return serde_json::from_slice(&payload).map(Some).map_err(undecodable);
    }
    let mut body = Vec::with_capacity(length.saturating_mul(4).min(MAX_FRAME));
    flate2::read::DeflateDecoder::new(&payload[..])
        .take(MAX_FRAME as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a frame does not inflate: {e}"),
            )
        })?;
    drop(payload);
    if body.len() > MAX_FRAME {
        return Err(too_large("an inflated frame", body.len()));
    }
    serde_json::from_slice(&body).map(Some).map_err(undecodable)
}

fn undecodable(error: serde_json::Error) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("a frame does not decode: {error}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_errors() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let sent = Message::Ack {
            version: 7,
            hash: "h".into(),
        };
        let bytes = write(&mut a, &sent).await.unwrap();
        assert!(bytes > 4);
        match read(&mut b).await.unwrap() {
            Some(Message::Ack { version: 7, hash }) => assert_eq!(hash, "h"),
            other => panic!("{other:?}"),
        }
        a.write_all(&(u32::MAX).to_be_bytes()).await.unwrap();
        assert!(read(&mut b).await.is_err(), "an oversized frame is refused");
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&3u32.to_be_bytes()).await.unwrap();
        a.write_all(b"{x}").await.unwrap();
        assert!(read(&mut b).await.is_err(), "a frame that is not a message");
        drop(a);
        assert!(read(&mut b).await.unwrap().is_none(), "closed between frames");
    }

    #[tokio::test]
    async fn large_frames_travel_deflated() {
        let changes: Vec<ConfigChange> = (0..2_000)
            .map(|_| ConfigChange::Delete {
                kind: strait_core::EntityKind::Routes,
                id: uuid::Uuid::new_v4(),
            })
            .collect();
        let message = Message::Changes {
            base: 1,
            version: 2,
            hash: String::new(),
            changes,
        };
        let plain = serde_json::to_vec(&message).unwrap().len();
        let frame = encode(&message).unwrap();
        assert!(plain >= COMPRESS_OVER, "{plain}");
        assert_ne!(frame[0] & 0x80, 0, "the deflate bit");
        assert!(frame.len() < plain / 2, "{} of {plain}", frame.len());
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move { a.write_all(&frame).await });
        match read(&mut b).await.unwrap() {
            Some(Message::Changes { changes, .. }) => assert_eq!(changes.len(), 2_000),
            other => panic!("{other:?}"),
        }
    }
}
