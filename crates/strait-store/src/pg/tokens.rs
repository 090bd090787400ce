//! [`PgTokens`]: the OAuth2 token store in the shared PostgreSQL database
//! (`oauth2_token_store = postgres`, the default when `database =
//! postgres`). Every node on the database sees a token the moment its save
//! commits.
//!
//! Runtime data, not configuration: a save is one `INSERT`, bumps no
//! config version, writes no change log and notifies nobody. The tables
//! (migration `001_oauth2_tokens`, [`super::schema::OAUTH2_TABLES`]) are
//! keyed by the SHA-256 of the access token and of the code, so every
//! bearer request is one primary-key `SELECT`; `id` and the refresh token's
//! hash are unique indexes. Uniqueness is the database's: a refused save is
//! a unique violation and changes nothing. Expired rows leave through the
//! `purge_at` / `expires_at` indexes, at most [`PURGE_BATCH`] rows per
//! statement; every node runs the purge and `SKIP LOCKED` keeps them off
//! each other's rows.
//!
//! Each statement is sent with its parameter types (`query_typed`): one
//! round trip, no prepared statement to keep per connection. Queries run on
//! a runtime of the store's own over the same pool type as the
//! configuration store, so a slow database never holds a proxy worker's
//! thread, only the request that waits for it (at most `pg_timeout`).

use std::sync::Arc;
use std::time::Duration;

use strait_runtime::oauth2::{
    key_of, now, AuthCode, OauthToken, StoreFuture, TokenPage, TokenStore, TokenStoreError, CODE_TTL_SECONDS,
};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;
use uuid::Uuid;

use super::store::{pg_error, Pool};
use super::PgConfig;
use crate::StoreError;

/// Expired rows removed per purge statement.
pub const PURGE_BATCH: i64 = 1_000;
/// How often each node looks for expired rows.
const PURGE_EVERY: Duration = Duration::from_secs(1);

const COLUMNS: &str = "id, created_at, service_id, credential_id, token_type, expires_in, access_token, \
                       refresh_token, authenticated_userid, scope, ttl";
/// A row is live until its purge time (the purge may be a second behind).
const LIVE: &str = "(purge_at IS NULL OR purge_at > $2)";

/// The PostgreSQL token store.
pub struct PgTokens {
    runtime: tokio::runtime::Runtime,
    pool: Arc<Pool>,
    timeout: Duration,
}

impl std::fmt::Debug for PgTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgTokens({})", self.pool.label())
    }
}

fn failed(error: StoreError) -> TokenStoreError {
    match error {
        StoreError::Unavailable(detail) => TokenStoreError::Unavailable(detail),
        other => TokenStoreError::Failed(other.to_string()),
    }
}

/// A unique violation names the field whose value is taken; anything else
/// is the database's error.
fn write_error(error: tokio_postgres::Error, token: Option<&OauthToken>, code: Option<&str>) -> TokenStoreError {
    if let Some(db) = error.as_db_error() {
        if db.code() == &tokio_postgres::error::SqlState::UNIQUE_VIOLATION {
            let conflict = match (db.constraint(), token) {
                (Some("oauth2_tokens_id_key"), Some(t)) => Some(("id", t.id.to_string())),
                (Some("oauth2_tokens_pkey"), Some(t)) => Some(("access_token", t.access_token.clone())),
                (Some("oauth2_tokens_refresh_hash_key"), Some(t)) => {
                    Some(("refresh_token", t.refresh_token.clone().unwrap_or_default()))
                }
                (Some("oauth2_authorization_codes_pkey"), _) => Some(("code", code.unwrap_or_default().to_string())),
                _ => None,
            };
            if let Some((field, value)) = conflict {
                return TokenStoreError::Conflict { field, value };
            }
        }
    }
    failed(pg_error(error))
}

fn read_error(error: tokio_postgres::Error) -> TokenStoreError {
    failed(pg_error(error))
}

