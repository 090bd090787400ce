//! StatsD lines over UDP (statsd, datadog): each line a datagram, or lines
//! packed (joined by `\n`) into datagrams of at most `packet_size` bytes.
//! The socket and the peer's address are kept between flushes (the name is
//! resolved again after a failure or a minute). Over TCP the lines go
//! through Kong's queue ([`super::sinks::TcpSink`]).
//!
//! [`MetricLines`] is the UDP path of statsd and datadog: workers write a
//! request's lines straight into one of a few locked buffers (no queue
//! entry, no wake-up of the shipping thread), which the shipping thread
//! takes every flush window, merges ([`super::aggregate`]) and sends. A
//! plugin that knows its lines' shape pushes numbers instead
//! ([`MetricLines::push_templated`], [`super::templated`]): the text is
//! written once per key and window, on the shipping thread.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::sync::Notify;

use super::templated::{LineTemplate, Templated};

/// How long a resolved address is used before the name is looked up again.
const RESOLVE_EVERY: Duration = Duration::from_secs(60);

struct UdpState {
    host: String,
    port: u16,
    /// 0: one datagram per line.
    packet_size: usize,
    timeout: Duration,
    peer: Option<(UdpSocket, SocketAddr, Instant)>,
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
            // Connected, as Kong's `setpeername`: datagrams go without an
            // address, many to a system call (send_many.rs).
            socket
                .connect(peer)
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
        let (socket, _) = self.peer().await?;
        let failed = |e: std::io::Error| format!("failed to send data to {host}:{port}: {e}");
        let lines = batch.iter().flat_map(|entry| entry.split(|b| *b == b'\n'));
        if packet_size == 0 {
            // A datagram per line, straight from the entry.
            let lines: Vec<&[u8]> = lines.filter(|l| !l.is_empty()).collect();
            return super::send_many::send_all(socket, &lines).await.map_err(failed);
        }
        let packed = datagrams(lines, packet_size);
        let packed: Vec<&[u8]> = packed.iter().map(Vec::as_slice).collect();
        super::send_many::send_all(socket, &packed).await.map_err(failed)
    }
}

/// A buffer holding this many bytes wakes the shipping thread before its
/// window ends (bounding what waits at high request rates).
const FLUSH_BYTES: usize = 64 * 1024;

/// The shortest flush window: a `max_coalescing_delay` of 0 is not a busy loop.
const MIN_WINDOW: Duration = Duration::from_millis(10);

/// Where and how a [`MetricLines`] sends.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricLinesParams {
    pub host: String,
    pub port: u16,
    /// 0: one datagram per line; otherwise lines packed up to this size.
    pub packet_size: usize,
    /// How long lines wait to be merged and sent (Kong's `max_coalescing_delay`).
    pub window: Duration,
    /// Requests' entries that may wait (Kong's `max_entries`); more are dropped.
    pub max_entries: usize,
    /// Bytes that may wait (Kong's `max_bytes`); more are dropped.
    pub max_bytes: Option<usize>,
}

/// StatsD lines over UDP, merged per flush window (see the module's notes).
pub struct MetricLines {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    shards: Box<[std::sync::Mutex<Shard>]>,
    /// Entries and bytes a shard may hold.
    shard_entries: usize,
    shard_bytes: usize,
    notify: Notify,
    /// A wake-up is on its way (one per window at most).
    woken: AtomicBool,
    closed: AtomicBool,
}

#[derive(Default)]
struct Shard {
    lines: Vec<u8>,
    templated: Templated,
    entries: usize,
}

impl Shard {
    fn bytes(&self) -> usize {
        self.lines.len() + self.templated.bytes()
    }
}

/// The shard a thread writes to: threads take them in turn.
fn shard_of(count: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    MINE.with(|mine| *mine % count)
}

type Registry = std::sync::Mutex<HashMap<String, Weak<MetricLines>>>;

