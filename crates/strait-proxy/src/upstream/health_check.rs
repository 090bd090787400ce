//! Active health checks: probes the targets of every upstream whose
//! `healthchecks.active` sets an interval, on a thread of its own.
//!
//! Every [`TICK`] the checker loads the current snapshot and starts the
//! probes that are due: a healthy target every `healthy.interval`, an
//! unhealthy one every `unhealthy.interval` (0 never probes targets in that
//! state), at most `concurrency` probes at a time per upstream. A probe is
//! what Kong's checker sends: a TCP connect (`tcp`), or an HTTP/1.1
//! `GET http_path` over plain TCP or TLS (`http`, `https`) whose status line
//! is judged by the `http_statuses` lists. The result goes to the target's
//! health ([`strait_runtime::health`]), which the balancers read; nothing is
//! rebuilt.
//!
//! The thread keeps normal priority (unlike the compiler and the Admin
//! API): a probe is small, and under saturation an idle-class checker would
//! never re-admit a target that came back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use strait_runtime::health::{Report, TargetHealth};
use strait_runtime::tls::ClientTls;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{watch, Semaphore};

use strait_snapshot::balancer::{ActiveChecks, Balancer, ProbeKind, TargetAddress};
use strait_snapshot::snapshot::Snapshot;

/// How often the checker looks for due probes.
const TICK: Duration = Duration::from_millis(100);
/// Most bytes read looking for the status line.
const MAX_STATUS_LINE: usize = 8 * 1024;

/// Start the checker thread; it stops when `shutdown` turns true.
pub fn start(
    snapshot: Arc<ArcSwap<Snapshot>>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("strait-health".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::error!(%error, "could not start the health checker");
                return;
            }
        };
        runtime.block_on(run(snapshot, shutdown));
    })
}

/// When a target is next due, whether its last probe still runs, and the
/// tick that last saw it (entries not seen are dropped).
struct Schedule {
    due: Instant,
    running: Arc<AtomicBool>,
    seen: u64,
}

/// A target's key: its health object, which the registry hands every
/// balancer of the same upstream and target (no string built per tick).
fn target_key(health: &Arc<TargetHealth>) -> usize {
    Arc::as_ptr(health) as usize
}

async fn run(snapshot: Arc<ArcSwap<Snapshot>>, mut shutdown: watch::Receiver<bool>) {
    let mut schedules: HashMap<usize, Schedule> = HashMap::new();
    let mut limits: HashMap<uuid::Uuid, (usize, Arc<Semaphore>, u64)> = HashMap::new();
    let mut tick = 0u64;
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = crate::stopped(&mut shutdown) => return,
        }
        tick += 1;
        let current = snapshot.load_full();
        let now = Instant::now();
        for balancer in current.balancers() {
            let Some(active) = &balancer.checks.active else {
                continue;
            };
            let semaphore = match limits.get_mut(&balancer.upstream_id) {
                Some((size, semaphore, seen)) if *size == active.concurrency => {
                    *seen = tick;
                    semaphore.clone()
                }
                _ => {
                    let semaphore = Arc::new(Semaphore::new(active.concurrency));
                    limits.insert(balancer.upstream_id, (active.concurrency, semaphore.clone(), tick));
                    semaphore
                }
            };
            for peer in balancer.peers() {
                let interval = if peer.health.is_healthy() {
                    active.healthy_interval
                } else {
                    active.unhealthy_interval
                };
                let schedule = schedules.entry(target_key(&peer.health)).or_insert_with(|| Schedule {
                    due: now,
                    running: Arc::new(AtomicBool::new(false)),
                    seen: tick,
                });
                schedule.seen = tick;
                if interval.is_zero() {
                    continue;
                }
                if schedule.due > now || schedule.running.load(Ordering::Relaxed) {
                    continue;
                }
                schedule.due = now + interval;
                schedule.running.store(true, Ordering::Relaxed);
                let probe = Probe {
                    upstream: balancer.upstream_name.clone(),
                    target: peer.name.clone(),
                    address: peer.address.clone(),
                    host_header: host_header(balancer, &peer.address),
                    checks: active.clone(),
                    health: peer.health.clone(),
                };
                let running = schedule.running.clone();
                let semaphore = semaphore.clone();
                tokio::spawn(async move {
                    if let Ok(_permit) = semaphore.acquire().await {
                        probe.run().await;
                    }
                    running.store(false, Ordering::Relaxed);
                });
            }
        }
        schedules.retain(|_, schedule| schedule.seen == tick);
        limits.retain(|_, (_, _, seen)| *seen == tick);
    }
}

