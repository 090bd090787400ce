//! The snapshot compiler: its own thread, never a proxy worker.
//!
//! Jobs arrive over a channel. For a replacement (`/config`, a declarative
//! file) the compiler diffs it against the running snapshot and derives the
//! new snapshot from the changes when they are few, else compiles it whole;
//! either way it builds the new snapshot first, then runs the caller's
//! commit (the store transaction), and only then publishes — so a
//! configuration that cannot compile is never committed and the running
//! snapshot stays. Retired snapshots are dropped
//! on this thread once no request holds them, keeping deallocation off the
//! request path.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use strait_core::{Config, ConfigChange, ConfigDelta, ConfigVersion, EntityKind};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::snapshot::{apply_delta, compile_snapshot_hashed, derive_snapshot, CompileError, Snapshot};

/// Why a commit failed (the store's own error type, boxed; callers downcast).
pub type CommitError = Box<dyn std::error::Error + Send + Sync>;

/// The commit step run after a snapshot compiled: returns the committed version.
pub type CommitFn = Box<dyn FnOnce() -> Result<ConfigVersion, CommitError> + Send>;

/// What a replacement commits: the whole configuration, or only the
/// changes that turn the running configuration into it.
#[derive(Debug)]
pub enum ReplaceCommit<'a> {
    Whole(&'a Config),
    /// The changes from the running snapshot, whose version is `base`: a
    /// shared store must refuse them when another writer moved it past
    /// `base` (then the whole configuration is committed instead).
    Changes {
        base: ConfigVersion,
        changes: &'a [ConfigChange],
    },
}

/// The commit step of a replacement; called a second time with
/// [`ReplaceCommit::Whole`] when committing the changes failed.
pub type ReplaceCommitFn = Box<dyn FnMut(ReplaceCommit<'_>) -> Result<ConfigVersion, CommitError> + Send>;

/// A replacement goes through the change path when it changes at most this
/// share of the entities (1/2): below it, deriving touches less than a
/// full compile does.
const CHANGE_PATH_SHARE: usize = 2;

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("configuration does not compile: {0}")]
    Compile(#[from] CompileError),
    #[error("commit failed: {0}")]
    Commit(CommitError),
    #[error("the snapshot compiler has stopped")]
    Stopped,
    #[error("the running configuration is no longer version {0}")]
    Stale(ConfigVersion),
}

enum Job {
    Sync {
        config: Arc<Config>,
        hash: Option<String>,
        generated: i64,
        commit: ReplaceCommitFn,
        reply: oneshot::Sender<Result<ConfigVersion, PublishError>>,
    },
    Part {
        part: Box<Part>,
        commit: ReplaceCommitFn,
        reply: oneshot::Sender<Result<ConfigVersion, PublishError>>,
    },
    Delta {
        delta: ConfigDelta,
        reply: oneshot::Sender<Result<ConfigVersion, PublishError>>,
    },
    Changes {
        changes: Vec<ConfigChange>,
        /// The hash the derived snapshot takes (another node's, whose
        /// configuration this one follows); None: chained from the changes.
        hash: Option<String>,
        commit: CommitFn,
        reply: oneshot::Sender<Result<ConfigVersion, PublishError>>,
    },
    Install {
        snapshot: Box<Snapshot>,
        commit: CommitFn,
        reply: oneshot::Sender<Result<ConfigVersion, PublishError>>,
    },
    RefreshSecrets,
}

/// A replacement given as its difference from one running version: the
/// entities to upsert (new or edited) and the ones to remove.
pub struct Part {
    /// The version these changes apply to.
    pub base: ConfigVersion,
    pub upserts: Config,
    pub gone: Vec<(EntityKind, Uuid)>,
    /// The input's hash (Kong's `configuration_hash`).
    pub hash: Option<String>,
    /// The timestamp parsing gave entities without one.
    pub generated: i64,
}

/// Handle to the compiler thread and the published snapshot.
#[derive(Clone)]
pub struct SnapshotPublisher {
    current: Arc<ArcSwap<Snapshot>>,
    jobs: mpsc::Sender<Job>,
}

impl SnapshotPublisher {
    /// Start the compiler thread, serving `initial` until the first job.
    pub fn start(initial: Snapshot) -> SnapshotPublisher {
        let current = Arc::new(ArcSwap::from_pointee(initial));
        let (jobs, receiver) = mpsc::channel();
        let published = current.clone();
        let spawned = std::thread::Builder::new()
            .name("strait-compiler".to_string())
            .spawn(move || {
                strait_runtime::background::attach_c_heap();
                compiler_loop(published, receiver)
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "could not start the snapshot compiler thread");
        }
        SnapshotPublisher { current, jobs }
    }

    /// The live snapshot, shared with the proxy.
    pub fn current(&self) -> Arc<ArcSwap<Snapshot>> {
        self.current.clone()
    }