impl MetricLines {
    /// The live sender with these parameters, or a new one whose flushes
    /// run on the log shipping thread. Shared like Kong's queues: every
    /// instance with the same destination and settings uses one.
    pub fn shared(plugin: &str, params: MetricLinesParams) -> Arc<MetricLines> {
        static LIVE: OnceLock<Registry> = OnceLock::new();
        let name = format!("{plugin}:{params:?}");
        let mut live = LIVE
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        live.retain(|_, lines| lines.strong_count() > 0);
        if let Some(lines) = live.get(&name).and_then(Weak::upgrade) {
            return lines;
        }
        let count = std::thread::available_parallelism()
            .map_or(4, |n| 2 * n.get())
            .clamp(2, 64);
        let shared = Arc::new(Shared {
            name: name.clone(),
            shards: (0..count).map(|_| Default::default()).collect(),
            shard_entries: params.max_entries.div_ceil(count).max(1),
            shard_bytes: params.max_bytes.map_or(usize::MAX, |max| max.div_ceil(count).max(1)),
            notify: Notify::new(),
            woken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        super::background::spawn(flush_loop(shared.clone(), params));
        let lines = Arc::new(MetricLines { shared });
        live.insert(name, Arc::downgrade(&lines));
        lines
    }

    /// One request's lines, written by `write` (`\n`-separated, nothing when
    /// it writes nothing); false (and counted) when the buffers are full.
    pub fn push_with(&self, write: impl FnOnce(&mut Vec<u8>)) -> bool {
        let shared = &*self.shared;
        let Some(mut shard) = shared.shard() else {
            return false;
        };
        let mark = shard.lines.len();
        if mark > 0 {
            shard.lines.push(b'\n');
        }
        let start = shard.lines.len();
        write(&mut shard.lines);
        if shard.lines.len() <= start {
            shard.lines.truncate(mark);
            return true;
        }
        shard.entries += 1;
        let full = shard.bytes() >= FLUSH_BYTES;
        drop(shard);
        shared.wake_if(full);
        true
    }

    /// One request's lines as numbers: `values` in the template of `key`
    /// (a plugin's hash of everything its lines' text depends on), which
    /// `make` makes when this window has none ([`super::templated`]);
    /// false (and counted) when the buffers are full.
    pub fn push_templated(&self, key: u64, values: &[i64], make: impl FnOnce() -> LineTemplate) -> bool {
        let shared = &*self.shared;
        let Some(mut shard) = shared.shard() else {
            return false;
        };
        shard.templated.add(key, values, make);
        shard.entries += 1;
        let full = shard.bytes() >= FLUSH_BYTES;
        drop(shard);
        shared.wake_if(full);
        true
    }
}

impl Shared {
    /// This thread's buffer, or None (the request's lines counted as
    /// dropped) when it holds its share of entries or bytes.
    fn shard(&self) -> Option<std::sync::MutexGuard<'_, Shard>> {
        let shard = self.shards[shard_of(self.shards.len())]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if shard.entries >= self.shard_entries || shard.bytes() >= self.shard_bytes {
            drop(shard);
            super::queue::count_dropped(1, || {
                format!(
                    "metric lines {}: max_entries or max_bytes reached, entry dropped",
                    self.name
                )
            });
            return None;
        }
        Some(shard)
    }

    /// Wakes the shipping thread before its window ends (once a window).
    fn wake_if(&self, full: bool) {
        if full && !self.woken.swap(true, Ordering::AcqRel) {
            self.notify.notify_one();
        }
    }
}

impl Drop for MetricLines {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.notify.notify_one();
    }
}

