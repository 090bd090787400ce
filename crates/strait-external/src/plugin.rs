//! A plugin served by a plugin server, as a plugin of the chain: its
//! `access` phase is an event on the server, awaited on the worker that
//! runs the request (the chain runs it as its one boxed future), its PDK
//! calls served from the request's context.
//!
//! Instances: the first event of a plugin instance (one configuration)
//! starts it on the server (`plugin.StartInstance` with the config as JSON,
//! Kong's `__plugin_id`, `route_id`, `service_id` added) and keeps the id
//! the server gave, with the server's generation; an instance of an
//! earlier generation (the server was started again) or one the server no
//! longer knows (`no plugin instance`) is started again, once per event.
//!
//! Failures: a server that cannot be reached, answers an error, or takes
//! longer than `pluginserver_timeout` fails the request with Kong's 500
//! (`An unexpected error occurred`) and a log line naming the plugin and
//! the server; nothing waits past the timeout.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value as Json};
use strait_plugins::{AccessFuture, Flow, LogRecord, Plugin, PluginResponse, RequestCtx, SharedStore};

use crate::mp_rpc::{self, Ended, RpcError};
use crate::msgpack;
use crate::pb_rpc;
use crate::pdk::{self, Dispatch, LogView};
use crate::server::{PluginInfo, Protocol, Server};

/// A connection to a server, in its protocol.
enum Conn {
    MsgPack(mp_rpc::Conn),
    ProtoBuf(pb_rpc::Conn),
}

impl Conn {
    async fn connect(protocol: Protocol, socket: &std::path::Path) -> Result<Conn, RpcError> {
        Ok(match protocol {
            Protocol::MsgPack => Conn::MsgPack(mp_rpc::Conn::connect(socket).await?),
            Protocol::ProtoBuf => Conn::ProtoBuf(pb_rpc::Conn::connect(socket).await?),
        })
    }

    async fn start_instance(&mut self, name: &str, config: &str) -> Result<i64, RpcError> {
        match self {
            Conn::MsgPack(conn) => conn.start_instance(name, config).await,
            Conn::ProtoBuf(conn) => conn.start_instance(name, config).await,
        }
    }

    async fn close_instance(&mut self, instance: i64) -> Result<(), RpcError> {
        match self {
            Conn::MsgPack(conn) => conn.close_instance(instance).await,
            Conn::ProtoBuf(conn) => conn.close_instance(instance).await,
        }
    }

    async fn handle_event(
        &mut self,
        instance: i64,
        phase: &str,
        plugin: &str,
        pdk: Dispatch<'_>,
    ) -> Result<Ended, RpcError> {
        match self {
            Conn::MsgPack(conn) => conn.handle_event(instance, phase, pdk).await,
            Conn::ProtoBuf(conn) => conn.handle_event(instance, phase, plugin, pdk).await,
        }
    }
}

/// Idle connections kept per server.
const IDLE_KEPT: usize = 64;

/// A server's idle connections.
#[derive(Default)]
pub struct Pool(Mutex<Vec<Conn>>);

