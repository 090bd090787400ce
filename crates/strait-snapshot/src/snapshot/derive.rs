//! Deriving a snapshot's compiled parts from its entities: per-service
//! runtimes, balancers, plugin instances and per-route plugin chains, and the
//! certificate index. A delta marks what it touched ([`Dirty`]) and only
//! that is rebuilt.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use strait_core::{ConfigChange, Entity, EntityKind, Plugin as PluginEntity};
use strait_plugins::{
    build_scoped_plugin, rank, ChainSlot, Plugin, PluginChain, PluginScope, ProtocolSet, ScopedPlugin,
};
use strait_router::{CowMap, Router};
use uuid::Uuid;

use super::filters::{routes_touched, BuiltFilterChains, FilterChains};
use super::identity::Identities;
use super::state::{EntityState, Previous};
use super::{route_problem, CompileProblem, RouteRuntime, ServiceRuntime};
use crate::balancer::{parse_target, Balancer};
use crate::tls::{CertificateIndex, UpstreamTlsCache};

/// Everything compiled from the entities.
#[derive(Clone, Default)]
pub(crate) struct Compiled {
    pub router: Router,
    pub services: CowMap<Uuid, Arc<ServiceRuntime>>,
    pub routes: CowMap<Uuid, Arc<RouteRuntime>>,
    pub certificates: Arc<CertificateIndex>,
    pub plugin_instances: CowMap<Uuid, Arc<dyn Plugin>>,
    /// Each route's proxy-wasm filters as built, kept for the next rebuild.
    pub filter_chains: BuiltFilterChains,
    /// Upstream name (lower case) -> balancer.
    pub balancers: CowMap<String, Arc<Balancer>>,
    pub identities: Identities,
    /// Global plugins with a certificate phase, run in TLS handshakes.
    pub global_certificate: Arc<PluginChain>,
    /// What each secret reference in use resolved to (fingerprints), for
    /// the refresh job to see rotations.
    pub secrets: Arc<crate::secrets::Fingerprints>,
}

/// What a delta touched and must be rebuilt.
#[derive(Default)]
pub(crate) struct Dirty {
    routes: HashSet<Uuid>,
    all_routes: bool,
    services: HashSet<Uuid>,
    all_services: bool,
    upstream_names: HashSet<String>,
    certificates: bool,
    /// Keys whose references must resolve.
    keys: HashSet<Uuid>,
    all_keys: bool,
    /// Every holder of a reference: a vault changed, or secrets rotated.
    secrets: bool,
    /// The fingerprints of the references in use must be taken again.
    fingerprints: bool,
}

impl Dirty {
    /// Everything: used when compiling from scratch.
    pub fn everything() -> Dirty {
        Dirty {
            all_routes: true,
            all_services: true,
            certificates: true,
            all_keys: true,
            fingerprints: true,
            ..Dirty::default()
        }
    }

    /// Every holder of a secret reference: after a rotation.
    pub fn secrets() -> Dirty {
        Dirty {
            secrets: true,
            ..Dirty::default()
        }
    }
}

fn upstream_name(state: &EntityState, upstream: Uuid) -> Option<String> {
    state.upstreams.get(&upstream).map(|u| u.name.to_ascii_lowercase())
}

