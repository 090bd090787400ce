//! Starting and stopping a node: open the store, publish the stored
//! configuration, apply `declarative_config`, start the proxy workers and the
//! Admin/status APIs; then serve until a signal: SIGQUIT drains, SIGTERM and
//! SIGINT stop now, SIGHUP reloads, SIGUSR2 hands over to a new process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use strait_proxy::wire::tls::LiveCert;

use anyhow::{anyhow, bail, Context, Result};
use strait_admin::{load_declarative, serve_admin, serve_status, AdminState};
use strait_core::declarative::DeclarativeFormat;
use strait_proxy::wire::tls::server_config;
use strait_proxy::{start_workers, ProxyContext};
use strait_runtime::stats::ProxyStats;
use strait_snapshot::tls::load_or_create_default_certificate;
use strait_snapshot::{compile_snapshot_hashed, SnapshotPublisher};
use strait_store::{LmdbStore, Store};
use tokio::sync::watch;

use crate::reload::Launch;
use crate::settings::{NodeSettings, Role};

fn node_id(prefix: &std::path::Path) -> Result<String> {
    let path = prefix.join("node_id");
    if let Ok(existing) = std::fs::read_to_string(&path) {
        return Ok(existing.trim().to_string());
    }
    let id = uuid::Uuid::new_v4().to_string();
    std::fs::write(&path, &id).with_context(|| format!("writing {}", path.display()))?;
    Ok(id)
}

/// Reads secret references again every `interval` (a rotated file takes
/// effect without a config change); on a thread of its own that only queues
/// a job for the compiler, so it never competes with requests.
fn start_secret_refresh(publisher: &SnapshotPublisher, interval: std::time::Duration) {
    if interval.is_zero() {
        return;
    }
    let publisher = publisher.clone();
    let spawned = std::thread::Builder::new()
        .name("strait-secrets".to_string())
        .spawn(move || loop {
            std::thread::sleep(interval);
            publisher.refresh_secrets();
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "could not start the secret refresh thread");
    }
}

/// Run a node until a termination signal, then drain and return.
/// Open the oauth2 plugin's token store and make it the node's.
fn open_token_store(settings: &NodeSettings) -> Result<()> {
    use crate::settings::TokenStoreSettings;
    use strait_runtime::oauth2::{install, lmdb::LmdbTokens, redis::RedisTokens, TokenStore};
    let store: Arc<dyn TokenStore> = match &settings.oauth2_tokens {
        TokenStoreSettings::Embedded { map_size } => {
            let dir = settings.prefix.join("oauth2_tokens");
            Arc::new(LmdbTokens::open(&dir, *map_size).map_err(|e| anyhow!("opening the OAuth2 token store: {e}"))?)
        }
        TokenStoreSettings::Redis(config) => {
            tracing::info!(redis = %config.label(), "OAuth2 tokens are kept in Redis");
            Arc::new(RedisTokens::new(strait_runtime::redis::Redis::new(config.clone())))
        }
        TokenStoreSettings::Postgres(config) => {
            tracing::info!(database = %config.label(), "OAuth2 tokens are kept in PostgreSQL");
            let tokens = strait_store::pg::PgTokens::new(config.clone())
                .map_err(|e| anyhow!("opening the OAuth2 token store on PostgreSQL {}: {e}", config.label()))?;
            // With database = postgres the configuration store has checked
            // this schema already.
            if settings.postgres.is_none() {
                schema_usable("PostgreSQL", &config.label(), tokens.check_schema())?;
            }
            Arc::new(tokens)
        }
        TokenStoreSettings::Cassandra(config) => {
            tracing::info!(keyspace = %config.label(), "OAuth2 tokens are kept in Cassandra");
            let tokens = strait_store::cassandra::CassandraTokens::new(config.clone())
                .map_err(|e| anyhow!("opening the OAuth2 token store on Cassandra {}: {e}", config.label()))?;
            // With database = cassandra the configuration store has checked
            // this keyspace already.
            if settings.cassandra.is_none() {
                schema_usable("Cassandra", &config.label(), tokens.check_schema())?;
            }
            Arc::new(tokens)
        }
    };
    install(store);
    open_runtime_store(settings)
}

