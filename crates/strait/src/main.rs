//! The `strait` binary: command line, node settings, logging, wiring.

/// mimalloc: allocation-heavy work (parsing and compiling a large config)
/// runs markedly faster than with glibc malloc, and freed memory goes back to
/// the OS instead of staying in per-thread arenas (measured in docs/benchmarks.md).
#[global_allocator]
static GLOBAL: Allocator = Allocator;

/// mimalloc, with each proxy worker thread on a heap of its own
/// ([`use_own_heap`]).
///
/// mimalloc (v3) hands a full page to its heap's pool of "abandoned" pages,
/// and a thread that needs a fresh page for a size class takes one from
/// that pool first. Loading a large configuration leaves many pages there,
/// partly holding the configuration, partly the parser's freed garbage: a
/// worker that took them carved its per-request allocations out of free
/// blocks scattered through megabytes of cold memory (with 50,000 routes
/// about one cache miss in four allocations, against a hot page reused with
/// one route; docs/benchmarks.md#many-routes-and-the-allocator). Pages of
/// one heap are never handed to another, so a worker on its own heap starts
/// from fresh pages and keeps reusing them.
struct Allocator;

extern "C" {
    fn mi_heap_new() -> *mut c_void;
    fn mi_heap_malloc(heap: *mut c_void, size: usize) -> *mut c_void;
    fn mi_heap_zalloc(heap: *mut c_void, size: usize) -> *mut c_void;
    fn mi_heap_realloc(heap: *mut c_void, p: *mut c_void, newsize: usize) -> *mut c_void;
    fn mi_heap_malloc_aligned(heap: *mut c_void, size: usize, alignment: usize) -> *mut c_void;
    fn mi_heap_zalloc_aligned(heap: *mut c_void, size: usize, alignment: usize) -> *mut c_void;
    fn mi_heap_realloc_aligned(heap: *mut c_void, p: *mut c_void, newsize: usize, alignment: usize) -> *mut c_void;
}

/// Every mimalloc block is aligned to a machine word at least, so a layout
/// asking no more goes to the unaligned entry points. The aligned ones test
/// whether a free block happens to be aligned and send every block over
/// 1 KiB (a request's future is 7 KiB) through a generic path: 79
/// instructions an allocation on the proxy's path, against about 25.
const WORD_ALIGN: usize = std::mem::size_of::<usize>();

thread_local! {
    /// The calling thread's own mimalloc heap; null: the shared one. Const
    /// and without a destructor, so reading it is one load and it can be read
    /// at any point of the thread's life, its end included.
    static OWN_HEAP: Cell<*mut c_void> = const { Cell::new(std::ptr::null_mut()) };
}

// SAFETY: a layout aligned to more than a word goes to mimalloc's aligned
// entry points, which honour any size and power-of-two alignment (as
// `MiMalloc` does); one aligned to a word or less to the unaligned ones,
// whose blocks are always word-aligned. Blocks of every heap are freed and
// reallocated by mimalloc from any thread.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match OWN_HEAP.get() {
            heap if heap.is_null() => MiMalloc.alloc(layout),
            heap if layout.align() <= WORD_ALIGN => mi_heap_malloc(heap, layout.size()).cast(),
            heap => mi_heap_malloc_aligned(heap, layout.size(), layout.align()).cast(),
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match OWN_HEAP.get() {
            heap if heap.is_null() => MiMalloc.alloc_zeroed(layout),
            heap if layout.align() <= WORD_ALIGN => mi_heap_zalloc(heap, layout.size()).cast(),
            heap => mi_heap_zalloc_aligned(heap, layout.size(), layout.align()).cast(),
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        MiMalloc.dealloc(ptr, layout)
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match OWN_HEAP.get() {
            heap if heap.is_null() => MiMalloc.realloc(ptr, layout, new_size),
            heap if layout.align() <= WORD_ALIGN => mi_heap_realloc(heap, ptr.cast(), new_size).cast(),
            heap => mi_heap_realloc_aligned(heap, ptr.cast(), new_size, layout.align()).cast(),
        }
    }
}