/// Record what `change` (already applied to `state`) invalidates, and keep
/// the router and plugin instances current.
pub(crate) fn note_change(
    compiled: &mut Compiled,
    state: &EntityState,
    change: &ConfigChange,
    previous: &Previous,
    dirty: &mut Dirty,
    problems: &mut Vec<CompileProblem>,
) {
    let (kind, id) = match change {
        ConfigChange::Upsert { entity } => (entity.kind(), entity.id()),
        ConfigChange::Delete { kind, id } => (*kind, *id),
    };
    match kind {
        EntityKind::Routes => {
            match state.routes.get(&id) {
                Some(route) => {
                    if let Err(error) = compiled.router.replace(route.clone()) {
                        problems.push(route_problem(&error));
                    }
                }
                None => {
                    compiled.router.remove(id);
                }
            }
            dirty.routes.insert(id);
        }
        EntityKind::Services => {
            dirty.services.insert(id);
        }
        EntityKind::FilterChains => dirty.routes.extend(routes_touched(state, id, previous)),
        EntityKind::Plugins => {
            note_plugin(compiled, state, id, previous, dirty, problems);
            let instances = &compiled.plugin_instances;
            dirty.all_routes |= compiled.identities.note(state, instances, kind, id, previous);
        }
        EntityKind::Upstreams => {
            dirty.upstream_names.extend(upstream_name(state, id));
            if let Some(Entity::Upstream(old)) = previous {
                dirty.upstream_names.insert(old.name.to_ascii_lowercase());
            }
        }
        EntityKind::Targets => {
            let parents = state
                .targets
                .get(&id)
                .map(|t| t.upstream.id)
                .into_iter()
                .chain(match previous {
                    Some(Entity::Target(old)) => Some(old.upstream.id),
                    _ => None,
                });
            let names: Vec<String> = parents.filter_map(|p| upstream_name(state, p)).collect();
            dirty.upstream_names.extend(names);
        }
        EntityKind::Certificates | EntityKind::Snis => {
            dirty.certificates = true;
            dirty.fingerprints |= kind == EntityKind::Certificates;
            // Services may use a certificate as their client certificate.
            dirty.all_services |= kind == EntityKind::Certificates;
        }
        EntityKind::CaCertificates => dirty.all_services = true,
        EntityKind::Vaults => dirty.secrets = true,
        EntityKind::Keys => {
            dirty.keys.insert(id);
            dirty.fingerprints = true;
        }
        EntityKind::KeySets => {}
        EntityKind::ConsumerGroups | EntityKind::ConsumerGroupConsumers => {
            dirty.all_routes |= compiled
                .identities
                .note(state, &compiled.plugin_instances, kind, id, previous);
        }
        EntityKind::Consumers
        | EntityKind::KeyauthCredentials
        | EntityKind::BasicauthCredentials
        | EntityKind::Acls
        | EntityKind::JwtSecrets
        | EntityKind::HmacauthCredentials
        | EntityKind::Oauth2Credentials => {
            compiled
                .identities
                .note(state, &compiled.plugin_instances, kind, id, previous);
        }
    }
}

fn note_plugin(
    compiled: &mut Compiled,
    state: &EntityState,
    id: Uuid,
    previous: &Previous,
    dirty: &mut Dirty,
    problems: &mut Vec<CompileProblem>,
) {
    let scopes = state.plugins.get(&id).into_iter().chain(match previous {
        Some(Entity::Plugin(old)) => Some(old),
        _ => None,
    });
    // Consumer-scoped plugins live in the consumer's list, not in chains.
    let scopes: Vec<&PluginEntity> = scopes.collect();
    dirty.fingerprints |= scopes.iter().any(|p| holds_references(p));
    for plugin in scopes
        .into_iter()
        .filter(|p| p.consumer.is_none() && p.consumer_group.is_none())
    {
        match plugin.route {
            Some(route) => {
                dirty.routes.insert(route.id);
            }
            None => dirty.all_routes = true,
        }
    }
    build_plugin_instance(compiled, state, id, problems);
}

/// (Re)build the instance of plugin `id`, or drop it when gone or disabled.
pub(crate) fn build_plugin_instance(
    compiled: &mut Compiled,
    state: &EntityState,
    id: Uuid,
    problems: &mut Vec<CompileProblem>,
) {
    compiled.plugin_instances.remove(&id);
    if let Some(plugin) = state.plugins.get(&id).filter(|p| p.enabled) {
        let resolved = match holds_references(plugin) {
            false => None,
            true => match crate::secrets::resolved(&Entity::Plugin(plugin.clone()), &state.vaults) {
                Ok(Some(Entity::Plugin(resolved))) => Some(resolved),
                Ok(_) => None,
                Err(message) => {
                    problems.push(CompileProblem {
                        entity: format!("plugins[{id}]"),
                        message,
                    });
                    return;
                }
            },
        };
        let config = resolved.as_ref().map_or(&plugin.config, |p| &p.config);
        let scope = PluginScope {
            route: plugin.route.map(|r| r.id),
            service: plugin.service.map(|s| s.id),
            plugin: Some(id),
        };
        match build_scoped_plugin(&plugin.name, config, scope) {
            Ok(instance) => {
                compiled.plugin_instances.insert(id, instance);
            }
            Err(error) => problems.push(CompileProblem {
                entity: format!("plugins[{id}]"),
                message: error.to_string(),
            }),
        }
    }
}

/// Whether a plugin's config holds vault references to resolve.
fn holds_references(plugin: &PluginEntity) -> bool {
    strait_core::schema::plugin_has_references(plugin)
}

/// Keys are not compiled into anything the proxy runs; their references
/// must still resolve (to a JWK that matches the key) for the change to
/// be accepted.
fn check_keys(state: &EntityState, ids: &[Uuid], problems: &mut Vec<CompileProblem>) {
    for id in ids {
        let Some(key) = state.keys.get(id) else { continue };
        let outcome =
            crate::secrets::resolved(&Entity::Key(key.clone()), &state.vaults).and_then(|resolved| match resolved {
                Some(Entity::Key(resolved)) => match &resolved.jwk {
                    Some(jwk) => strait_core::schema::check_jwk(jwk, &resolved.kid).map_err(|e| format!("jwk: {e}")),
                    None => Ok(()),
                },
                _ => Ok(()),
            });
        if let Err(message) = outcome {
            problems.push(CompileProblem {
                entity: format!("keys[{id}]"),
                message,
            });
        }
    }
}

