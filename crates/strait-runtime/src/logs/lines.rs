//! Line-oriented metric sinks (statsd, datadog): each queued entry holds
//! one request's lines, `\n`-separated. Over UDP each line is a datagram,
//! or lines are packed (joined by `\n`) into datagrams of at most
//! `packet_size` bytes; over TCP every line ends with `\n` on one kept-alive
//! connection. The socket and the peer's address are kept between batches
//! (the name is resolved again after a failure or a minute).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::sync::Mutex;

use super::queue::{Handler, SendFuture};

/// How long a resolved address is used before the name is looked up again.
const RESOLVE_EVERY: Duration = Duration::from_secs(60);

/// StatsD lines over UDP.
pub struct UdpLines {
    state: Arc<Mutex<UdpState>>,
}

struct UdpState {
    host: String,
    port: u16,
    /// 0: one datagram per line.
    packet_size: usize,
    timeout: Duration,
    peer: Option<(UdpSocket, SocketAddr, Instant)>,
}

impl UdpLines {
    pub fn new(host: &str, port: u16, packet_size: usize, timeout: Duration) -> UdpLines {
        UdpLines {
            state: Arc::new(Mutex::new(UdpState {
                host: host.to_string(),
                port,
                packet_size,
                timeout,
                peer: None,
            })),
        }
    }
}

/// The datagrams `lines` make: one per line, or packed up to `packet_size`
/// bytes (a line longer than that goes alone).
pub fn datagrams<'a>(lines: impl Iterator<Item = &'a [u8]>, packet_size: usize) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut current: Vec<u8> = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        if packet_size == 0 {
            out.push(line.to_vec());
            continue;
        }
        if !current.is_empty() && current.len() + 1 + line.len() > packet_size {
            out.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(b'\n');
        }
        current.extend_from_slice(line);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

impl UdpState {
    async fn peer(&mut self) -> Result<(&UdpSocket, SocketAddr), String> {
        let stale = self.peer.as_ref().is_none_or(|(_, _, at)| at.elapsed() > RESOLVE_EVERY);
        if stale {
            let where_to = format!("{}:{}", self.host, self.port);
            let peer = tokio::net::lookup_host((self.host.as_str(), self.port))
                .await
                .map_err(|e| format!("resolving {}: {e}", self.host))?
                .next()
                .ok_or_else(|| format!("{} has no address", self.host))?;
            let local = if peer.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
            let socket = UdpSocket::bind(local)
                .await
                .map_err(|e| format!("failed to connect to {where_to}: {e}"))?;
            self.peer = Some((socket, peer, Instant::now()));
        }
        match &self.peer {
            Some((socket, peer, _)) => Ok((socket, *peer)),
            None => Err("no socket".into()),
        }
    }

    async fn send(&mut self, batch: &[Vec<u8>]) -> Result<(), String> {
        let packet_size = self.packet_size;
        let (host, port) = (self.host.clone(), self.port);
        let (socket, peer) = self.peer().await?;
        let failed = |e: std::io::Error| format!("failed to send data to {host}:{port}: {e}");
        let lines = batch.iter().flat_map(|entry| entry.split(|b| *b == b'\n'));
        if packet_size == 0 {
            // A datagram per line, straight from the entry.
            for line in lines.filter(|l| !l.is_empty()) {
                socket.send_to(line, peer).await.map_err(failed)?;
            }
            return Ok(());
        }
        for datagram in datagrams(lines, packet_size) {
            socket.send_to(&datagram, peer).await.map_err(failed)?;
        }
        Ok(())
    }
}

impl Handler for UdpLines {
    fn send(&mut self, batch: Vec<Vec<u8>>) -> SendFuture {
        let state = self.state.clone();
        Box::pin(async move {
            let mut state = state.lock().await;
            let timeout = state.timeout;
            let sent = tokio::time::timeout(timeout, state.send(&batch))
                .await
                .unwrap_or_else(|_| Err(format!("could not send within {timeout:?}")));
            if sent.is_err() {
                state.peer = None;
            }
            sent
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_go_one_per_datagram_or_packed_up_to_the_size() {
        let lines = [&b"kong.a:1|c"[..], b"kong.bb:22|ms", b"kong.c:3|c"];
        assert_eq!(datagrams(lines.iter().copied(), 0).len(), 3);
        let packed = datagrams(lines.iter().copied(), 24);
        assert_eq!(
            packed,
            vec![b"kong.a:1|c\nkong.bb:22|ms".to_vec(), b"kong.c:3|c".to_vec()]
        );
        // A line longer than the packet goes alone.
        let long = datagrams([&b"kong.long.name:1|c"[..], b"x:1|c"].iter().copied(), 8);
        assert_eq!(long, vec![b"kong.long.name:1|c".to_vec(), b"x:1|c".to_vec()]);
    }
}
