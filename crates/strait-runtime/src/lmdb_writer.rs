//! The one writer thread of an embedded runtime store (the OAuth2 token
//! store, the runtime key-value store): every write waiting at the time
//! goes into one LMDB transaction and one commit, each answered only once
//! that commit is on disk; expired rows are purged in batches between.
//! Reads never come here (a read transaction on the caller's thread).

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use heed::{Env, RwTxn, WithoutTls};
use tokio::sync::oneshot;

/// One write and where its answer goes.
pub struct Job<Op, T, E> {
    pub op: Op,
    pub reply: oneshot::Sender<Result<T, E>>,
}

/// How a store's writer applies writes and purges.
pub struct Writer<A, P, E> {
    /// Writes applied in one transaction at most.
    pub batch: usize,
    /// How often the purge runs when nothing else wakes the writer.
    pub purge_every: Duration,
    /// One write; checks come before its first put, so a refused write
    /// leaves nothing in the shared transaction.
    pub apply: A,
    /// One purge round; true when it removed a full batch (run again at once).
    pub purge: P,
    /// For the log line of a failed purge.
    pub what: &'static str,
    /// A failed transaction or commit as the store's error.
    pub failed: fn(String) -> E,
}

/// The writer's loop, until every sender is gone.
pub fn run<Op, T, E, A, P>(env: Env<WithoutTls>, jobs: Receiver<Job<Op, T, E>>, mut writer: Writer<A, P, E>)
where
    E: std::fmt::Display,
    A: FnMut(&mut RwTxn, Op) -> Result<T, E>,
    P: FnMut(&Env<WithoutTls>) -> Result<bool, E>,
{
    let mut last_purge = Instant::now();
    let mut purge_again = false;
    loop {
        let wait = if purge_again {
            Duration::ZERO
        } else {
            writer.purge_every
        };
        let mut batch = Vec::new();
        match jobs.recv_timeout(wait) {
            Ok(job) => batch.push(job),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        while batch.len() < writer.batch {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            commit(&env, batch, &mut writer.apply, writer.failed);
        }
        if purge_again || last_purge.elapsed() >= writer.purge_every {
            last_purge = Instant::now();
            purge_again = (writer.purge)(&env).unwrap_or_else(|error| {
                tracing::warn!(%error, "removing expired {} failed", writer.what);
                false
            });
        }
    }
}

fn commit<Op, T, E, A>(env: &Env<WithoutTls>, batch: Vec<Job<Op, T, E>>, apply: &mut A, failed: fn(String) -> E)
where
    A: FnMut(&mut RwTxn, Op) -> Result<T, E>,
{
    let mut txn = match env.write_txn() {
        Ok(txn) => txn,
        Err(error) => {
            for job in batch {
                let _ = job.reply.send(Err(failed(error.to_string())));
            }
            return;
        }
    };
    let mut answers = Vec::with_capacity(batch.len());
    for job in batch {
        let result = apply(&mut txn, job.op);
        answers.push((job.reply, result));
    }
    match txn.commit() {
        Ok(()) => {
            for (reply, result) in answers {
                let _ = reply.send(result);
            }
        }
        Err(error) => {
            for (reply, _) in answers {
                let _ = reply.send(Err(failed(error.to_string())));
            }
        }
    }
}
