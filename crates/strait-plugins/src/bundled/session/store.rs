//! `storage = kong`: the session rows Kong keeps in its `sessions` table,
//! here in the node's runtime store (`strait_runtime::kv`, table
//! `sessions`): never configuration, so a login writes no config version.
//!
//! Keys: `s:<session_id>` -> the row (JSON, Kong's columns), and
//! `i:<id>` -> the session id, for the Admin API's `/sessions/{id}`.
//! Each expires with the row's TTL.

use serde::{Deserialize, Serialize};
use strait_runtime::kv::{self, KvError, KvStore, Table};
use uuid::Uuid;

/// One row of Kong's `sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRow {
    pub id: Uuid,
    /// base64url of the session id (the cookie's header holds the id).
    pub session_id: String,
    /// Seconds since the epoch.
    pub expires: i64,
    /// JSON `[ciphertext (base64url), info]`, as lua-resty-session stores it.
    pub data: String,
    pub created_at: i64,
    pub ttl: i64,
}

pub fn row_key(session_id: &str) -> String {
    format!("s:{session_id}")
}

pub fn id_key(id: Uuid) -> String {
    format!("i:{id}")
}

fn store() -> Result<&'static std::sync::Arc<dyn KvStore>, KvError> {
    kv::installed().ok_or_else(|| KvError::Unavailable("this node has no runtime store".into()))
}

fn decode(bytes: &[u8]) -> Result<SessionRow, KvError> {
    serde_json::from_slice(bytes).map_err(|e| KvError::Failed(format!("a stored session does not decode: {e}")))
}

pub async fn load(session_id: &str) -> Result<Option<SessionRow>, KvError> {
    match store()?.get(Table::Sessions, &row_key(session_id)).await? {
        Some(bytes) => decode(&bytes).map(Some),
        None => Ok(None),
    }
}

/// The row of the Admin API's `/sessions/{id or session_id}`.
pub async fn find(id_or_session_id: &str) -> Result<Option<SessionRow>, KvError> {
    if let Ok(id) = Uuid::parse_str(id_or_session_id) {
        if let Some(session_id) = store()?.get(Table::Sessions, &id_key(id)).await? {
            return load(&String::from_utf8_lossy(&session_id)).await;
        }
    }
    load(id_or_session_id).await
}

async fn put(row: &SessionRow, ttl: i64) -> Result<(), KvError> {
    let kv = store()?;
    let bytes = serde_json::to_vec(row).map_err(|e| KvError::Failed(e.to_string()))?;
    kv.put(Table::Sessions, &id_key(row.id), row.session_id.clone().into_bytes(), Some(ttl))
        .await?;
    kv.put(Table::Sessions, &row_key(&row.session_id), bytes, Some(ttl)).await
}

pub async fn delete(row: &SessionRow) -> Result<bool, KvError> {
    let kv = store()?;
    kv.delete(Table::Sessions, &id_key(row.id)).await?;
    kv.delete(Table::Sessions, &row_key(&row.session_id)).await
}

/// What becomes of the row a save replaces.
#[derive(Debug, Clone)]
pub enum Old {
    /// Kept readable `stale_ttl` more seconds (requests already in flight
    /// with the old cookie still open it).
    Stale(SessionRow, i64),
    /// Deleted (a persistent session's old row).
    Gone(SessionRow),
}

/// Kong's `insert_session`: the new row with `ttl`, then the old one made
/// stale or removed.
pub async fn insert(session_id: String, data: String, ttl: i64, now: i64, old: Option<Old>) -> Result<(), KvError> {
    let row = SessionRow {
        id: Uuid::new_v4(),
        session_id,
        expires: now + ttl,
        data,
        created_at: now,
        ttl,
    };
    put(&row, ttl).await?;
    match old {
        Some(Old::Stale(mut row, stale_ttl)) => {
            row.expires = now + stale_ttl;
            row.ttl = stale_ttl;
            put(&row, stale_ttl).await
        }
        Some(Old::Gone(row)) => delete(&row).await.map(|_| ()),
        None => Ok(()),
    }
}

/// A page of rows for the Admin API (`offset`: opaque, from the page
/// before).
pub async fn list(offset: Option<&str>, size: usize) -> Result<(Vec<SessionRow>, Option<String>), KvError> {
    let page = store()?.list(Table::Sessions, "s:", offset, size).await?;
    let rows = page.entries.iter().map(|(_, bytes)| decode(bytes)).collect::<Result<Vec<_>, _>>()?;
    Ok((rows, page.next))
}