/// A token store's schema check on a database the node does not keep its
/// configuration in: refused at start, or unreachable (then token requests
/// fail until it is back).
fn schema_usable(database: &str, label: &str, checked: Result<(), strait_store::StoreError>) -> Result<()> {
    match checked {
        Ok(()) => Ok(()),
        Err(strait_store::StoreError::Unavailable(detail)) => {
            tracing::warn!(
                database = %label,
                %detail,
                "the OAuth2 token store's {database} is unreachable: token requests fail until it is back"
            );
            Ok(())
        }
        Err(error) => bail!("the OAuth2 token store on {database} {label}: {error}"),
    }
}

/// Open the runtime key-value store (server-side sessions, ACME data) on
/// the backend the token store uses, and make it the node's.
fn open_runtime_store(settings: &NodeSettings) -> Result<()> {
    use crate::settings::TokenStoreSettings;
    use strait_runtime::kv::{install, lmdb::LmdbKv, redis::RedisKv, KvStore};
    let store: Arc<dyn KvStore> = match &settings.oauth2_tokens {
        TokenStoreSettings::Embedded { map_size } => {
            let dir = settings.prefix.join("runtime_kv");
            Arc::new(LmdbKv::open(&dir, *map_size).map_err(|e| anyhow!("opening the runtime store: {e}"))?)
        }
        TokenStoreSettings::Redis(config) => Arc::new(RedisKv::new(strait_runtime::redis::Redis::new(config.clone()))),
        TokenStoreSettings::Postgres(config) => Arc::new(
            strait_store::pg::PgKv::new(config.clone())
                .map_err(|e| anyhow!("opening the runtime store on PostgreSQL {}: {e}", config.label()))?,
        ),
        TokenStoreSettings::Cassandra(config) => Arc::new(
            strait_store::cassandra::CassandraKv::new(config.clone())
                .map_err(|e| anyhow!("opening the runtime store on Cassandra {}: {e}", config.label()))?,
        ),
    };
    install(store);
    Ok(())
}

