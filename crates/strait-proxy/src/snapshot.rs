//! The immutable view of the configuration the proxy serves from.
//!
//! A [`Snapshot`] is compiled from a [`Config`] off the proxy threads and
//! published through one `ArcSwap`; a request loads it once and keeps it to
//! its end. Everything expensive happens here: route compilation, plugin
//! instances, TLS material, balancer rings.

use std::collections::HashMap;
use std::sync::Arc;

use strait_core::{
    Config, ConfigChange, ConfigDelta, ConfigVersion, DeltaBody, Entity, EntityKind, Plugin as PluginEntity, Route,
    Service,
};
use strait_plugins::{build_plugin, PluginChain};
use strait_router::{Router, RouterError};
use uuid::Uuid;

use crate::balancer::Balancer;
use crate::tls::{CertificateIndex, UpstreamTls};

/// One problem found while compiling, naming the entity it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileProblem {
    /// e.g. `plugins[9c1f...]` or `certificates[...]`.
    pub entity: String,
    pub message: String,
}

/// Every problem that kept a configuration from compiling.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .problems.iter().map(|p| format!("{}: {}", p.entity, p.message)).collect::<Vec<_>>().join("; "))]
pub struct CompileError {
    pub problems: Vec<CompileProblem>,
}

/// A service with what is needed to reach it, prepared at compile time.
#[derive(Debug)]
pub struct ServiceRuntime {
    pub service: Service,
    pub tls: Option<Arc<UpstreamTls>>,
    /// Present when the service host names an upstream entity.
    pub balancer: Option<Arc<Balancer>>,
}

/// What the proxy needs for one matched route.
#[derive(Debug, Default)]
pub struct RouteRuntime {
    pub plugins: PluginChain,
}

#[derive(Debug)]
pub struct Snapshot {
    pub version: ConfigVersion,
    pub config: Arc<Config>,
    /// md5 of the canonical configuration (Kong's `configuration_hash`).
    pub hash: String,
    pub router: Router,
    pub services: HashMap<Uuid, Arc<ServiceRuntime>>,
    pub routes: HashMap<Uuid, RouteRuntime>,
    pub certificates: CertificateIndex,
}

impl Snapshot {
    /// The snapshot served before any configuration is loaded.
    pub fn empty() -> Snapshot {
        compile_snapshot(0, Arc::new(Config::default())).unwrap_or_else(|_| Snapshot {
            version: 0,
            config: Arc::new(Config::default()),
            hash: config_hash(&Config::default()),
            router: Router::default(),
            services: HashMap::new(),
            routes: HashMap::new(),
            certificates: CertificateIndex::default(),
        })
    }
}

