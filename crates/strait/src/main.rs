//! The `strait` binary: command line, node settings, logging, wiring.

/// mimalloc: allocation-heavy work (parsing and compiling a large config)
/// runs markedly faster than with glibc malloc, and freed memory goes back to
/// the OS instead of staying in per-thread arenas (measured in docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Return mimalloc's free pages to the OS now (registered with
/// `strait_proxy::background`, which calls it after large jobs). mimalloc
/// otherwise purges on its next call from the freeing thread, so an idle
/// node kept a parsed configuration's garbage resident.
fn release_allocator_memory() {
    extern "C" {
        fn mi_collect(force: bool);
    }
    // SAFETY: `mi_collect` is part of the mimalloc library linked as the
    // global allocator above; it takes a plain bool, may be called from any
    // thread at any time, and only returns free pages.
    unsafe { mi_collect(true) }
}

mod db_config;
mod kong_configuration;
mod logfile;
mod migrations;
mod node;
mod pg_cache;
mod pg_follow;
mod settings;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use strait_core::declarative::{parse_declarative, DeclarativeFormat};

use crate::settings::{NodeSettings, RawSettings};

const USAGE: &str = "\
Usage: strait <command>

Commands:
  start [--conf FILE] [--prefix DIR] [--declarative-config FILE]
                           start a node (settings: FILE, then STRAIT_<KEY> env vars)
  config validate FILE     check a Kong declarative config; prints every error
  config db_import FILE [--conf F]
                           add and update the file's entities in PostgreSQL (never deletes)
  config db_export FILE [--conf F]
                           write PostgreSQL's configuration as a declarative file
  migrations COMMAND       manage the PostgreSQL schema (bootstrap, up, finish, list, reset,
                           status); `strait migrations help` for the flags
  version                  print the version
";

fn main() -> ExitCode {
    strait_proxy::background::disable_transparent_huge_pages();
    strait_proxy::background::set_memory_release(release_allocator_memory);
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("Error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode> {
    match args.first().map(String::as_str) {
        Some("start") => start(&args[1..]).map(|_| ExitCode::SUCCESS),
        Some("config") if args.get(1).map(String::as_str) == Some("validate") => validate(args.get(2)),
        Some("config") if args.get(1).map(String::as_str) == Some("db_import") => db_config::import(&args[2..]),
        Some("config") if args.get(1).map(String::as_str) == Some("db_export") => db_config::export(&args[2..]),
        Some("migrations") => migrations::run(&args[1..]),
        Some("version") | Some("--version") => {
            println!("Strait {}", strait_proxy::VERSION);
            Ok(ExitCode::SUCCESS)
        }
        Some("help") | Some("--help") | Some("-h") | None => {
            print!("{USAGE}");
            Ok(if args.is_empty() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Some(other) => bail!("unknown command {other:?}\n\n{USAGE}"),
    }
}

fn validate(file: Option<&String>) -> Result<ExitCode> {
    let file = file.ok_or_else(|| anyhow!("config validate needs a FILE\n\n{USAGE}"))?;
    let bytes = std::fs::read(file).map_err(|e| anyhow!("reading {file}: {e}"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    match parse_declarative(&bytes, DeclarativeFormat::Auto, now) {
        Ok(config) => match strait_proxy::compile_snapshot(0, std::sync::Arc::new(config)) {
            Ok(snapshot) => {
                println!("{file}: ok ({} entities)", snapshot.entity_count());
                Ok(ExitCode::SUCCESS)
            }
            Err(error) => {
                eprintln!("{file}: invalid configuration");
                for problem in &error.problems {
                    eprintln!("{}: {}", problem.entity, problem.message);
                }
                Ok(ExitCode::FAILURE)
            }
        },
        Err(error) => {
            eprintln!("{file}: invalid configuration");
            for field in &error.errors {
                eprintln!("{}: {}", field.path, field.message);
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

fn start(args: &[String]) -> Result<()> {
    let mut conf: Option<PathBuf> = None;
    let mut overrides = Vec::new();
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let mut value = |name: &str| rest.next().cloned().ok_or_else(|| anyhow!("{name} needs a value"));
        match flag.as_str() {
            "--conf" | "-c" => conf = Some(PathBuf::from(value("--conf")?)),
            "--prefix" | "-p" => overrides.push(("STRAIT_PREFIX".to_string(), value("--prefix")?)),
            "--declarative-config" => {
                overrides.push(("STRAIT_DECLARATIVE_CONFIG".to_string(), value("--declarative-config")?))
            }
            other => bail!("unknown flag {other:?} for start\n\n{USAGE}"),
        }
    }
    let raw = RawSettings::load(conf.as_deref(), std::env::vars().chain(overrides))?;
    let settings = NodeSettings::from_raw(raw)?;
    init_logging(&settings)?;
    node::run(settings)
}

/// The node's own log (`proxy_error_log`, `log_level`, `log_format`):
/// plain text without colour codes unless it is a terminal, or JSON lines.
fn init_logging(settings: &settings::NodeSettings) -> Result<()> {
    use std::io::IsTerminal;
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let level = match settings.log_level.as_str() {
        "debug" => "debug",
        "info" | "notice" => "info",
        "warn" => "warn",
        _ => "error",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("STRAIT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},hyper=warn,h2=warn,rustls=warn")));
    let (writer, ansi) = match &settings.error_log {
        settings::LogTarget::Off => (BoxMakeWriter::new(std::io::sink), false),
        settings::LogTarget::Stderr => (BoxMakeWriter::new(std::io::stderr), std::io::stderr().is_terminal()),
        settings::LogTarget::Stdout => (BoxMakeWriter::new(std::io::stdout), std::io::stdout().is_terminal()),
        settings::LogTarget::File(path) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            (BoxMakeWriter::new(logfile::ErrorLog::new(path)), false)
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi);
    if settings.json_logs {
        builder.json().init();
    } else {
        builder.init();
    }
    Ok(())
}