/// The `Host` a probe sends: the upstream's `host_header`, else the target.
fn host_header(balancer: &Balancer, address: &TargetAddress) -> String {
    match &balancer.host_header {
        Some(host) => host.clone(),
        None => address.name(),
    }
}

struct Probe {
    upstream: String,
    target: String,
    address: TargetAddress,
    host_header: String,
    checks: ActiveChecks,
    health: Arc<TargetHealth>,
}

impl Probe {
    async fn run(self) {
        let report = match tokio::time::timeout(self.checks.timeout, self.exchange()).await {
            Err(_) => Some(Report::Timeout),
            Ok(report) => report,
        };
        let Some(report) = report else {
            return;
        };
        if let Some(healthy) = self.health.report(report, &self.checks.limits) {
            tracing::warn!(
                upstream = %self.upstream,
                target = %self.target,
                healthy,
                ?report,
                "active health check changed the target's health"
            );
        }
    }

    /// What one probe reports; `None` for a status in neither list.
    async fn exchange(&self) -> Option<Report> {
        if matches!(self.checks.kind, ProbeKind::Grpc | ProbeKind::Grpcs) {
            return self.grpc_exchange().await;
        }
        let tls_name = self.checks.https_sni.as_deref().unwrap_or(&self.address.host);
        let tls = (self.checks.kind == ProbeKind::Https).then_some(ClientTls {
            server_name: tls_name,
            verify: self.checks.verify_certificate,
        });
        let addr = match crate::upstream::dns::resolve(&self.address.host, self.address.port).await {
            Ok(addr) => addr,
            Err(error) => {
                tracing::debug!(target = %self.target, %error, "health probe could not resolve the target");
                return Some(Report::TcpFailure);
            }
        };
        let mut stream = match strait_runtime::tls::connect(&addr.ip().to_string(), addr.port(), tls).await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(target = %self.target, %error, "health probe could not connect");
                return Some(Report::TcpFailure);
            }
        };
        if self.checks.kind == ProbeKind::Tcp {
            return Some(Report::Success);
        }
        let mut request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: strait-health-check\r\nConnection: close\r\n",
            self.checks.http_path, self.host_header
        );
        for (name, value) in &self.checks.headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        if stream.write_all(request.as_bytes()).await.is_err() {
            return Some(Report::TcpFailure);
        }
        match read_status(&mut stream).await {
            Some(status) => self.checks.judge(status),
            None => Some(Report::TcpFailure),
        }
    }
}

