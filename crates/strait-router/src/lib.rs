//! strait-router: matches a request's facts to a route. No I/O.
//!
//! One index for both route styles: traditional routes (Kong's
//! `traditional_compatible` priority order) and `expression` routes (Kong's
//! expressions language, parsed by `strait-expr`). Both compile into
//! [`cond::Cond`] trees; the [`index`] narrows a request to the few
//! candidates its host and path can hit, and those are evaluated in rank
//! order. A [`Router`] is cheap to clone and to change after cloning
//! (sharded copy-on-write maps), so the snapshot compiler derives each new
//! router from the previous one with [`Router::insert`] / [`Router::remove`] /
//! [`Router::replace`] instead of rebuilding. See docs/routing.md.
#![forbid(unsafe_code)]

mod analysis;
mod compile;
mod cond;
mod cow_map;
mod eval;
mod index;
mod matcher;
mod normalize;
mod path;
mod priority;
mod regex_cache;
mod traditional;

use std::net::SocketAddr;
use std::sync::Arc;

use strait_core::{ProtocolSet, Route};
use uuid::Uuid;

pub use compile::{RouteLabel, RouterError};
pub use cow_map::CowMap;
pub use matcher::RouteFacts;
pub use normalize::{normalize_path, InvalidPath};
pub use path::upstream_path;

use crate::compile::{compile_route, Matchers};
use crate::eval::RequestView;
use crate::index::{BulkIndex, CandidateLists, Index};
use crate::matcher::Matcher;
use crate::regex_cache::RegexCache;

/// The request fields routes can look at, borrowed from the request.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// `http`, `https`, `grpc` or `grpcs` as seen by the gateway.
    pub protocol: &'a str,
    pub method: &'a str,
    /// Host without port, lower case.
    pub host: &'a str,
    /// Port the client addressed (from Host or the listener).
    pub port: u16,
    /// Path without query string.
    pub path: &'a str,
    /// Raw query string, without `?` (empty when there is none).
    pub query: &'a str,
    pub sni: Option<&'a str>,
    pub headers: &'a dyn HeaderLookup,
    /// The client's address (`net.src.*`, traditional `sources`).
    pub source: Option<SocketAddr>,
    /// The local address the request arrived on (`net.dst.*`, `destinations`).
    pub destination: Option<SocketAddr>,
}

/// Access to request headers by lower-case name.
pub trait HeaderLookup: std::fmt::Debug {
    /// Every value of the header `name` (lower case).
    fn values(&self, name: &str) -> Vec<&str>;
}

/// The outcome of a successful match.
#[derive(Debug, Clone)]
pub struct RouteMatch<'r> {
    /// Borrowed from the router (no reference count touched per request:
    /// with many routes that count sits on a cold cache line).
    pub route: &'r Arc<Route>,
    /// The route fields every proxied request reads, stored with the
    /// matcher (read these rather than `route`'s).
    pub facts: &'r RouteFacts,
    /// The route's `protocols`, as a set.
    pub protocols: ProtocolSet,
    /// The part of the request path the route's path matched (what strip_path removes).
    pub matched_path: Option<String>,
    /// Named and numbered regex captures of the matched path.
    pub captures: Vec<(String, String)>,
}

/// An indexed matcher over a route set; `Clone` is cheap and clones share
/// everything until one of them changes.
#[derive(Clone, Default)]
pub struct Router {
    routes: CowMap<Uuid, Matchers>,
    index: Index,
    regexes: RegexCache,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("routes", &self.routes.len())
            .field("regexes", &self.regexes.len())
            .finish()
    }
}

impl Router {
    /// Compile every route; the first route that cannot compile is the error.
    pub fn build(routes: &[Arc<Route>]) -> Result<Router, RouterError> {
        Router::build_all(routes).map_err(|mut errors| errors.swap_remove(0))
    }

