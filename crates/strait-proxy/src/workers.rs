//! The worker model, kept behind this one module.
//!
//! `ThreadPerCore` (default): one thread per worker, each with a
//! current-thread tokio runtime, its own SO_REUSEPORT listening sockets and
//! its own upstream pool; the kernel spreads connections across workers.
//! `WorkStealing`: one multi-thread runtime sharing one socket per listener
//! and one pool. docs/architecture.md records the measurement behind the
//! default.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::pipeline::access_log::AccessLog;
use crate::pipeline::handler::ConnInfo;
use crate::upstream::Pool;
use crate::wire::conn::{serve_plain, serve_tls};
use crate::wire::listen::{bind, ListenSpec};
use crate::{ProxyContext, Shared};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerModel {
    ThreadPerCore,
    WorkStealing,
}

impl std::str::FromStr for WorkerModel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "thread-per-core" => Ok(WorkerModel::ThreadPerCore),
            "work-stealing" => Ok(WorkerModel::WorkStealing),
            other => Err(format!(
                "unknown worker_model {other:?} (thread-per-core or work-stealing)"
            )),
        }
    }
}

/// Running proxy workers.
pub struct Workers {
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Wait for every worker to finish draining.
    pub fn join(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// Bind every listener and start the workers. Binding errors are returned
/// before any worker starts.
pub fn start_workers(context: ProxyContext, shutdown: watch::Receiver<bool>) -> Result<Workers, String> {
    let threads = context.settings.worker_threads.max(1);
    let model = context.settings.worker_model;
    let mut groups: Vec<Vec<(ListenSpec, std::net::TcpListener)>> = match model {
        WorkerModel::ThreadPerCore => (0..threads)
            .map(|_| bind_all(&context.settings.listeners, true))
            .collect::<Result<_, _>>()?,
        WorkerModel::WorkStealing => vec![bind_all(&context.settings.listeners, false)?],
    };
    // A process taken over with more workers handed over more sockets per
    // address than there are workers now: they are served too, spread over
    // the workers, as closing one would reset the connections in its queue.
    let workers = groups.len();
    let mut next = 0;
    for spec in &context.settings.listeners {
        for socket in crate::wire::listen::unclaimed_inherited(spec.addr) {
            groups[next % workers].push((spec.clone(), socket));
            next += 1;
        }
    }
    // HTTP/3: one UDP socket per worker and `http3` listener, bound before
    // any worker starts, and one QUIC configuration for all of them.
    let quic_specs: Vec<&ListenSpec> = context.settings.listeners.iter().filter(|spec| spec.http3).collect();
    let quic = if quic_specs.is_empty() {
        None
    } else {
        Some(crate::wire::h3_server::server_config(
            &context.tls,
            &context.settings.limits.http3,
        )?)
    };
    let mut quic_groups = Vec::new();
    for _ in 0..workers {
        let mut sockets = Vec::new();
        for spec in &quic_specs {
            let socket = crate::wire::h3_server::bind_udp(spec.addr)
                .map_err(|e| format!("could not listen on {} (udp, http3): {e}", spec.addr))?;
            sockets.push(socket);
        }
        quic_groups.push(sockets);
    }
    let mut handles = Vec::new();
    for ((index, sockets), quic_sockets) in groups.into_iter().enumerate().zip(quic_groups) {
        let context = context.clone();
        let shutdown = shutdown.clone();
        let quic = quic.clone();
        let handle = std::thread::Builder::new()
            .name(format!("strait-worker-{index}"))
            .spawn(move || {
                run_worker(
                    context,
                    sockets,
                    quic.map(|config| (config, quic_sockets)),
                    shutdown,
                    if model == WorkerModel::WorkStealing { threads } else { 1 },
                )
            })
            .map_err(|e| format!("spawning worker: {e}"))?;
        handles.push(handle);
    }
    Ok(Workers { threads: handles })
}

fn bind_all(specs: &[ListenSpec], reuseport: bool) -> Result<Vec<(ListenSpec, std::net::TcpListener)>, String> {
    specs
        .iter()
        .map(|spec| {
            bind(spec, reuseport || spec.reuseport)
                .map(|socket| (spec.clone(), socket))
                .map_err(|e| format!("could not listen on {}: {e}", spec.addr))
        })
        .collect()
}

fn run_worker(
    context: ProxyContext,
    sockets: Vec<(ListenSpec, std::net::TcpListener)>,
    quic: Option<(quinn::ServerConfig, Vec<std::net::UdpSocket>)>,
    shutdown: watch::Receiver<bool>,
    runtime_threads: usize,
) {
    // Before the runtime: what it allocates is the worker's too.
    strait_runtime::background::worker_allocator();
    let runtime = if runtime_threads > 1 {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(runtime_threads)
            .on_thread_start(strait_runtime::background::worker_allocator)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "could not start worker runtime");
            return;
        }
    };
    let grace = context.settings.graceful_shutdown_timeout;
    let active = Arc::new(AtomicUsize::new(0));
    runtime.block_on(async {
        let shared = Arc::new(Shared {
            snapshot: context.snapshot.clone(),
            stats: context.stats.clone(),
            limits: context.limits.clone(),
            headers: context.settings.headers,
            access_log: context.settings.access_log.as_ref().map(AccessLog::for_worker),
            pool: Pool::new(context.settings.keepalive, context.settings.upstream_http2.clone()),
        });
        if let Some(every) = shared.pool().sweep_interval() {
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(every);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    shared.pool().sweep();
                }
            });
        }
        for (spec, socket) in sockets {
            let listener = match TcpListener::from_std(socket) {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::error!(%error, addr = %spec.addr, "listener setup failed");
                    continue;
                }
            };
            let acceptor = spec.ssl.then(|| tokio_rustls::TlsAcceptor::from(context.tls.clone()));
            // The TLS listener of a port that also serves HTTP/3 says so.
            let alt_svc = spec.http3.then(|| crate::wire::h3_server::alt_svc(spec.addr.port()));
            tokio::spawn(accept_loop(
                listener,
                acceptor,
                alt_svc,
                shared.clone(),
                shutdown.clone(),
                active.clone(),
            ));
        }
        if let Some((config, quic_sockets)) = quic {
            for socket in quic_sockets {
                let addr = socket.local_addr().ok();
                match crate::wire::h3_server::endpoint(socket, config.clone()) {
                    Ok(endpoint) => {
                        tokio::spawn(crate::wire::h3_server::accept_loop(
                            endpoint,
                            shared.clone(),
                            shutdown.clone(),
                            active.clone(),
                        ));
                    }
                    Err(error) => tracing::error!(%error, ?addr, "HTTP/3 listener setup failed"),
                }
            }
        }
        let mut stop = shutdown.clone();
        crate::stopped(&mut stop).await;
        // `strait stop` (SIGTERM) does not wait for connections to finish.
        let grace = if crate::stopping_now() { Duration::ZERO } else { grace };
        let deadline = tokio::time::Instant::now() + grace;
        while active.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    runtime.shutdown_timeout(Duration::from_millis(100));
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    alt_svc: Option<http::HeaderValue>,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    active: Arc<AtomicUsize>,
) {
    let local = match listener.local_addr() {
        Ok(addr) => addr,
        Err(_) => return,
    };
    let mut stop = shutdown.clone();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = crate::stopped(&mut stop) => break,
        };
        let (stream, client) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if active.load(Ordering::Acquire) >= shared.limits().max_connections_per_worker {
            // At the cap: closing now tells the client at once, where
            // leaving it in the backlog would let it hang.
            shared.stats.connection_refused();
            tracing::debug!(%client, "worker_connections reached: connection closed");
            drop(stream);
            continue;
        }
        let info = ConnInfo::new(client, local, acceptor.is_some(), alt_svc.clone());
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        let active = active.clone();
        let acceptor = acceptor.clone();
        active.fetch_add(1, Ordering::AcqRel);
        shared.stats.connection_opened();
        tokio::spawn(async move {
            match acceptor {
                Some(acceptor) => serve_tls(stream, info, shared.clone(), acceptor, shutdown).await,
                None => serve_plain(stream, info, shared.clone(), shutdown).await,
            }
            shared.stats.connection_closed();
            active.fetch_sub(1, Ordering::AcqRel);
        });
    }
    drop(listener);
}