impl Probe {
    /// The gRPC health-checking protocol: `grpc.health.v1.Health/Check`
    /// with an empty request (the server's overall health). SERVING is a
    /// success; another status, a `grpc-status` other than 0 or an HTTP
    /// status in the unhealthy list is an HTTP failure.
    async fn grpc_exchange(&self) -> Option<Report> {
        use http_body_util::{BodyExt, Full};
        let addr = match crate::upstream::dns::resolve(&self.address.host, self.address.port).await {
            Ok(addr) => addr,
            Err(_) => return Some(Report::TcpFailure),
        };
        let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
            return Some(Report::TcpFailure);
        };
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn strait_runtime::tls::Stream> = if self.checks.kind == ProbeKind::Grpcs {
            let name = self
                .checks
                .https_sni
                .clone()
                .unwrap_or_else(|| self.address.host.clone());
            let Ok(config) = strait_runtime::tls::client_config(self.checks.verify_certificate) else {
                return Some(Report::TcpFailure);
            };
            let mut config = (*config).clone();
            config.alpn_protocols = vec![b"h2".to_vec()];
            let Ok(server_name) = rustls::pki_types::ServerName::try_from(name) else {
                return Some(Report::TcpFailure);
            };
            match tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(server_name, tcp)
                .await
            {
                Ok(tls) => Box::new(tls),
                Err(_) => return Some(Report::TcpFailure),
            }
        } else {
            Box::new(tcp)
        };
        let handshake = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(io),
        );
        let Ok((mut sender, connection)) = handshake.await else {
            return Some(Report::TcpFailure);
        };
        tokio::spawn(connection);
        let scheme = if self.checks.kind == ProbeKind::Grpcs {
            "https"
        } else {
            "http"
        };
        let mut request = http::Request::post(format!("{scheme}://{}/grpc.health.v1.Health/Check", self.host_header))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (name, value) in &self.checks.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        // One gRPC message: not compressed, length 0 (an empty HealthCheckRequest).
        let request = request
            .body(Full::new(bytes::Bytes::from_static(&[0, 0, 0, 0, 0])))
            .ok()?;
        let Ok(response) = sender.send_request(request).await else {
            return Some(Report::TcpFailure);
        };
        if response.status() != http::StatusCode::OK {
            return self.checks.judge(response.status().as_u16());
        }
        let header_status = response.headers().get("grpc-status").cloned();
        let Ok(collected) = response.into_body().collect().await else {
            return Some(Report::TcpFailure);
        };
        let grpc_status = collected
            .trailers()
            .and_then(|t| t.get("grpc-status").cloned())
            .or(header_status);
        if grpc_status.as_ref().map(|v| v.as_bytes()) != Some(b"0") {
            return Some(Report::HttpFailure);
        }
        match serving_status(&collected.to_bytes()) {
            Some(1) => Some(Report::Success),
            _ => Some(Report::HttpFailure),
        }
    }
}

/// The `status` (field 1) of a HealthCheckResponse in one gRPC message.
fn serving_status(message: &[u8]) -> Option<u64> {
    let body = message.get(5..)?;
    let mut at = 0;
    while at < body.len() {
        let key = body[at];
        at += 1;
        let (value, used) = varint(body.get(at..)?)?;
        at += used;
        match (key >> 3, key & 0x7) {
            (1, 0) => return Some(value),
            (_, 0) => {}
            // Length-delimited fields (none in this message today): skip them.
            (_, 2) => at += value as usize,
            _ => return None,
        }
    }
    // Field 1 absent: its default, UNKNOWN (0).
    Some(0)
}

fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The status code of the first line the server sends.
async fn read_status(stream: &mut Box<dyn strait_runtime::tls::Stream>) -> Option<u16> {
    let mut buffer = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    while !buffer.contains(&b'\n') {
        if buffer.len() > MAX_STATUS_LINE {
            return None;
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    parse_status_line(&buffer)
}

/// `HTTP/1.x NNN ...` -> NNN.
fn parse_status_line(bytes: &[u8]) -> Option<u16> {
    let line = bytes.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    if !words.next()?.starts_with("HTTP/") {
        return None;
    }
    words.next()?.parse().ok().filter(|s| (100..=999).contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_responses_parse() {
        assert_eq!(serving_status(&[0, 0, 0, 0, 2, 0x08, 0x01]), Some(1));
        assert_eq!(serving_status(&[0, 0, 0, 0, 2, 0x08, 0x02]), Some(2));
        assert_eq!(serving_status(&[0, 0, 0, 0, 0]), Some(0), "UNKNOWN by default");
        assert_eq!(serving_status(&[0, 0, 0]), None);
    }

    #[test]
    fn status_lines_parse() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK\r\nx: y"), Some(200));
        assert_eq!(parse_status_line(b"HTTP/1.0 503\r\n"), Some(503));
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse_status_line(b"HTTP/1.1 abc\r\n"), None);
    }
}
