//! The data plane's side: one connection to `cluster_control_plane`,
//! reconnected with jittered exponential backoff, that says what the node
//! serves and applies what the control plane sends through the snapshot
//! path: changes as a derived snapshot (cost in proportion to the change),
//! a whole configuration as a sync. Every applied version is written to
//! the node's local cache (an LMDB store under the prefix) on the compiler
//! thread before it is published, so a restart serves it at once, with or
//! without the control plane.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use strait_core::{ConfigChange, Entity};
use strait_snapshot::compiler::{CommitError, CommitFn, PublishError};
use strait_snapshot::SnapshotPublisher;

use crate::cp::{PING_EVERY, SILENCE};
use crate::frame::{self, Message, PROTOCOL};
use crate::tls::ClusterTls;

/// Reconnect backoff: from the first, doubling up to the last, each wait
/// drawn between half and all of it (so a fleet that lost its control
/// plane at once does not come back at once).
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// Where a data plane keeps what it applied.
pub trait ConfigCache: Send + Sync {
    fn apply(&self, version: u64, changes: &[ConfigChange], hash: Option<&str>);
    /// A transfer in parts begins: the cache is emptied and not used
    /// until [`ConfigCache::finish`].
    fn begin_whole(&self);
    /// One part of it (its own bounded transaction).
    fn add(&self, entities: &[Entity]);
    /// The transfer is complete at `version`.
    fn finish(&self, version: u64, hash: &str);
}

/// A transfer of the whole configuration under way: each part goes into a
/// snapshot built beside the running one, published at the end.
struct Parts {
    version: u64,
    hash: String,
    expected: u64,
    received: u64,
    builder: strait_snapshot::SnapshotBuilder,
}

/// What `/status` says about the control plane.
#[derive(Debug, Default)]
pub struct DataPlaneStatus {
    pub control_plane: String,
    connected: AtomicBool,
    /// Unix seconds of the last configuration applied (0: none yet).
    last_sync: AtomicI64,
    /// Connections made to the control plane.
    connects: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl DataPlaneStatus {
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    pub fn last_sync(&self) -> i64 {
        self.last_sync.load(Ordering::Relaxed)
    }

    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn failed(&self, error: String) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
    }
}

/// Everything a data plane needs to follow its control plane.
pub struct DataPlane {
    /// `host:port`.
    pub control_plane: String,
    pub tls: ClusterTls,
    pub publisher: SnapshotPublisher,
    pub cache: Arc<dyn ConfigCache>,
    pub node_id: String,
    pub hostname: String,
    pub plugins: Vec<String>,
    /// `/status/ready`: set once the node has a configuration to serve
    /// (its cache at start, or the first one the control plane sends).
    pub ready: Arc<AtomicBool>,
}

