//! The embedded token store: an LMDB environment of its own (never the
//! configuration's), under `<prefix>/oauth2_tokens`.
//!
//! Tables, every one keyed for a primary-key lookup:
//! - `tokens`: SHA-256(access token) -> token (`row` format);
//! - `token_ids`: token id -> SHA-256(access token) (Admin API by id);
//! - `refresh`: SHA-256(refresh token) -> SHA-256(access token);
//! - `codes`: SHA-256(code) -> authorization code (JSON);
//! - `expiry`: (when, kind, key) -> nothing: the TTL-ordered index that
//!   expired rows leave through, in batches.
//!
//! Reads run on the caller's thread in a read transaction (no lock, no
//! wait on writers). Writes go to one writer thread through a bounded
//! queue: it takes every write waiting, applies them in one transaction
//! and commits once, so a thousand saves a second are a few hundred
//! fsyncs, and each save is answered only after its commit is on disk.
#![allow(unsafe_code)]

use std::ops::Bound;
use std::path::Path;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::Duration;

use heed::types::Bytes;
use heed::{Database, Env, EnvOpenOptions, RoTxn, RwTxn, WithoutTls};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{key_of, now, AuthCode, OauthToken, StoreFuture, TokenPage, TokenStore, TokenStoreError, CODE_TTL_SECONDS};

type Db = Database<Bytes, Bytes>;

/// Writes waiting for the writer at most; past it a save fails at once
/// (Kong's client sees a 500 and retries) rather than queueing unbounded.
const QUEUE: usize = 16_384;
/// Writes applied in one transaction at most.
const BATCH: usize = 4_096;
/// Expired rows removed per purge transaction.
const PURGE_BATCH: usize = 1_000;
/// How often the writer looks for expired rows when nothing else wakes it.
const PURGE_EVERY: Duration = Duration::from_secs(1);

const KIND_TOKEN: u8 = 0;
const KIND_CODE: u8 = 1;

#[derive(Clone, Copy)]
struct Tables {
    tokens: Db,
    ids: Db,
    refresh: Db,
    codes: Db,
    expiry: Db,
}

enum Op {
    InsertToken(OauthToken),
    ReplaceToken(OauthToken),
    DeleteToken(Uuid),
    InsertCode(AuthCode),
    TakeCode(String),
}

enum Done {
    Nothing,
    Token(Option<OauthToken>),
    Code(Option<AuthCode>),
}

type Job = crate::lmdb_writer::Job<Op, Done, TokenStoreError>;

/// The embedded token store.
pub struct LmdbTokens {
    env: Env<WithoutTls>,
    tables: Tables,
    writer: SyncSender<Job>,
}

impl std::fmt::Debug for LmdbTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LmdbTokens").field("path", &self.env.path()).finish()
    }
}

fn failed(error: impl std::fmt::Display) -> TokenStoreError {
    TokenStoreError::Failed(error.to_string())
}

impl LmdbTokens {
    /// Open (creating) the store in `dir`, with room for `map_size` bytes,
    /// and start its writer thread.
    pub fn open(dir: &Path, map_size: usize) -> Result<LmdbTokens, TokenStoreError> {
        std::fs::create_dir_all(dir).map_err(|e| failed(format!("cannot create {}: {e}", dir.display())))?;
        let map_size = map_size.div_ceil(64 * 1024).max(1) * 64 * 1024;
        let mut options = EnvOpenOptions::new().read_txn_without_tls();
        options.map_size(map_size).max_dbs(8);
        // SAFETY: the map is undefined behaviour only if the file changes
        // behind LMDB's back. Only this module writes it, through LMDB
        // transactions with LMDB's own locking (no NO_LOCK / NO_SYNC), and
        // heed refuses to open one path twice in a process.
        let env = unsafe { options.open(dir) }.map_err(|e| failed(format!("cannot open {}: {e}", dir.display())))?;
        let mut txn = env.write_txn().map_err(failed)?;
        let mut db = |name: &str| {
            env.create_database::<Bytes, Bytes>(&mut txn, Some(name))
                .map_err(failed)
        };
        let tables = Tables {
            tokens: db("tokens")?,
            ids: db("token_ids")?,
            refresh: db("refresh")?,
            codes: db("codes")?,
            expiry: db("expiry")?,
        };
        txn.commit().map_err(failed)?;
        let (writer, jobs) = mpsc::sync_channel(QUEUE);
        let writer_env = env.clone();
        std::thread::Builder::new()
            .name("strait-oauth2-tokens".into())
            .spawn(move || {
                let writer = crate::lmdb_writer::Writer {
                    batch: BATCH,
                    purge_every: PURGE_EVERY,
                    apply: |txn: &mut RwTxn, op| apply(txn, tables, op),
                    purge: |env: &Env<WithoutTls>| {
                        purge(env, tables, now(), PURGE_BATCH).map(|removed| removed == PURGE_BATCH)
                    },
                    what: "OAuth2 tokens",
                    failed: TokenStoreError::Failed,
                };
                crate::lmdb_writer::run(writer_env, jobs, writer)
            })
            .map_err(|e| failed(format!("cannot start the token writer: {e}")))?;
        Ok(LmdbTokens { env, tables, writer })
    }

