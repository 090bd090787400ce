//! The Cassandra schema and its migrations (`strait migrations ...` with
//! `database = cassandra`).
//!
//! Three tables, each read only by its partition key:
//!
//! - `config`: one partition per configuration generation. Static columns
//!   hold the generation's `version`, the version it `base`d on (its
//!   replacement), its `successor` once replaced, its `predecessor`, the
//!   configuration `hash` and the change log's `log_floor`. Clustering rows
//!   `(section, key1, key2)`: `e/<table>` (an entity by id), `u/<table>/<field>`
//!   (a unique value, its owner's id in `body`), `f/<table>/<field>` (parent
//!   id, child id), `log` (version, sequence: one change).
//! - `config_head`: where readers start looking for the newest generation
//!   (a hint: each generation names its successor, which is authoritative).
//! - `schema_meta`: the migrations this keyspace has run.
//!
//! And the runtime data (`001_runtime`), every row written with a TTL so
//! expired rows leave by themselves (no purge, no scan):
//!
//! - `oauth2_tokens`: a token by the SHA-256 of its access token;
//!   `oauth2_token_ids` and `oauth2_refresh_tokens` lead from its id and
//!   from the hash of its refresh token to that key; `oauth2_codes`: an
//!   authorization code by its hash (300 s TTL);
//! - `runtime_kv`: sessions and ACME data, partitioned by `(tbl, key)`;
//! - `ratelimiting_metrics`: rate-limiting's `cluster` policy, one
//!   partition per counter window, each node's count a row in it.
//!
//! No secondary index, no materialized view, no `ALLOW FILTERING`:
//! tests/tests/cassandra_store.rs checks every statement of this crate, and
//! the test server runs with Cassandra's guardrails that refuse them.

use scylla::client::session::Session;
use scylla::statement::Statement;

use super::{cql_error, CassandraConfig, Replication};
use crate::StoreError;

/// The migrations this build knows, in order (Kong's `subsystem` `core`).
pub const MIGRATIONS: &[&str] = &["000_base", "001_runtime"];

/// `name` quoted for CQL (keyspace names are `[A-Za-z0-9_]`, checked by
/// the settings; quotes keep case).
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn replication(config: &CassandraConfig) -> String {
    match &config.replication {
        Replication::Simple(factor) => format!("{{'class': 'SimpleStrategy', 'replication_factor': {factor}}}"),
        Replication::NetworkTopology(dcs) => {
            let dcs: Vec<String> = dcs
                .iter()
                .map(|(dc, f)| format!("'{}': {f}", dc.replace('\'', "''")))
                .collect();
            format!("{{'class': 'NetworkTopologyStrategy', {}}}", dcs.join(", "))
        }
    }
}

/// The DDL of `migration`, for `keyspace`.
pub fn statements(migration: &str, keyspace: &str) -> Vec<String> {
    let ks = ident(keyspace);
    match migration {
        "000_base" => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.config (\
                   generation uuid, section text, key1 text, key2 text, body blob, \
                   version bigint STATIC, base bigint STATIC, successor uuid STATIC, predecessor uuid STATIC, \
                   hash text STATIC, log_floor bigint STATIC, \
                   PRIMARY KEY ((generation), section, key1, key2))"
            ),
            format!("CREATE TABLE IF NOT EXISTS {ks}.config_head (name text PRIMARY KEY, generation uuid)"),
            format!("CREATE TABLE IF NOT EXISTS {ks}.schema_meta (subsystem text PRIMARY KEY, executed list<text>)"),
        ],
        "001_runtime" => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.oauth2_tokens (access_hash blob PRIMARY KEY, id uuid, \
                 refresh_hash blob, purge_at bigint, body blob)"
            ),
            format!("CREATE TABLE IF NOT EXISTS {ks}.oauth2_token_ids (id uuid PRIMARY KEY, access_hash blob)"),
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.oauth2_refresh_tokens (refresh_hash blob PRIMARY KEY, access_hash blob)"
            ),
            format!("CREATE TABLE IF NOT EXISTS {ks}.oauth2_codes (code_hash blob PRIMARY KEY, body text)"),
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.runtime_kv (tbl text, key text, value blob, expires_at bigint, \
                 PRIMARY KEY ((tbl, key)))"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.ratelimiting_metrics (key text, window_start bigint, \
                 node uuid, hits bigint, PRIMARY KEY ((key, window_start), node))"
            ),
        ],
        _ => Vec::new(),
    }
}

/// One schema change: given as long as schema agreement may take (a busy
/// cluster applies schema changes one at a time).
async fn run(session: &Session, config: &CassandraConfig, cql: String) -> Result<(), StoreError> {
    let mut statement = Statement::new(cql);
    statement.set_request_timeout(Some(config.timeout.max(config.schema_consensus_timeout)));
    session.query_unpaged(statement, ()).await.map_err(cql_error)?;
    Ok(())
}

