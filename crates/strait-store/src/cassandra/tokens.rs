//! [`CassandraTokens`]: the OAuth2 token store on Cassandra
//! (`oauth2_token_store = cassandra`, the default with `database =
//! cassandra`), the answer to the field report this dialect exists for:
//! token saves of 5 to 30 s because Kong's schema found tokens through
//! secondary indexes.
//!
//! Every statement names a partition key (schema.rs, `001_runtime`):
//! - a bearer request is one read of `oauth2_tokens` by the SHA-256 of the
//!   access token; a refresh or an Admin API read by id is one more read of
//!   a lookup table (`oauth2_refresh_tokens`, `oauth2_token_ids`) first;
//! - a save is a lightweight transaction (`IF NOT EXISTS`, Paxos at
//!   `SERIAL`) per unique key a client chose: the access token, the id, the
//!   refresh token if any. A key already taken fails its transaction, the
//!   rows written before it are taken back (conditionally: only if still
//!   ours) and the save is refused with the field, as PostgreSQL's unique
//!   violation is. A key this node drew (a v4 UUID, a 192-bit random
//!   token: `Drawn`) cannot be taken and is written plainly: the token
//!   endpoint's saves are three plain writes, a migration's
//!   `POST /oauth2_tokens` with its own access token one transaction and
//!   one write;
//! - every row carries the token's TTL (its purge time), so expired tokens
//!   leave by themselves: no purge loop, no scan;
//! - listing pages through `oauth2_token_ids` by token range (Admin API
//!   pages only, never a proxy path).
//!
//! Every later change (update, revocation, a code taken) is a lightweight
//! transaction; over a row first written plainly it wins by timestamp, as
//! every Cassandra write does, so the nodes' clocks must be synchronised
//! (NTP), as Cassandra itself requires.

use std::sync::Arc;

use scylla::response::query_result::QueryResult;
use scylla::serialize::row::SerializeRow;
use strait_runtime::oauth2::{
    key_of, now, row, AuthCode, Drawn, OauthToken, StoreFuture, TokenPage, TokenStore, TokenStoreError,
    CODE_TTL_SECONDS,
};
use uuid::Uuid;

use super::schema::ident;
use super::write::applied;
use super::{cql_error, ttl_until, CassandraConfig, Client, Conn};
use crate::StoreError;

/// An insert of a row keyed by a unique value: as a lightweight
/// transaction (`IF NOT EXISTS`), and plain for keys drawn here.
struct Insert {
    claim: String,
    plain: String,
}

impl Insert {
    /// `INSERT ... VALUES (...)`, then `USING TTL ?`.
    fn new(insert: String) -> Insert {
        Insert {
            claim: format!("{insert} IF NOT EXISTS USING TTL ?"),
            plain: format!("{insert} USING TTL ?"),
        }
    }
}

/// The CQL of every statement, with the keyspace in it.
struct Cql {
    by_access: String,
    id_row: String,
    refresh_row: String,
    insert_token: Insert,
    update_token: String,
    insert_id: Insert,
    update_id: String,
    insert_refresh: Insert,
    update_refresh: String,
    delete_token: String,
    delete_id: String,
    delete_refresh: String,
    list_first: String,
    list_after: String,
    insert_code: String,
    read_code: String,
    take_code: String,
}

