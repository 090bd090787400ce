//! `database = cassandra`: keep this node's snapshot at the cluster's
//! version. Cassandra has no LISTEN/NOTIFY, so the follower reads the head
//! generation's version every [`POLL`] (one read by partition key) and,
//! when it moved, the change log after the running version and the
//! entities it names, applied through the snapshot path as deltas (cost in
//! proportion to the change); the whole configuration when the log does
//! not reach back (a replacement, a trimmed log) or the changes do not
//! derive. Changes of any node are served everywhere within POLL plus the
//! reads (docs/architecture.md#cassandra-store).
//!
//! The node's local copy (pg_cache.rs's [`LocalCache`], written behind the
//! store by pg_cache.rs's `Cached`) stays in step, so a node restarted
//! while the cluster is away serves what it served.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use strait_core::ConfigChange;
use strait_snapshot::compiler::{CommitError, CommitFn, PublishError};
use strait_snapshot::SnapshotPublisher;
use strait_store::cassandra::CassandraStore;
use strait_store::{ChangeOp, Store, StoreError};

use crate::pg_cache::LocalCache;

/// How often the follower reads the cluster's version.
pub const POLL: Duration = Duration::from_millis(250);
/// Rounds whose changes kept moving under the reads before the whole
/// configuration is read instead.
const CHASES: usize = 3;

pub fn start(store: Arc<CassandraStore>, cache: Arc<LocalCache>, publisher: SnapshotPublisher) -> Result<()> {
    std::thread::Builder::new()
        .name("strait-cassandra-follow".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "the Cassandra follower could not start");
                    return;
                }
            };
            runtime.block_on(follow(store, cache, publisher));
        })
        .context("starting the Cassandra follower")?;
    Ok(())
}

async fn follow(store: Arc<CassandraStore>, cache: Arc<LocalCache>, publisher: SnapshotPublisher) {
    let mut reachable = true;
    let mut chases = 0;
    loop {
        match catch_up(&store, &cache, &publisher, chases >= CHASES).await {
            Ok(caught_up) => {
                if !reachable {
                    tracing::info!(
                        version = publisher.current().load().version,
                        "Cassandra is back: caught up"
                    );
                }
                reachable = true;
                chases = if caught_up { 0 } else { chases + 1 };
            }
            Err(error) => {
                if reachable {
                    tracing::warn!(%error, "reading changes from Cassandra failed: serving the last configuration");
                }
                reachable = false;
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Publish what the cluster has after the running version; false when the
/// cluster moved on while the changes were read (nothing published: the
/// next round reads again, or reads everything after [`CHASES`] of them).
async fn catch_up(
    store: &CassandraStore,
    cache: &Arc<LocalCache>,
    publisher: &SnapshotPublisher,
    read_whole: bool,
) -> Result<bool, StoreError> {
    let current = publisher.current();
    let base = current.load().version;
    let moved_on = move || current.load().version != base;
    let head = store.version()?;
    if head <= base {
        return Ok(true);
    }
    let entries = match store.changes_since(base) {
        Ok(entries) if !read_whole && entries.iter().all(|e| e.op != ChangeOp::Replace) => entries,
        Ok(_) | Err(StoreError::ChangeLogTrimmed { .. }) => {
            reload_whole(store, cache, publisher, base, moved_on).await?;
            return Ok(true);
        }
        Err(error) => return Err(error),
    };
    let Some(version) = entries.iter().map(|e| e.version).max() else {
        return Ok(true);
    };
    let mut touched = BTreeSet::new();
    for entry in &entries {
        if let Some(id) = entry.id {
            touched.insert((entry.kind, id));
        }
    }
    let mut changes = Vec::with_capacity(touched.len());
    for (kind, id) in touched {
        changes.push(match store.get(kind, id)? {
            Some(entity) => ConfigChange::Upsert { entity },
            None => ConfigChange::Delete { kind, id },
        });
    }
    // The entities were read one by one: only if nothing committed since
    // the log was read are they all of `version`.
    if store.version()? != version {
        return Ok(false);
    }
    let count = changes.len();
    let (cache_copy, copy, check) = (cache.clone(), changes.clone(), moved_on.clone());
    let commit: CommitFn = Box::new(move || -> Result<u64, CommitError> {
        if check() {
            return Err("the running configuration moved on".into());
        }
        cache_copy.apply(version, &copy);
        Ok(version)
    });
    match publisher.apply_changes(changes, commit).await {
        Ok(_) => tracing::debug!(version, changes = count, "changes from Cassandra applied"),
        Err(PublishError::Commit(_)) => {}
        Err(error) => {
            tracing::warn!(%error, version, "changes from Cassandra do not derive; loading everything");
            reload_whole(store, cache, publisher, base, moved_on).await?;
        }
    }
    Ok(true)
}

/// The whole configuration read and published in place of `base`'s.
async fn reload_whole(
    store: &CassandraStore,
    cache: &Arc<LocalCache>,
    publisher: &SnapshotPublisher,
    base: u64,
    moved_on: impl Fn() -> bool + Send + 'static,
) -> Result<(), StoreError> {
    let (version, config) = store.load()?;
    let hash = store.config_hash()?;
    let reload = crate::pg_follow::Reload {
        source: "Cassandra",
        base,
        version,
        config,
        hash,
    };
    crate::pg_follow::whole(publisher, cache, reload, moved_on).await;
    Ok(())
}