fn decode(row: &Row) -> Result<OauthToken, TokenStoreError> {
    let bad = |e: tokio_postgres::Error| TokenStoreError::Failed(format!("a stored token does not decode: {e}"));
    Ok(OauthToken {
        id: row.try_get("id").map_err(bad)?,
        created_at: row.try_get("created_at").map_err(bad)?,
        service: row.try_get("service_id").map_err(bad)?,
        credential: row.try_get("credential_id").map_err(bad)?,
        token_type: row.try_get("token_type").map_err(bad)?,
        expires_in: row.try_get("expires_in").map_err(bad)?,
        access_token: row.try_get("access_token").map_err(bad)?,
        refresh_token: row.try_get("refresh_token").map_err(bad)?,
        authenticated_userid: row.try_get("authenticated_userid").map_err(bad)?,
        scope: row.try_get("scope").map_err(bad)?,
        ttl: row.try_get("ttl").map_err(bad)?,
    })
}

/// The fourteen values of a token row, in the insert's column order.
struct RowValues {
    access_hash: Vec<u8>,
    refresh_hash: Option<Vec<u8>>,
    purge_at: Option<i64>,
    token: OauthToken,
}

impl RowValues {
    fn of(token: OauthToken) -> RowValues {
        RowValues {
            access_hash: key_of(&token.access_token).to_vec(),
            refresh_hash: token.refresh_token.as_deref().map(|r| key_of(r).to_vec()),
            purge_at: token.purge_at(),
            token,
        }
    }

    fn params(&self) -> [(&(dyn ToSql + Sync), Type); 14] {
        let t = &self.token;
        [
            (&self.access_hash, Type::BYTEA),
            (&t.id, Type::UUID),
            (&self.refresh_hash, Type::BYTEA),
            (&t.created_at, Type::INT8),
            (&t.service, Type::UUID),
            (&t.credential, Type::UUID),
            (&t.token_type, Type::TEXT),
            (&t.expires_in, Type::INT8),
            (&t.access_token, Type::TEXT),
            (&t.refresh_token, Type::TEXT),
            (&t.authenticated_userid, Type::TEXT),
            (&t.scope, Type::TEXT),
            (&t.ttl, Type::INT8),
            (&self.purge_at, Type::INT8),
        ]
    }
}

const INSERT_TOKEN: &str = "INSERT INTO oauth2_tokens (access_hash, id, refresh_hash, created_at, service_id, \
     credential_id, token_type, expires_in, access_token, refresh_token, authenticated_userid, scope, ttl, purge_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";

/// Kong's update: the row with `$2` takes every value, its keys included.
const REPLACE_TOKEN: &str = "UPDATE oauth2_tokens SET access_hash = $1, refresh_hash = $3, created_at = $4, \
     service_id = $5, credential_id = $6, token_type = $7, expires_in = $8, access_token = $9, refresh_token = $10, \
     authenticated_userid = $11, scope = $12, ttl = $13, purge_at = $14 WHERE id = $2 RETURNING id";

impl PgTokens {
    /// The store on `config`'s database (the schema must have run
    /// `001_oauth2_tokens`: `strait start` checks it first). Connections
    /// open as statements need them; the purge starts at once.
    pub fn new(config: PgConfig) -> Result<PgTokens, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("strait-pg-tokens")
            .enable_all()
            .build()?;
        let timeout = config.timeout;
        let pool = Arc::new(Pool::new(config));
        runtime.spawn(purge_loop(pool.clone()));
        Ok(PgTokens { runtime, pool, timeout })
    }

    /// Refuse a database whose schema this build cannot use (not
    /// bootstrapped, behind, ahead); [`StoreError::Unavailable`] when it
    /// cannot be reached. For a node whose configuration lives elsewhere
    /// (`database = embedded`); the PostgreSQL store checks its own.
    pub fn check_schema(&self) -> Result<(), StoreError> {
        let work = self.call(|pool| async move {
            let mut conn = pool.get().await.map_err(failed)?;
            let state = super::migrate::schema_state(conn.client()).await.map_err(|e| match e {
                super::migrate::MigrateError::Postgres(error) => failed(pg_error(error)),
                other => TokenStoreError::Failed(other.to_string()),
            })?;
            Ok(state.refusal())
        });
        // Waited for on this thread (start-up, maybe inside another
        // runtime), the query running on the store's.
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let _ = reply.send(work.await);
        });
        let state = answer
            .recv()
            .unwrap_or_else(|_| Err(TokenStoreError::Failed("the token store's runtime stopped".into())));
        match state {
            Ok(None) => Ok(()),
            Ok(Some(refusal)) => Err(StoreError::Postgres(refusal)),
            Err(TokenStoreError::Unavailable(detail)) => Err(StoreError::Unavailable(detail)),
            Err(other) => Err(StoreError::Postgres(other.to_string())),
        }
    }

    /// Run `work` with a pooled connection on the store's runtime, at most
    /// `pg_timeout`.
    fn call<T, F, Fut>(&self, work: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Pool>) -> Fut,
        Fut: std::future::Future<Output = Result<T, TokenStoreError>> + Send + 'static,
    {
        crate::run_within(
            &self.runtime,
            self.timeout,
            work(self.pool.clone()),
            TokenStoreError::Unavailable,
            TokenStoreError::Failed,
        )
    }

    /// The one live token a keyed `SELECT` finds (`$1`: the key, `$2`: now).
    fn select_one<K>(&self, filter: &'static str, key: K, key_type: Type) -> StoreFuture<'_, Option<OauthToken>>
    where
        K: ToSql + Sync + Send + 'static,
    {
        self.call(move |pool| async move {
            let mut conn = pool.get().await.map_err(failed)?;
            let sql = format!("SELECT {COLUMNS} FROM oauth2_tokens WHERE {filter} AND {LIVE}");
            let rows = conn
                .client()
                .query_typed(&sql, &[(&key, key_type), (&now(), Type::INT8)])
                .await
                .map_err(read_error)?;
            rows.first().map(decode).transpose()
        })
    }
}

