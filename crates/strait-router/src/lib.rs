//! strait-router: matches a request's facts to a route, Kong's priority order.
//!
//! Takes values, returns values: no sockets, no clocks. This is the
//! straightforward matcher (routes sorted by Kong's `traditional_compatible`
//! priority, evaluated in order); the indexed router replaces its internals
//! behind the same [`Router`] interface.
#![forbid(unsafe_code)]

mod compile;
mod path;

use std::sync::Arc;

use strait_core::Route;
use uuid::Uuid;

pub use compile::RouterError;
pub use path::upstream_path;

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
    pub sni: Option<&'a str>,
    pub headers: &'a dyn HeaderLookup,
}

/// Access to request headers by lower-case name.
pub trait HeaderLookup: std::fmt::Debug {
    /// Every value of the header `name` (lower case).
    fn values(&self, name: &str) -> Vec<&str>;
}

/// The outcome of a successful match.
#[derive(Debug, Clone)]
pub struct RouteMatch {
    pub route: Arc<Route>,
    /// The part of the request path the route's path matched (what strip_path removes).
    pub matched_path: Option<String>,
    /// Named and numbered regex captures of the matched path.
    pub captures: Vec<(String, String)>,
}

/// An immutable matcher over a route set.
#[derive(Debug, Default)]
pub struct Router {
    routes: Vec<compile::CompiledRoute>,
}

impl Router {
    /// Compile every route; a route that cannot compile is reported with its id.
    pub fn build(routes: &[Arc<Route>]) -> Result<Router, RouterError> {
        let mut compiled = routes
            .iter()
            .map(|route| compile::CompiledRoute::new(route.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        compiled.sort_by_key(|route| std::cmp::Reverse(route.priority));
        Ok(Router { routes: compiled })
    }

    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The highest-priority route that matches, if any.
    pub fn find(&self, facts: &RequestFacts<'_>) -> Option<RouteMatch> {
        self.routes.iter().find_map(|route| route.matches(facts))
    }

    /// Ids in match-priority order (used by tests and diagnostics).
    pub fn ordered_ids(&self) -> Vec<Uuid> {
        self.routes.iter().map(|r| r.route.id).collect()
    }
}

#[cfg(test)]
mod tests;
