//! `strait migrations bootstrap | up | finish | list | reset | status`:
//! the PostgreSQL schema, managed as Kong's `kong migrations` manages
//! Kong's (same subcommands, same exit codes for `list`, same lock).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use strait_store::pg::{self, migrate};

use crate::settings::{pg_config, RawSettings};

pub const USAGE: &str = "\
Usage: strait migrations COMMAND [--conf FILE] [--yes] [--force] [--lock-timeout SECONDS] [--db-timeout SECONDS]

  bootstrap   create the schema in an empty database (--force: reset first)
  up          run the migrations this version has and the database has not
  finish      complete migrations left pending by 'up'
  list        show executed, pending and new migrations
              (exit 0 up to date, 3 needs bootstrap, 4 pending, 5 new)
  reset       drop every Strait table (needs --yes)
  status      the schema state as JSON

Settings (pg_host, pg_port, pg_user, pg_password, pg_database, pg_schema, pg_timeout; with
database = cassandra the cassandra_* ones: the keyspace, its replication, the tables)
come from FILE, then STRAIT_<KEY> environment variables.
";

struct Args {
    command: String,
    conf: Option<PathBuf>,
    yes: bool,
    force: bool,
    lock_timeout: Duration,
    db_timeout: Option<Duration>,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut rest = args.iter();
    let command = rest
        .next()
        .cloned()
        .ok_or_else(|| anyhow!("migrations needs a command\n\n{USAGE}"))?;
    let mut parsed = Args {
        command,
        conf: None,
        yes: false,
        force: false,
        lock_timeout: Duration::from_secs(60),
        db_timeout: None,
    };
    while let Some(flag) = rest.next() {
        let mut value = |name: &str| rest.next().cloned().ok_or_else(|| anyhow!("{name} needs a value"));
        let seconds = |name: &str, text: String| -> Result<Duration> {
            text.parse::<u64>()
                .ok()
                .filter(|s| *s > 0)
                .map(Duration::from_secs)
                .ok_or_else(|| anyhow!("{name}: expected a number of seconds above 0, got {text:?}"))
        };
        match flag.as_str() {
            "--conf" | "-c" => parsed.conf = Some(PathBuf::from(value("--conf")?)),
            "--yes" | "-y" => parsed.yes = true,
            "--force" | "-f" => parsed.force = true,
            "--lock-timeout" => parsed.lock_timeout = seconds("--lock-timeout", value("--lock-timeout")?)?,
            "--db-timeout" => parsed.db_timeout = Some(seconds("--db-timeout", value("--db-timeout")?)?),
            other => bail!("unknown flag {other:?} for migrations\n\n{USAGE}"),
        }
    }
    Ok(parsed)
}

/// Who holds the migration lock: this host and process.
fn owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}:{}", host.trim(), std::process::id())
}

pub fn run(args: &[String]) -> Result<ExitCode> {
    if matches!(args.first().map(String::as_str), None | Some("help" | "--help" | "-h")) {
        print!("{USAGE}");
        return Ok(if args.is_empty() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        });
    }
    let args = parse(args)?;
    if !["bootstrap", "up", "finish", "list", "reset", "status"].contains(&args.command.as_str()) {
        bail!("No such command for migrations: {}\n\n{USAGE}", args.command);
    }
    if args.command == "reset" && !args.yes {
        bail!("reset drops every Strait table in the database: run it with --yes");
    }
    let raw = RawSettings::load(args.conf.as_deref(), std::env::vars())?;
    if raw.0.get("database").map(String::as_str) == Some("cassandra") {
        return cassandra(&args, &raw);
    }
    let mut config = pg_config(&raw)?;
    if let Some(timeout) = args.db_timeout {
        config.timeout = timeout;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow!("starting the runtime: {e}"))?;
    runtime.block_on(async {
        let mut client = pg::connect(&config).await.map_err(|e| match e {
            strait_store::StoreError::Postgres(detail) | strait_store::StoreError::Unavailable(detail) => {
                anyhow!("[PostgreSQL error] {detail}")
            }
            other => anyhow!("[PostgreSQL error] {other}"),
        })?;
        let owner = owner();
        let database = config.database.clone();
        let print = |report: migrate::Report| {
            for line in report.lines {
                println!("{line}");
            }
        };
        let outcome = match args.command.as_str() {
            "bootstrap" => {
                if args.force && !migrate::schema_state(&client).await?.needs_bootstrap {
                    print(migrate::reset(&mut client, &owner, args.lock_timeout).await?);
                }
                migrate::bootstrap(&mut client, &database, &owner, args.lock_timeout).await
            }
            "up" => migrate::up(&mut client, &database, &owner, args.lock_timeout).await,
            "finish" => migrate::finish(&mut client).await,
            "reset" => migrate::reset(&mut client, &owner, args.lock_timeout).await,
            "list" => {
                let state = migrate::schema_state(&client).await?;
                let (lines, code) = migrate::list(&state);
                for line in lines {
                    println!("{line}");
                }
                return Ok(ExitCode::from(code as u8));
            }
            _ => {
                let state = migrate::schema_state(&client).await?;
                println!("{}", serde_json::to_string(&state)?);
                return Ok(ExitCode::SUCCESS);
            }
        };
        match outcome {
            Ok(report) => {
                print(report);
                Ok(ExitCode::SUCCESS)
            }
            // Kong: a node that finds the lock taken reports it and exits 0
            // (the other node is doing the work).
            Err(migrate::MigrateError::NotLeader) if args.command != "reset" => {
                println!("{}", migrate::NOT_LEADER);
                Ok(ExitCode::SUCCESS)
            }
            Err(error) => Err(anyhow!(error)),
        }
    })
}