/// Every window (or sooner, when a buffer fills): take the buffers, merge,
/// send. A failed send is not retried (a StatsD datagram is fire and forget;
/// the lines are counted as dropped). After the last sender is dropped, what
/// is left is sent and the loop ends.
async fn flush_loop(shared: Arc<Shared>, params: MetricLinesParams) {
    let window = params.window.max(MIN_WINDOW);
    let mut udp = UdpState {
        host: params.host,
        port: params.port,
        packet_size: params.packet_size,
        timeout: Duration::from_secs(10),
        peer: None,
    };
    let mut taken: Vec<Vec<u8>> = (0..shared.shards.len()).map(|_| Vec::new()).collect();
    let mut taken_templated: Vec<Templated> = (0..shared.shards.len()).map(|_| Templated::default()).collect();
    let mut written = Vec::new();
    let mut each = Vec::new();
    let mut merged = Vec::new();
    loop {
        if !shared.closed.load(Ordering::Acquire) {
            tokio::select! {
                _ = tokio::time::sleep(window) => {}
                _ = shared.notify.notified() => {}
            }
        }
        let closed = shared.closed.load(Ordering::Acquire);
        shared.woken.store(false, Ordering::Release);
        let mut entries = 0;
        for ((shard, into), templated) in shared
            .shards
            .iter()
            .zip(taken.iter_mut())
            .zip(taken_templated.iter_mut())
        {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::swap(&mut shard.lines, into);
            std::mem::swap(&mut shard.templated, templated);
            entries += std::mem::take(&mut shard.entries);
        }
        // The templated requests' lines, written here (off the workers),
        // then merged with the text lines as one window; the lines a merge
        // leaves as they are (timers) go after, unparsed.
        written.clear();
        each.clear();
        for templated in &mut taken_templated {
            templated.write(&mut written, &mut each);
            templated.clear();
        }
        merged.clear();
        super::aggregate::merge(
            taken
                .iter()
                .chain(std::iter::once(&written))
                .flat_map(|lines| lines.split(|b| *b == b'\n')),
            &mut merged,
        );
        if !each.is_empty() {
            if !merged.is_empty() {
                merged.push(b'\n');
            }
            merged.extend_from_slice(&each);
        }
        for lines in &mut taken {
            lines.clear();
        }
        if !merged.is_empty() {
            let timeout = udp.timeout;
            let batch = std::slice::from_ref(&merged);
            let sent = tokio::time::timeout(timeout, udp.send(batch))
                .await
                .unwrap_or_else(|_| Err(format!("could not send within {timeout:?}")));
            if let Err(error) = sent {
                udp.peer = None;
                super::queue::count_dropped(entries as u64, || {
                    format!("metric lines {}: {entries} entries dropped: {error}", shared.name)
                });
            }
        }
        if closed {
            return;
        }
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

    fn receive(socket: &std::net::UdpSocket, count: usize) -> Vec<String> {
        let mut buf = [0u8; 2048];
        (0..count)
            .map(|_| {
                let n = socket.recv(&mut buf).expect("a datagram within 5 s");
                String::from_utf8_lossy(&buf[..n]).into_owned()
            })
            .collect()
    }

    fn params(receiver: &std::net::UdpSocket, window: Duration, max_entries: usize) -> MetricLinesParams {
        receiver.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        MetricLinesParams {
            host: "127.0.0.1".into(),
            port: receiver.local_addr().unwrap().port(),
            packet_size: 0,
            window,
            max_entries,
            max_bytes: None,
        }
    }

    #[test]
    fn lines_are_merged_and_sent_each_window() {
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let lines = MetricLines::shared("test", params(&receiver, Duration::from_millis(200), 100));
        for _ in 0..3 {
            assert!(lines.push_with(|out| out.extend_from_slice(b"a:1|c\nt:5|ms")));
        }
        assert!(lines.push_with(|_| {}), "writing nothing is no entry");
        let mut got = receive(&receiver, 4);
        got.sort();
        assert_eq!(got, ["a:3|c", "t:5|ms", "t:5|ms", "t:5|ms"]);
    }

    #[test]
    fn a_full_buffer_drops_and_the_last_sender_flushes_what_is_left() {
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let lines = MetricLines::shared("test", params(&receiver, Duration::from_secs(3600), 1));
        assert!(lines.push_with(|out| out.extend_from_slice(b"a:1|c\nt:5|ms")));
        assert!(
            !lines.push_with(|out| out.extend_from_slice(b"a:1|c")),
            "max_entries reached"
        );
        drop(lines);
        assert_eq!(receive(&receiver, 2), ["a:1|c", "t:5|ms"]);
    }
}
