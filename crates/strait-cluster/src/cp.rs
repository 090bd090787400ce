//! The control plane's side: `cluster_listen` accepts data planes over
//! mutual TLS, answers each one's hello with what it lacks (the changes
//! since its version, or the whole configuration), then sends every new
//! version as it is published, and keeps the list of data planes that
//! `GET /clustering/data-planes` shows.
//!
//! Memory per data plane is bounded without a queue: a session computes
//! its next update only when its socket has taken the last one, from the
//! version that data plane holds to the version running then. A slow data
//! plane gets one larger update later (or the whole configuration, once
//! the store's change log no longer reaches back to its version), never a
//! backlog. The whole configuration is encoded once per version and the
//! bytes shared by every data plane that needs them.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use strait_core::ConfigChange;
use strait_snapshot::{Snapshot, SnapshotPublisher};
use strait_store::{ChangeOp, Store, StoreError};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::frame::{self, Message, PROTOCOL};
use crate::tls::ClusterTls;

/// How often each side pings the other; a session that hears nothing for
/// [`SILENCE`] is closed.
pub const PING_EVERY: Duration = Duration::from_secs(10);
pub const SILENCE: Duration = Duration::from_secs(35);
/// A TLS handshake and hello take at most this long.
const HELLO_WITHIN: Duration = Duration::from_secs(10);
/// How often the running version is looked at for new configurations.
const WATCH_EVERY: Duration = Duration::from_millis(5);

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// One data plane as the control plane knows it (Kong's
/// `clustering_data_planes` row, plus what Strait adds).
#[derive(Debug, Clone)]
pub struct DataPlane {
    pub id: String,
    pub hostname: String,
    pub ip: String,
    pub version: String,
    /// Kong's words: `normal`, `unknown`, `plugin_set_incompatible`, ...
    pub sync_status: String,
    /// The version and hash the data plane acknowledged serving.
    pub config_version: u64,
    pub config_hash: String,
    pub last_seen: i64,
    pub connected: bool,
    /// Frames' bytes sent to it since it connected.
    pub bytes_sent: u64,
}

/// Every data plane seen within `cluster_data_plane_purge_delay`.
#[derive(Debug)]
pub struct DataPlanes {
    planes: Mutex<HashMap<String, DataPlane>>,
    purge_delay: Duration,
}

impl DataPlanes {
    fn new(purge_delay: Duration) -> DataPlanes {
        DataPlanes {
            planes: Mutex::new(HashMap::new()),
            purge_delay,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, DataPlane>> {
        self.planes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, id: &str, change: impl FnOnce(&mut DataPlane)) {
        if let Some(plane) = self.lock().get_mut(id) {
            change(plane);
        }
    }

    /// The data planes by id; those disconnected and silent for longer
    /// than the purge delay are forgotten here.
    pub fn list(&self) -> Vec<DataPlane> {
        let cutoff = now() - self.purge_delay.as_secs() as i64;
        let mut planes = self.lock();
        planes.retain(|_, plane| plane.connected || plane.last_seen >= cutoff);
        let mut list: Vec<DataPlane> = planes.values().cloned().collect();
        list.sort_by(|a, b| a.id.cmp(&b.id));
        list
    }

    /// Seconds a data plane stays listed after it was last seen.
    pub fn purge_delay(&self) -> Duration {
        self.purge_delay
    }
}

/// What the control plane needs to serve data planes.
pub struct ControlPlane {
    pub listen: SocketAddr,
    /// `listen`, bound by the node (a socket a restart handed over, or a
    /// new one).
    pub socket: std::net::TcpListener,
    pub tls: ClusterTls,
    pub store: Arc<dyn Store>,
    pub publisher: SnapshotPublisher,
    pub purge_delay: Duration,
}

/// The whole configuration of one version as the frames of a transfer in
/// parts, encoded once and shared by every data plane that needs it.
type FullParts = Mutex<Option<(u64, Arc<Vec<Vec<u8>>>)>>;

/// Entities per `full_batch` frame.
const BATCH: usize = 20_000;

struct Shared {
    store: Arc<dyn Store>,
    publisher: SnapshotPublisher,
    planes: Arc<DataPlanes>,
    parts: FullParts,
}

impl ControlPlane {
    /// Serve data planes on `cluster_listen` on a thread of their own
    /// until the process ends; the list of data planes for the Admin API.
    pub fn start(self) -> Result<Arc<DataPlanes>, String> {
        let server = self.tls.server_config()?;
        let socket = self.socket;
        socket.set_nonblocking(true).map_err(|e| e.to_string())?;
        let planes = Arc::new(DataPlanes::new(self.purge_delay));
        let shared = Arc::new(Shared {
            store: self.store,
            publisher: self.publisher,
            planes: planes.clone(),
            parts: Mutex::new(None),
        });
        crate::spawn_on_thread("the cluster listener", move || serve(socket, server, shared))?;
        tracing::info!(listen = %self.listen, "control plane: listening for data planes");
        Ok(planes)
    }
}

async fn serve(socket: std::net::TcpListener, server: Arc<rustls::ServerConfig>, shared: Arc<Shared>) {
    let listener = match tokio::net::TcpListener::from_std(socket) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, "cluster listener setup failed");
            return;
        }
    };
    // One watcher for every session: the running version, as it changes.
    let (versions, _) = watch::channel(shared.publisher.current().load().version);
    let current = shared.publisher.current();
    let sender = versions.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            let version = current.load().version;
            sender.send_if_modified(|seen| std::mem::replace(seen, version) != version);
        }
    });
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "cluster listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, shared, versions) = (acceptor.clone(), shared.clone(), versions.subscribe());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HELLO_WITHIN, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::warn!(%peer, %error, "a data plane was refused at the TLS handshake");
                    return;
                }
                Err(_) => {
                    tracing::warn!(%peer, "a data plane did not finish its TLS handshake in time");
                    return;
                }
            };
            session(tls, peer, shared, versions).await;
        });
    }
}

