//! The wire protocol between a control plane and its data planes: one
//! long-lived TLS connection per data plane, carrying frames of a 4-byte
//! big-endian length followed by that many bytes of JSON ([`Message`]).
//! docs/hybrid.md describes the exchange.

use serde::{Deserialize, Serialize};
use strait_core::{Config, ConfigChange};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame either side accepts (a whole configuration of a
/// million consumers is a few hundred MB of JSON).
pub const MAX_FRAME: usize = 1 << 30;

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
    /// The whole configuration at `version` (a data plane that is new, too
    /// far behind, or ahead of the control plane).
    Full {
        version: u64,
        hash: String,
        config: Box<Config>,
    },
    /// What changed from `base` to `version`: each entity touched once, as
    /// it stands at `version`.
    Changes {
        base: u64,
        version: u64,
        changes: Vec<ConfigChange>,
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

/// Write one frame; the number of bytes sent.
pub async fn write<W: AsyncWrite + Unpin>(writer: &mut W, message: &Message) -> std::io::Result<usize> {
    let body = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "a frame of {} bytes is over the limit of {MAX_FRAME}",
            body.len()
        )));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    writer.write_all(&frame).await?;
    writer.flush().await?;
    Ok(frame.len())
}

/// Read one frame; `Ok(None)` when the peer closed between frames.
pub async fn read<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<Option<Message>> {
    let mut length = [0u8; 4];
    match reader.read_exact(&mut length).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let length = u32::from_be_bytes(length) as usize;
    if length > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {length} bytes is over the limit of {MAX_FRAME}"),
        ));
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a frame does not decode: {e}")))
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
}