impl Cql {
    fn new(keyspace: &str) -> Cql {
        let ks = ident(keyspace);
        Cql {
            by_access: format!("SELECT purge_at, body FROM {ks}.oauth2_tokens WHERE access_hash = ?"),
            id_row: format!("SELECT access_hash FROM {ks}.oauth2_token_ids WHERE id = ?"),
            refresh_row: format!("SELECT access_hash FROM {ks}.oauth2_refresh_tokens WHERE refresh_hash = ?"),
            insert_token: Insert::new(format!(
                "INSERT INTO {ks}.oauth2_tokens (access_hash, id, refresh_hash, purge_at, body) \
                 VALUES (?, ?, ?, ?, ?)"
            )),
            update_token: format!(
                "UPDATE {ks}.oauth2_tokens USING TTL ? SET id = ?, refresh_hash = ?, purge_at = ?, body = ? \
                 WHERE access_hash = ? IF id = ?"
            ),
            insert_id: Insert::new(format!(
                "INSERT INTO {ks}.oauth2_token_ids (id, access_hash) VALUES (?, ?)"
            )),
            update_id: format!("UPDATE {ks}.oauth2_token_ids USING TTL ? SET access_hash = ? WHERE id = ? IF EXISTS"),
            insert_refresh: Insert::new(format!(
                "INSERT INTO {ks}.oauth2_refresh_tokens (refresh_hash, access_hash) VALUES (?, ?)"
            )),
            update_refresh: format!(
                "UPDATE {ks}.oauth2_refresh_tokens USING TTL ? SET access_hash = ? WHERE refresh_hash = ? \
                 IF access_hash = ?"
            ),
            delete_token: format!("DELETE FROM {ks}.oauth2_tokens WHERE access_hash = ? IF id = ?"),
            delete_id: format!("DELETE FROM {ks}.oauth2_token_ids WHERE id = ? IF access_hash = ?"),
            delete_refresh: format!("DELETE FROM {ks}.oauth2_refresh_tokens WHERE refresh_hash = ? IF access_hash = ?"),
            list_first: format!("SELECT id, access_hash FROM {ks}.oauth2_token_ids LIMIT ?"),
            list_after: format!("SELECT id, access_hash FROM {ks}.oauth2_token_ids WHERE token(id) > token(?) LIMIT ?"),
            insert_code: format!(
                "INSERT INTO {ks}.oauth2_codes (code_hash, body) VALUES (?, ?) IF NOT EXISTS USING TTL ?"
            ),
            read_code: format!("SELECT body FROM {ks}.oauth2_codes WHERE code_hash = ?"),
            take_code: format!("DELETE FROM {ks}.oauth2_codes WHERE code_hash = ? IF body = ?"),
        }
    }
}

/// The Cassandra token store.
pub struct CassandraTokens {
    client: Client,
    cql: Arc<Cql>,
}

impl std::fmt::Debug for CassandraTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CassandraTokens({})", self.client.config().label())
    }
}

fn failed(error: StoreError) -> TokenStoreError {
    match error {
        StoreError::Unavailable(detail) => TokenStoreError::Unavailable(detail),
        other => TokenStoreError::Failed(other.to_string()),
    }
}

fn cql_failed(error: impl std::fmt::Display) -> TokenStoreError {
    failed(cql_error(error))
}

/// One statement, its answer.
async fn exec(conn: &Conn, cql: &str, lwt: bool, values: impl SerializeRow) -> Result<QueryResult, TokenStoreError> {
    let session = conn.session().await.map_err(failed)?;
    session
        .execute_unpaged(conn.statement(cql, lwt), values)
        .await
        .map_err(cql_failed)
}

/// A lightweight transaction: whether it applied.
async fn lwt(conn: &Conn, cql: &str, values: impl SerializeRow) -> Result<bool, TokenStoreError> {
    applied(exec(conn, cql, true, values).await?).map_err(failed)
}

/// The rows of a read.
async fn rows<R>(conn: &Conn, cql: &str, values: impl SerializeRow) -> Result<Vec<R>, TokenStoreError>
where
    R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
{
    conn.rows(cql, false, values).await.map_err(failed)
}

/// A token's row as stored: what the lookups need beside the token.
struct Stored {
    token: OauthToken,
    purge_at: Option<i64>,
}

impl Stored {
    fn live(&self, at: i64) -> bool {
        self.purge_at.is_none_or(|p| p > at)
    }
}

/// The token under `access`, live or not (a purge time passed but its TTL
/// not yet run out: the same second).
async fn stored(conn: &Conn, cql: &Cql, access: &[u8]) -> Result<Option<Stored>, TokenStoreError> {
    let found: Vec<(Option<i64>, Option<Vec<u8>>)> = rows(conn, &cql.by_access, (access,)).await?;
    let Some((purge_at, Some(body))) = found.into_iter().next() else {
        return Ok(None);
    };
    let token =
        row::decode(&body).map_err(|e| TokenStoreError::Failed(format!("a stored token does not decode: {e}")))?;
    Ok(Some(Stored { token, purge_at }))
}