/// Remove expired tokens and codes, a batch per statement, every
/// [`PURGE_EVERY`]; a failed round is logged once per outage and retried.
async fn purge_loop(pool: Arc<Pool>) {
    let mut warned = false;
    loop {
        tokio::time::sleep(PURGE_EVERY).await;
        let round = async {
            let mut conn = pool.get().await?;
            for table_key in [
                ("oauth2_tokens", "access_hash", "purge_at"),
                ("oauth2_authorization_codes", "code_hash", "expires_at"),
            ] {
                let (table, key, at) = table_key;
                let sql = format!(
                    "DELETE FROM {table} WHERE {key} IN (SELECT {key} FROM {table} WHERE {at} <= $1 \
                     ORDER BY {at} LIMIT $2 FOR UPDATE SKIP LOCKED)"
                );
                loop {
                    let removed = conn
                        .client()
                        .execute(&sql, &[&now(), &PURGE_BATCH])
                        .await
                        .map_err(pg_error)?;
                    if removed < PURGE_BATCH as u64 {
                        break;
                    }
                }
            }
            Ok::<(), StoreError>(())
        };
        match round.await {
            Ok(()) => warned = false,
            Err(error) if !warned => {
                warned = true;
                tracing::warn!(%error, "removing expired OAuth2 tokens from PostgreSQL failed; retrying every second");
            }
            Err(_) => {}
        }
    }
}

