//! Schema state and migrations, as Kong's `kong migrations` runs them:
//! `schema_meta` records which migrations ran, a lease row in `locks`
//! makes sure one node migrates at a time, and each migration commits in a
//! transaction of its own (a failed one leaves the schema as it was).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio_postgres::Client;

use super::schema::{ident, BOOKKEEPING, MIGRATIONS, SUBSYSTEM};
use strait_core::EntityKind;

/// The lock key migrations hold (Kong's).
const LOCK_KEY: &str = "migrations";

/// Where a database's schema stands against this build.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SchemaState {
    /// No `schema_meta` table: `strait migrations bootstrap` first.
    pub needs_bootstrap: bool,
    /// Migrations recorded as run, in order.
    pub executed: Vec<String>,
    /// Migrations whose first part ran and whose `finish` has not.
    pub pending: Vec<String>,
    /// Migrations this build has that the database has not run.
    pub new: Vec<String>,
    /// Migrations the database ran that this build does not know: the
    /// schema is ahead of this build (a newer Strait migrated it).
    pub unknown: Vec<String>,
}

impl SchemaState {
    pub fn up_to_date(&self) -> bool {
        !self.needs_bootstrap && self.pending.is_empty() && self.new.is_empty() && self.unknown.is_empty()
    }

    /// Why a node must not serve from this database, if it must not.
    pub fn refusal(&self) -> Option<String> {
        if self.needs_bootstrap {
            return Some(NEEDS_BOOTSTRAP.trim_end().to_string());
        }
        if !self.unknown.is_empty() {
            return Some(format!(
                "the database schema is newer than this Strait (it ran migrations this build does not know: {}); \
                 run a Strait at least as new as the one that migrated it",
                self.unknown.join(", ")
            ));
        }
        if !self.new.is_empty() {
            return Some("New migrations available; run 'strait migrations up' to proceed".into());
        }
        None
    }
}

/// Kong's message for a database without `schema_meta`, in Strait's words.
pub const NEEDS_BOOTSTRAP: &str = "Database needs bootstrapping.\n\n\
To start a new installation from scratch, run 'strait migrations bootstrap'.\n";

/// Another node holds the migration lock.
pub const NOT_LEADER: &str = "aborted: another node is performing database changes";

/// What a migration command did, line by line (the CLI prints them).
#[derive(Debug, Default)]
pub struct Report {
    pub lines: Vec<String>,
}

