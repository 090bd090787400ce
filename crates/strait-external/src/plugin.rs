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
use strait_plugins::{AccessFuture, Flow, Plugin, PluginResponse, RequestCtx};

use crate::mp_rpc::{self, Ended, RpcError};
use crate::pb_rpc;
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

    async fn handle_event(
        &mut self,
        instance: i64,
        phase: &str,
        plugin: &str,
        ctx: &mut RequestCtx<'_>,
    ) -> Result<Ended, RpcError> {
        match self {
            Conn::MsgPack(conn) => conn.handle_event(instance, phase, plugin, ctx).await,
            Conn::ProtoBuf(conn) => conn.handle_event(instance, phase, plugin, ctx).await,
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

/// What the instances of one plugin share.
pub struct Host {
    pub info: PluginInfo,
    pub server: Arc<Server>,
    pub pool: Pool,
    pub timeout: Duration,
    /// The generation the pool's connections were made in.
    pool_generation: std::sync::atomic::AtomicU64,
}

impl Host {
    pub fn new(info: PluginInfo, server: Arc<Server>, timeout: Duration) -> Host {
        Host {
            info,
            server,
            pool: Pool::default(),
            timeout,
            pool_generation: std::sync::atomic::AtomicU64::new(0),
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
    host: Arc<Host>,
    /// The config as the server gets it (JSON text).
    config: String,
    /// The server's id for this instance, with the server generation it
    /// was started in.
    instance: Mutex<Option<(u64, i64)>>,
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
            host,
            config: Json::Object(config).to_string(),
            instance: Mutex::new(None),
        }
    }

    fn name(&self) -> &str {
        &self.host.info.name
    }

    /// The server's instance id, started on `conn` when there is none for
    /// the server's current generation (or `fresh` asks for a new one).
    async fn instance(&self, conn: &mut Conn, fresh: bool) -> Result<i64, RpcError> {
        let generation = self.host.server.generation.load(Ordering::Acquire);
        if !fresh {
            let known = *self.instance.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((started_in, id)) = known {
                if started_in == generation {
                    return Ok(id);
                }
            }
        }
        let id = conn.start_instance(self.name(), &self.config).await?;
        *self.instance.lock().unwrap_or_else(PoisonError::into_inner) = Some((generation, id));
        Ok(id)
    }

    /// The access event, retried once on a fresh instance when the server
    /// no longer knows this one.
    async fn access_event(&self, ctx: &mut RequestCtx<'_>) -> Result<Ended, RpcError> {
        let mut conn = self.host.conn().await?;
        let mut fresh = false;
        loop {
            let id = self.instance(&mut conn, fresh).await?;
            match conn.handle_event(id, "access", self.name(), ctx).await {
                Ok(Ended::Returned) => {
                    self.host.pool.put(conn);
                    return Ok(Ended::Returned);
                }
                Ok(ended) => return Ok(ended),
                // A server that lost the instance: MsgPack servers say so,
                // go-pdk closes the connection (Kong retries on both).
                Err(RpcError::Server(why))
                    if !fresh && (why.contains("no plugin instance") || why.contains("closed")) =>
                {
                    fresh = true;
                    if matches!(conn, Conn::ProtoBuf(_)) {
                        conn = Conn::connect(self.host.info.protocol, &self.host.server.socket).await?;
                    }
                }
                Err(error) => return Err(error),
            }
        }
    }
}

impl std::fmt::Debug for External {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("External")
            .field("plugin", &self.host.info.name)
            .field("server", &self.host.server.name)
            .finish_non_exhaustive()
    }
}

impl Plugin for External {
    fn name(&self) -> &'static str {
        self.host.info.name_static
    }

    fn priority(&self) -> i32 {
        self.host.info.priority
    }

    fn waits(&self) -> bool {
        true
    }

    fn access_async<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> AccessFuture<'a> {
        Box::pin(async move {
            let outcome = tokio::time::timeout(self.host.timeout, self.access_event(ctx)).await;
            let failure = match outcome {
                Ok(Ok(Ended::Returned)) => return Flow::Continue,
                Ok(Ok(Ended::Exit(response))) => return Flow::Respond(response),
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!(
                    "no answer within pluginserver_timeout ({} ms)",
                    self.host.timeout.as_millis()
                ),
            };
            tracing::error!(
                target: "strait::pluginserver",
                "[{}] access phase: pluginserver {} error: {failure}",
                self.name(),
                self.host.server.name
            );
            Flow::Respond(PluginResponse::message(500, "An unexpected error occurred"))
        })
    }
}