/// Kong's configuration hash: md5 hex of the canonical JSON of the config.
pub fn config_hash(config: &Config) -> String {
    use md5::{Digest, Md5};
    let json = serde_json::to_vec(config).unwrap_or_default();
    let digest = Md5::digest(&json);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compile a whole configuration into a snapshot, or list every problem.
pub fn compile_snapshot(version: ConfigVersion, config: Arc<Config>) -> Result<Snapshot, CompileError> {
    let mut problems = Vec::new();
    let routes: Vec<Arc<Route>> = config.routes.iter().cloned().map(Arc::new).collect();
    let router = Router::build_all(&routes).unwrap_or_else(|errors| {
        problems.extend(errors.iter().map(route_problem));
        Router::default()
    });
    compile_with_router(version, config, router, problems)
}

/// A route the router rejected, named by id (the message names it too).
fn route_problem(error: &RouterError) -> CompileProblem {
    CompileProblem {
        entity: format!("routes[{}]", error.route().id),
        message: error.to_string(),
    }
}

/// Everything but the router, which the caller built or derived.
fn compile_with_router(
    version: ConfigVersion,
    config: Arc<Config>,
    router: Router,
    mut problems: Vec<CompileProblem>,
) -> Result<Snapshot, CompileError> {
    let certificates = CertificateIndex::build(&config, &mut problems);
    let services = compile_services(&config, &mut problems);
    let route_runtimes = compile_route_plugins(&config, &mut problems);
    if !problems.is_empty() {
        return Err(CompileError { problems });
    }
    Ok(Snapshot {
        version,
        hash: config_hash(&config),
        config,
        router,
        services,
        routes: route_runtimes,
        certificates,
    })
}

/// Apply a committed change to the previous snapshot.
///
/// `Replace` compiles the new configuration. `Changes` derives the router
/// from the previous one, one insert/replace/remove per route change (a
/// cheap clone: the routers share everything else), and recompiles the rest.
pub fn apply_delta(previous: &Snapshot, delta: &ConfigDelta) -> Result<Snapshot, CompileError> {
    match &delta.body {
        DeltaBody::Replace(config) => compile_snapshot(delta.version, config.clone()),
        DeltaBody::Changes(changes) => {
            let mut config = (*previous.config).clone();
            config.apply_changes(changes);
            let mut problems = Vec::new();
            let router = derive_router(&previous.router, changes, &mut problems);
            compile_with_router(delta.version, Arc::new(config), router, problems)
        }
    }
}

/// The previous router with this delta's route changes applied.
fn derive_router(previous: &Router, changes: &[ConfigChange], problems: &mut Vec<CompileProblem>) -> Router {
    let mut router = previous.clone();
    for change in changes {
        match change {
            ConfigChange::Upsert {
                entity: Entity::Route(route),
            } => {
                if let Err(error) = router.replace(Arc::new(route.clone())) {
                    problems.push(route_problem(&error));
                }
            }
            ConfigChange::Delete {
                kind: EntityKind::Routes,
                id,
            } => {
                router.remove(*id);
            }
            _ => {}
        }
    }
    router
}

fn compile_services(config: &Config, problems: &mut Vec<CompileProblem>) -> HashMap<Uuid, Arc<ServiceRuntime>> {
    let balancers = crate::balancer::build_balancers(config);
    let mut tls_cache = crate::tls::UpstreamTlsCache::default();
    let mut services = HashMap::with_capacity(config.services.len());
    for service in &config.services {
        let tls = match service.protocol.as_str() {
            "https" | "grpcs" | "tls" | "wss" => match tls_cache.get(service, config) {
                Ok(tls) => Some(tls),
                Err(message) => {
                    problems.push(CompileProblem {
                        entity: format!("services[{}]", service.id),
                        message,
                    });
                    None
                }
            },
            _ => None,
        };
        let balancer = balancers.get(&service.host.to_ascii_lowercase()).cloned();
        services.insert(
            service.id,
            Arc::new(ServiceRuntime {
                service: service.clone(),
                tls,
                balancer,
            }),
        );
    }
    services
}

/// Kong scope precedence for plugins without a consumer: route+service >
/// route > service > global. Consumer-scoped plugins apply after
/// authentication and are not part of the precomputed chain.
fn scope_rank(plugin: &PluginEntity) -> Option<u8> {
    if plugin.consumer.is_some() {
        return None;
    }
    Some(match (plugin.route.is_some(), plugin.service.is_some()) {
        (true, true) => 3,
        (true, false) => 2,
        (false, true) => 1,
        (false, false) => 0,
    })
}

fn compile_route_plugins(config: &Config, problems: &mut Vec<CompileProblem>) -> HashMap<Uuid, RouteRuntime> {
    let mut instances = HashMap::new();
    let mut global = Vec::new();
    let mut by_route: HashMap<Uuid, Vec<&PluginEntity>> = HashMap::new();
    let mut by_service: HashMap<Uuid, Vec<&PluginEntity>> = HashMap::new();
    for plugin in config.plugins.iter().filter(|p| p.enabled) {
        match build_plugin(&plugin.name, &plugin.config) {
            Ok(instance) => {
                instances.insert(plugin.id, instance);
            }
            Err(err) => problems.push(CompileProblem {
                entity: format!("plugins[{}]", plugin.id),
                message: err.to_string(),
            }),
        }
        match (plugin.route, plugin.service) {
            (Some(route), _) => by_route.entry(route.id).or_default().push(plugin),
            (None, Some(service)) => by_service.entry(service.id).or_default().push(plugin),
            (None, None) => global.push(plugin),
        }
    }
    let mut runtimes = HashMap::with_capacity(config.routes.len());
    for route in &config.routes {
        let service = route.service.map(|s| s.id);
        let candidates = global
            .iter()
            .chain(service.and_then(|s| by_service.get(&s)).into_iter().flatten())
            .chain(by_route.get(&route.id).into_iter().flatten());
        let mut chosen: HashMap<&str, (u8, &PluginEntity)> = HashMap::new();
        for plugin in candidates {
            let Some(rank) = scope_rank(plugin) else { continue };
            if plugin.service.is_some_and(|s| Some(s.id) != service) {
                continue;
            }
            let entry = chosen.entry(plugin.name.as_str()).or_insert((rank, plugin));
            if rank > entry.0 {
                *entry = (rank, plugin);
            }
        }
        let chain = chosen
            .values()
            .filter_map(|(_, plugin)| instances.get(&plugin.id).cloned())
            .collect();
        runtimes.insert(
            route.id,
            RouteRuntime {
                plugins: PluginChain::new(chain),
            },
        );
    }
    runtimes
}
