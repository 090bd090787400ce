//! [`CassandraCounters`]: rate-limiting's `cluster` policy counters in the
//! keyspace's `ratelimiting_metrics` (migration `001_runtime`).
//!
//! Partition `(key, window_start)`: one counter's window; clustering `node`: each
//! node's own count, written whole with the window's TTL and the writer's
//! timestamp (`USING TIMESTAMP`), never incremented in place (Cassandra's
//! counter columns take no TTL and are not idempotent on retry). A window's
//! usage is one partition read, summed.

use std::sync::Arc;

use strait_runtime::cluster_counters::{instance, ClusterCounters, CounterFuture, CounterRow};

use super::schema::ident;
use super::{cql_error, CassandraConfig, Client, Conn};
use crate::StoreError;

struct Cql {
    write: String,
    read: String,
}

/// The Cassandra cluster counters.
pub struct CassandraCounters {
    client: Client,
    cql: Arc<Cql>,
}

impl std::fmt::Debug for CassandraCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CassandraCounters({})", self.client.config().label())
    }
}

fn text(error: StoreError) -> String {
    error.to_string()
}

/// Write this node's count of `row`, then read the window's counts.
async fn exchange_one(conn: Arc<Conn>, cql: Arc<Cql>, row: CounterRow) -> Result<i64, String> {
    let session = conn.session().await.map_err(text)?;
    let values = (&row.key, row.window, instance(), row.count, row.ttl, row.stamp);
    session
        .execute_unpaged(conn.statement(&cql.write, false), values)
        .await
        .map_err(|e| text(cql_error(e)))?;
    let counts: Vec<(Option<i64>,)> = conn
        .rows(&cql.read, false, (&row.key, row.window))
        .await
        .map_err(text)?;
    Ok(counts
        .into_iter()
        .fold(0i64, |sum, (count,)| sum.saturating_add(count.unwrap_or(0))))
}

impl CassandraCounters {
    /// The counters on `config`'s keyspace. Connects on first use.
    pub fn new(config: CassandraConfig) -> Result<CassandraCounters, StoreError> {
        let ks = ident(&config.keyspace);
        let cql = Cql {
            write: format!(
                "INSERT INTO {ks}.ratelimiting_metrics (key, window_start, node, hits) VALUES (?, ?, ?, ?) \
                 USING TTL ? AND TIMESTAMP ?"
            ),
            read: format!("SELECT hits FROM {ks}.ratelimiting_metrics WHERE key = ? AND window_start = ?"),
        };
        Ok(CassandraCounters {
            client: Client::new(config, "strait-cassandra-counters")?,
            cql: Arc::new(cql),
        })
    }
}

impl ClusterCounters for CassandraCounters {
    fn backend(&self) -> &'static str {
        "cassandra"
    }

    fn exchange(&self, rows: Vec<CounterRow>) -> CounterFuture {
        let cql = self.cql.clone();
        self.client.call(
            move |conn| async move {
                let mut tasks = tokio::task::JoinSet::new();
                let count = rows.len();
                for (at, row) in rows.into_iter().enumerate() {
                    let (conn, cql) = (conn.clone(), cql.clone());
                    tasks.spawn(async move { (at, exchange_one(conn, cql, row).await) });
                }
                let mut sums = vec![0; count];
                while let Some(done) = tasks.join_next().await {
                    let (at, sum) = done.map_err(|e| e.to_string())?;
                    sums[at] = sum?;
                }
                Ok(sums)
            },
            |detail| detail,
            |detail| detail,
        )
    }
}