/// Rebuild everything `dirty` names.
pub(crate) fn rebuild(
    compiled: &mut Compiled,
    state: &EntityState,
    mut dirty: Dirty,
    problems: &mut Vec<CompileProblem>,
) {
    if dirty.secrets {
        dirty.certificates = true;
        dirty.all_services = true;
        dirty.all_routes = true;
        dirty.all_keys = true;
        dirty.fingerprints = true;
        let holders: Vec<Uuid> = state
            .plugins
            .iter()
            .filter(|(_, p)| holds_references(p))
            .map(|(id, _)| *id)
            .collect();
        for id in holders {
            build_plugin_instance(compiled, state, id, problems);
        }
    }
    let keys: Vec<Uuid> = match dirty.all_keys {
        true => state.keys.iter().map(|(id, _)| *id).collect(),
        false => dirty.keys.iter().copied().collect(),
    };
    check_keys(state, &keys, problems);
    if dirty.fingerprints {
        compiled.secrets = Arc::new(crate::secrets::fingerprints(state));
    }
    if dirty.certificates {
        compiled.certificates = Arc::new(CertificateIndex::build_from(state, problems));
    }
    let mut services = dirty.services;
    let all_upstreams = dirty.all_services;
    rebuild_balancers(compiled, state, &dirty.upstream_names, all_upstreams);
    if !dirty.upstream_names.is_empty() {
        for service in state.services.values() {
            if dirty.upstream_names.contains(&service.host.to_ascii_lowercase()) {
                services.insert(service.id);
            }
        }
    }
    let service_ids: Vec<Uuid> = if dirty.all_services {
        state.services.iter().map(|(id, _)| *id).collect()
    } else {
        services.into_iter().collect()
    };
    rebuild_services(compiled, state, &service_ids, problems);
    let route_ids: Vec<Uuid> = if dirty.all_routes {
        state.routes.iter().map(|(id, _)| *id).collect()
    } else {
        dirty.routes.into_iter().collect()
    };
    rebuild_chains(compiled, state, &route_ids, dirty.all_routes, problems);
}

fn rebuild_balancers(compiled: &mut Compiled, state: &EntityState, names: &HashSet<String>, all: bool) {
    if !all && names.is_empty() {
        return;
    }
    let wanted = |name: &str| all || names.contains(name);
    let mut targets: HashMap<Uuid, Vec<_>> = HashMap::new();
    for target in state.targets.values() {
        let in_scope = upstream_name(state, target.upstream.id).is_some_and(|n| wanted(&n));
        if let (true, Some(address)) = (in_scope, parse_target(&target.target)) {
            targets
                .entry(target.upstream.id)
                .or_default()
                .push((address, target.weight.max(0) as u64));
        }
    }
    for name in names {
        compiled.balancers.remove(name.as_str());
    }
    for upstream in state.upstreams.values() {
        let name = upstream.name.to_ascii_lowercase();
        if wanted(&name) {
            let weighted = targets.remove(&upstream.id).unwrap_or_default();
            let balancer = Balancer::new(upstream, weighted);
            compiled.balancers.insert(name, Arc::new(balancer));
        }
    }
}

fn rebuild_services(compiled: &mut Compiled, state: &EntityState, ids: &[Uuid], problems: &mut Vec<CompileProblem>) {
    let mut tls_cache = UpstreamTlsCache::default();
    for id in ids {
        let Some(service) = state.services.get(id) else {
            compiled.services.remove(id);
            continue;
        };
        let balancer = compiled
            .balancers
            .get(service.host.to_ascii_lowercase().as_str())
            .cloned();
        let upstream_cert = balancer
            .as_ref()
            .and_then(|b| state.upstreams.get(&b.upstream_id))
            .and_then(|u| u.client_certificate.as_ref())
            .map(|c| c.id);
        let tls = match service.protocol.as_str() {
            "https" | "grpcs" | "tls" | "wss" => match tls_cache.get(service, upstream_cert, state) {
                Ok(tls) => Some(tls),
                Err(message) => {
                    problems.push(CompileProblem {
                        entity: format!("services[{id}]"),
                        message,
                    });
                    None
                }
            },
            _ => None,
        };
        let runtime = ServiceRuntime::new(service.clone(), tls, balancer);
        compiled.services.insert(*id, Arc::new(runtime));
    }
}