pub fn run(settings: NodeSettings, launch: Launch, log_level: LogLevelSetter) -> Result<()> {
    strait_runtime::cache::set_capacity(settings.mem_cache_size);
    strait_runtime::logs::set_syslog_socket(settings.syslog_socket.clone());
    strait_plugins::bundled::opentelemetry::set_node_sampling_rate(settings.tracing_sampling_rate);
    if let Some(log) = &settings.proxy.access_log {
        if let Some(dir) = log.path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    strait_snapshot::secrets::set_defaults(settings.vaults.clone());
    strait_proxy::upstream::dns::configure(settings.dns.clone());
    std::fs::create_dir_all(&settings.prefix)
        .with_context(|| format!("creating prefix {}", settings.prefix.display()))?;
    // A successor started by `strait restart` takes the running node's
    // listening sockets; otherwise no other node may serve this prefix.
    let takeover = match std::env::var("STRAIT_TAKEOVER").as_deref() {
        Ok("1") => Some(crate::handover::take_over(&settings.prefix)?),
        _ => {
            if let Some(pid) = crate::control::running_pid(&settings.prefix) {
                bail!(
                    "Strait is already running at {} (pid {pid}); `strait restart` replaces it without dropping a connection",
                    settings.prefix.display()
                );
            }
            None
        }
    };
    // A data plane's store is its cache of what the control plane sent.
    let dp_cache = match &settings.role {
        Role::DataPlane { .. } => Some(Arc::new(crate::pg_cache::LocalCache::open_data_plane(
            &settings.prefix,
        )?)),
        _ => None,
    };
    let mut cassandra = None;
    let (store, mut postgres): (Arc<dyn Store>, _) = match &settings.postgres {
        None if settings.cassandra.is_some() => {
            let config = settings.cassandra.clone().expect("checked");
            let store = Arc::new(
                strait_store::cassandra::CassandraStore::new(config.clone(), settings.change_log_size)
                    .map_err(|e| anyhow!("opening the Cassandra store {}: {e}", config.label()))?,
            );
            let cache = Arc::new(crate::pg_cache::LocalCache::open(&settings.prefix)?);
            let cached_start = match store.check_schema() {
                Ok(()) => None,
                Err(strait_store::StoreError::Unavailable(detail)) => match cache.load() {
                    Some(cached) => {
                        tracing::warn!(
                            cluster = %config.label(),
                            %detail,
                            config_version = cached.0,
                            "Cassandra is unreachable: serving the cached configuration until it is back"
                        );
                        Some(cached)
                    }
                    None => bail!(
                        "Cassandra {} is unreachable ({detail}) and this node has no cached configuration to serve",
                        config.label()
                    ),
                },
                Err(error) => bail!("opening the Cassandra store {}: {error}", config.label()),
            };
            tracing::info!(cluster = %config.label(), "configuration is kept in Cassandra");
            cassandra = Some((store.clone(), cache.clone(), cached_start));
            let cached = crate::pg_cache::Cached {
                primary: store,
                cache,
                replica: None,
            };
            (Arc::new(cached) as Arc<dyn Store>, None)
        }
        _ if dp_cache.is_some() => (
            dp_cache
                .as_ref()
                .map(|cache| cache.store())
                .expect("a data plane's cache") as Arc<dyn Store>,
            None,
        ),
        None => (
            Arc::new(
                LmdbStore::open(&settings.prefix.join("lmdb"))
                    .map_err(|e| anyhow!("opening the embedded store: {e}"))?
                    .with_change_log_limit(settings.change_log_size),
            ),
            None,
        ),
        Some(config) => {
            let pg = Arc::new(
                strait_store::pg::PgStore::new(config.clone(), settings.change_log_size)
                    .map_err(|e| anyhow!("opening the PostgreSQL store {}: {e}", config.label()))?,
            );
            let cache = Arc::new(crate::pg_cache::LocalCache::open(&settings.prefix)?);
            let cached_start = match pg.check_schema() {
                Ok(()) => None,
                Err(strait_store::StoreError::Unavailable(detail)) => match cache.load() {
                    Some(cached) => {
                        tracing::warn!(
                            database = %config.label(),
                            %detail,
                            config_version = cached.0,
                            "PostgreSQL is unreachable: serving the cached configuration until it is back"
                        );
                        Some(cached)
                    }
                    None => bail!(
                        "PostgreSQL {} is unreachable ({detail}) and this node has no cached configuration to serve",
                        config.label()
                    ),
                },
                Err(error) => bail!("opening the PostgreSQL store {}: {error}", config.label()),
            };
            tracing::info!(database = %config.label(), "configuration is kept in PostgreSQL");
            // The replica is not checked at start: while it is away, GET
            // requests answer 503 and everything else goes on.
            let replica = match &settings.postgres_ro {
                Some(ro) => {
                    tracing::info!(replica = %ro.label(), "Admin API reads go to the read-only replica");
                    Some(
                        strait_store::pg::PgStore::new(ro.clone(), strait_store::DEFAULT_CHANGE_LOG_LIMIT)
                            .map_err(|e| anyhow!("opening the PostgreSQL replica {}: {e}", ro.label()))?,
                    )
                }
                None => None,
            };
            let store = Arc::new(crate::pg_cache::CachedPg {
                primary: pg.clone(),
                cache: cache.clone(),
                replica,
            });
            (store as Arc<dyn Store>, Some((pg, cache, config.clone(), cached_start)))
        }
    };
    open_token_store(&settings)?;
    if let Some(config) = &settings.cassandra {
        // rate-limiting's `cluster` policy counts in the keyspace.
        let counters = strait_store::cassandra::CassandraCounters::new(config.clone())
            .map_err(|e| anyhow!("opening the cluster counters on Cassandra {}: {e}", config.label()))?;
        strait_runtime::cluster_counters::install(Arc::new(counters));
    }
    let initial = match &dp_cache {
        // What the data plane served last, or nothing until the control
        // plane sends the configuration.
        Some(cache) => match cache.load_snapshot() {
            Some(compiled) => compiled,
            None => compile_snapshot_hashed(0, Arc::new(strait_core::Config::default()), None),
        },
        None => {
            let cached_start = postgres
                .as_mut()
                .and_then(|(_, _, _, cached)| cached.take())
                .or_else(|| cassandra.as_mut().and_then(|(_, _, cached)| cached.take()));
            let (version, config, stored_hash) = match cached_start {
                Some(cached) => cached,
                None => {
                    let (version, config) = store
                        .load()
                        .map_err(|e| anyhow!("loading the stored configuration: {e}"))?;
                    let stored_hash = store
                        .config_hash()
                        .map_err(|e| anyhow!("reading the configuration hash: {e}"))?;
                    if let Some((_, cache, _, _)) = &postgres {
                        cache.replace(version, &config, stored_hash.as_deref());
                    }
                    if let Some((_, cache, _)) = &cassandra {
                        cache.replace(version, &config, stored_hash.as_deref());
                    }
                    (version, config, stored_hash)
                }
            };
            compile_snapshot_hashed(version, Arc::new(config), stored_hash)
        }
    }
    .map_err(|e| anyhow!("stored configuration does not compile: {e}"))?;
    tracing::info!(config_version = initial.version, "stored configuration loaded");
    let publisher = SnapshotPublisher::start(initial);
    if let Some((store, cache, config, _)) = postgres {
        crate::pg_follow::start(store, cache, config, publisher.clone())?;
    }
    if let Some((store, cache, _)) = cassandra {
        crate::cassandra_follow::start(store, cache, publisher.clone())?;
    }
    start_secret_refresh(&publisher, settings.vault_refresh_interval);
    let node_id = node_id(&settings.prefix)?;
    strait_runtime::set_node_id(&node_id);
    strait_lua::set_node(node_id.clone(), strait_runtime::hostname());
    strait_external::set_node(node_id.clone());
    let ready = Arc::new(AtomicBool::new(false));
    let cluster = match &settings.role {
        Role::Traditional => strait_admin::Cluster::None,
        Role::ControlPlane {
            listen,
            tls,
            purge_delay,
        } => strait_admin::Cluster::ControlPlane(
            strait_cluster::cp::ControlPlane {
                listen: *listen,
                socket: strait_proxy::wire::listen::bind_addr(*listen, false, 1024)
                    .with_context(|| format!("cluster_listen: could not listen on {listen}"))?,
                tls: tls.clone(),
                store: store.clone(),
                publisher: publisher.clone(),
                purge_delay: *purge_delay,
            }
            .start()
            .map_err(|e| anyhow!(e))?,
        ),
        Role::DataPlane { control_plane, tls } => {
            tracing::info!(
                control_plane = %control_plane,
                config_version = publisher.current().load().version,
                "data plane: serving the cached configuration while following the control plane"
            );
            strait_admin::Cluster::DataPlane(
                strait_cluster::dp::DataPlane {
                    control_plane: control_plane.clone(),
                    tls: tls.clone(),
                    publisher: publisher.clone(),
                    cache: dp_cache.clone().expect("a data plane's cache"),
                    node_id: node_id.clone(),
                    hostname: strait_runtime::hostname(),
                    plugins: strait_plugins::available()
                        .iter()
                        .map(|name| name.to_string())
                        .collect(),
                    ready: ready.clone(),
                }
                .start()
                .map_err(|e| anyhow!(e))?,
            )
        }
    };
    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the control runtime")?;
    let mut memo = None;
    if let Some(path) = &settings.declarative_config {
        let bytes = std::fs::read(path).with_context(|| format!("reading declarative_config {}", path.display()))?;
        let version = control
            .block_on(load_declarative(
                &publisher,
                &store,
                &mut memo,
                &bytes,
                DeclarativeFormat::Auto,
                settings.router_flavor,
            ))
            .map_err(|e| anyhow!("declarative_config {}:\n{e}", path.display()))?;
        tracing::info!(config_version = version, path = %path.display(), "declarative configuration loaded");
    }
    // Parsing the file left free pages; return them before serving.
    strait_runtime::background::release_memory();
    strait_store::c_heap_arena_per_thread();
    let stats = Arc::new(ProxyStats::default());
    let proxy_cert: LiveCert = Arc::new(ArcSwap::new(proxy_certificate(&settings)?));
    let client_verify = match &settings.client_verify {
        (mode, Some(path)) if mode != "off" => {
            let pem =
                std::fs::read_to_string(path).with_context(|| format!("ssl_client_ca: reading {}", path.display()))?;
            if mode == "on" {
                strait_proxy::wire::tls::ClientVerify::On(pem)
            } else {
                strait_proxy::wire::tls::ClientVerify::Optional(pem)
            }
        }
        _ => strait_proxy::wire::tls::ClientVerify::Off,
    };
    let stapler = settings.tls.stapling().then(strait_proxy::wire::ocsp::Stapler::new);
    let tls = server_config(
        publisher.current(),
        proxy_cert.clone(),
        &settings.tls,
        &client_verify,
        stapler.clone(),
    )
    .map_err(|e| anyhow!("TLS setup: {e}"))?;
    if let Some(stapler) = stapler {
        // On the control thread, while it serves: handshakes never wait for a responder.
        control.spawn(staple(stapler, proxy_cert.clone(), publisher.current()));
    }
    let (admin_tls, admin_cert) = match admin_tls_config(&settings)? {
        Some((config, cert)) => (Some(config), Some(cert)),
        None => (None, None),
    };
    let live_limits = Arc::new(ArcSwap::from_pointee(settings.proxy.limits.clone()));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    // A control plane does not proxy (Kong's control planes neither).
    let proxies = !matches!(settings.role, Role::ControlPlane { .. });
    let workers = match proxies {
        true => Some(
            start_workers(
                ProxyContext {
                    settings: settings.proxy.clone(),
                    snapshot: publisher.current(),
                    stats: stats.clone(),
                    tls,
                    limits: live_limits.clone(),
                },
                shutdown_rx.clone(),
            )
            .map_err(|e| anyhow!(e))?,
        ),
        false => None,
    };
    let health = match proxies {
        true => Some(
            strait_proxy::upstream::health_check::start(publisher.current(), shutdown_rx.clone())
                .context("starting the health checker")?,
        ),
        false => None,
    };
    // A successor serves the proxy sockets now; the node before it stops
    // accepting and closes its Admin API, then this one opens its own on
    // what the store holds by then.
    if let Some(takeover) = takeover {
        let grace = settings.proxy.graceful_shutdown_timeout + std::time::Duration::from_secs(5);
        let handed = takeover.ready(grace);
        tracing::info!(previous_version = ?handed, "hand-over: the previous process drains");
        let embedded = settings.postgres.is_none()
            && settings.cassandra.is_none()
            && !matches!(settings.role, Role::DataPlane { .. });
        if embedded {
            control.block_on(catch_up(&store, &publisher));
        }
    }
    let serving = publisher.current();
    let state = Arc::new(AdminState {
        store,
        publisher,
        stats,
        node_id,
        hostname: strait_runtime::hostname(),
        configuration: crate::kong_configuration::configuration(&settings),
        ready: ready.clone(),
        router_flavor: settings.router_flavor,
        admin_token: settings.admin_token.clone(),
        writes: Default::default(),
        declarative: std::sync::Mutex::new(memo),
        headers: settings.proxy.headers,
        cluster,
        origins: strait_admin::origin::AllowedOrigins::new(
            &settings.admin_gui.urls,
            &settings
                .admin_gui
                .listen
                .iter()
                .map(|spec| spec.addr.port())
                .collect::<Vec<_>>(),
        ),
    });
    let admin = start_admin_thread(&settings, state.clone(), admin_tls, shutdown_rx)?;
    // A data plane is ready once it has a configuration: its cache now, or
    // the control plane's first (Kong's data planes answer 503 until then).
    if !matches!(settings.role, Role::DataPlane { .. }) || serving.load().version > 0 {
        ready.store(true, Ordering::Release);
    }
    for addr in strait_proxy::wire::listen::close_unclaimed() {
        tracing::info!(%addr, "hand-over: a listener the settings no longer have is closed");
    }
    crate::control::write_pid(&settings.prefix)?;
    crate::cli::write_env_file(&settings.prefix, &settings.raw);
    let (handed_tx, mut handed_rx) = tokio::sync::mpsc::unbounded_channel();
    crate::handover::listen(&settings.prefix, move |successor| {
        let _ = handed_tx.send(successor);
    })?;
    crate::control::notify(&format!("MAINPID={}\nREADY=1", std::process::id()));
    tracing::info!(proxy = ?settings.proxy.listeners.iter().map(|l| l.addr).collect::<Vec<_>>(), "strait started");
    let reloader = crate::reload::Reloader {
        launch: std::sync::Mutex::new(launch),
        raw: std::sync::Mutex::new(settings.raw.0.clone()),
        log_level,
        proxy_cert,
        admin_cert,
        limits: live_limits,
    };
    let ending = control.block_on(serve_until_stop(&settings, &reloader, &state, &mut handed_rx));
    crate::control::notify("STOPPING=1");
    let successor = match ending {
        Ending::Now => {
            tracing::info!("stopping now: connections are closed");
            strait_proxy::stop_now();
            None
        }
        Ending::Graceful => {
            tracing::info!(grace = ?settings.proxy.graceful_shutdown_timeout, "shutting down: draining connections");
            None
        }
        Ending::HandedOver(successor) => {
            tracing::info!(grace = ?settings.proxy.graceful_shutdown_timeout, "handed over: draining connections");
            Some(successor)
        }
    };
    let _ = shutdown_tx.send(true);
    drop(state);
    // The successor opens its Admin API once this one is closed.
    let _ = admin.join();
    if let Some(successor) = successor {
        successor.draining(serving.load().version);
    }
    strait_proxy::wire::listen::forget_listening();
    if let Some(workers) = workers {
        workers.join();
    }
    if let Some(health) = health {
        let _ = health.join();
    }
    crate::control::remove_pid_if_ours(&settings.prefix);
    tracing::info!("stopped");
    strait_runtime::logs::files::flush();
    Ok(())
}

/// A successor's first step once the node before it stopped writing: the
/// store's configuration, when it moved on since this process loaded it.
async fn catch_up(store: &Arc<dyn Store>, publisher: &SnapshotPublisher) {
    let running = publisher.current().load().version;
    match store.version() {
        Ok(stored) if stored != running => {}
        Ok(_) => return,
        Err(error) => {
            tracing::error!(%error, "hand-over: could not read the store's version");
            return;
        }
    }
    let (version, config) = match store.load() {
        Ok(loaded) => loaded,
        Err(error) => {
            tracing::error!(%error, "hand-over: could not load the stored configuration");
            return;
        }
    };
    let hash = store.config_hash().ok().flatten();
    let commit: strait_snapshot::compiler::ReplaceCommitFn =
        Box::new(move |_| -> Result<u64, strait_snapshot::compiler::CommitError> { Ok(version) });
    match publisher.sync(Arc::new(config), hash, 0, commit).await {
        Ok(_) => tracing::info!(
            from = running,
            version,
            "hand-over: the configuration written meanwhile is served"
        ),
        Err(error) => tracing::error!(%error, version, "hand-over: the stored configuration does not compile"),
    }
}

/// Sets the node's log level (`strait reload`).
pub type LogLevelSetter = Box<dyn Fn(&str) -> Result<()> + Send + Sync>;

enum Ending {
    /// `strait stop`, SIGTERM, SIGINT.
    Now,
    /// `strait quit`, SIGQUIT.
    Graceful,
    /// A successor took the sockets (`strait restart`, SIGUSR2).
    HandedOver(crate::handover::Successor),
}

/// Serve until a signal ends it; reload on SIGHUP, start a successor on
/// SIGUSR2, reopen the log files on SIGUSR1.
async fn serve_until_stop(
    settings: &NodeSettings,
    reloader: &crate::reload::Reloader,
    state: &AdminState,
    handed: &mut tokio::sync::mpsc::UnboundedReceiver<crate::handover::Successor>,
) -> Ending {
    use tokio::signal::unix::{signal, SignalKind};
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::quit()),
        signal(SignalKind::hangup()),
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
    );
    let (Ok(mut term), Ok(mut int), Ok(mut quit), Ok(mut hup), Ok(mut usr1), Ok(mut usr2)) = signals else {
        tracing::error!("could not install signal handlers; stopping");
        return Ending::Now;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return Ending::Now,
            _ = int.recv() => return Ending::Now,
            _ = quit.recv() => return Ending::Graceful,
            Some(successor) = handed.recv() => return Ending::HandedOver(successor),
            _ = usr1.recv() => {
                strait_runtime::logs::files::reopen_all();
                tracing::info!("SIGUSR1: log files reopened");
            }
            _ = hup.recv() => {
                crate::control::notify("RELOADING=1");
                let (token, conf) = crate::reload::take_request(&settings.prefix);
                let outcome = reloader.reload(conf, Some(state)).await;
                match &outcome {
                    crate::reload::Outcome::Applied(lines) => tracing::info!(changes = ?lines, "reloaded"),
                    crate::reload::Outcome::Refused(lines) => {
                        tracing::error!(settings = ?lines, "reload refused: nothing changed")
                    }
                    crate::reload::Outcome::Failed(error) => tracing::error!(%error, "reload failed: nothing changed"),
                }
                crate::reload::report(&settings.prefix, &token, &outcome);
                crate::control::notify("READY=1");
            }
            _ = usr2.recv() => {
                let launch = reloader.launch.lock().unwrap_or_else(|e| e.into_inner()).clone();
                start_successor(&launch, &settings.prefix);
            }
        }
    }
}