impl Pool {
    fn take(&self) -> Option<Conn> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).pop()
    }

    fn put(&self, conn: Conn) {
        let mut idle = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_KEPT {
            idle.push(conn);
        }
    }

    /// Drops every idle connection (the server was started again).
    fn clear(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

/// A configuration change drops the old instances: each is closed on the
/// server (Kong calls `CloseInstance` for a replaced instance; the Python
/// server never expires one by itself), in a task on the workers' runtime,
/// its failure only logged at debug level (the server may be gone).
impl Drop for Instance {
    fn drop(&mut self) {
        let known = *self.id.get_mut().unwrap_or_else(PoisonError::into_inner);
        let (Some((generation, id)), Some(runtime)) = (known, self.host.runtime.get()) else {
            return;
        };
        if generation != self.host.server.generation.load(Ordering::Acquire) {
            return;
        }
        let host = self.host.clone();
        runtime.spawn(async move {
            let closed = async {
                let mut conn = host.conn().await?;
                conn.close_instance(id).await?;
                host.pool.put(conn);
                Ok::<(), RpcError>(())
            };
            if let Ok(Err(error)) = tokio::time::timeout(host.timeout, closed).await {
                tracing::debug!(target: "strait::pluginserver", "[{}] closing instance {id}: {error}", host.info.name);
            }
        });
    }
}

/// What the instances of one plugin share.
pub struct Host {
    pub info: PluginInfo,
    pub server: Arc<Server>,
    pub pool: Pool,
    pub timeout: Duration,
    /// The phases the plugin has (read once, not per request).
    access: bool,
    log: bool,
    /// The generation the pool's connections were made in.
    pool_generation: std::sync::atomic::AtomicU64,
    /// The proxy workers' runtime, seen on the first event: where an
    /// instance that is dropped is closed on the server.
    runtime: std::sync::OnceLock<tokio::runtime::Handle>,
}

impl Host {
    pub fn new(info: PluginInfo, server: Arc<Server>, timeout: Duration) -> Host {
        let runs = |phase: &str| info.phases.iter().any(|p| p == phase);
        Host {
            access: runs("access"),
            log: runs("log"),
            info,
            server,
            pool: Pool::default(),
            timeout,
            pool_generation: std::sync::atomic::AtomicU64::new(0),
            runtime: std::sync::OnceLock::new(),
        }
    }

    async fn conn(&self) -> Result<Conn, RpcError> {
        let generation = self.server.generation.load(Ordering::Acquire);
        if self.pool_generation.swap(generation, Ordering::AcqRel) != generation {
            self.pool.clear();
        }
        match self.pool.take() {
            Some(conn) => Ok(conn),
            None => Conn::connect(self.info.protocol, &self.server.socket).await,
        }
    }
}

/// One plugin instance (one configuration).
pub struct External {
    inner: Arc<Instance>,
}

/// What an instance's events share (a log event outlives its request).
struct Instance {
    host: Arc<Host>,
    /// The config as the server gets it (JSON text).
    config: String,
    /// The server's id for this instance, with the server generation it
    /// was started in.
    id: Mutex<Option<(u64, i64)>>,
}

impl External {
    pub fn new(host: Arc<Host>, config: &Map<String, Json>, scope: strait_plugins::PluginScope) -> External {
        let mut config = config.clone();
        let id = |id: Option<uuid::Uuid>| id.map_or(Json::Null, |id| Json::String(id.to_string()));
        if let Some(plugin) = scope.plugin {
            config.insert("__plugin_id".into(), Json::String(plugin.to_string()));
        }
        config.insert("route_id".into(), id(scope.route));
        config.insert("service_id".into(), id(scope.service));
        config.retain(|_, v| !v.is_null());
        External {
            inner: Arc::new(Instance {
                host,
                config: Json::Object(config).to_string(),
                id: Mutex::new(None),
            }),
        }
    }

    fn access(&self) -> bool {
        self.inner.host.access
    }

    fn logs_phase(&self) -> bool {
        self.inner.host.log
    }
}

impl Instance {
    fn name(&self) -> &str {
        &self.host.info.name
    }

    /// The server's instance id, started on `conn` when there is none for
    /// the server's current generation (or `fresh` asks for a new one).
    async fn instance(&self, conn: &mut Conn, fresh: bool) -> Result<i64, RpcError> {
        let generation = self.host.server.generation.load(Ordering::Acquire);
        if !fresh {
            let known = *self.id.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((started_in, id)) = known {
                if started_in == generation {
                    return Ok(id);
                }
            }
        }
        let id = conn.start_instance(self.name(), &self.config).await?;
        *self.id.lock().unwrap_or_else(PoisonError::into_inner) = Some((generation, id));
        Ok(id)
    }

    /// One event in `phase`, retried once on a fresh instance when the
    /// server no longer knows this one.
    async fn event(&self, phase: &str, pdk: Dispatch<'_>) -> Result<Ended, RpcError> {
        self.host.runtime.get_or_init(tokio::runtime::Handle::current);
        let mut conn = self.host.conn().await?;
        let mut fresh = false;
        loop {
            let id = self.instance(&mut conn, fresh).await?;
            match conn.handle_event(id, phase, self.name(), &mut *pdk).await {
                Ok(Ended::Returned) => {
                    self.host.pool.put(conn);
                    return Ok(Ended::Returned);
                }
                Ok(ended) => return Ok(ended),
                // Once per event: the instance is started again (go-pdk
                // closed this connection, so on a new one).
                Err(RpcError::Lost(_)) if !fresh => {
                    fresh = true;
                    if matches!(conn, Conn::ProtoBuf(_)) {
                        conn = Conn::connect(self.host.info.protocol, &self.host.server.socket).await?;
                    }
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// A failed event's log line.
    fn failed(&self, phase: &str, why: &str) {
        tracing::error!(
            target: "strait::pluginserver",
            "[{}] {phase} phase: pluginserver {} error: {why}",
            self.name(),
            self.host.server.name
        );
    }
}

impl std::fmt::Debug for External {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("External")
            .field("plugin", &self.inner.host.info.name)
            .field("server", &self.inner.host.server.name)
            .finish_non_exhaustive()
    }
}

impl Plugin for External {
    fn name(&self) -> &'static str {
        self.inner.host.info.name_static
    }

    fn priority(&self) -> i32 {
        self.inner.host.info.priority
    }

    fn waits(&self) -> bool {
        self.access()
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(async move {
            if !self.access() {
                return Flow::Continue;
            }
            let inner = &self.inner;
            let plugin = inner.host.info.name_static;
            let mut serve = |method: &str, args: &[msgpack::Value]| pdk::call(ctx, plugin, method, args);
            let outcome = tokio::time::timeout(inner.host.timeout, inner.event("access", &mut serve)).await;
            let failure = match outcome {
                Ok(Ok(Ended::Returned)) => return Flow::Continue,
                Ok(Ok(Ended::Exit(response))) => return Flow::Respond(response),
                Ok(Err(error)) => error.to_string(),
                Err(_) => timed_out(inner.host.timeout),
            };
            inner.failed("access", &failure);
            Flow::Respond(PluginResponse::message(500, "An unexpected error occurred"))
        })
    }

    fn logs(&self) -> bool {
        self.logs_phase()
    }

    /// The log phase needs the serializer's details (the request line and
    /// both header maps).
    fn serializes(&self) -> bool {
        self.logs_phase()
    }

    fn reads_request_headers_in_response(&self) -> bool {
        self.logs_phase()
    }

    /// An event on the server after the response, off the request's path
    /// (a task on the worker's runtime), with the request's data saved.
    fn log(&self, record: &LogRecord, shared: &SharedStore) {
        if !self.logs_phase() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let view = log_view(record, shared);
        let inner = self.inner.clone();
        runtime.spawn(async move {
            let plugin = inner.host.info.name_static;
            let mut serve = |method: &str, args: &[msgpack::Value]| pdk::call_log(&view, plugin, method, args);
            match tokio::time::timeout(inner.host.timeout, inner.event("log", &mut serve)).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => inner.failed("log", &error.to_string()),
                Err(_) => inner.failed("log", &timed_out(inner.host.timeout)),
            }
        });
    }
}

fn timed_out(timeout: Duration) -> String {
    format!("no answer within pluginserver_timeout ({} ms)", timeout.as_millis())
}

/// What the log event reads, saved from the finished request.
fn log_view(record: &LogRecord, shared: &SharedStore) -> LogView {
    let details = record.details.as_deref();
    LogView {
        scheme: details.map_or("http", |d| d.scheme),
        host: details.map_or_else(String::new, |d| d.host.clone()),
        port: details.map_or(0, |d| d.port),
        request_uri: details.map_or_else(|| "/".to_string(), |d| d.request_uri.clone()),
        method: record.request.method.clone(),
        http_version: details.map_or(http::Version::HTTP_11, |d| d.http_version),
        client_ip: record.request.client_ip,
        request_headers: details
            .map(|d| d.request_headers.clone())
            .or_else(|| record.request.request_headers.clone())
            .unwrap_or_default(),
        response_headers: details.map(|d| d.response_headers.clone()).unwrap_or_default(),
        status: record.status,
        source: record.source.name(),
        consumer_id: record.request.consumer_id,
        shared: shared.get::<pdk::SharedValues>().cloned().unwrap_or_default(),
        serialized: strait_plugins::observability::serialize::kong_entry(record, shared),
    }
}