impl TokenStore for PgTokens {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn insert_token(&self, token: OauthToken) -> StoreFuture<'_, ()> {
        self.call(move |pool| async move {
            let values = RowValues::of(token);
            let mut conn = pool.get().await.map_err(failed)?;
            conn.client()
                .query_typed(INSERT_TOKEN, &values.params())
                .await
                .map_err(|e| write_error(e, Some(&values.token), None))?;
            Ok(())
        })
    }

    fn replace_token(&self, token: OauthToken) -> StoreFuture<'_, ()> {
        self.call(move |pool| async move {
            let values = RowValues::of(token);
            let mut conn = pool.get().await.map_err(failed)?;
            let rows = conn
                .client()
                .query_typed(REPLACE_TOKEN, &values.params())
                .await
                .map_err(|e| write_error(e, Some(&values.token), None))?;
            match rows.is_empty() {
                true => Err(TokenStoreError::NotFound),
                false => Ok(()),
            }
        })
    }

    fn token_by_access(&self, access_token: &str) -> StoreFuture<'_, Option<OauthToken>> {
        self.select_one("access_hash = $1", key_of(access_token).to_vec(), Type::BYTEA)
    }

    fn token_by_refresh(&self, refresh_token: &str) -> StoreFuture<'_, Option<OauthToken>> {
        self.select_one("refresh_hash = $1", key_of(refresh_token).to_vec(), Type::BYTEA)
    }

    fn token_by_id(&self, id: Uuid) -> StoreFuture<'_, Option<OauthToken>> {
        self.select_one("id = $1", id, Type::UUID)
    }

    fn delete_token(&self, id: Uuid) -> StoreFuture<'_, Option<OauthToken>> {
        self.call(move |pool| async move {
            let mut conn = pool.get().await.map_err(failed)?;
            let sql = format!("DELETE FROM oauth2_tokens WHERE id = $1 RETURNING {COLUMNS}, purge_at");
            let rows = conn
                .client()
                .query_typed(&sql, &[(&id, Type::UUID)])
                .await
                .map_err(read_error)?;
            // A row past its purge time was already gone to readers.
            let at = now();
            match rows.first() {
                Some(row) => {
                    let purge_at: Option<i64> = row.try_get("purge_at").map_err(read_error)?;
                    match purge_at.is_some_and(|p| p <= at) {
                        true => Ok(None),
                        false => decode(row).map(Some),
                    }
                }
                None => Ok(None),
            }
        })
    }

    fn list_tokens(&self, cursor: Option<&str>, size: usize) -> StoreFuture<'_, TokenPage> {
        let after = match strait_runtime::oauth2::id_cursor(cursor) {
            Ok(after) => after,
            Err(error) => return Box::pin(std::future::ready(Err(error))),
        };
        let size = size.clamp(1, 1_000);
        self.call(move |pool| async move {
            let mut conn = pool.get().await.map_err(failed)?;
            // One row past the page says whether there is a next one.
            let sql = format!(
                "SELECT {COLUMNS} FROM oauth2_tokens WHERE ($1::uuid IS NULL OR id > $1) AND {LIVE} \
                 ORDER BY id LIMIT $3"
            );
            let limit = size as i64 + 1;
            let rows = conn
                .client()
                .query_typed(
                    &sql,
                    &[(&after, Type::UUID), (&now(), Type::INT8), (&limit, Type::INT8)],
                )
                .await
                .map_err(read_error)?;
            let mut tokens = rows.iter().take(size).map(decode).collect::<Result<Vec<_>, _>>()?;
            let next = match rows.len() > size {
                true => tokens.last().map(|t| t.id.to_string()),
                false => None,
            };
            tokens.shrink_to_fit();
            Ok(TokenPage { tokens, next })
        })
    }

    fn insert_code(&self, code: AuthCode) -> StoreFuture<'_, ()> {
        self.call(move |pool| async move {
            let text = serde_json::to_string(&code).map_err(|e| TokenStoreError::Failed(e.to_string()))?;
            let hash = key_of(&code.code).to_vec();
            let expires_at = code.created_at.saturating_add(CODE_TTL_SECONDS);
            let mut conn = pool.get().await.map_err(failed)?;
            conn.client()
                .query_typed(
                    "INSERT INTO oauth2_authorization_codes (code_hash, expires_at, code) VALUES ($1, $2, $3::text::jsonb)",
                    &[(&hash, Type::BYTEA), (&expires_at, Type::INT8), (&text, Type::TEXT)],
                )
                .await
                .map_err(|e| write_error(e, None, Some(&code.code)))?;
            Ok(())
        })
    }

    fn take_code(&self, code: &str) -> StoreFuture<'_, Option<AuthCode>> {
        let hash = key_of(code).to_vec();
        self.call(move |pool| async move {
            let mut conn = pool.get().await.map_err(failed)?;
            // Taken once: of two exchanges racing on other nodes, one
            // deletes the row and the other finds nothing.
            let rows = conn
                .client()
                .query_typed(
                    "DELETE FROM oauth2_authorization_codes WHERE code_hash = $1 RETURNING code::text",
                    &[(&hash, Type::BYTEA)],
                )
                .await
                .map_err(read_error)?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let text: String = row.try_get(0).map_err(read_error)?;
            let found: AuthCode = serde_json::from_str(&text)
                .map_err(|e| TokenStoreError::Failed(format!("a stored code does not decode: {e}")))?;
            Ok(Some(found).filter(|c| !c.expired(now())))
        })
    }
}