/// Why a data plane of version `dp` may not follow a control plane of
/// version `cp`, if it may not (Kong's rule: the same major version, and a
/// minor version no newer than the control plane's).
fn version_incompatible(dp: &str, cp: &str) -> Option<String> {
    let major_minor = |v: &str| -> Option<(u64, u64)> {
        let mut parts = v.split('.');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    match (major_minor(dp), major_minor(cp)) {
        (None, _) => Some(format!("the data plane's version {dp:?} is not a version")),
        (Some((dp_major, _)), Some((cp_major, _))) if dp_major != cp_major => Some(format!(
            "the data plane's version {dp} and the control plane's {cp} differ in their major version"
        )),
        (Some((_, dp_minor)), Some((_, cp_minor))) if dp_minor > cp_minor => Some(format!(
            "the data plane's version {dp} is newer than the control plane's {cp}"
        )),
        _ => None,
    }
}

/// Plugins the configuration enables that the data plane does not have.
fn missing_plugins(snapshot: &Snapshot, available: &HashSet<String>) -> Vec<String> {
    snapshot
        .enabled_plugin_names()
        .into_iter()
        .filter(|name| !available.contains(name))
        .collect()
}

async fn session<S>(stream: S, peer: SocketAddr, shared: Arc<Shared>, mut versions: watch::Receiver<u64>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let hello = match tokio::time::timeout(HELLO_WITHIN, frame::read(&mut reader)).await {
        Ok(Ok(Some(hello))) => hello,
        _ => {
            tracing::warn!(%peer, "a data plane sent no hello");
            return;
        }
    };
    let Message::Hello {
        protocol,
        node_id,
        hostname,
        version,
        plugins,
        config_version,
        config_hash,
    } = hello
    else {
        tracing::warn!(%peer, "a data plane's first frame was not a hello");
        return;
    };
    let refusal = match protocol == PROTOCOL {
        false => Some(format!(
            "this control plane speaks protocol {PROTOCOL}, the data plane {protocol}"
        )),
        true => version_incompatible(&version, strait_core::VERSION),
    };
    let available: HashSet<String> = plugins.into_iter().collect();
    shared.planes.lock().insert(
        node_id.clone(),
        DataPlane {
            id: node_id.clone(),
            hostname,
            ip: peer.ip().to_string(),
            version,
            sync_status: match refusal {
                Some(_) => "kong_version_incompatible".into(),
                None => "unknown".into(),
            },
            config_version,
            config_hash,
            last_seen: now(),
            connected: refusal.is_none(),
            bytes_sent: 0,
        },
    );
    if let Some(reason) = refusal {
        let message = Message::Incompatible {
            sync_status: "kong_version_incompatible".into(),
            reason: reason.clone(),
        };
        let _ = frame::write(&mut writer, &message).await;
        tracing::warn!(%peer, node_id, %reason, "a data plane was refused");
        return;
    }
    tracing::info!(%peer, node_id, config_version, "data plane connected");
    // Frames from the data plane, read apart from the writes so a write
    // waiting on a slow socket never stops acks and pings.
    let (inbound, mut incoming) = tokio::sync::mpsc::channel::<Message>(16);
    let reading = tokio::spawn(async move {
        while let Ok(Some(message)) = frame::read(&mut reader).await {
            if inbound.send(message).await.is_err() {
                break;
            }
        }
    });
    // `sent`: the version the data plane holds as far as this session
    // knows; `seen`: the last running version this session dealt with.
    let mut sent = config_version;
    let mut seen = None;
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    let mut heard = tokio::time::Instant::now();
    let result: Result<(), String> = loop {
        let snapshot = shared.publisher.current().load_full();
        if seen != Some(snapshot.version) {
            seen = Some(snapshot.version);
            let missing = missing_plugins(&snapshot, &available);
            if !missing.is_empty() {
                // The data plane keeps what it has; it is told once per
                // version, and gets the configuration once it can run it.
                let reason = format!(
                    "the configuration uses plugins this data plane does not have: {}",
                    missing.join(", ")
                );
                shared
                    .planes
                    .update(&node_id, |p| p.sync_status = "plugin_set_incompatible".into());
                let message = Message::Incompatible {
                    sync_status: "plugin_set_incompatible".into(),
                    reason,
                };
                match frame::write(&mut writer, &message).await {
                    Ok(bytes) => shared.planes.update(&node_id, |p| p.bytes_sent += bytes as u64),
                    Err(error) => break Err(error.to_string()),
                }
            } else if snapshot.version == sent {
                shared.planes.update(&node_id, |p| p.sync_status = "normal".into());
            } else {
                match send_update(&shared, &mut writer, sent, &snapshot).await {
                    Ok(bytes) => {
                        shared.planes.update(&node_id, |p| p.bytes_sent += bytes as u64);
                        sent = snapshot.version;
                    }
                    Err(error) => break Err(error),
                }
            }
        }
        tokio::select! {
            changed = versions.changed() => {
                if changed.is_err() {
                    break Ok(());
                }
            }
            message = incoming.recv() => {
                heard = tokio::time::Instant::now();
                shared.planes.update(&node_id, |p| p.last_seen = now());
                match message {
                    Some(Message::Ack { version, hash }) => shared.planes.update(&node_id, |p| {
                        p.config_version = version;
                        p.config_hash = hash;
                        p.sync_status = "normal".into();
                    }),
                    Some(Message::Ping) => {
                        if let Err(error) = frame::write(&mut writer, &Message::Pong).await {
                            break Err(error.to_string());
                        }
                    }
                    Some(_) => {}
                    None => break Ok(()),
                }
            }
            _ = ping.tick() => {
                if heard.elapsed() > SILENCE {
                    break Err(format!("nothing heard for {SILENCE:?}"));
                }
                if let Err(error) = frame::write(&mut writer, &Message::Ping).await {
                    break Err(error.to_string());
                }
            }
        }
    };
    reading.abort();
    let _ = writer.shutdown().await;
    shared.planes.update(&node_id, |p| p.connected = false);
    match result {
        Ok(()) => tracing::info!(%peer, node_id, "data plane disconnected"),
        Err(error) => tracing::warn!(%peer, node_id, %error, "data plane session ended"),
    }
}

/// Send what takes a data plane from `base` to `snapshot`: the changes
/// when the change log still holds every version since `base` and none of
/// them replaced the whole configuration, else the whole configuration in
/// parts. The bytes sent.
async fn send_update<W: tokio::io::AsyncWrite + Unpin>(
    shared: &Shared,
    writer: &mut W,
    base: u64,
    snapshot: &Snapshot,
) -> Result<usize, String> {
    if let Some(changes) = changes_since(shared.store.as_ref(), base, snapshot)? {
        let message = Message::Changes {
            base,
            version: snapshot.version,
            hash: snapshot.hash.clone(),
            changes,
        };
        return frame::write(writer, &message).await.map_err(|e| e.to_string());
    }
    let parts = full_parts(shared, snapshot)?;
    let mut sent = 0;
    for part in parts.iter() {
        writer.write_all(part).await.map_err(|e| e.to_string())?;
        sent += part.len();
    }
    writer.flush().await.map_err(|e| e.to_string())?;
    Ok(sent)
}

/// Each entity the versions after `base` (up to the snapshot's) touched,
/// once, as the snapshot has it; `None` when only the whole configuration
/// will do.
fn changes_since(store: &dyn Store, base: u64, snapshot: &Snapshot) -> Result<Option<Vec<ConfigChange>>, String> {
    if base == 0 || base > snapshot.version {
        return Ok(None);
    }
    let entries = match store.changes_since(base) {
        Ok(entries) => entries,
        Err(StoreError::ChangeLogTrimmed { .. }) => return Ok(None),
        Err(error) => return Err(format!("reading the change log: {error}")),
    };
    let mut seen = HashSet::new();
    let mut changes = Vec::new();
    for entry in entries.iter().filter(|e| e.version <= snapshot.version) {
        if entry.op == ChangeOp::Replace {
            return Ok(None);
        }
        let Some(id) = entry.id else { return Ok(None) };
        if !seen.insert((entry.kind, id)) {
            continue;
        }
        changes.push(match snapshot.entity(entry.kind, id) {
            Some(entity) => ConfigChange::Upsert { entity },
            None => ConfigChange::Delete { kind: entry.kind, id },
        });
    }
    Ok(Some(changes))
}

/// The snapshot's whole configuration as the frames of a transfer in parts,
/// encoded once per version: everything but services, routes, their filter
/// chains and plugins in batches (parents before children), then those
/// four in one batch.
fn full_parts(shared: &Shared, snapshot: &Snapshot) -> Result<Arc<Vec<Vec<u8>>>, String> {
    use strait_core::Entity;
    let mut cached = shared.parts.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((version, frames)) = cached.as_ref() {
        if *version == snapshot.version {
            return Ok(frames.clone());
        }
    }
    let c = snapshot.config();
    let count = c.entity_count() as u64;
    let last: Vec<Entity> = (c.services.into_iter().map(Entity::Service))
        .chain(c.routes.into_iter().map(Entity::Route))
        .chain(c.filter_chains.into_iter().map(Entity::FilterChain))
        .chain(c.plugins.into_iter().map(Entity::Plugin))
        .collect();
    let rest = (c.vaults.into_iter().map(Entity::Vault))
        .chain(c.ca_certificates.into_iter().map(Entity::CaCertificate))
        .chain(c.certificates.into_iter().map(Entity::Certificate))
        .chain(c.snis.into_iter().map(Entity::Sni))
        .chain(c.key_sets.into_iter().map(Entity::KeySet))
        .chain(c.keys.into_iter().map(Entity::Key))
        .chain(c.upstreams.into_iter().map(Entity::upstream))
        .chain(c.targets.into_iter().map(Entity::Target))
        .chain(c.consumers.into_iter().map(Entity::Consumer))
        .chain(c.consumer_groups.into_iter().map(Entity::ConsumerGroup))
        .chain(
            c.consumer_group_consumers
                .into_iter()
                .map(Entity::ConsumerGroupConsumer),
        )
        .chain(c.keyauth_credentials.into_iter().map(Entity::KeyauthCredential))
        .chain(c.basicauth_credentials.into_iter().map(Entity::BasicauthCredential))
        .chain(c.acls.into_iter().map(Entity::Acl))
        .chain(c.jwt_secrets.into_iter().map(Entity::JwtSecret))
        .chain(c.hmacauth_credentials.into_iter().map(Entity::HmacauthCredential))
        .chain(c.oauth2_credentials.into_iter().map(Entity::Oauth2Credential));
    let encode = |message: &Message| frame::encode(message).map_err(|e| format!("encoding the configuration: {e}"));
    let mut frames = vec![encode(&Message::FullStart {
        version: snapshot.version,
        hash: snapshot.hash.clone(),
        entities: count,
    })?];
    let mut batch = Vec::with_capacity(BATCH);
    for entity in rest {
        batch.push(entity);
        if batch.len() == BATCH {
            frames.push(encode(&Message::FullBatch {
                entities: std::mem::take(&mut batch),
            })?);
        }
    }
    if !batch.is_empty() {
        frames.push(encode(&Message::FullBatch { entities: batch })?);
    }
    frames.push(encode(&Message::FullBatch { entities: last })?);
    frames.push(encode(&Message::FullEnd {
        version: snapshot.version,
    })?);
    let frames = Arc::new(frames);
    *cached = Some((snapshot.version, frames.clone()));
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;
    use strait_core::declarative::{parse_declarative, DeclarativeFormat};
    use strait_snapshot::compiler::{CommitError, ReplaceCommitFn};

    async fn publish(publisher: &SnapshotPublisher, version: u64, document: &str) {
        let config = parse_declarative(document.as_bytes(), DeclarativeFormat::Auto, 1).expect("a valid document");
        let commit: ReplaceCommitFn = Box::new(move |_| -> Result<u64, CommitError> { Ok(version) });
        publisher
            .sync(Arc::new(config), None, 0, commit)
            .await
            .expect("published");
    }

    #[test]
    fn versions_follow_kongs_rule() {
        assert_eq!(version_incompatible("0.1.0", "0.1.0"), None);
        assert_eq!(version_incompatible("1.2.9", "1.3.0"), None, "an older minor follows");
        assert!(version_incompatible("1.4.0", "1.3.0").is_some_and(|r| r.contains("newer")));
        assert!(version_incompatible("2.0.0", "1.9.0").is_some_and(|r| r.contains("major")));
        assert!(version_incompatible("sim", "1.0.0").is_some_and(|r| r.contains("not a version")));
    }

    async fn next<R: tokio::io::AsyncRead + Unpin>(reader: &mut R) -> Message {
        tokio::time::timeout(Duration::from_secs(5), frame::read(reader))
            .await
            .expect("a frame in time")
            .expect("a frame")
            .expect("not closed")
    }

    /// A data plane without a plugin the configuration uses is told so and
    /// sent nothing; once the configuration no longer uses it, it gets the
    /// whole configuration from its own version (not from the version it
    /// was told about, which it never received): in parts, as it has none.
    #[tokio::test]
    async fn a_data_plane_missing_a_plugin_is_told_then_synced_once_it_can_run_it() {
        let dir = std::env::temp_dir().join(format!("strait-cp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let store: Arc<dyn Store> = Arc::new(strait_store::LmdbStore::open(&dir).unwrap());
        let publisher = SnapshotPublisher::start(Snapshot::empty());
        publish(
            &publisher,
            5,
            r#"{"_format_version":"3.0","plugins":[{"name":"request-termination","config":{"status_code":418}}]}"#,
        )
        .await;
        let shared = Arc::new(Shared {
            store,
            publisher: publisher.clone(),
            planes: Arc::new(DataPlanes::new(Duration::from_secs(60))),
            parts: Mutex::new(None),
        });
        let (versions_tx, versions) = watch::channel(5);
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        tokio::spawn(session(
            theirs,
            "127.0.0.1:1".parse().unwrap(),
            shared.clone(),
            versions,
        ));
        let (mut reader, mut writer) = tokio::io::split(ours);
        let hello = Message::Hello {
            protocol: PROTOCOL,
            node_id: "dp-1".into(),
            hostname: "dp".into(),
            version: strait_core::VERSION.into(),
            plugins: vec!["key-auth".into()],
            config_version: 0,
            config_hash: String::new(),
        };
        frame::write(&mut writer, &hello).await.unwrap();
        match next(&mut reader).await {
            Message::Incompatible { sync_status, reason } => {
                assert_eq!(sync_status, "plugin_set_incompatible");
                assert!(reason.contains("request-termination"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(shared.planes.list()[0].sync_status, "plugin_set_incompatible");

        publish(
            &publisher,
            6,
            r#"{"_format_version":"3.0","services":[{"name":"s","url":"http://a.test"}]}"#,
        )
        .await;
        versions_tx.send(6).unwrap();
        // It has nothing: the configuration in parts, services last.
        match next(&mut reader).await {
            Message::FullStart { version, entities, .. } => assert_eq!((version, entities), (6, 1)),
            other => panic!("{other:?}"),
        }
        match next(&mut reader).await {
            Message::FullBatch { entities } => {
                assert_eq!(entities.len(), 1);
                assert!(matches!(entities[0], strait_core::Entity::Service(_)));
            }
            other => panic!("{other:?}"),
        }
        match next(&mut reader).await {
            Message::FullEnd { version } => assert_eq!(version, 6),
            other => panic!("{other:?}"),
        }
        frame::write(
            &mut writer,
            &Message::Ack {
                version: 6,
                hash: "h".into(),
            },
        )
        .await
        .unwrap();
        tokio::time::timeout(Duration::from_secs(5), async {
            while shared.planes.list()[0].config_version != 6 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the ack is recorded");
        assert_eq!(shared.planes.list()[0].sync_status, "normal");
        let _ = std::fs::remove_dir_all(dir);
    }
}