/// The live token under `access`.
async fn live(conn: &Conn, cql: &Cql, access: &[u8]) -> Result<Option<OauthToken>, TokenStoreError> {
    let at = now();
    Ok(stored(conn, cql, access).await?.filter(|s| s.live(at)).map(|s| s.token))
}

/// The access hash a lookup row points to.
async fn pointer<K: scylla::serialize::value::SerializeValue>(
    conn: &Conn,
    cql: &str,
    key: K,
) -> Result<Option<Vec<u8>>, TokenStoreError> {
    let found: Vec<(Option<Vec<u8>>,)> = rows(conn, cql, (key,)).await?;
    Ok(found.into_iter().next().and_then(|(access,)| access))
}

/// What a token's rows are written with.
struct Keys {
    access: Vec<u8>,
    refresh: Option<Vec<u8>>,
    purge_at: Option<i64>,
    ttl: i32,
    body: Vec<u8>,
}

impl Keys {
    fn of(token: &OauthToken) -> Keys {
        let purge_at = token.purge_at();
        Keys {
            access: key_of(&token.access_token).to_vec(),
            refresh: token.refresh_token.as_deref().map(|r| key_of(r).to_vec()),
            purge_at,
            ttl: ttl_until(purge_at, now()),
            body: row::encode(token),
        }
    }
}

impl CassandraTokens {
    /// The store on `config`'s keyspace (migration `001_runtime` must have
    /// run: the node checks the schema first). Connects on first use.
    pub fn new(config: CassandraConfig) -> Result<CassandraTokens, StoreError> {
        let cql = Arc::new(Cql::new(&config.keyspace));
        Ok(CassandraTokens {
            client: Client::new(config, "strait-cassandra-tokens")?,
            cql,
        })
    }

    /// Refuse a keyspace this build cannot use; [`StoreError::Unavailable`]
    /// when the cluster is away. For a node whose configuration lives
    /// elsewhere (the Cassandra configuration store checks its own).
    pub fn check_schema(&self) -> Result<(), StoreError> {
        self.client.check_schema()
    }

    fn call<T, F, Fut>(&self, work: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Conn>, Arc<Cql>) -> Fut,
        Fut: std::future::Future<Output = Result<T, TokenStoreError>> + Send + 'static,
    {
        let cql = self.cql.clone();
        self.client.call(
            move |conn| work(conn, cql),
            TokenStoreError::Unavailable,
            TokenStoreError::Failed,
        )
    }
}

fn conflict(field: &'static str, value: String) -> TokenStoreError {
    TokenStoreError::Conflict { field, value }
}

/// Saves `token`: its access token, its id and its refresh token each
/// claimed by a lightweight transaction, or written plainly when drawn
/// here; a taken key undoes the claims before it.
async fn insert(conn: &Conn, cql: &Cql, token: &OauthToken, drawn: Drawn) -> Result<(), TokenStoreError> {
    let k = Keys::of(token);
    let row = (&k.access, token.id, &k.refresh, k.purge_at, &k.body, k.ttl);
    if !claim(conn, &cql.insert_token, drawn.access_token, row).await? {
        return Err(conflict("access_token", token.access_token.clone()));
    }
    if !claim(conn, &cql.insert_id, drawn.id, (token.id, &k.access, k.ttl)).await? {
        lwt(conn, &cql.delete_token, (&k.access, token.id)).await?;
        return Err(conflict("id", token.id.to_string()));
    }
    if let Some(refresh) = &k.refresh {
        let values = (refresh, &k.access, k.ttl);
        if !claim(conn, &cql.insert_refresh, drawn.refresh_token, values).await? {
            lwt(conn, &cql.delete_id, (token.id, &k.access)).await?;
            lwt(conn, &cql.delete_token, (&k.access, token.id)).await?;
            return Err(conflict(
                "refresh_token",
                token.refresh_token.clone().unwrap_or_default(),
            ));
        }
    }
    Ok(())
}

