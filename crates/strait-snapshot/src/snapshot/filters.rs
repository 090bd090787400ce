//! A route's proxy-wasm filters (Kong's `filter_chains`), compiled into its
//! plugin chain: the enabled filters of its service's chain, then those of
//! its own chain (a disabled chain contributes nothing), built into one
//! instance by the Wasm host through [`build_filter_chain`]. This module
//! knows nothing of Wasm: without the host's factory every build fails,
//! and the change that asked for it is refused.
//!
//! A built instance is kept per route and used again while the route's
//! filters and scope stay the same: rebuilding every route's chain (a
//! global plugin changed, secrets rotated) then configures no filter anew.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use strait_core::{FilterChain, Route};
use strait_plugins::filters::{build_filter_chain, FilterScope, FilterSpec};
use strait_plugins::{rank, ChainSlot, Plugin, ProtocolSet, ScopedPlugin};
use strait_router::CowMap;
use uuid::Uuid;

use super::state::{EntityState, Previous};
use super::CompileProblem;

/// A route's filters as the Wasm host built them, with what it was given.
pub(crate) struct BuiltFilters {
    specs: Vec<FilterSpec>,
    scope: FilterScope,
    instance: Arc<dyn Plugin>,
}

/// Each route's built filters, by route id.
pub(crate) type BuiltFilterChains = CowMap<Uuid, Arc<BuiltFilters>>;

/// The chains of a configuration by what they are attached to, indexed
/// once per rebuild.
pub(super) struct FilterChains<'a> {
    by_route: HashMap<Uuid, &'a FilterChain>,
    by_service: HashMap<Uuid, &'a FilterChain>,
}

impl<'a> FilterChains<'a> {
    pub fn index(state: &'a EntityState) -> FilterChains<'a> {
        let mut chains = FilterChains {
            by_route: HashMap::new(),
            by_service: HashMap::new(),
        };
        for chain in state.filter_chains.values() {
            if let Some(route) = chain.route {
                chains.by_route.insert(route.id, chain);
            }
            if let Some(service) = chain.service {
                chains.by_service.insert(service.id, chain);
            }
        }
        chains
    }

    /// The slot running `route`'s filters, `None` when no enabled filter
    /// applies; `built` keeps the instance for the next rebuild. A chain
    /// the Wasm host cannot build is a problem of the chain it came from
    /// (the route's when both contribute), reported once however many
    /// routes share it.
    pub fn slot_for(
        &self,
        route: &Route,
        built: &mut BuiltFilterChains,
        problems: &mut Vec<CompileProblem>,
    ) -> Option<ChainSlot> {
        let service = route.service.map(|s| s.id);
        let service_chain = service.and_then(|id| self.by_service.get(&id)).copied();
        let route_chain = self.by_route.get(&route.id).copied();
        let mut specs = Vec::new();
        let mut blamed = None;
        for chain in [service_chain, route_chain].into_iter().flatten() {
            let before = specs.len();
            specs.extend(enabled_filters(chain));
            if specs.len() > before {
                blamed = Some(chain);
            }
        }
        let Some(blamed) = blamed else {
            built.remove(&route.id);
            return None;
        };
        let scope = FilterScope {
            route: Some(route.id),
            service,
        };
        let kept = built
            .get(&route.id)
            .filter(|b| b.specs == specs && b.scope == scope)
            .map(|b| b.instance.clone());
        let instance = match kept {
            Some(instance) => Ok(instance),
            None => build_filter_chain(&specs, scope),
        };
        match instance {
            Ok(instance) => {
                let kept = BuiltFilters {
                    specs,
                    scope,
                    instance: instance.clone(),
                };
                built.insert(route.id, Arc::new(kept));
                let scoped = ScopedPlugin {
                    instance,
                    protocols: ProtocolSet::from_names(["http", "https"]),
                    rank: rank::ROUTE,
                };
                Some(ChainSlot::new(scoped, false))
            }
            Err(message) => {
                built.remove(&route.id);
                let problem = CompileProblem {
                    entity: format!("filter_chains[{}]", chain_label(blamed)),
                    message,
                };
                if !problems.contains(&problem) {
                    problems.push(problem);
                }
                None
            }
        }
    }
}

/// A chain's enabled filters in order; none when the chain is disabled.
fn enabled_filters(chain: &FilterChain) -> impl Iterator<Item = FilterSpec> + '_ {
    chain
        .filters
        .iter()
        .filter(move |filter| chain.enabled && filter.enabled)
        .map(|filter| FilterSpec {
            name: filter.name.clone(),
            config: filter.config.clone(),
        })
}

/// How a problem names a chain: its name, else its id.
fn chain_label(chain: &FilterChain) -> String {
    chain.name.clone().unwrap_or_else(|| chain.id.to_string())
}

/// The routes whose filters a change to chain `id` (now in `state`, and as
/// it was before, `previous`) touches: the route it is on, or every route
/// of the service it is on.
pub(super) fn routes_touched(state: &EntityState, id: Uuid, previous: &Previous) -> HashSet<Uuid> {
    let old = match previous {
        Some(strait_core::Entity::FilterChain(old)) => Some(old),
        _ => None,
    };
    let mut routes = HashSet::new();
    let mut services = HashSet::new();
    for chain in state.filter_chains.get(&id).into_iter().chain(old) {
        routes.extend(chain.route.map(|r| r.id));
        services.extend(chain.service.map(|s| s.id));
    }
    if !services.is_empty() {
        let of_services = state
            .routes
            .iter()
            .filter(|(_, route)| route.service.is_some_and(|s| services.contains(&s.id)))
            .map(|(id, _)| *id);
        routes.extend(of_services);
    }
    routes
}