impl Report {
    fn say(&mut self, line: impl Into<String>) {
        self.lines.push(line.into());
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("[PostgreSQL error] {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("{NOT_LEADER}")]
    NotLeader,
    #[error("{0}")]
    Refused(String),
}

fn error_text(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => error.to_string(),
    }
}

/// Read the schema state (no lock: a read).
pub async fn schema_state(client: &Client) -> Result<SchemaState, MigrateError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('schema_meta') IS NOT NULL", &[])
        .await?
        .get(0);
    let known: Vec<String> = MIGRATIONS.iter().map(|m| m.name.to_string()).collect();
    if !exists {
        return Ok(SchemaState {
            needs_bootstrap: true,
            new: known,
            ..SchemaState::default()
        });
    }
    let row = client
        .query_opt(
            "SELECT executed, pending FROM schema_meta WHERE key = 'schema_meta' AND subsystem = $1",
            &[&SUBSYSTEM],
        )
        .await?;
    let (executed, pending): (Vec<String>, Vec<String>) = match row {
        Some(row) => (
            row.get::<_, Option<Vec<String>>>(0).unwrap_or_default(),
            row.get::<_, Option<Vec<String>>>(1).unwrap_or_default(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    Ok(SchemaState {
        needs_bootstrap: false,
        new: known
            .iter()
            .filter(|n| !executed.contains(n) && !pending.contains(n))
            .cloned()
            .collect(),
        unknown: executed.iter().filter(|n| !known.contains(n)).cloned().collect(),
        executed,
        pending,
    })
}

fn epoch_seconds(after: Duration) -> f64 {
    (SystemTime::now() + after)
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Kong's lease: delete expired leases, insert ours unless one is held.
async fn take_lock(client: &mut Client, owner: &str, ttl: Duration) -> Result<bool, MigrateError> {
    let txn = client.transaction().await?;
    txn.execute("DELETE FROM locks WHERE ttl < CURRENT_TIMESTAMP", &[])
        .await?;
    let inserted = txn
        .execute(
            "INSERT INTO locks (key, owner, ttl) VALUES ($1, $2, to_timestamp($3)) ON CONFLICT DO NOTHING",
            &[&LOCK_KEY, &owner, &epoch_seconds(ttl)],
        )
        .await?;
    txn.commit().await?;
    Ok(inserted == 1)
}

async fn release_lock(client: &Client, owner: &str) -> Result<(), MigrateError> {
    client
        .execute("DELETE FROM locks WHERE key = $1 AND owner = $2", &[&LOCK_KEY, &owner])
        .await?;
    Ok(())
}

/// Run every migration not yet run, each in its own transaction, under the
/// lock.
async fn run_new(client: &mut Client, database: &str, report: &mut Report) -> Result<usize, MigrateError> {
    let state = schema_state(client).await?;
    let mut ran = 0;
    for migration in MIGRATIONS.iter().filter(|m| state.new.iter().any(|n| n == m.name)) {
        report.say(format!("migrating {SUBSYSTEM} on database '{database}'..."));
        let txn = client.transaction().await?;
        txn.batch_execute(&(migration.up)())
            .await
            .map_err(|e| MigrateError::Refused(format!("migration {} failed: {}", migration.name, error_text(&e))))?;
        txn.execute(
            "INSERT INTO schema_meta (key, subsystem, last_executed, executed) \
             VALUES ('schema_meta', $1, $2, ARRAY[$2]) \
             ON CONFLICT (key, subsystem) DO UPDATE SET last_executed = EXCLUDED.last_executed, \
             executed = array_append(COALESCE(schema_meta.executed, ARRAY[]::text[]), $2)",
            &[&SUBSYSTEM, &migration.name],
        )
        .await?;
        txn.commit().await?;
        report.say(format!("{SUBSYSTEM} migrated up to: {} (executed)", migration.name));
        ran += 1;
    }
    if ran > 0 {
        report.say(format!(
            "{ran} migration{} processed\n{ran} executed",
            if ran == 1 { "" } else { "s" }
        ));
    }
    Ok(ran)
}

/// [`run_new`] under the migration lock, released whatever happens.
async fn run_locked(
    client: &mut Client,
    database: &str,
    owner: &str,
    lock_ttl: Duration,
    report: &mut Report,
) -> Result<usize, MigrateError> {
    if !take_lock(client, owner, lock_ttl).await? {
        return Err(MigrateError::NotLeader);
    }
    let result = run_new(client, database, report).await;
    let released = release_lock(client, owner).await;
    let ran = result?;
    released?;
    Ok(ran)
}

/// `strait migrations bootstrap`: the bookkeeping tables, then every
/// migration.
pub async fn bootstrap(
    client: &mut Client,
    database: &str,
    owner: &str,
    lock_ttl: Duration,
) -> Result<Report, MigrateError> {
    let mut report = Report::default();
    if !schema_state(client).await?.needs_bootstrap {
        report.say("Database already bootstrapped");
        return Ok(report);
    }
    report.say("Bootstrapping database...");
    client.batch_execute(BOOKKEEPING).await?;
    run_locked(client, database, owner, lock_ttl, &mut report).await?;
    report.say("Database is up-to-date");
    Ok(report)
}

/// `strait migrations up`: the migrations this build has and the database
/// has not run.
pub async fn up(client: &mut Client, database: &str, owner: &str, lock_ttl: Duration) -> Result<Report, MigrateError> {
    let mut report = Report::default();
    let state = schema_state(client).await?;
    if state.needs_bootstrap {
        return Err(MigrateError::Refused(NEEDS_BOOTSTRAP.trim_end().into()));
    }
    if !state.unknown.is_empty() {
        return Err(MigrateError::Refused(state.refusal().unwrap_or_default()));
    }
    if state.new.is_empty() {
        report.say("Database is already up-to-date");
        return Ok(report);
    }
    run_locked(client, database, owner, lock_ttl, &mut report).await?;
    report.say("Database is up-to-date");
    Ok(report)
}

/// `strait migrations finish`: Strait's migrations have no second part
/// yet, so there is never anything pending; said as Kong says it.
pub async fn finish(client: &mut Client) -> Result<Report, MigrateError> {
    let mut report = Report::default();
    let state = schema_state(client).await?;
    if state.needs_bootstrap {
        return Err(MigrateError::Refused(NEEDS_BOOTSTRAP.trim_end().into()));
    }
    report.say("No pending migrations to finish");
    if !state.new.is_empty() {
        report.say("\nNew migrations available; run 'strait migrations up' to proceed");
    }
    Ok(report)
}

/// `strait migrations reset`: drop every table Strait made.
pub async fn reset(client: &mut Client, owner: &str, lock_ttl: Duration) -> Result<Report, MigrateError> {
    let mut report = Report::default();
    if schema_state(client).await?.needs_bootstrap {
        return Err(MigrateError::Refused(
            "Database not bootstrapped, nothing to reset".into(),
        ));
    }
    if !take_lock(client, owner, lock_ttl).await? {
        return Err(MigrateError::NotLeader);
    }
    report.say("Resetting database...");
    let mut tables: Vec<String> = EntityKind::ALL.iter().map(|k| ident(k.table())).collect();
    tables.extend(super::schema::OAUTH2_TABLES.map(ident));
    tables.push(ident(super::schema::RUNTIME_KV_TABLE));
    tables.extend(["config_meta", "change_log", "schema_meta", "locks"].map(ident));
    client
        .batch_execute(&format!("DROP TABLE IF EXISTS {} CASCADE", tables.join(", ")))
        .await?;
    report.say("Database successfully reset");
    Ok(report)
}

/// `strait migrations list`: the lines and Kong's exit code (0 up to date,
/// 3 needs bootstrap, 4 pending, 5 new migrations).
pub fn list(state: &SchemaState) -> (Vec<String>, i32) {
    let mut lines = Vec::new();
    if state.needs_bootstrap {
        lines.push(NEEDS_BOOTSTRAP.trim_end().to_string());
        return (lines, 3);
    }
    let section = |lines: &mut Vec<String>, title: &str, names: &[String]| {
        if !names.is_empty() {
            let gap = if lines.is_empty() { "" } else { "\n" };
            lines.push(format!("{gap}{title}:\n{SUBSYSTEM}: {}", names.join(", ")));
        }
    };
    section(&mut lines, "Executed migrations", &state.executed);
    section(&mut lines, "Pending migrations", &state.pending);
    section(&mut lines, "New migrations available", &state.new);
    if !state.unknown.is_empty() {
        lines.push(format!("\n{}", state.refusal().unwrap_or_default()));
        return (lines, 1);
    }
    if !state.pending.is_empty() {
        lines.push("\nRun 'strait migrations finish' when ready".into());
        return (lines, 4);
    }
    if !state.new.is_empty() {
        lines.push("\nRun 'strait migrations up' to proceed".into());
        return (lines, 5);
    }
    (lines, 0)
}