/// Start the process that takes this one's sockets over (the binary now
/// at the path this one started from, with the same arguments).
fn start_successor(launch: &crate::reload::Launch, prefix: &std::path::Path) {
    let failed = crate::control::restart_failed_path(prefix);
    let spawned = std::process::Command::new(&launch.exe)
        .args(&launch.args)
        .env("STRAIT_TAKEOVER", "1")
        .spawn();
    match spawned {
        Ok(mut child) => {
            let pid = child.id();
            tracing::info!(pid, exe = %launch.exe.display(), "SIGUSR2: a new process starts to take over");
            // Reaped here: one that fails before the hand-over is reported.
            let _ = std::thread::Builder::new()
                .name("strait-successor".to_string())
                .spawn(move || {
                    let outcome = match child.wait() {
                        Ok(status) if status.success() => return,
                        Ok(status) => format!("the new process {pid} exited ({status}) before taking over"),
                        Err(error) => format!("waiting for the new process {pid}: {error}"),
                    };
                    tracing::error!(pid, "{outcome}; this one keeps serving");
                    // `strait restart` is waiting: it says so at once.
                    let _ = std::fs::write(
                        &failed,
                        format!("{outcome}; the running node keeps serving (see its error log)\n"),
                    );
                });
        }
        Err(error) => tracing::error!(%error, exe = %launch.exe.display(), "could not start the new process"),
    }
}