/// The same commands on `database = cassandra`: the keyspace (created with
/// `cassandra_repl_strategy`), its tables and generation 0, each change of
/// schema waited on until every node agrees (`cassandra_schema_consensus_timeout`).
/// Cassandra has no transaction around DDL: `bootstrap` is idempotent
/// (`IF NOT EXISTS`), so a second node running it at once does no harm.
fn cassandra(args: &Args, raw: &RawSettings) -> Result<ExitCode> {
    use strait_store::cassandra::schema::{self, State};
    let mut config = crate::settings::cassandra_config(raw)?;
    if let Some(timeout) = args.db_timeout {
        config.timeout = timeout;
        config.schema_consensus_timeout = timeout;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow!("starting the runtime: {e}"))?;
    runtime.block_on(async {
        let session = strait_store::cassandra::connect(&config)
            .await
            .map_err(|e| anyhow!("[Cassandra error] {e}"))?;
        let keyspace = config.keyspace.clone();
        match args.command.as_str() {
            "bootstrap" => {
                if args.force {
                    schema::reset(&session, &config).await?;
                }
                if let State::Executed { .. } = schema::state(&session, &config).await? {
                    println!("Database already bootstrapped");
                    return Ok(ExitCode::SUCCESS);
                }
                println!("Bootstrapping database...");
                schema::bootstrap(&session, &config).await?;
                for migration in schema::MIGRATIONS {
                    println!("migrating core on keyspace '{keyspace}'...\ncore migrated up to: {migration}");
                }
                println!("{} migrations processed\n{} executed\nDatabase is up-to-date", schema::MIGRATIONS.len(), schema::MIGRATIONS.len());
                Ok(ExitCode::SUCCESS)
            }
            "up" | "finish" => {
                let ran = schema::up(&session, &config).await?;
                if ran.is_empty() {
                    println!("Database is already up-to-date");
                } else {
                    for migration in &ran {
                        println!("migrating core on keyspace '{keyspace}'...\ncore migrated up to: {migration}");
                    }
                    println!("{} migrations processed\n{} executed\nDatabase is up-to-date", ran.len(), ran.len());
                }
                Ok(ExitCode::SUCCESS)
            }
            "reset" => {
                schema::reset(&session, &config).await?;
                println!("Database reset: keyspace {keyspace} dropped");
                Ok(ExitCode::SUCCESS)
            }
            "list" => match schema::state(&session, &config).await? {
                State::NeedsBootstrap => {
                    println!("Database needs bootstrapping or is older than Strait 0.1; run 'strait migrations bootstrap'");
                    Ok(ExitCode::from(3))
                }
                State::Executed { executed, pending } => {
                    println!("Executed migrations:\ncore: {}", executed.join(", "));
                    if pending.is_empty() {
                        println!("\nDatabase is up-to-date");
                        Ok(ExitCode::SUCCESS)
                    } else {
                        println!("\nPending migrations:\ncore: {}", pending.join(", "));
                        Ok(ExitCode::from(4))
                    }
                }
            },
            _ => {
                let state = schema::state(&session, &config).await?;
                let json = match state {
                    State::NeedsBootstrap => serde_json::json!({ "needs_bootstrap": true, "keyspace": keyspace }),
                    State::Executed { executed, pending } => serde_json::json!({
                        "needs_bootstrap": false, "keyspace": keyspace,
                        "executed_migrations": executed, "pending_migrations": pending,
                    }),
                };
                println!("{json}");
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}
