//! The embedded runtime store: an LMDB environment of its own (never the
//! configuration's), under `<prefix>/runtime_kv`.
//!
//! Two tables: `entries` (`<table>\0<key>` -> expiry, 8 bytes big-endian,
//! `u64::MAX` for never, then the value) and `expiry` (expiry, then the
//! entry key -> nothing), the TTL-ordered index expired entries leave
//! through in batches. Reads run on the caller's thread in a read
//! transaction; writes go to one writer thread through a bounded queue,
//! every write waiting at the time in one transaction and one commit, each
//! answered only once its commit is on disk.
#![allow(unsafe_code)]

use std::ops::Bound;
use std::path::Path;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::Duration;

use heed::types::Bytes;
use heed::{Database, Env, EnvOpenOptions, RwTxn, WithoutTls};
use tokio::sync::oneshot;

use super::{expiry, now, KvError, KvFuture, KvPage, KvStore, Table};

type Db = Database<Bytes, Bytes>;

const QUEUE: usize = 16_384;
const BATCH: usize = 4_096;
const PURGE_BATCH: usize = 1_000;
const PURGE_EVERY: Duration = Duration::from_secs(1);
const NEVER: u64 = u64::MAX;

#[derive(Clone, Copy)]
struct Tables {
    entries: Db,
    expiry: Db,
}

enum Op {
    Put(Vec<u8>, Vec<u8>, Option<i64>),
    Delete(Vec<u8>),
}

type Job = crate::lmdb_writer::Job<Op, bool, KvError>;

/// The embedded runtime store.
pub struct LmdbKv {
    env: Env<WithoutTls>,
    tables: Tables,
    writer: SyncSender<Job>,
}

impl std::fmt::Debug for LmdbKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LmdbKv").field("path", &self.env.path()).finish()
    }
}

fn failed(error: impl std::fmt::Display) -> KvError {
    KvError::Failed(error.to_string())
}

fn entry_key(table: Table, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(table.name().len() + 1 + key.len());
    out.extend_from_slice(table.name().as_bytes());
    out.push(0);
    out.extend_from_slice(key.as_bytes());
    out
}

fn expiry_key(at: u64, entry: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + entry.len());
    out.extend_from_slice(&at.to_be_bytes());
    out.extend_from_slice(entry);
    out
}

/// The expiry and value of a stored entry.
fn split(stored: &[u8]) -> Option<(u64, &[u8])> {
    let (at, value) = stored.split_at_checked(8)?;
    Some((u64::from_be_bytes(at.try_into().ok()?), value))
}

fn live(at: u64) -> bool {
    at == NEVER || at > now().max(0) as u64
}

impl LmdbKv {
    /// Open (creating) the store in `dir`, with room for `map_size` bytes,
    /// and start its writer thread.
    pub fn open(dir: &Path, map_size: usize) -> Result<LmdbKv, KvError> {
        std::fs::create_dir_all(dir).map_err(|e| failed(format!("cannot create {}: {e}", dir.display())))?;
        let map_size = map_size.div_ceil(64 * 1024).max(1) * 64 * 1024;
        let mut options = EnvOpenOptions::new().read_txn_without_tls();
        options.map_size(map_size).max_dbs(4);
        // SAFETY: as for the token store: only this module writes the
        // file, through LMDB transactions with LMDB's own locking, and heed
        // refuses to open one path twice in a process.
        let env = unsafe { options.open(dir) }.map_err(|e| failed(format!("cannot open {}: {e}", dir.display())))?;
        let mut txn = env.write_txn().map_err(failed)?;
        let tables = Tables {
            entries: env.create_database(&mut txn, Some("entries")).map_err(failed)?,
            expiry: env.create_database(&mut txn, Some("expiry")).map_err(failed)?,
        };
        txn.commit().map_err(failed)?;
        let (writer, jobs) = mpsc::sync_channel(QUEUE);
        let writer_env = env.clone();
        std::thread::Builder::new()
            .name("strait-runtime-kv".into())
            .spawn(move || {
                let writer = crate::lmdb_writer::Writer {
                    batch: BATCH,
                    purge_every: PURGE_EVERY,
                    apply: |txn: &mut RwTxn, op| apply(txn, tables, op),
                    purge: |env: &Env<WithoutTls>| purge(env, tables).map(|removed| removed == PURGE_BATCH),
                    what: "runtime entries",
                    failed: KvError::Failed,
                };
                crate::lmdb_writer::run(writer_env, jobs, writer)
            })
            .map_err(|e| failed(format!("cannot start the runtime store's writer: {e}")))?;
        Ok(LmdbKv { env, tables, writer })
    }

    fn submit(&self, op: Op) -> KvFuture<'static, bool> {
        let (reply, answer) = oneshot::channel();
        let sent = match self.writer.try_send(Job { op, reply }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(KvError::Unavailable("too many writes waiting".into())),
            Err(TrySendError::Disconnected(_)) => Err(KvError::Unavailable("the writer stopped".into())),
        };
        Box::pin(async move {
            sent?;
            answer
                .await
                .unwrap_or_else(|_| Err(KvError::Unavailable("the writer stopped".into())))
        })
    }
}