/// The proxy's default certificate: `ssl_cert`/`ssl_cert_key`, or the one
/// generated in the prefix.
pub fn proxy_certificate(settings: &NodeSettings) -> Result<Arc<rustls::sign::CertifiedKey>> {
    match &settings.ssl_cert {
        Some((cert, key)) => {
            let read = |name: &str, path: &std::path::Path| {
                std::fs::read_to_string(path).with_context(|| format!("{name}: reading {}", path.display()))
            };
            strait_snapshot::tls::certified_key(&read("ssl_cert", cert)?, &read("ssl_cert_key", key)?)
                .map_err(|e| anyhow!("ssl_cert: {e}"))
        }
        None => load_or_create_default_certificate(&settings.prefix).map_err(|e| anyhow!("default certificate: {e}")),
    }
}

/// The Admin API's certificate when it has `ssl` listeners:
/// `admin_ssl_cert`, else the proxy's default.
pub fn admin_certificate(settings: &NodeSettings) -> Result<Option<Arc<rustls::sign::CertifiedKey>>> {
    if !settings.admin_listen.iter().any(|spec| spec.ssl) {
        return Ok(None);
    }
    let read = |key: &str, path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("{key}: reading {}", path.display()))
    };
    let tls = &settings.admin_tls;
    Ok(Some(match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            strait_snapshot::tls::certified_key(&read("admin_ssl_cert", cert)?, &read("admin_ssl_cert_key", key)?)
                .map_err(|e| anyhow!("admin_ssl_cert: {e}"))?
        }
        _ => proxy_certificate(settings)?,
    }))
}