    /// Tokens stored (LMDB keeps the count; no scan).
    pub fn token_count(&self) -> Result<u64, TokenStoreError> {
        let txn = self.env.read_txn().map_err(failed)?;
        self.tables.tokens.len(&txn).map_err(failed)
    }

    fn submit(&self, op: Op) -> StoreFuture<'_, Done> {
        let (reply, answer) = oneshot::channel();
        let sent = match self.writer.try_send(Job { op, reply }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(TokenStoreError::Unavailable("too many token writes waiting".into())),
            Err(TrySendError::Disconnected(_)) => Err(TokenStoreError::Unavailable("the token writer stopped".into())),
        };
        Box::pin(async move {
            sent?;
            answer
                .await
                .unwrap_or_else(|_| Err(TokenStoreError::Unavailable("the token writer stopped".into())))
        })
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&RoTxn<WithoutTls>, Tables) -> Result<T, TokenStoreError>,
    ) -> Result<T, TokenStoreError> {
        let txn = self.env.read_txn().map_err(failed)?;
        f(&txn, self.tables)
    }
}

fn decode_token(bytes: &[u8]) -> Result<OauthToken, TokenStoreError> {
    super::row::decode(bytes).map_err(|e| failed(format!("a stored token does not decode: {e}")))
}

fn decode_code(bytes: &[u8]) -> Result<AuthCode, TokenStoreError> {
    serde_json::from_slice(bytes).map_err(|e| failed(format!("a stored code does not decode: {e}")))
}

/// A token that is there and whose row has not outlived its TTL (the purge
/// may be a second behind).
fn live(token: OauthToken) -> Option<OauthToken> {
    match token.purge_at() {
        Some(at) if at <= now() => None,
        _ => Some(token),
    }
}

fn token_at(txn: &RoTxn<WithoutTls>, t: Tables, access_key: &[u8]) -> Result<Option<OauthToken>, TokenStoreError> {
    match t.tokens.get(txn, access_key).map_err(failed)? {
        Some(bytes) => decode_token(bytes).map(Some),
        None => Ok(None),
    }
}

fn expiry_key(at: i64, kind: u8, key: &[u8; 32]) -> [u8; 41] {
    let mut out = [0u8; 41];
    out[..8].copy_from_slice(&(at.max(0) as u64).to_be_bytes());
    out[8] = kind;
    out[9..].copy_from_slice(key);
    out
}

