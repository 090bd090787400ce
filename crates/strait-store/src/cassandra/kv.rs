//! [`CassandraKv`]: the runtime key-value store (`strait_runtime::kv`:
//! server-side sessions, ACME data) on Cassandra, chosen with the OAuth2
//! token store (`oauth2_token_store = cassandra`, the default with
//! `database = cassandra`): a session saved through one node opens on every
//! other.
//!
//! `runtime_kv` is partitioned by `(tbl, key)`: every get, put and delete
//! is one statement on one partition, and each row carries its entry's TTL
//! (expired entries leave by themselves; a read checks `expires_at` too, so
//! an entry is absent from its expiry second on). Writes are plain
//! upserts, last writer wins, as PostgreSQL's `ON CONFLICT DO UPDATE`.
//! Listing (Admin API pages, ACME's renewals) pages through the table by
//! token range and keeps the entries of the table and prefix asked for.

use std::sync::Arc;

use scylla::serialize::row::SerializeRow;
use strait_runtime::kv::{expiry, now, KvError, KvFuture, KvPage, KvStore, Table};

use super::schema::ident;
use super::{cql_error, ttl_until, CassandraConfig, Client, Conn};
use crate::StoreError;

/// Rows one listing reads at most before it answers (with fewer entries
/// than asked and a cursor to go on from).
const SCAN_BUDGET: usize = 10_000;
/// Rows per statement of a listing.
const SCAN_PAGE: i32 = 1_000;

struct Cql {
    get: String,
    put: String,
    delete: String,
    scan_first: String,
    scan_after: String,
}

/// The Cassandra runtime store.
pub struct CassandraKv {
    client: Client,
    cql: Arc<Cql>,
}

impl std::fmt::Debug for CassandraKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CassandraKv({})", self.client.config().label())
    }
}

fn failed(error: StoreError) -> KvError {
    match error {
        StoreError::Unavailable(detail) => KvError::Unavailable(detail),
        other => KvError::Failed(other.to_string()),
    }
}

fn cql_failed(error: impl std::fmt::Display) -> KvError {
    failed(cql_error(error))
}

async fn rows<R>(conn: &Conn, cql: &str, values: impl SerializeRow) -> Result<Vec<R>, KvError>
where
    R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
{
    conn.rows(cql, false, values).await.map_err(failed)
}

async fn exec(conn: &Conn, cql: &str, values: impl SerializeRow) -> Result<(), KvError> {
    let session = conn.session().await.map_err(failed)?;
    session
        .execute_unpaged(conn.statement(cql, false), values)
        .await
        .map_err(cql_failed)?;
    Ok(())
}

fn live(expires_at: Option<i64>, at: i64) -> bool {
    expires_at.is_none_or(|e| e > at)
}

impl CassandraKv {
    /// The store on `config`'s keyspace (migration `001_runtime` must have
    /// run). Connects on first use.
    pub fn new(config: CassandraConfig) -> Result<CassandraKv, StoreError> {
        let ks = ident(&config.keyspace);
        let cql = Cql {
            get: format!("SELECT value, expires_at FROM {ks}.runtime_kv WHERE tbl = ? AND key = ?"),
            put: format!("INSERT INTO {ks}.runtime_kv (tbl, key, value, expires_at) VALUES (?, ?, ?, ?) USING TTL ?"),
            delete: format!("DELETE FROM {ks}.runtime_kv WHERE tbl = ? AND key = ?"),
            scan_first: format!("SELECT tbl, key, value, expires_at, token(tbl, key) FROM {ks}.runtime_kv LIMIT ?"),
            scan_after: format!(
                "SELECT tbl, key, value, expires_at, token(tbl, key) FROM {ks}.runtime_kv \
                 WHERE token(tbl, key) > ? LIMIT ?"
            ),
        };
        Ok(CassandraKv {
            client: Client::new(config, "strait-cassandra-kv")?,
            cql: Arc::new(cql),
        })
    }

    fn call<T, F, Fut>(&self, work: F) -> KvFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Conn>, Arc<Cql>) -> Fut,
        Fut: std::future::Future<Output = Result<T, KvError>> + Send + 'static,
    {
        let cql = self.cql.clone();
        self.client
            .call(move |conn| work(conn, cql), KvError::Unavailable, KvError::Failed)
    }
}

type ScanRow = (String, String, Option<Vec<u8>>, Option<i64>, i64);

impl KvStore for CassandraKv {
    fn backend(&self) -> &'static str {
        "cassandra"
    }

    fn get(&self, table: Table, key: &str) -> KvFuture<'_, Option<Vec<u8>>> {
        let key = key.to_string();
        self.call(move |conn, cql| async move {
            let found: Vec<(Option<Vec<u8>>, Option<i64>)> = rows(&conn, &cql.get, (table.name(), &key)).await?;
            let at = now();
            Ok(found
                .into_iter()
                .next()
                .filter(|(_, expires_at)| live(*expires_at, at))
                .map(|(value, _)| value.unwrap_or_default()))
        })
    }

    fn put(&self, table: Table, key: &str, value: Vec<u8>, ttl: Option<i64>) -> KvFuture<'_, ()> {
        let key = key.to_string();
        let at = expiry(ttl);
        self.call(move |conn, cql| async move {
            // Expiring at once: nothing to keep.
            if ttl.is_some_and(|ttl| ttl <= 0) {
                return exec(&conn, &cql.delete, (table.name(), &key)).await;
            }
            let row_ttl = ttl_until(at, now());
            exec(&conn, &cql.put, (table.name(), &key, value, at, row_ttl)).await
        })
    }

    fn delete(&self, table: Table, key: &str) -> KvFuture<'_, bool> {
        let key = key.to_string();
        self.call(move |conn, cql| async move {
            let found: Vec<(Option<Vec<u8>>, Option<i64>)> = rows(&conn, &cql.get, (table.name(), &key)).await?;
            let at = now();
            let was = found.into_iter().next().is_some_and(|(_, e)| live(e, at));
            exec(&conn, &cql.delete, (table.name(), &key)).await?;
            Ok(was)
        })
    }

    fn list(&self, table: Table, prefix: &str, cursor: Option<&str>, size: usize) -> KvFuture<'_, KvPage> {
        let mut after = match cursor.map(str::parse::<i64>) {
            Some(Err(_)) => return Box::pin(std::future::ready(Err(KvError::BadCursor))),
            Some(Ok(token)) => Some(token),
            None => None,
        };
        let prefix = prefix.to_string();
        let size = size.max(1);
        self.call(move |conn, cql| async move {
            let mut page = KvPage::default();
            let mut scanned = 0;
            let at = now();
            loop {
                let batch: Vec<ScanRow> = match after {
                    None => rows(&conn, &cql.scan_first, (SCAN_PAGE,)).await?,
                    Some(token) => rows(&conn, &cql.scan_after, (token, SCAN_PAGE)).await?,
                };
                let full = batch.len() == SCAN_PAGE as usize;
                for (tbl, key, value, expires_at, token) in batch {
                    scanned += 1;
                    after = Some(token);
                    if tbl == table.name() && key.starts_with(&prefix) && live(expires_at, at) {
                        page.entries.push((key, value.unwrap_or_default()));
                        if page.entries.len() == size {
                            page.next = Some(token.to_string());
                            return Ok(page);
                        }
                    }
                }
                if !full {
                    return Ok(page);
                }
                if scanned >= SCAN_BUDGET {
                    page.next = after.map(|t| t.to_string());
                    return Ok(page);
                }
            }
        })
    }
}