    /// Compile every route, reporting every route that cannot compile.
    pub fn build_all(routes: &[Arc<Route>]) -> Result<Router, Vec<RouterError>> {
        let mut router = Router::default();
        let mut errors = Vec::new();
        let mut index = BulkIndex::with_capacity(expected_exact_hosts(routes));
        router.routes.reserve(routes.len());
        for route in routes {
            if router.routes.get(&route.id).is_some() {
                errors.push(RouterError::DuplicateRoute {
                    route: RouteLabel {
                        id: route.id,
                        name: route.name.clone(),
                    },
                });
                continue;
            }
            match compile_route(route, &mut router.regexes) {
                Ok(matchers) => {
                    matchers.iter().for_each(|matcher| index.push(matcher));
                    router.routes.insert(route.id, matchers);
                }
                Err(error) => errors.push(error),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        router.index = index.finish();
        Ok(router)
    }

    /// Add one route; an id already present is an error (see [`Router::replace`]).
    pub fn insert(&mut self, route: Arc<Route>) -> Result<(), RouterError> {
        if self.routes.get(&route.id).is_some() {
            return Err(RouterError::DuplicateRoute {
                route: RouteLabel {
                    id: route.id,
                    name: route.name.clone(),
                },
            });
        }
        let matchers = compile_route(&route, &mut self.regexes)?;
        for matcher in matchers.iter() {
            self.index.insert(matcher);
        }
        self.routes.insert(route.id, matchers);
        Ok(())
    }

    /// Remove one route; `false` when it was not there.
    pub fn remove(&mut self, id: Uuid) -> bool {
        let Some(entry) = self.routes.remove(&id) else {
            return false;
        };
        let mut patterns = Vec::new();
        for matcher in entry.iter() {
            self.index.remove(matcher);
            matcher.cond.regex_keys(&mut patterns);
        }
        drop(entry);
        for pattern in patterns {
            self.regexes.release(&pattern);
        }
        true
    }

    /// Insert or update a route. On error the router is unchanged.
    pub fn replace(&mut self, route: Arc<Route>) -> Result<(), RouterError> {
        let matchers = compile_route(&route, &mut self.regexes)?;
        self.remove(route.id);
        for matcher in matchers.iter() {
            self.index.insert(matcher);
        }
        self.routes.insert(route.id, matchers);
        Ok(())
    }

    pub fn contains(&self, id: Uuid) -> bool {
        self.routes.get(&id).is_some()
    }

    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The highest-priority route that matches, if any.
    pub fn find(&self, facts: &RequestFacts<'_>) -> Option<RouteMatch<'_>> {
        let request = RequestView::new(facts);
        let mut lists = CandidateLists::new();
        self.index.collect(&request.host, facts.path, &mut lists);
        if let Some((matcher, hot)) = lists.lone_keyed() {
            return Some(matcher.keyed_match(hot, &request));
        }
        lists
            .first_accepted(|matcher| matcher.matches(&request))
            .map(|matcher| matcher.to_match(&request))
    }

    /// Hands `prefetch` the memory a lookup for `path` reads first among
    /// the routes that name no host: the index slots of its path prefixes,
    /// in tables large enough to be cold (with many routes, each one a
    /// cache miss). A server that has a request's path before it can route
    /// (the request line arrived, the rest of the head is still to be
    /// parsed) has the CPU fetch them meanwhile. `path` is the raw target;
    /// one that normalizes to another path only makes the fetch useless.
    pub fn first_slots(&self, path: &[u8], mut prefetch: impl FnMut(*const u8, usize)) {
        self.index.first_slots(path, &mut prefetch);
    }

    /// Route ids in match-priority order (a route split by path appears at
    /// its best part). For tests and diagnostics; walks every route.
    pub fn ordered_ids(&self) -> Vec<Uuid> {
        let mut matchers: Vec<&Arc<Matcher>> = self.routes.values().flat_map(|matchers| matchers.iter()).collect();
        matchers.sort_by_key(|m| m.rank);
        let mut seen = std::collections::HashSet::new();
        matchers
            .into_iter()
            .map(|m| m.route.id)
            .filter(|id| seen.insert(*id))
            .collect()
    }
}

/// About how many exact hosts a route set indexes (a capacity hint): plain
/// `hosts` entries, and one per expression that reads `http.host`.
fn expected_exact_hosts(routes: &[Arc<Route>]) -> usize {
    routes
        .iter()
        .map(|route| match (&route.expression, &route.hosts) {
            (Some(expression), _) => usize::from(expression.contains("http.host")),
            (None, Some(hosts)) => hosts.iter().filter(|host| !host.contains('*')).count(),
            (None, None) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests;