    /// Make `config` the configuration, touching only what differs from
    /// the running one: the entities that changed are committed and derived
    /// as changes (`commit(ReplaceCommit::Changes)`) when they are at most
    /// half of the configuration, else the whole configuration is compiled
    /// and committed (`commit(ReplaceCommit::Whole)`), as it is when the
    /// change path fails. `generated`: the timestamp parsing gave entities
    /// without one (such timestamps are not a difference). The running
    /// snapshot is untouched when a step fails.
    pub async fn sync(
        &self,
        config: Arc<Config>,
        hash: Option<String>,
        generated: i64,
        commit: ReplaceCommitFn,
    ) -> Result<ConfigVersion, PublishError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Sync {
                config,
                hash,
                generated,
                commit,
                reply,
            })
            .map_err(|_| PublishError::Stopped)?;
        answer.await.map_err(|_| PublishError::Stopped)?
    }

    /// Apply a replacement given as changes to the running version
    /// `part.base`: derive the snapshot, commit the changes
    /// (`commit(ReplaceCommit::Changes)`), publish. Fails with
    /// [`PublishError::Stale`] when another version is running; nothing is
    /// committed or published when a step fails.
    pub async fn sync_part(&self, part: Part, commit: ReplaceCommitFn) -> Result<ConfigVersion, PublishError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Part {
                part: Box::new(part),
                commit,
                reply,
            })
            .map_err(|_| PublishError::Stopped)?;
        answer.await.map_err(|_| PublishError::Stopped)?
    }

    /// Derive the snapshot `changes` produce, run `commit` (the store
    /// transaction), publish. A change that does not compile is never
    /// committed; a failed commit publishes nothing.
    pub async fn apply_changes(
        &self,
        changes: Vec<ConfigChange>,
        commit: CommitFn,
    ) -> Result<ConfigVersion, PublishError> {
        self.apply_changes_hashed(changes, None, commit).await
    }

    /// [`SnapshotPublisher::apply_changes`], the snapshot taking `hash`
    /// when given (a data plane shows its control plane's hash).
    pub async fn apply_changes_hashed(
        &self,
        changes: Vec<ConfigChange>,
        hash: Option<String>,
        commit: CommitFn,
    ) -> Result<ConfigVersion, PublishError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Changes {
                changes,
                hash,
                commit,
                reply,
            })
            .map_err(|_| PublishError::Stopped)?;
        answer.await.map_err(|_| PublishError::Stopped)?
    }

    /// Publish a snapshot built elsewhere ([`crate::SnapshotBuilder`]) once
    /// `commit` succeeds; it takes the version `commit` returns.
    pub async fn install(&self, snapshot: Snapshot, commit: CommitFn) -> Result<ConfigVersion, PublishError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Install {
                snapshot: Box::new(snapshot),
                commit,
                reply,
            })
            .map_err(|_| PublishError::Stopped)?;
        answer.await.map_err(|_| PublishError::Stopped)?
    }

    /// Read every secret reference in use again and, when one rotated,
    /// publish the running configuration rebuilt with the new values.
    /// Queued behind configuration changes; returns at once.
    pub fn refresh_secrets(&self) {
        let _ = self.jobs.send(Job::RefreshSecrets);
    }

    /// Apply an already committed delta.
    pub async fn apply(&self, delta: ConfigDelta) -> Result<ConfigVersion, PublishError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Delta { delta, reply })
            .map_err(|_| PublishError::Stopped)?;
        answer.await.map_err(|_| PublishError::Stopped)?
    }
}

fn compiler_loop(current: Arc<ArcSwap<Snapshot>>, jobs: mpsc::Receiver<Job>) {
    strait_runtime::background::lower_priority("strait-compiler");
    let mut retired: Vec<Arc<Snapshot>> = Vec::new();
    loop {
        let ran = match jobs.recv_timeout(Duration::from_millis(250)) {
            Ok(job) => {
                if let Some(old) = run_job(&current, job) {
                    retired.push(old);
                }
                true
            }
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let before = retired.len();
        retired.retain(|snapshot| Arc::strong_count(snapshot) > 1);
        // A job's garbage and a freed snapshot go back to the OS now, not at
        // the allocator's next call from this thread (maybe never, idle).
        if ran || retired.len() < before {
            strait_runtime::background::release_memory();
        }
    }
}

/// Run one job; returns the snapshot it replaced, if any.
fn run_job(current: &ArcSwap<Snapshot>, job: Job) -> Option<Arc<Snapshot>> {
    match job {
        Job::Sync {
            config,
            hash,
            generated,
            commit,
            reply,
        } => {
            let started = std::time::Instant::now();
            let (answer, old, changes) = sync(current, config, hash, generated, commit);
            tracing::info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                ok = answer.is_ok(),
                changes = changes.map_or_else(|| "all".to_string(), |n| n.to_string()),
                "configuration replaced"
            );
            let _ = reply.send(answer);
            old
        }
        Job::Part { part, commit, reply } => {
            let started = std::time::Instant::now();
            let (answer, old, changes) = sync_part(current, *part, commit);
            tracing::info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                ok = answer.is_ok(),
                changes,
                "configuration replaced by its changes"
            );
            let _ = reply.send(answer);
            old
        }
        Job::Changes {
            changes,
            hash,
            commit,
            reply,
        } => {
            let result = derive_snapshot(&current.load(), &changes)
                .map_err(PublishError::from)
                .and_then(|mut snapshot| {
                    snapshot.version = commit().map_err(PublishError::Commit)?;
                    if let Some(hash) = hash {
                        snapshot.hash = hash;
                    }
                    Ok(snapshot)
                });
            let (answer, old) = publish(current, result);
            let _ = reply.send(answer);
            old
        }
        Job::Install {
            snapshot,
            commit,
            reply,
        } => {
            let mut snapshot = *snapshot;
            let result = commit().map_err(PublishError::Commit).map(|version| {
                snapshot.version = version;
                snapshot
            });
            let (answer, old) = publish(current, result);
            let _ = reply.send(answer);
            old
        }
        Job::RefreshSecrets => match current.load().refresh_secrets() {
            None => None,
            Some(Ok(snapshot)) => publish(current, Ok(snapshot)).1,
            Some(Err(error)) => {
                tracing::warn!(%error, "rotated secrets do not compile; the running configuration stays");
                None
            }
        },
        Job::Delta { delta, reply } => {
            let result = apply_delta(&current.load(), &delta).map_err(PublishError::from);
            let (answer, old) = publish(current, result);
            let _ = reply.send(answer);
            old
        }
    }
}