async fn agree(session: &Session) -> Result<(), StoreError> {
    session
        .await_schema_agreement()
        .await
        .map(|_| ())
        .map_err(|e| StoreError::Unavailable(format!("Cassandra nodes did not agree on the schema: {e}")))
}

/// What `strait migrations list|status` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// No keyspace, or no `schema_meta` in it.
    NeedsBootstrap,
    /// These migrations ran; `pending` did not.
    Executed {
        executed: Vec<String>,
        pending: Vec<String>,
    },
}

pub async fn state(session: &Session, config: &CassandraConfig) -> Result<State, StoreError> {
    let ks = ident(&config.keyspace);
    let cql = format!("SELECT executed FROM {ks}.schema_meta WHERE subsystem = 'core'");
    let result = match session.query_unpaged(Statement::new(cql), ()).await {
        Ok(result) => result,
        // No keyspace or no table yet.
        Err(error)
            if error.to_string().contains("does not exist") || error.to_string().contains("unconfigured table") =>
        {
            return Ok(State::NeedsBootstrap);
        }
        Err(error) => return Err(cql_error(error)),
    };
    let rows = result.into_rows_result().map_err(cql_error)?;
    let executed: Option<(Option<Vec<String>>,)> = rows.maybe_first_row().map_err(cql_error)?;
    let Some((executed,)) = executed else {
        return Ok(State::NeedsBootstrap);
    };
    let executed = executed.unwrap_or_default();
    let pending = MIGRATIONS
        .iter()
        .filter(|m| !executed.iter().any(|e| e == *m))
        .map(|m| m.to_string())
        .collect();
    Ok(State::Executed { executed, pending })
}

/// Creates the keyspace, the tables and generation 0 (version 0), waiting
/// for schema agreement after each change of schema.
pub async fn bootstrap(session: &Session, config: &CassandraConfig) -> Result<(), StoreError> {
    let ks = ident(&config.keyspace);
    run(
        session,
        config,
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {}",
            replication(config)
        ),
    )
    .await?;
    agree(session).await?;
    for migration in MIGRATIONS {
        for cql in statements(migration, &config.keyspace) {
            run(session, config, cql).await?;
            agree(session).await?;
        }
    }
    super::store::first_generation(session, config).await?;
    record(session, &ks, MIGRATIONS.iter().map(|m| m.to_string()).collect()).await
}

async fn record(session: &Session, ks: &str, executed: Vec<String>) -> Result<(), StoreError> {
    let cql = format!("INSERT INTO {ks}.schema_meta (subsystem, executed) VALUES ('core', ?)");
    session
        .query_unpaged(Statement::new(cql), (executed,))
        .await
        .map_err(cql_error)?;
    Ok(())
}

/// Runs what is pending (each migration only adds tables, so `finish`
/// has nothing left to do), waiting for schema agreement after each
/// change; the migrations it ran.
pub async fn up(session: &Session, config: &CassandraConfig) -> Result<Vec<String>, StoreError> {
    match state(session, config).await? {
        State::NeedsBootstrap => Err(StoreError::Cassandra(format!(
            "keyspace {} is not bootstrapped: run `strait migrations bootstrap`",
            config.keyspace
        ))),
        State::Executed { mut executed, pending } => {
            for migration in &pending {
                for cql in statements(migration, &config.keyspace) {
                    run(session, config, cql).await?;
                    agree(session).await?;
                }
                executed.push(migration.clone());
                record(session, &ident(&config.keyspace), executed.clone()).await?;
            }
            Ok(pending)
        }
    }
}

/// Why a node may not use this keyspace (not bootstrapped, migrations
/// pending), if it may not.
pub async fn refusal(session: &Session, config: &CassandraConfig) -> Result<(), StoreError> {
    match state(session, config).await? {
        State::NeedsBootstrap => Err(StoreError::Cassandra(format!(
            "keyspace {} is not bootstrapped: run `strait migrations bootstrap`",
            config.keyspace
        ))),
        State::Executed { pending, .. } if !pending.is_empty() => Err(StoreError::Cassandra(format!(
            "keyspace {} has pending migrations ({}): run `strait migrations up`",
            config.keyspace,
            pending.join(", ")
        ))),
        State::Executed { .. } => Ok(()),
    }
}

/// Drops the keyspace: every configuration and runtime row in it.
pub async fn reset(session: &Session, config: &CassandraConfig) -> Result<(), StoreError> {
    run(
        session,
        config,
        format!("DROP KEYSPACE IF EXISTS {}", ident(&config.keyspace)),
    )
    .await?;
    agree(session).await
}