/// A spawned task that ends with the value holding it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A random fraction in [0.5, 1) from the clock and the node (jitter needs
/// spread across nodes, not cryptographic randomness).
fn jitter(node_id: &str, attempt: u32) -> f64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    let mut x = nanos ^ (attempt as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in node_id.bytes() {
        x = (x ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    0.5 + (x % 1_000_000) as f64 / 2_000_000.0
}

impl DataPlane {
    /// Follow the control plane on a thread of its own until the process
    /// ends; the status the Admin API shows.
    pub fn start(self) -> Result<Arc<DataPlaneStatus>, String> {
        let client = self.tls.client_config()?;
        let status = Arc::new(DataPlaneStatus {
            control_plane: self.control_plane.clone(),
            ..Default::default()
        });
        let shown = status.clone();
        crate::spawn_on_thread("the data plane's sync", move || self.follow(client, status))?;
        Ok(shown)
    }

    async fn follow(self, client: Arc<rustls::ClientConfig>, status: Arc<DataPlaneStatus>) {
        let connector = tokio_rustls::TlsConnector::from(client);
        let mut attempt = 0u32;
        // After a configuration that would not apply, ask for the whole one.
        let mut want_full = false;
        loop {
            let outcome = self.session(&connector, &status, &mut want_full).await;
            status.connected.store(false, Ordering::Release);
            match outcome {
                Ok(()) => {
                    tracing::warn!(control_plane = %self.control_plane, "the control plane closed the connection");
                    attempt = 0;
                }
                Err((error, synced)) => {
                    if synced {
                        attempt = 0;
                    }
                    if attempt == 0 {
                        tracing::warn!(
                            control_plane = %self.control_plane,
                            %error,
                            "no connection to the control plane: serving the last configuration"
                        );
                    }
                    status.failed(error);
                }
            }
            let ceiling = BACKOFF_FIRST.saturating_mul(1u32 << attempt.min(10)).min(BACKOFF_MAX);
            let wait = ceiling.mul_f64(jitter(&self.node_id, attempt));
            attempt = attempt.saturating_add(1);
            tokio::time::sleep(wait).await;
        }
    }

    /// One connection, until it ends: `Err((why, whether it got as far as
    /// the hello))`.
    async fn session(
        &self,
        connector: &tokio_rustls::TlsConnector,
        status: &DataPlaneStatus,
        want_full: &mut bool,
    ) -> Result<(), (String, bool)> {
        let fail = |e: String| (e, false);
        let tcp = tokio::time::timeout(CONNECT_WITHIN, tokio::net::TcpStream::connect(&self.control_plane))
            .await
            .map_err(|_| fail("connecting timed out".into()))?
            .map_err(|e| fail(format!("connecting: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let tls = tokio::time::timeout(CONNECT_WITHIN, connector.connect(self.tls.server_name(), tcp))
            .await
            .map_err(|_| fail("the TLS handshake timed out".into()))?
            .map_err(|e| fail(format!("TLS handshake: {e}")))?;
        let (mut reader, mut writer) = tokio::io::split(tls);
        let current = self.publisher.current().load_full();
        let hello = Message::Hello {
            protocol: PROTOCOL,
            node_id: self.node_id.clone(),
            hostname: self.hostname.clone(),
            version: strait_core::VERSION.to_string(),
            plugins: self.plugins.clone(),
            config_version: if *want_full { 0 } else { current.version },
            config_hash: current.hash.clone(),
        };
        frame::write(&mut writer, &hello)
            .await
            .map_err(|e| fail(format!("sending the hello: {e}")))?;
        status.connected.store(true, Ordering::Release);
        status.connects.fetch_add(1, Ordering::Relaxed);
        tracing::info!(control_plane = %self.control_plane, config_version = current.version, "connected to the control plane");
        let synced = |e: String| (e, true);
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        let mut heard = tokio::time::Instant::now();
        let mut parts: Option<Parts> = None;
        // Frames are read by a task of their own: a read is not cancel-safe
        // (a heartbeat firing halfway through a large frame would lose its
        // bytes), a channel's receive is. Two frames wait at most.
        let (inbound, mut incoming) = tokio::sync::mpsc::channel::<std::io::Result<Option<Message>>>(2);
        let _reading = AbortOnDrop(tokio::spawn(async move {
            loop {
                let message = frame::read(&mut reader).await;
                let last = !matches!(message, Ok(Some(_)));
                if inbound.send(message).await.is_err() || last {
                    break;
                }
            }
        }));
        loop {
            tokio::select! {
                message = incoming.recv() => {
                    heard = tokio::time::Instant::now();
                    let message = match message {
                        Some(Ok(Some(message))) => message,
                        Some(Ok(None)) | None => return Ok(()),
                        Some(Err(error)) => return Err(synced(format!("reading: {error}"))),
                    };
                    let reply = match message {
                        Message::Changes { base, version, hash, changes } => {
                            let running = self.publisher.current().load().version;
                            if running != base {
                                *want_full = true;
                                return Err(synced(format!(
                                    "changes from version {base} while serving {running}: asking for the whole configuration"
                                )));
                            }
                            if let Err(error) = self.apply_changes(version, hash, changes).await {
                                *want_full = true;
                                return Err(synced(error));
                            }
                            self.ready.store(true, Ordering::Release);
                            status.last_sync.store(now(), Ordering::Relaxed);
                            Some(self.ack())
                        }
                        Message::FullStart { version, hash, entities } => {
                            // The cache is rewritten part by part and unused until the end.
                            self.cache.begin_whole();
                            parts = Some(Parts {
                                version,
                                hash,
                                expected: entities,
                                received: 0,
                                builder: Default::default(),
                            });
                            None
                        }
                        Message::FullBatch { entities } => {
                            let Some(transfer) = parts.as_mut() else {
                                return Err(synced("a batch outside a transfer".into()));
                            };
                            transfer.received += entities.len() as u64;
                            self.cache.add(&entities);
                            for entity in entities {
                                transfer.builder.add(entity);
                            }
                            None
                        }
                        Message::FullEnd { version } => {
                            let Some(transfer) = parts.take() else {
                                return Err(synced("the end of a transfer that did not start".into()));
                            };
                            if transfer.version != version || transfer.received != transfer.expected {
                                return Err(synced(format!(
                                    "a transfer of {} entities at version {} ended with {} at version {version}",
                                    transfer.expected, transfer.version, transfer.received
                                )));
                            }
                            self.install(transfer).await.map_err(|e| {
                                *want_full = true;
                                synced(e)
                            })?;
                            *want_full = false;
                            self.ready.store(true, Ordering::Release);
                            status.last_sync.store(now(), Ordering::Relaxed);
                            Some(self.ack())
                        }
                        Message::Incompatible { sync_status, reason } => {
                            tracing::error!(%sync_status, %reason, "the control plane's configuration cannot run here: serving the last configuration");
                            status.failed(reason);
                            None
                        }
                        Message::Ping => Some(Message::Pong),
                        _ => None,
                    };
                    if let Some(reply) = reply {
                        frame::write(&mut writer, &reply).await.map_err(|e| synced(format!("writing: {e}")))?;
                    }
                }
                _ = ping.tick() => {
                    if heard.elapsed() > SILENCE {
                        return Err(synced(format!("nothing heard for {SILENCE:?}")));
                    }
                    frame::write(&mut writer, &Message::Ping).await.map_err(|e| synced(format!("writing: {e}")))?;
                }
            }
        }
    }

    fn ack(&self) -> Message {
        let snapshot = self.publisher.current().load_full();
        Message::Ack {
            version: snapshot.version,
            hash: snapshot.hash.clone(),
        }
    }

    /// Publish a whole configuration that arrived in parts.
    async fn install(&self, transfer: Parts) -> Result<(), String> {
        let Parts {
            version, hash, builder, ..
        } = transfer;
        let snapshot = builder
            .finish(version, hash.clone())
            .map_err(|error| format!("the control plane's configuration {version} does not compile: {error}"))?;
        let cache = self.cache.clone();
        let commit: CommitFn = Box::new(move || -> Result<u64, CommitError> {
            cache.finish(version, &hash);
            Ok(version)
        });
        self.publisher
            .install(snapshot, commit)
            .await
            .map_err(|error| format!("the control plane's configuration {version} was not installed: {error}"))?;
        tracing::info!(version, "configuration from the control plane applied (whole)");
        // Building it left free pages; give them back (hundreds of MB for a
        // large configuration).
        strait_runtime::background::release_memory();
        Ok(())
    }

    async fn apply_changes(&self, version: u64, hash: String, changes: Vec<ConfigChange>) -> Result<(), String> {
        let count = changes.len();
        let (cache, copy, hash_copy) = (self.cache.clone(), changes.clone(), hash.clone());
        let commit: CommitFn = Box::new(move || -> Result<u64, CommitError> {
            cache.apply(version, &copy, Some(&hash_copy));
            Ok(version)
        });
        match self.publisher.apply_changes_hashed(changes, Some(hash), commit).await {
            Ok(_) => {
                tracing::debug!(version, changes = count, "changes from the control plane applied");
                Ok(())
            }
            Err(PublishError::Stopped) => Err("the compiler stopped".into()),
            Err(error) => Err(format!("changes to version {version} do not apply: {error}")),
        }
    }
}