/// A row keyed by a unique value: claimed by a lightweight transaction
/// (false: the key is taken), or written plainly when the key was drawn
/// here.
async fn claim(conn: &Conn, insert: &Insert, drawn: bool, values: impl SerializeRow) -> Result<bool, TokenStoreError> {
    if !drawn {
        return lwt(conn, &insert.claim, values).await;
    }
    exec(conn, &insert.plain, false, values).await?;
    Ok(true)
}

impl TokenStore for CassandraTokens {
    fn backend(&self) -> &'static str {
        "cassandra"
    }

    fn insert_token(&self, token: OauthToken) -> StoreFuture<'_, ()> {
        self.insert_drawn_token(token, Drawn::default())
    }

    fn insert_drawn_token(&self, token: OauthToken, drawn: Drawn) -> StoreFuture<'_, ()> {
        self.call(move |conn, cql| async move { insert(&conn, &cql, &token, drawn).await })
    }

    fn replace_token(&self, token: OauthToken) -> StoreFuture<'_, ()> {
        self.call(move |conn, cql| async move {
            let Some(old_access) = pointer(&conn, &cql.id_row, token.id).await? else {
                return Err(TokenStoreError::NotFound);
            };
            let Some(old) = stored(&conn, &cql, &old_access).await? else {
                return Err(TokenStoreError::NotFound);
            };
            let k = Keys::of(&token);
            let old_refresh = old.token.refresh_token.as_deref().map(|r| key_of(r).to_vec());
            let moved = k.access != old_access;
            if moved {
                let row = (&k.access, token.id, &k.refresh, k.purge_at, &k.body, k.ttl);
                if !lwt(&conn, &cql.insert_token.claim, row).await? {
                    return Err(conflict("access_token", token.access_token.clone()));
                }
            } else {
                let row = (k.ttl, token.id, &k.refresh, k.purge_at, &k.body, &k.access, token.id);
                if !lwt(&conn, &cql.update_token, row).await? {
                    return Err(TokenStoreError::NotFound);
                }
            }
            match (&k.refresh, &old_refresh) {
                (Some(new), Some(was)) if new == was => {
                    lwt(&conn, &cql.update_refresh, (k.ttl, &k.access, new, &old_access)).await?;
                }
                (new, was) => {
                    if let Some(new) = new {
                        if !lwt(&conn, &cql.insert_refresh.claim, (new, &k.access, k.ttl)).await? {
                            if moved {
                                lwt(&conn, &cql.delete_token, (&k.access, token.id)).await?;
                            }
                            return Err(conflict(
                                "refresh_token",
                                token.refresh_token.clone().unwrap_or_default(),
                            ));
                        }
                    }
                    if let Some(was) = was {
                        lwt(&conn, &cql.delete_refresh, (was, &old_access)).await?;
                    }
                }
            }
            lwt(&conn, &cql.update_id, (k.ttl, &k.access, token.id)).await?;
            if moved {
                lwt(&conn, &cql.delete_token, (&old_access, token.id)).await?;
            }
            Ok(())
        })
    }

    fn token_by_access(&self, access_token: &str) -> StoreFuture<'_, Option<OauthToken>> {
        let access = key_of(access_token);
        self.call(move |conn, cql| async move { live(&conn, &cql, &access).await })
    }

    fn token_by_refresh(&self, refresh_token: &str) -> StoreFuture<'_, Option<OauthToken>> {
        let refresh = key_of(refresh_token).to_vec();
        let wanted = refresh_token.to_string();
        self.call(move |conn, cql| async move {
            let Some(access) = pointer(&conn, &cql.refresh_row, refresh).await? else {
                return Ok(None);
            };
            let found = live(&conn, &cql, &access).await?;
            Ok(found.filter(|t| t.refresh_token.as_deref() == Some(wanted.as_str())))
        })
    }

    fn token_by_id(&self, id: Uuid) -> StoreFuture<'_, Option<OauthToken>> {
        self.call(move |conn, cql| async move {
            let Some(access) = pointer(&conn, &cql.id_row, id).await? else {
                return Ok(None);
            };
            Ok(live(&conn, &cql, &access).await?.filter(|t| t.id == id))
        })
    }

    fn delete_token(&self, id: Uuid) -> StoreFuture<'_, Option<OauthToken>> {
        self.call(move |conn, cql| async move {
            let Some(access) = pointer(&conn, &cql.id_row, id).await? else {
                return Ok(None);
            };
            let found = stored(&conn, &cql, &access).await?;
            // Of two deletes racing, one takes the token row.
            let taken = lwt(&conn, &cql.delete_token, (&access, id)).await?;
            lwt(&conn, &cql.delete_id, (id, &access)).await?;
            let Some(found) = found.filter(|_| taken) else {
                return Ok(None);
            };
            if let Some(refresh) = found.token.refresh_token.as_deref() {
                lwt(&conn, &cql.delete_refresh, (key_of(refresh).to_vec(), &access)).await?;
            }
            let was_live = found.live(now());
            Ok(Some(found.token).filter(|_| was_live))
        })
    }

    fn list_tokens(&self, cursor: Option<&str>, size: usize) -> StoreFuture<'_, TokenPage> {
        let after = match strait_runtime::oauth2::id_cursor(cursor) {
            Ok(after) => after,
            Err(error) => return Box::pin(std::future::ready(Err(error))),
        };
        let size = size.clamp(1, 1_000);
        self.call(move |conn, cql| async move {
            // One row past the page says whether there is a next one.
            let limit = size as i32 + 1;
            let ids: Vec<(Uuid, Option<Vec<u8>>)> = match after {
                None => rows(&conn, &cql.list_first, (limit,)).await?,
                Some(id) => rows(&conn, &cql.list_after, (id, limit)).await?,
            };
            let next = match ids.len() > size {
                true => Some(ids[size - 1].0.to_string()),
                false => None,
            };
            let mut reads = tokio::task::JoinSet::new();
            for (position, (id, access)) in ids.into_iter().take(size).enumerate() {
                let Some(access) = access else { continue };
                let (conn, cql) = (conn.clone(), cql.clone());
                reads.spawn(async move {
                    let token = live(&conn, &cql, &access).await?;
                    Ok::<_, TokenStoreError>((position, token.filter(|t| t.id == id)))
                });
            }
            let mut found = Vec::with_capacity(size);
            while let Some(read) = reads.join_next().await {
                let (position, token) = read.map_err(|e| TokenStoreError::Failed(e.to_string()))??;
                if let Some(token) = token {
                    found.push((position, token));
                }
            }
            found.sort_by_key(|(position, _)| *position);
            Ok(TokenPage {
                tokens: found.into_iter().map(|(_, token)| token).collect(),
                next,
            })
        })
    }

    fn insert_code(&self, code: AuthCode) -> StoreFuture<'_, ()> {
        self.call(move |conn, cql| async move {
            let text = serde_json::to_string(&code).map_err(|e| TokenStoreError::Failed(e.to_string()))?;
            let hash = key_of(&code.code).to_vec();
            let ttl = ttl_until(Some(code.created_at.saturating_add(CODE_TTL_SECONDS)), now());
            if !lwt(&conn, &cql.insert_code, (hash, text, ttl)).await? {
                return Err(conflict("code", code.code.clone()));
            }
            Ok(())
        })
    }

    fn take_code(&self, code: &str) -> StoreFuture<'_, Option<AuthCode>> {
        let hash = key_of(code).to_vec();
        self.call(move |conn, cql| async move {
            let found: Vec<(Option<String>,)> = rows(&conn, &cql.read_code, (&hash,)).await?;
            let Some((Some(text),)) = found.into_iter().next() else {
                return Ok(None);
            };
            // Taken once: of two exchanges racing on other nodes, one
            // deletes the row and the other's condition fails.
            if !lwt(&conn, &cql.take_code, (&hash, &text)).await? {
                return Ok(None);
            }
            let found: AuthCode = serde_json::from_str(&text)
                .map_err(|e| TokenStoreError::Failed(format!("a stored code does not decode: {e}")))?;
            Ok(Some(found).filter(|c| !c.expired(now())))
        })
    }
}