/// Make `config` the running configuration by its changes when they are
/// few, else whole (see [`SnapshotPublisher::sync`]). Returns the answer,
/// the replaced snapshot, and how many changes went the change path (None:
/// the whole configuration was compiled).
fn sync(
    current: &ArcSwap<Snapshot>,
    config: Arc<Config>,
    hash: Option<String>,
    generated: i64,
    mut commit: ReplaceCommitFn,
) -> (
    Result<ConfigVersion, PublishError>,
    Option<Arc<Snapshot>>,
    Option<usize>,
) {
    let running = current.load_full();
    // Owned (the parse's only reference): the diff adopts running timestamps
    // into it in place instead of copying every entity to compare it.
    let mut config = Arc::try_unwrap(config).unwrap_or_else(|shared| (*shared).clone());
    let size = config.entity_count().max(running.entity_count()).max(1);
    let few = |count: usize| count * CHANGE_PATH_SHARE <= size;
    // At least the entities the running configuration lacks change: when
    // they alone are too many (a first load, a new set), the diff and its
    // memory are skipped.
    if few(config.entity_count().saturating_sub(running.entity_count())) {
        let changes = running.diff(&mut config, generated);
        if few(changes.len()) {
            let derived = derive_snapshot(&running, &changes).ok().and_then(|mut snapshot| {
                let base = running.version;
                snapshot.version = commit(ReplaceCommit::Changes {
                    base,
                    changes: &changes,
                })
                .ok()?;
                if let Some(hash) = &hash {
                    snapshot.hash = hash.clone();
                }
                Some(snapshot)
            });
            if let Some(snapshot) = derived {
                let (answer, old) = publish(current, Ok(snapshot));
                return (answer, old, Some(changes.len()));
            }
        }
    }
    drop(running);
    let config = Arc::new(config);
    let result = compile_snapshot_hashed(0, config.clone(), hash)
        .map_err(PublishError::from)
        .and_then(|mut snapshot| {
            snapshot.version = commit(ReplaceCommit::Whole(&config)).map_err(PublishError::Commit)?;
            Ok(snapshot)
        });
    let (answer, old) = publish(current, result);
    (answer, old, None)
}

/// [`SnapshotPublisher::sync_part`] on the compiler thread: the answer,
/// the replaced snapshot, and how many changes there were.
fn sync_part(
    current: &ArcSwap<Snapshot>,
    part: Part,
    mut commit: ReplaceCommitFn,
) -> (Result<ConfigVersion, PublishError>, Option<Arc<Snapshot>>, usize) {
    let running = current.load_full();
    if running.version != part.base {
        return (Err(PublishError::Stale(part.base)), None, 0);
    }
    let Part {
        mut upserts,
        gone,
        hash,
        generated,
        ..
    } = part;
    let changes = running.changes_to(&mut upserts, &gone, generated);
    drop(upserts);
    let result = derive_snapshot(&running, &changes)
        .map_err(PublishError::from)
        .and_then(|mut snapshot| {
            let base = running.version;
            snapshot.version = commit(ReplaceCommit::Changes {
                base,
                changes: &changes,
            })
            .map_err(PublishError::Commit)?;
            if let Some(hash) = hash {
                snapshot.hash = hash;
            }
            Ok(snapshot)
        });
    drop(running);
    let (answer, old) = publish(current, result);
    (answer, old, changes.len())
}

fn publish(
    current: &ArcSwap<Snapshot>,
    result: Result<Snapshot, PublishError>,
) -> (Result<ConfigVersion, PublishError>, Option<Arc<Snapshot>>) {
    match result {
        Ok(snapshot) => {
            let version = snapshot.version;
            let old = current.swap(Arc::new(snapshot));
            (Ok(version), Some(old))
        }
        Err(error) => (Err(error), None),
    }
}