/// The TLS configuration of the Admin API's `ssl` listeners, when there are
/// any, and its certificate (which `strait reload` can replace); client
/// certificates signed by `admin_ssl_client_ca` when that is set.
/// OCSP stapling's round (wire/ocsp.rs): the default certificate and every
/// certificate entity, looked over every `SCAN`.
async fn staple(
    stapler: Arc<strait_proxy::wire::ocsp::Stapler>,
    default: LiveCert,
    snapshot: Arc<ArcSwap<strait_snapshot::Snapshot>>,
) {
    loop {
        let mut served = vec![default.load_full()];
        served.extend(snapshot.load().served_certificates());
        stapler.refresh(&served).await;
        tokio::time::sleep(strait_proxy::wire::ocsp::SCAN).await;
    }
}

fn admin_tls_config(settings: &NodeSettings) -> Result<Option<(Arc<rustls::ServerConfig>, LiveCert)>> {
    let Some(certificate) = admin_certificate(settings)? else {
        return Ok(None);
    };
    let client_ca = match &settings.admin_tls.client_ca {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("admin_ssl_client_ca: reading {}", path.display()))?,
        ),
        None => None,
    };
    let live: LiveCert = Arc::new(ArcSwap::new(certificate));
    let config = strait_proxy::wire::tls::admin_server_config(live.clone(), client_ca.as_deref(), &settings.tls)
        .map_err(|e| anyhow!("Admin API TLS: {e}"))?;
    Ok(Some((config, live)))
}