/// Put the calling thread's allocations on a heap of its own (registered
/// with `strait_runtime::background` for proxy worker threads). Blocks it
/// allocated may still be freed by any thread. Once per thread: a second
/// call keeps the first heap.
fn use_own_heap() {
    if OWN_HEAP.get().is_null() {
        // SAFETY: `mi_heap_new` takes no arguments and returns a new heap, or
        // null when out of memory (then the thread stays on the shared heap).
        OWN_HEAP.set(unsafe { mi_heap_new() });
    }
}

/// Return mimalloc's free pages to the OS now (registered with
/// `strait_runtime::background`, which calls it after large jobs). mimalloc
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

mod cassandra_follow;
mod cli;
mod control;
mod db_config;
mod handover;
mod kong_configuration;
mod logfile;
mod migrations;
mod node;
mod pg_cache;
mod pg_follow;
mod reload;
mod settings;

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ffi::c_void;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use mimalloc::MiMalloc;
use strait_core::declarative::{parse_declarative, DeclarativeFormat};

use crate::settings::{NodeSettings, RawSettings};

const USAGE: &str = "\
Usage: strait <command>

Commands (-c/--conf FILE and -p/--prefix DIR as Kong's; a node's prefix is
its settings' `prefix` unless given):
  start [-c FILE] [-p DIR] [--declarative-config FILE]
                           start a node (settings: FILE, then STRAIT_<KEY> env vars)
  quit [-p DIR] [--wait S] [--timeout S]
                           finish requests in flight, then exit (SIGQUIT); after --timeout
                           (default 10 s) stop now
  stop [-p DIR]            stop now, closing connections (SIGTERM)
  reload [-p DIR] [-c FILE]
                           apply changed settings that can change live (SIGHUP); says which
                           need a restart, and then changes nothing
  restart [-p DIR]         a new process takes the listening sockets over, the old one
                           drains: no connection is dropped (a binary upgrade as well)
  health [-p DIR]          whether the node runs, and its listeners
  check [FILE]             check a settings file; prints every error
  prepare [-c FILE] [-p DIR]
                           lay out the prefix without starting
  config init [FILE]       write a starter declarative file (default ./kong.yml)
  config parse FILE        check a declarative file without loading it
  config validate FILE     check a Kong declarative config; prints every error
  config db_import FILE [--conf F]
                           add and update the file's entities in PostgreSQL (never deletes)
  config db_export FILE [--conf F]
                           write PostgreSQL's configuration as a declarative file
  migrations COMMAND       manage the PostgreSQL schema (bootstrap, up, finish, list, reset,
                           status); `strait migrations help` for the flags
  version [--all]          print the version (--all: its parts' too)
";

fn main() -> ExitCode {
    strait_runtime::background::disable_transparent_huge_pages();
    strait_plugins::install();
    strait_lua::install();
    strait_store::tune_c_heap();
    strait_runtime::background::set_memory_release(release_allocator_memory);
    strait_runtime::background::set_worker_allocator(use_own_heap);
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
        Some("quit") => control::quit(&args[1..]),
        Some("stop") => control::stop(&args[1..]),
        Some("reload") => control::reload(&args[1..]),
        Some("restart") => control::restart(&args[1..]),
        Some("health") => control::health(&args[1..]),
        Some("check") => cli::check(&args[1..]),
        Some("prepare") => cli::prepare(&args[1..]),
        Some("config") if args.get(1).map(String::as_str) == Some("init") => cli::config_init(&args[2..]),
        Some("config") if args.get(1).map(String::as_str) == Some("parse") => cli::config_parse(&args[2..]),
        Some("config") if args.get(1).map(String::as_str) == Some("validate") => validate(args.get(2), "ok"),
        Some("config") if args.get(1).map(String::as_str) == Some("db_import") => db_config::import(&args[2..]),
        Some("config") if args.get(1).map(String::as_str) == Some("db_export") => db_config::export(&args[2..]),
        Some("migrations") => migrations::run(&args[1..]),
        Some("version") | Some("--version") => cli::version(&args[1..]),
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

fn validate(file: Option<&String>, valid: &str) -> Result<ExitCode> {
    let file = file.ok_or_else(|| anyhow!("config validate needs a FILE\n\n{USAGE}"))?;
    // Custom plugins named by STRAIT_PLUGINS validate as they will run.
    let raw = RawSettings::load(None, std::env::vars())?;
    let mut lua = settings::lua_settings(&raw)?;
    load_plugin_servers(&settings::external_settings(&raw)?, &mut lua, false)?;
    strait_lua::load_custom_plugins(&lua).map_err(|e| anyhow!(e))?;
    load_wasm_filters(&settings::wasm_settings(&raw)?)?;
    let bytes = std::fs::read(file).map_err(|e| anyhow!("reading {file}: {e}"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    match parse_declarative(&bytes, DeclarativeFormat::Auto, now) {
        Ok(config) => match strait_snapshot::compile_snapshot(0, std::sync::Arc::new(config)) {
            Ok(snapshot) => {
                println!("{file}: {valid} ({} entities)", snapshot.entity_count());
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
    let raw = RawSettings::load(conf.as_deref(), std::env::vars().chain(overrides.iter().cloned()))?;
    let mut settings = NodeSettings::from_raw(raw)?;
    let log_level = init_logging(&settings)?;
    // How to read these settings again (`strait reload`) and to start a
    // successor (`strait restart`): the binary's path now, as a package
    // upgrade replaces the file there.
    let exe = std::env::current_exe().context("finding the binary's path")?;
    let exe = PathBuf::from(exe.to_string_lossy().trim_end_matches(" (deleted)"));
    let launch = reload::Launch {
        conf: conf.map(|conf| std::fs::canonicalize(&conf).unwrap_or(conf)),
        overrides,
        exe,
        args: std::env::args().skip(1).collect(),
    };
    load_plugin_servers(&settings.external, &mut settings.lua, true)?;
    strait_lua::configure(settings.lua.clone());
    strait_lua::load_custom_plugins(&settings.lua).map_err(|e| anyhow!(e))?;
    load_wasm_filters(&settings.wasm)?;
    node::run(settings, launch, log_level)
}

/// The plugin servers' plugins into the registry (and, with `start`, the
/// servers started); the names they serve are not looked for as Lua
/// plugins.
fn load_plugin_servers(
    external: &strait_external::ExternalSettings,
    lua: &mut strait_lua::LuaSettings,
    start: bool,
) -> Result<()> {
    let served = strait_external::load(external, &lua.custom_plugins, start).map_err(|e| anyhow!(e))?;
    lua.custom_plugins.retain(|name| !served.contains(name));
    Ok(())
}

/// The proxy-wasm filters compiled, the factory of filter chains
/// installed, and what every write path validates filter chains with.
fn load_wasm_filters(wasm: &strait_wasm::WasmSettings) -> Result<()> {
    let loaded = strait_wasm::load(wasm).map_err(|e| anyhow!(e))?;
    let filters = loaded
        .into_iter()
        .map(|filter| {
            let check = filter.config_schema.clone().map(|schema| {
                let check: strait_core::schema::FilterConfigCheck =
                    std::sync::Arc::new(move |config| strait_wasm::check_config(&schema, config));
                check
            });
            strait_core::schema::WasmFilterInfo {
                name: filter.name,
                config_schema: filter.config_schema,
                check,
            }
        })
        .collect();
    strait_core::schema::set_wasm_filters(wasm.enabled, filters);
    Ok(())
}

/// The node's own log (`proxy_error_log`, `log_level`, `log_format`):
/// plain text without colour codes unless it is a terminal, or JSON lines.
/// Returns what sets the level later (`strait reload`).
fn init_logging(settings: &settings::NodeSettings) -> Result<node::LogLevelSetter> {
    use std::io::IsTerminal;
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let filter = |level: &str| {
        let level = match level {
            "debug" => "debug",
            "info" | "notice" => "info",
            "warn" => "warn",
            _ => "error",
        };
        tracing_subscriber::EnvFilter::new(format!("{level},hyper=warn,h2=warn,rustls=warn"))
    };
    // STRAIT_LOG (a tracing filter) fixes the level: reload leaves it.
    let fixed = tracing_subscriber::EnvFilter::try_from_env("STRAIT_LOG").ok();
    let pinned = fixed.is_some();
    let initial = fixed.unwrap_or_else(|| filter(&settings.log_level));
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
        .with_env_filter(initial)
        .with_writer(writer)
        .with_ansi(ansi);
    let set: Box<dyn Fn(tracing_subscriber::EnvFilter) -> Result<()> + Send + Sync> = if settings.json_logs {
        let builder = builder.json().with_filter_reloading();
        let handle = builder.reload_handle();
        builder.init();
        Box::new(move |new| handle.reload(new).map_err(|e| anyhow!("log_level: {e}")))
    } else {
        let builder = builder.with_filter_reloading();
        let handle = builder.reload_handle();
        builder.init();
        Box::new(move |new| handle.reload(new).map_err(|e| anyhow!("log_level: {e}")))
    };
    Ok(Box::new(move |level: &str| {
        if pinned {
            tracing::warn!("log_level: STRAIT_LOG sets the log filter; unchanged");
            return Ok(());
        }
        set(filter(level))
    }))
}

#[cfg(test)]
mod allocator_tests {
    use super::*;

    extern "C" {
        fn mi_heap_contains(heap: *const c_void, p: *const c_void) -> bool;
    }

    fn contains(heap: *mut c_void, p: *const u8) -> bool {
        // SAFETY: `heap` is a live heap from `mi_heap_new` (never deleted) and
        // `p` a live block; the call only reads mimalloc's page map.
        unsafe { mi_heap_contains(heap, p.cast()) }
    }

    /// A thread on its own heap allocates, zero-allocates and reallocates
    /// there (a request's blocks never come from pages a configuration
    /// load left behind), and its blocks can be freed by another thread.
    #[test]
    fn an_own_heap_thread_allocates_on_its_heap_only() {
        let (own, blocks) = std::thread::spawn(|| {
            use_own_heap();
            let own = OWN_HEAP.get();
            assert!(!own.is_null());
            use_own_heap();
            assert_eq!(OWN_HEAP.get(), own, "a second call keeps the first heap");
            let boxed = Box::new([7u64; 6]);
            let zeroed = vec![0u8; 3000];
            assert!(zeroed.iter().all(|b| *b == 0));
            let mut grown = Vec::<u32>::with_capacity(4);
            grown.extend(0..10_000);
            let aligned = Box::new(Aligned([1; 256]));
            for p in [
                &*boxed as *const _ as *const u8,
                zeroed.as_ptr(),
                grown.as_ptr().cast(),
                &*aligned as *const _ as *const u8,
            ] {
                assert!(contains(own, p), "a block of the worker's is on its heap");
            }
            assert_eq!((&*aligned as *const Aligned as usize) % 128, 0);
            (own as usize, (boxed, zeroed, grown, aligned))
        })
        .join()
        .expect("the worker thread");
        let own = own as *mut c_void;
        let elsewhere = Box::new([7u64; 6]);
        assert!(!contains(own, &*elsewhere as *const _ as *const u8));
        assert_eq!(blocks.2.last(), Some(&9_999));
        assert_eq!(blocks.3 .0[255], 1);
        drop(blocks);
    }

    #[repr(align(128))]
    struct Aligned([u8; 256]);
}
