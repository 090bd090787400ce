//! `database = postgres`: keep this node's snapshot at the database's
//! version. A `LISTEN` connection wakes the follower at every commit of
//! any node (`NOTIFY` in the write transaction); a poll every second
//! covers a lost notification or a lost connection. Each round reads what
//! changed after the running version in one consistent transaction and
//! applies it through the snapshot path as deltas (cost in proportion to
//! the change), or the whole configuration when the node is too far
//! behind.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use strait_snapshot::compiler::{CommitError, CommitFn, PublishError, ReplaceCommitFn};
use strait_snapshot::SnapshotPublisher;
use strait_store::pg::{CatchUp, PgConfig, PgStore};

use crate::pg_cache::LocalCache;
use strait_store::{Store, StoreError};
use tokio::sync::Notify;

/// How often the follower looks even without a notification.
const POLL: Duration = Duration::from_secs(1);
/// How often it tries while the database is unreachable.
const RETRY: Duration = Duration::from_millis(100);

pub fn start(
    store: Arc<PgStore>,
    cache: Arc<LocalCache>,
    config: PgConfig,
    publisher: SnapshotPublisher,
) -> Result<()> {
    std::thread::Builder::new()
        .name("strait-pg-follow".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "the PostgreSQL follower could not start");
                    return;
                }
            };
            runtime.block_on(follow(store, cache, config, publisher));
        })
        .context("starting the PostgreSQL follower")?;
    Ok(())
}

async fn follow(store: Arc<PgStore>, cache: Arc<LocalCache>, config: PgConfig, publisher: SnapshotPublisher) {
    let wake = Arc::new(Notify::new());
    let mut listener = None;
    let mut reachable = true;
    let mut schema_checked = false;
    loop {
        if listener.as_ref().is_none_or(strait_store::pg::Listener::is_closed) {
            listener = match strait_store::pg::listen(&config, wake.clone()).await {
                Ok(client) => Some(client),
                Err(error) => {
                    if reachable {
                        tracing::warn!(%error, "PostgreSQL is unreachable: serving the last configuration");
                    }
                    None
                }
            };
        }
        if !schema_checked {
            match store.check_schema() {
                Ok(()) => schema_checked = true,
                Err(StoreError::Unavailable(_)) => {}
                Err(error) => {
                    // A database migrated by another version while this node
                    // served its cache: keep serving, apply nothing.
                    tracing::error!(%error, "the PostgreSQL schema does not match this node: serving the cache");
                }
            }
        }
        let round = if schema_checked {
            catch_up(&store, &cache, &publisher).await
        } else {
            Err(StoreError::Unavailable("the schema is not checked yet".into()))
        };
        match round {
            Ok(()) => {
                if !reachable {
                    tracing::info!(
                        version = publisher.current().load().version,
                        "PostgreSQL is back: caught up"
                    );
                }
                reachable = true;
            }
            Err(error) => {
                if reachable {
                    tracing::warn!(%error, "reading changes from PostgreSQL failed: serving the last configuration");
                }
                reachable = false;
            }
        }
        // Without a listening connection nothing wakes the follower: look
        // more often until the database is back.
        let pause = if reachable && listener.is_some() { POLL } else { RETRY };
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// Publish what the database has after the running version. The commit
/// functions only check that the snapshot did not move on meanwhile (an
/// admin write of this node publishes through the same compiler thread)
/// and write the local cache, in publish order.
async fn catch_up(store: &PgStore, cache: &Arc<LocalCache>, publisher: &SnapshotPublisher) -> Result<(), StoreError> {
    let current = publisher.current();
    let base = current.load().version;
    let moved_on = move || current.load().version != base;
    // What to reload whole, when the changes cannot be applied as deltas.
    let (version, config, hash) = match store.catch_up(base)? {
        CatchUp::UpToDate => return Ok(()),
        CatchUp::Changes { version, changes } => {
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
                Ok(_) => {
                    tracing::debug!(version, changes = count, "changes from PostgreSQL applied");
                    return Ok(());
                }
                Err(PublishError::Commit(_)) => return Ok(()),
                Err(error) => {
                    tracing::warn!(%error, version, "changes from PostgreSQL do not derive; loading everything");
                    let (version, config) = store.load()?;
                    (version, config, store.config_hash()?)
                }
            }
        }
        CatchUp::Whole { version, config, hash } => (version, *config, hash),
    };
    let reload = Reload {
        source: "PostgreSQL",
        base,
        version,
        config,
        hash,
    };
    whole(publisher, cache, reload, moved_on).await;
    Ok(())
}

/// A whole configuration read from the shared database, to publish in
/// place of the running one (`base`); `source` names the database in logs.
pub(crate) struct Reload {
    pub source: &'static str,
    pub base: u64,
    pub version: u64,
    pub config: strait_core::Config,
    pub hash: Option<String>,
}

/// Publishes (and caches) `reload`, unless an admin write moved the
/// snapshot on meanwhile.
pub(crate) async fn whole(
    publisher: &SnapshotPublisher,
    cache: &Arc<LocalCache>,
    reload: Reload,
    moved_on: impl Fn() -> bool + Send + 'static,
) {
    let Reload {
        source,
        base,
        version,
        config,
        hash,
    } = reload;
    let config = Arc::new(config);
    let (cache_copy, copy, hash_copy) = (cache.clone(), config.clone(), hash.clone());
    let commit: ReplaceCommitFn = Box::new(move |_| -> Result<u64, CommitError> {
        if moved_on() {
            return Err("the running configuration moved on".into());
        }
        cache_copy.replace(version, &copy, hash_copy.as_deref());
        Ok(version)
    });
    match publisher.sync(config, hash, 0, commit).await {
        Ok(_) => tracing::info!(from = base, version, "configuration reloaded from {source}"),
        Err(PublishError::Commit(_)) => {}
        Err(error) => tracing::error!(%error, version, "the configuration in {source} does not compile"),
    }
}