impl KvStore for LmdbKv {
    fn backend(&self) -> &'static str {
        "embedded"
    }

    fn get(&self, table: Table, key: &str) -> KvFuture<'_, Option<Vec<u8>>> {
        let found = (|| {
            let txn = self.env.read_txn().map_err(failed)?;
            let stored = self.tables.entries.get(&txn, &entry_key(table, key)).map_err(failed)?;
            Ok(stored
                .and_then(split)
                .filter(|(at, _)| live(*at))
                .map(|(_, value)| value.to_vec()))
        })();
        Box::pin(std::future::ready(found))
    }

    fn put(&self, table: Table, key: &str, value: Vec<u8>, ttl: Option<i64>) -> KvFuture<'_, ()> {
        let done = self.submit(Op::Put(entry_key(table, key), value, expiry(ttl)));
        Box::pin(async move { done.await.map(|_| ()) })
    }

    fn delete(&self, table: Table, key: &str) -> KvFuture<'_, bool> {
        self.submit(Op::Delete(entry_key(table, key)))
    }

    fn list(&self, table: Table, prefix: &str, cursor: Option<&str>, size: usize) -> KvFuture<'_, KvPage> {
        let size = size.max(1);
        let start = entry_key(table, prefix);
        let listed = (|| {
            let after = cursor.map(|c| entry_key(table, c));
            if after.as_ref().is_some_and(|a| !a.starts_with(&start)) {
                return Err(KvError::BadCursor);
            }
            let txn = self.env.read_txn().map_err(failed)?;
            let lower = match &after {
                Some(after) => Bound::Excluded(after.as_slice()),
                None => Bound::Included(start.as_slice()),
            };
            let skip = table.name().len() + 1;
            let mut page = KvPage::default();
            for entry in self
                .tables
                .entries
                .range(&txn, &(lower, Bound::Unbounded))
                .map_err(failed)?
            {
                let (stored_key, stored) = entry.map_err(failed)?;
                if !stored_key.starts_with(&start) {
                    break;
                }
                let Some((_, value)) = split(stored).filter(|(at, _)| live(*at)) else {
                    continue;
                };
                let key = String::from_utf8_lossy(&stored_key[skip..]).into_owned();
                if page.entries.len() == size {
                    page.next = page.entries.last().map(|(k, _)| k.clone());
                    break;
                }
                page.entries.push((key, value.to_vec()));
            }
            Ok(page)
        })();
        Box::pin(std::future::ready(listed))
    }
}

/// Remove `entry` and its expiry row; true when a live one was there.
fn remove(txn: &mut RwTxn, t: Tables, entry: &[u8]) -> Result<bool, KvError> {
    let Some(at) = t
        .entries
        .get(txn, entry)
        .map_err(failed)?
        .and_then(split)
        .map(|(at, _)| at)
    else {
        return Ok(false);
    };
    t.entries.delete(txn, entry).map_err(failed)?;
    if at != NEVER {
        t.expiry.delete(txn, &expiry_key(at, entry)).map_err(failed)?;
    }
    Ok(live(at))
}

fn apply(txn: &mut RwTxn, t: Tables, op: Op) -> Result<bool, KvError> {
    match op {
        Op::Put(entry, value, expires) => {
            remove(txn, t, &entry)?;
            let at = expires.map_or(NEVER, |at| at.max(0) as u64);
            let mut stored = Vec::with_capacity(8 + value.len());
            stored.extend_from_slice(&at.to_be_bytes());
            stored.extend_from_slice(&value);
            t.entries.put(txn, &entry, &stored).map_err(failed)?;
            if at != NEVER {
                t.expiry.put(txn, &expiry_key(at, &entry), &[]).map_err(failed)?;
            }
            Ok(true)
        }
        Op::Delete(entry) => remove(txn, t, &entry),
    }
}

/// Remove at most [`PURGE_BATCH`] expired entries; how many went.
fn purge(env: &Env<WithoutTls>, t: Tables) -> Result<usize, KvError> {
    let now = now().max(0) as u64;
    let mut txn = env.write_txn().map_err(failed)?;
    let mut due = Vec::new();
    for row in t.expiry.iter(&txn).map_err(failed)? {
        let (key, _) = row.map_err(failed)?;
        let Some((at, entry)) = split(key) else { continue };
        if at > now || due.len() == PURGE_BATCH {
            break;
        }
        due.push((key.to_vec(), entry.to_vec(), at));
    }
    for (expiry_row, entry, at) in &due {
        t.expiry.delete(&mut txn, expiry_row).map_err(failed)?;
        // A newer write of the entry has its own expiry: leave it.
        let current = t
            .entries
            .get(&txn, entry)
            .map_err(failed)?
            .and_then(split)
            .map(|(a, _)| a);
        if current == Some(*at) {
            t.entries.delete(&mut txn, entry).map_err(failed)?;
        }
    }
    txn.commit().map_err(failed)?;
    Ok(due.len())
}