impl TokenStore for LmdbTokens {
    fn backend(&self) -> &'static str {
        "embedded"
    }

    fn insert_token(&self, token: OauthToken) -> StoreFuture<'_, ()> {
        let done = self.submit(Op::InsertToken(token));
        Box::pin(async move { done.await.map(|_| ()) })
    }

    fn replace_token(&self, token: OauthToken) -> StoreFuture<'_, ()> {
        let done = self.submit(Op::ReplaceToken(token));
        Box::pin(async move { done.await.map(|_| ()) })
    }

    fn token_by_access(&self, access_token: &str) -> StoreFuture<'_, Option<OauthToken>> {
        let found = self.read(|txn, t| token_at(txn, t, &key_of(access_token)));
        Box::pin(std::future::ready(found.map(|t| t.and_then(live))))
    }

    fn token_by_refresh(&self, refresh_token: &str) -> StoreFuture<'_, Option<OauthToken>> {
        let found = self.read(
            |txn, t| match t.refresh.get(txn, &key_of(refresh_token)).map_err(failed)? {
                Some(access_key) => token_at(txn, t, access_key),
                None => Ok(None),
            },
        );
        Box::pin(std::future::ready(found.map(|t| t.and_then(live))))
    }

    fn token_by_id(&self, id: Uuid) -> StoreFuture<'_, Option<OauthToken>> {
        let found = self.read(|txn, t| match t.ids.get(txn, id.as_bytes()).map_err(failed)? {
            Some(access_key) => token_at(txn, t, access_key),
            None => Ok(None),
        });
        Box::pin(std::future::ready(found.map(|t| t.and_then(live))))
    }

    fn delete_token(&self, id: Uuid) -> StoreFuture<'_, Option<OauthToken>> {
        let done = self.submit(Op::DeleteToken(id));
        Box::pin(async move {
            match done.await? {
                Done::Token(token) => Ok(token),
                _ => Ok(None),
            }
        })
    }

    fn list_tokens(&self, cursor: Option<&str>, size: usize) -> StoreFuture<'_, TokenPage> {
        let after = match super::id_cursor(cursor) {
            Ok(after) => after,
            Err(error) => return Box::pin(std::future::ready(Err(error))),
        };
        let size = size.max(1);
        let listed = self.read(|txn, t| {
            let after_bytes = after.map(|a| *a.as_bytes());
            let start = match &after_bytes {
                Some(bytes) => Bound::Excluded(&bytes[..]),
                None => Bound::Unbounded,
            };
            let mut out = Vec::with_capacity(size.min(1000));
            for entry in t.ids.range(txn, &(start, Bound::Unbounded)).map_err(failed)? {
                let (_, access_key) = entry.map_err(failed)?;
                if out.len() == size {
                    let next = out.last().map(|t: &OauthToken| t.id.to_string());
                    return Ok(TokenPage { tokens: out, next });
                }
                if let Some(token) = token_at(txn, t, access_key)?.and_then(live) {
                    out.push(token);
                }
            }
            Ok(TokenPage {
                tokens: out,
                next: None,
            })
        });
        Box::pin(std::future::ready(listed))
    }

    fn insert_code(&self, code: AuthCode) -> StoreFuture<'_, ()> {
        let done = self.submit(Op::InsertCode(code));
        Box::pin(async move { done.await.map(|_| ()) })
    }

    fn take_code(&self, code: &str) -> StoreFuture<'_, Option<AuthCode>> {
        let done = self.submit(Op::TakeCode(code.to_string()));
        Box::pin(async move {
            match done.await? {
                Done::Code(code) => Ok(code),
                _ => Ok(None),
            }
        })
    }
}

/// One write. Checks come before the first put, so a refused write leaves
/// nothing behind in the shared transaction.
fn apply(txn: &mut RwTxn, t: Tables, op: Op) -> Result<Done, TokenStoreError> {
    match op {
        Op::InsertToken(token) => {
            if t.ids.get(txn, token.id.as_bytes()).map_err(failed)?.is_some() {
                return Err(TokenStoreError::Conflict {
                    field: "id",
                    value: token.id.to_string(),
                });
            }
            check_free(txn, t, &token, None)?;
            put_token(txn, t, &token)?;
            Ok(Done::Nothing)
        }
        Op::ReplaceToken(token) => {
            let old = remove_token(txn, t, token.id, true)?.ok_or(TokenStoreError::NotFound)?;
            check_free(txn, t, &token, Some(&old))?;
            remove_token(txn, t, token.id, false)?;
            put_token(txn, t, &token)?;
            Ok(Done::Nothing)
        }
        Op::DeleteToken(id) => Ok(Done::Token(remove_token(txn, t, id, false)?)),
        Op::InsertCode(code) => {
            let key = key_of(&code.code);
            if t.codes.get(txn, &key).map_err(failed)?.is_some() {
                return Err(TokenStoreError::Conflict {
                    field: "code",
                    value: code.code,
                });
            }
            let bytes = serde_json::to_vec(&code).map_err(failed)?;
            t.codes.put(txn, &key, &bytes).map_err(failed)?;
            let at = code.created_at.saturating_add(CODE_TTL_SECONDS);
            t.expiry
                .put(txn, &expiry_key(at, KIND_CODE, &key), &[])
                .map_err(failed)?;
            Ok(Done::Nothing)
        }
        Op::TakeCode(code) => {
            let key = key_of(&code);
            let Some(bytes) = t.codes.get(txn, &key).map_err(failed)? else {
                return Ok(Done::Code(None));
            };
            let found = decode_code(bytes)?;
            t.codes.delete(txn, &key).map_err(failed)?;
            let at = found.created_at.saturating_add(CODE_TTL_SECONDS);
            t.expiry.delete(txn, &expiry_key(at, KIND_CODE, &key)).map_err(failed)?;
            Ok(Done::Code(Some(found).filter(|c| !c.expired(now()))))
        }
    }
}

