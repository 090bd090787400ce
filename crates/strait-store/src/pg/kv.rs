//! [`PgKv`]: the runtime key-value store (`strait_runtime::kv`) in the
//! shared PostgreSQL database, chosen with the OAuth2 token store
//! (`oauth2_token_store = postgres`, the default with `database =
//! postgres`): a session saved through one node opens on every other.
//!
//! Runtime data: one `INSERT ... ON CONFLICT` per write, no config version,
//! no change log. Every read is the primary key `(tbl, key)`; expired rows
//! read as absent at once and leave through `expires_at` in batches, every
//! node purging with `SKIP LOCKED`. Queries run on a runtime of the
//! store's own, at most `pg_timeout` each.

use std::sync::Arc;
use std::time::Duration;

use strait_runtime::kv::{expiry, now, KvError, KvFuture, KvPage, KvStore, Table};
use tokio_postgres::types::Type;

use super::store::{pg_error, Pool};
use super::PgConfig;
use crate::StoreError;

const PURGE_BATCH: i64 = 1_000;
const PURGE_EVERY: Duration = Duration::from_secs(1);
const LIVE: &str = "(expires_at IS NULL OR expires_at > $3)";

/// The PostgreSQL runtime store.
pub struct PgKv {
    runtime: tokio::runtime::Runtime,
    pool: Arc<Pool>,
    timeout: Duration,
}

impl std::fmt::Debug for PgKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgKv({})", self.pool.label())
    }
}

fn failed(error: StoreError) -> KvError {
    match error {
        StoreError::Unavailable(detail) => KvError::Unavailable(detail),
        other => KvError::Failed(other.to_string()),
    }
}

fn query_error(error: tokio_postgres::Error) -> KvError {
    failed(pg_error(error))
}

/// `text` as a `LIKE` pattern matching it literally, then anything.
fn like_prefix(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

impl PgKv {
    /// The store on `config`'s database (migration `003_runtime_kv` must
    /// have run: `strait start` checks the schema first).
    pub fn new(config: PgConfig) -> Result<PgKv, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("strait-pg-kv")
            .enable_all()
            .build()?;
        let timeout = config.timeout;
        let pool = Arc::new(Pool::new(config));
        runtime.spawn(purge_loop(pool.clone()));
        Ok(PgKv { runtime, pool, timeout })
    }

    fn call<T, F, Fut>(&self, work: F) -> KvFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Pool>) -> Fut,
        Fut: std::future::Future<Output = Result<T, KvError>> + Send + 'static,
    {
        crate::run_within(
            &self.runtime,
            self.timeout,
            work(self.pool.clone()),
            KvError::Unavailable,
            KvError::Failed,
        )
    }
}

impl KvStore for PgKv {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn get(&self, table: Table, key: &str) -> KvFuture<'_, Option<Vec<u8>>> {
        let key = key.to_string();
        self.call(move |pool| async move {
            let mut conn = pool.get().await.map_err(failed)?;
            let sql = format!("SELECT value FROM runtime_kv WHERE tbl = $1 AND key = $2 AND {LIVE}");
            let rows = conn
                .client()
                .query_typed(
                    &sql,
                    &[(&table.name(), Type::TEXT), (&key, Type::TEXT), (&now(), Type::INT8)],
                )
                .await
                .map_err(query_error)?;
            rows.first()
                .map(|row| row.try_get::<_, Vec<u8>>(0).map_err(query_error))
                .transpose()
        })
    }

    fn put(&self, table: Table, key: &str, value: Vec<u8>, ttl: Option<i64>) -> KvFuture<'_, ()> {
        let key = key.to_string();
        let at = expiry(ttl);
        self.call(move |pool| async move {
            let mut conn = pool.get().await.map_err(failed)?;
            conn.client()
                .query_typed(
                    "INSERT INTO runtime_kv (tbl, key, value, expires_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (tbl, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at",
                    &[
                        (&table.name(), Type::TEXT),
                        (&key, Type::TEXT),
                        (&value, Type::BYTEA),
                        (&at, Type::INT8),
                    ],
                )
                .await
                .map_err(query_error)?;
            Ok(())
        })
    }

    fn delete(&self, table: Table, key: &str) -> KvFuture<'_, bool> {
        let key = key.to_string();
        self.call(move |pool| async move {
            let mut conn = pool.get().await.map_err(failed)?;
            let sql = format!("DELETE FROM runtime_kv WHERE tbl = $1 AND key = $2 RETURNING {LIVE}");
            let rows = conn
                .client()
                .query_typed(
                    &sql,
                    &[(&table.name(), Type::TEXT), (&key, Type::TEXT), (&now(), Type::INT8)],
                )
                .await
                .map_err(query_error)?;
            Ok(rows
                .first()
                .and_then(|row| row.try_get::<_, bool>(0).ok())
                .unwrap_or(false))
        })
    }

    fn list(&self, table: Table, prefix: &str, cursor: Option<&str>, size: usize) -> KvFuture<'_, KvPage> {
        let pattern = like_prefix(prefix);
        let after = cursor.unwrap_or("").to_string();
        let size = size.max(1) as i64;
        self.call(move |pool| async move {
            let mut conn = pool.get().await.map_err(failed)?;
            let sql = format!(
                "SELECT key, value FROM runtime_kv WHERE tbl = $1 AND key LIKE $2 AND key COLLATE \"C\" > $4 AND {LIVE} \
                 ORDER BY key COLLATE \"C\" LIMIT $5"
            );
            let rows = conn
                .client()
                .query_typed(
                    &sql,
                    &[
                        (&table.name(), Type::TEXT),
                        (&pattern, Type::TEXT),
                        (&now(), Type::INT8),
                        (&after, Type::TEXT),
                        (&(size + 1), Type::INT8),
                    ],
                )
                .await
                .map_err(query_error)?;
            let mut page = KvPage::default();
            for row in rows {
                let key: String = row.try_get(0).map_err(query_error)?;
                let value: Vec<u8> = row.try_get(1).map_err(query_error)?;
                if page.entries.len() as i64 == size {
                    page.next = page.entries.last().map(|(k, _)| k.clone());
                    break;
                }
                page.entries.push((key, value));
            }
            Ok(page)
        })
    }
}

/// Remove expired rows, a batch per statement, every [`PURGE_EVERY`].
async fn purge_loop(pool: Arc<Pool>) {
    let mut warned = false;
    loop {
        tokio::time::sleep(PURGE_EVERY).await;
        let round = async {
            let mut conn = pool.get().await?;
            let sql = "DELETE FROM runtime_kv WHERE (tbl, key) IN (SELECT tbl, key FROM runtime_kv \
                       WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)";
            loop {
                let removed = conn
                    .client()
                    .execute(sql, &[&now(), &PURGE_BATCH])
                    .await
                    .map_err(pg_error)?;
                if removed < PURGE_BATCH as u64 {
                    break;
                }
            }
            Ok::<(), StoreError>(())
        };
        match round.await {
            Ok(()) => warned = false,
            Err(error) if !warned => {
                warned = true;
                tracing::warn!(%error, "removing expired runtime entries from PostgreSQL failed; retrying every second");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn list_patterns_match_the_prefix_literally() {
        assert_eq!(super::like_prefix("renew_config:a%b"), "renew\\_config:a\\%b%");
    }
}
