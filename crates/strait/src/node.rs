//! Starting and stopping a node: open the store, publish the stored
//! configuration, apply `declarative_config`, start the proxy workers and the
//! Admin/status APIs, and drain on SIGTERM/SIGINT.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
                match tokens.check_schema() {
                    Ok(()) => {}
                    Err(strait_store::StoreError::Unavailable(detail)) => tracing::warn!(
                        database = %config.label(),
                        %detail,
                        "the OAuth2 token store's PostgreSQL is unreachable: token requests fail until it is back"
                    ),
                    Err(error) => bail!("the OAuth2 token store on PostgreSQL {}: {error}", config.label()),
                }
            }
            Arc::new(tokens)
        }
    };
    install(store);
    open_runtime_store(settings)
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
    };
    install(store);
    Ok(())
}

pub fn run(settings: NodeSettings) -> Result<()> {
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
    // A data plane's store is its cache of what the control plane sent.
    let dp_cache = match &settings.role {
        Role::DataPlane { .. } => Some(Arc::new(crate::pg_cache::LocalCache::open_data_plane(
            &settings.prefix,
        )?)),
        _ => None,
    };
    let (store, mut postgres): (Arc<dyn Store>, _) = match &settings.postgres {
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
                pg: pg.clone(),
                cache: cache.clone(),
                replica,
            });
            (store as Arc<dyn Store>, Some((pg, cache, config.clone(), cached_start)))
        }
    };
    open_token_store(&settings)?;
    let initial = match &dp_cache {
        // What the data plane served last, or nothing until the control
        // plane sends the configuration.
        Some(cache) => match cache.load_snapshot() {
            Some(compiled) => compiled,
            None => compile_snapshot_hashed(0, Arc::new(strait_core::Config::default()), None),
        },
        None => {
            let (version, config, stored_hash) = match postgres.as_mut().and_then(|(_, _, _, cached)| cached.take()) {
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
    let default_cert =
        load_or_create_default_certificate(&settings.prefix).map_err(|e| anyhow!("default certificate: {e}"))?;
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
    let tls = server_config(publisher.current(), default_cert.clone(), &settings.tls, &client_verify)
        .map_err(|e| anyhow!("TLS setup: {e}"))?;
    let admin_tls = admin_tls_config(&settings, default_cert)?;
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
    });
    let admin = start_admin_thread(&settings, state, admin_tls, shutdown_rx)?;
    // A data plane is ready once it has a configuration: its cache now, or
    // the control plane's first (Kong's data planes answer 503 until then).
    if !matches!(settings.role, Role::DataPlane { .. }) || serving.load().version > 0 {
        ready.store(true, Ordering::Release);
    }
    tracing::info!(proxy = ?settings.proxy.listeners.iter().map(|l| l.addr).collect::<Vec<_>>(), "strait started");
    control.block_on(wait_for_signal());
    tracing::info!(grace = ?settings.proxy.graceful_shutdown_timeout, "shutting down: draining connections");
    let _ = shutdown_tx.send(true);
    if let Some(workers) = workers {
        workers.join();
    }
    let _ = admin.join();
    if let Some(health) = health {
        let _ = health.join();
    }
    tracing::info!("stopped");
    strait_runtime::logs::files::flush();
    Ok(())
}

/// The TLS configuration of the Admin API's `ssl` listeners, when there are
/// any: `admin_ssl_cert` (else the node's default certificate), and client
/// certificates signed by `admin_ssl_client_ca` when that is set.
fn admin_tls_config(
    settings: &NodeSettings,
    default_cert: Arc<rustls::sign::CertifiedKey>,
) -> Result<Option<Arc<rustls::ServerConfig>>> {
    if !settings.admin_listen.iter().any(|spec| spec.ssl) {
        return Ok(None);
    }
    let read = |key: &str, path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("{key}: reading {}", path.display()))
    };
    let tls = &settings.admin_tls;
    let certificate = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            strait_snapshot::tls::certified_key(&read("admin_ssl_cert", cert)?, &read("admin_ssl_cert_key", key)?)
                .map_err(|e| anyhow!("admin_ssl_cert: {e}"))?
        }
        _ => default_cert,
    };
    let client_ca = match &tls.client_ca {
        Some(path) => Some(read("admin_ssl_client_ca", path)?),
        None => None,
    };
    let config = strait_proxy::wire::tls::admin_server_config(certificate, client_ca.as_deref(), &settings.tls)
        .map_err(|e| anyhow!("Admin API TLS: {e}"))?;
    Ok(Some(config))
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
                for task in tasks {
                    let _ = task.await;
                }
            });
        })
        .context("spawning the admin thread")
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("could not install signal handlers; stopping");
        return;
    };
    // SIGUSR1: reopen every log file (nginx's and Kong's logrotate signal).
    let mut usr1 = signal(SignalKind::user_defined1()).ok();
    loop {
        let reopen = async {
            match usr1.as_mut() {
                Some(usr1) => usr1.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = reopen => {
                strait_runtime::logs::files::reopen_all();
                tracing::info!("SIGUSR1: log files reopened");
            }
        }
    }
}