/// Refuse `token` when its access or refresh token names another token
/// (`replacing`: the token it replaces, whose own names are free).
fn check_free(
    txn: &RwTxn,
    t: Tables,
    token: &OauthToken,
    replacing: Option<&OauthToken>,
) -> Result<(), TokenStoreError> {
    let same = |other: &OauthToken| replacing.is_some_and(|r| r.id == other.id);
    if let Some(bytes) = t.tokens.get(txn, &key_of(&token.access_token)).map_err(failed)? {
        if !same(&decode_token(bytes)?) {
            return Err(TokenStoreError::Conflict {
                field: "access_token",
                value: token.access_token.clone(),
            });
        }
    }
    if let Some(refresh) = &token.refresh_token {
        if let Some(access_key) = t.refresh.get(txn, &key_of(refresh)).map_err(failed)? {
            let holder = match t.tokens.get(txn, access_key).map_err(failed)? {
                Some(bytes) => Some(decode_token(bytes)?),
                None => None,
            };
            if !holder.as_ref().is_some_and(same) {
                return Err(TokenStoreError::Conflict {
                    field: "refresh_token",
                    value: refresh.clone(),
                });
            }
        }
    }
    Ok(())
}

fn put_token(txn: &mut RwTxn, t: Tables, token: &OauthToken) -> Result<(), TokenStoreError> {
    let access_key = key_of(&token.access_token);
    t.tokens
        .put(txn, &access_key, &super::row::encode(token))
        .map_err(failed)?;
    t.ids.put(txn, token.id.as_bytes(), &access_key).map_err(failed)?;
    if let Some(refresh) = &token.refresh_token {
        t.refresh.put(txn, &key_of(refresh), &access_key).map_err(failed)?;
    }
    if let Some(at) = token.purge_at() {
        t.expiry
            .put(txn, &expiry_key(at, KIND_TOKEN, &access_key), &[])
            .map_err(failed)?;
    }
    Ok(())
}

/// Remove the token `id` and its index rows (`dry`: only find it).
fn remove_token(txn: &mut RwTxn, t: Tables, id: Uuid, dry: bool) -> Result<Option<OauthToken>, TokenStoreError> {
    let Some(access_key) = t.ids.get(txn, id.as_bytes()).map_err(failed)? else {
        return Ok(None);
    };
    let access_key: [u8; 32] = access_key
        .try_into()
        .map_err(|_| failed("a token id index entry is not a SHA-256"))?;
    let Some(token) = token_at(txn, t, &access_key)? else {
        return Ok(None);
    };
    if dry {
        return Ok(Some(token));
    }
    drop_rows(txn, t, &access_key, &token)?;
    Ok(Some(token))
}

fn drop_rows(txn: &mut RwTxn, t: Tables, access_key: &[u8; 32], token: &OauthToken) -> Result<(), TokenStoreError> {
    t.tokens.delete(txn, access_key).map_err(failed)?;
    t.ids.delete(txn, token.id.as_bytes()).map_err(failed)?;
    if let Some(refresh) = &token.refresh_token {
        let refresh_key = key_of(refresh);
        // Only the index entry that points at this token.
        if t.refresh.get(txn, &refresh_key).map_err(failed)? == Some(&access_key[..]) {
            t.refresh.delete(txn, &refresh_key).map_err(failed)?;
        }
    }
    if let Some(at) = token.purge_at() {
        t.expiry
            .delete(txn, &expiry_key(at, KIND_TOKEN, access_key))
            .map_err(failed)?;
    }
    Ok(())
}

/// Remove up to `limit` rows whose time has come, oldest first, in one
/// transaction; how many were removed.
fn purge(env: &Env<WithoutTls>, t: Tables, now: i64, limit: usize) -> Result<usize, TokenStoreError> {
    let mut txn = env.write_txn().map_err(failed)?;
    let mut due = Vec::new();
    for entry in t.expiry.iter(&txn).map_err(failed)? {
        let (key, _) = entry.map_err(failed)?;
        let Ok(key) = <[u8; 41]>::try_from(key) else {
            continue;
        };
        let at = u64::from_be_bytes(key[..8].try_into().unwrap_or([0; 8]));
        if at > now.max(0) as u64 || due.len() >= limit {
            break;
        }
        due.push(key);
    }
    for key in &due {
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&key[9..]);
        match key[8] {
            KIND_TOKEN => {
                if let Some(token) = token_at(&txn, t, &hash)? {
                    drop_rows(&mut txn, t, &hash, &token)?;
                }
            }
            _ => {
                t.codes.delete(&mut txn, &hash).map_err(failed)?;
            }
        }
        t.expiry.delete(&mut txn, key).map_err(failed)?;
    }
    txn.commit().map_err(failed)?;
    Ok(due.len())
}