/// Kong scope precedence for plugins without a consumer: route+service >
/// route > service > global. Consumer-scoped plugins apply after
/// authentication and are not part of the precomputed chain.
fn scope_rank(plugin: &PluginEntity) -> Option<u8> {
    if plugin.consumer.is_some() || plugin.consumer_group.is_some() {
        return None;
    }
    Some(match (plugin.route.is_some(), plugin.service.is_some()) {
        (true, true) => 3,
        (true, false) => 2,
        (false, true) => 1,
        (false, false) => 0,
    })
}

/// Plugins by scope, indexed once per rebuild.
struct PluginScopes<'a> {
    global: Vec<&'a PluginEntity>,
    by_route: HashMap<Uuid, Vec<&'a PluginEntity>>,
    by_service: HashMap<Uuid, Vec<&'a PluginEntity>>,
}

impl<'a> PluginScopes<'a> {
    fn index(state: &'a EntityState) -> PluginScopes<'a> {
        let mut scopes = PluginScopes {
            global: Vec::new(),
            by_route: HashMap::new(),
            by_service: HashMap::new(),
        };
        for plugin in state.plugins.values().filter(|p| p.enabled) {
            match (plugin.route, plugin.service) {
                (Some(route), _) => scopes.by_route.entry(route.id).or_default().push(plugin),
                (None, Some(service)) => scopes.by_service.entry(service.id).or_default().push(plugin),
                (None, None) => scopes.global.push(plugin),
            }
        }
        scopes
    }

    /// The most specific plugin of each name that applies to a route.
    fn chain_for(&self, route: Uuid, service: Option<Uuid>) -> Vec<&'a PluginEntity> {
        let candidates = self
            .global
            .iter()
            .chain(service.and_then(|s| self.by_service.get(&s)).into_iter().flatten())
            .chain(self.by_route.get(&route).into_iter().flatten());
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
        chosen.into_values().map(|(_, plugin)| plugin).collect()
    }
}

/// The plugin names of an `ordering`'s `before` or `after` access list.
fn access_names(ordering: &serde_json::Value, side: &str) -> Vec<String> {
    ordering
        .get(side)
        .and_then(|s| s.get("access"))
        .and_then(serde_json::Value::as_array)
        .map(|names| names.iter().filter_map(|n| n.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn rebuild_chains(
    compiled: &mut Compiled,
    state: &EntityState,
    route_ids: &[Uuid],
    all: bool,
    problems: &mut Vec<CompileProblem>,
) {
    if route_ids.is_empty() && !all {
        return;
    }
    let scopes = PluginScopes::index(state);
    let filter_chains = FilterChains::index(state);
    if all {
        let certifying = scopes
            .global
            .iter()
            .filter_map(|p| compiled.plugin_instances.get(&p.id))
            .filter(|p| p.handles_certificate())
            .cloned()
            .collect();
        compiled.global_certificate = Arc::new(PluginChain::from_instances(certifying));
    }
    let consumer_scoped = compiled.identities.consumer_scoped.clone();
    for id in route_ids {
        let Some(route) = state.routes.get(id) else {
            compiled.routes.remove(id);
            compiled.filter_chains.remove(id);
            continue;
        };
        let mut slots: Vec<ChainSlot> = scopes
            .chain_for(*id, route.service.map(|s| s.id))
            .into_iter()
            .filter_map(|plugin| {
                let instance = compiled.plugin_instances.get(&plugin.id)?.clone();
                let scoped = ScopedPlugin {
                    instance,
                    protocols: ProtocolSet::from_names(plugin.protocols.iter().map(String::as_str)),
                    rank: rank::of(plugin.route.is_some(), plugin.service.is_some(), false),
                };
                let slot = ChainSlot::new(scoped, consumer_scoped.contains_key(&plugin.name));
                Some(match &plugin.ordering {
                    None => slot,
                    Some(ordering) => slot.ordered(access_names(ordering, "before"), access_names(ordering, "after")),
                })
            })
            .collect();
        slots.extend(filter_chains.slot_for(route, &mut compiled.filter_chains, problems));
        for (name, (_, sample)) in consumer_scoped.iter() {
            if !slots.iter().any(|s| s.name() == name) {
                slots.push(ChainSlot::consumer_only(sample.clone()));
            }
        }
        // A route without plugins has no entry: the request path's lookup
        // then stops at the table, without reading an empty chain (with
        // many routes each read is a cache miss), and nothing is kept for it.
        if slots.is_empty() {
            compiled.routes.remove(id);
            continue;
        }
        let plugins = match PluginChain::ordered(slots) {
            Ok(chain) => chain,
            Err(message) => {
                let name = route.name.as_deref().map_or_else(|| id.to_string(), str::to_string);
                problems.push(CompileProblem {
                    entity: format!("routes[{name}]"),
                    message,
                });
                compiled.routes.remove(id);
                continue;
            }
        };
        let runtime = RouteRuntime { plugins };
        compiled.routes.insert(*id, Arc::new(runtime));
    }
}
