//! `strait config db_import FILE` and `strait config db_export FILE`: a
//! declarative file into and out of the PostgreSQL store, as Kong's
//! commands do. Import adds and updates, never deletes (Kong's rule); every
//! entity of the file lands in one transaction, after the result was
//! compiled, so a file that does not fit changes nothing. Nodes on the
//! database pick the change up as any other write.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use strait_core::declarative::{config_to_declarative, parse_declarative, DeclarativeFormat};
use strait_core::ConfigChange;
use strait_store::keys::config_entities;
use strait_store::pg::PgStore;
use strait_store::{Store, StoreError, DEFAULT_CHANGE_LOG_LIMIT};

use crate::settings::{pg_config, RawSettings};

fn open(conf: Option<&Path>) -> Result<PgStore> {
    let raw = RawSettings::load(conf, std::env::vars())?;
    let config = pg_config(&raw)?;
    PgStore::open(config.clone(), DEFAULT_CHANGE_LOG_LIMIT).map_err(|e| anyhow!("{}: {e}", config.label()))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `[--conf FILE]` after the file argument.
fn conf_flag(rest: &[String]) -> Result<Option<PathBuf>> {
    match rest {
        [] => Ok(None),
        [flag, path] if flag == "--conf" || flag == "-c" => Ok(Some(PathBuf::from(path))),
        other => bail!("unexpected arguments {other:?}: expected [--conf FILE]"),
    }
}

pub fn import(args: &[String]) -> Result<ExitCode> {
    let (file, rest) = args
        .split_first()
        .ok_or_else(|| anyhow!("config db_import needs a FILE"))?;
    let conf = conf_flag(rest)?;
    let bytes = std::fs::read(file).map_err(|e| anyhow!("reading {file}: {e}"))?;
    let config = match parse_declarative(&bytes, DeclarativeFormat::Auto, now()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{file}: invalid configuration");
            for field in &error.errors {
                eprintln!("{}: {}", field.path, field.message);
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    println!("parse successful, beginning import");
    let store = open(conf.as_deref())?;
    let changes: Vec<ConfigChange> = config_entities(&config)
        .map(|entity| ConfigChange::Upsert { entity })
        .collect();
    // Compile what the database will hold before writing any of it; a
    // write by a node in between makes the import derive again.
    for _ in 0..5 {
        let (version, current) = store.load().map_err(|e| anyhow!("reading the database: {e}"))?;
        let running = strait_snapshot::compile_snapshot(version, Arc::new(current))
            .map_err(|e| anyhow!("the configuration in the database does not compile: {e}"))?;
        if let Err(error) = strait_snapshot::snapshot::derive_snapshot(&running, &changes) {
            eprintln!("{file}: the imported configuration does not compile");
            for problem in &error.problems {
                eprintln!("{}: {}", problem.entity, problem.message);
            }
            return Ok(ExitCode::FAILURE);
        }
        match store.apply_at(version, &changes) {
            Ok(version) => {
                println!(
                    "import successful ({} entities, configuration version {version})",
                    changes.len()
                );
                return Ok(ExitCode::SUCCESS);
            }
            Err(StoreError::Stale { .. }) => continue,
            Err(error) => {
                eprintln!("{file}: import failed, nothing was written: {error}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    bail!("other nodes kept writing: the import was derived five times and never committed")
}

pub fn export(args: &[String]) -> Result<ExitCode> {
    let (file, rest) = args
        .split_first()
        .ok_or_else(|| anyhow!("config db_export needs a FILE"))?;
    let conf = conf_flag(rest)?;
    if Path::new(file).exists() {
        bail!("{file} already exists. Will not overwrite it.");
    }
    let store = open(conf.as_deref())?;
    let (_, config) = store.load().map_err(|e| anyhow!("reading the database: {e}"))?;
    let text = serde_yaml::to_string(&config_to_declarative(&config))?;
    std::fs::write(file, text).map_err(|e| anyhow!("writing {file}: {e}"))?;
    println!("export successful");
    Ok(ExitCode::SUCCESS)
}