/// The Admin and status APIs on their own thread and runtime.
fn start_admin_thread(
    settings: &NodeSettings,
    state: Arc<AdminState>,
    admin_tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: watch::Receiver<bool>,
) -> Result<std::thread::JoinHandle<()>> {
    let bind = |specs: &[strait_proxy::ListenSpec]| -> Result<Vec<std::net::TcpListener>> {
        specs
            .iter()
            .map(|spec| {
                strait_proxy::wire::listen::bind(spec, spec.reuseport)
                    .with_context(|| format!("could not listen on {}", spec.addr))
            })
            .collect()
    };
    let admin_sockets: Vec<(std::net::TcpListener, Option<Arc<rustls::ServerConfig>>)> = bind(&settings.admin_listen)?
        .into_iter()
        .zip(&settings.admin_listen)
        .map(|(socket, spec)| (socket, spec.ssl.then(|| admin_tls.clone()).flatten()))
        .collect();
    let status_sockets = bind(&settings.status_listen)?;
    let gui_sockets = bind(&settings.admin_gui.listen)?;
    let gui = Arc::new(strait_admin::gui::GuiConfig {
        path: settings.admin_gui.path.clone(),
        api_url: settings.admin_gui.api_url.clone(),
        admin_port: settings.admin_listen.iter().find(|s| !s.ssl).map(|s| s.addr.port()),
        admin_ssl_port: settings.admin_listen.iter().find(|s| s.ssl).map(|s| s.addr.port()),
    });
    std::thread::Builder::new()
        .name("strait-admin".to_string())
        .spawn(move || {
            // Admin work (a whole-config POST above all) yields to the proxy
            // workers; threads the runtime starts inherit the priority.
            strait_runtime::background::lower_priority("strait-admin");
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "could not start the admin runtime");
                    return;
                }
            };
            runtime.block_on(async move {
                let mut tasks = Vec::new();
                for (socket, tls, status_only) in admin_sockets
                    .into_iter()
                    .map(|(s, tls)| (s, tls, false))
                    .chain(status_sockets.into_iter().map(|s| (s, None, true)))
                {
                    match tokio::net::TcpListener::from_std(socket) {
                        Ok(listener) if status_only => {
                            tasks.push(tokio::spawn(serve_status(listener, state.clone(), shutdown.clone())))
                        }
                        Ok(listener) => tasks.push(tokio::spawn(serve_admin(
                            listener,
                            state.clone(),
                            tls,
                            shutdown.clone(),
                        ))),
                        Err(error) => tracing::error!(%error, "admin listener setup failed"),
                    }
                }
                for socket in gui_sockets {
                    match tokio::net::TcpListener::from_std(socket) {
                        Ok(listener) => tasks.push(tokio::spawn(strait_admin::gui::serve_gui(
                            listener,
                            gui.clone(),
                            shutdown.clone(),
                        ))),
                        Err(error) => tracing::error!(%error, "admin UI listener setup failed"),
                    }
                }
                for task in tasks {
                    let _ = task.await;
                }
            });
        })
        .context("spawning the admin thread")
}
