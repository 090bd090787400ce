//! One indexed unit: a route (or one part of a traditional route split by
//! path), its rank and its condition (its index keys are derived from it).

use std::sync::Arc;

use strait_core::Route;

use crate::cond::Cond;
use crate::eval::{evaluate, Recording, RequestView};
use crate::priority::Rank;
use crate::RouteMatch;

#[derive(Debug)]
pub(crate) struct Matcher {
    pub rank: Rank,
    pub route: Arc<Route>,
    pub cond: Cond,
    /// The route's protocols, read once here: the request path checks them
    /// from the matcher it already has in cache rather than through the
    /// route's list of strings (two more cache misses with many routes).
    pub transports: Transports,
}

impl Matcher {
    pub(crate) fn new(rank: Rank, route: Arc<Route>, cond: Cond) -> Matcher {
        let transports = Transports::of(&route.protocols);
        Matcher {
            rank,
            route,
            cond,
            transports,
        }
    }

    pub(crate) fn matches(&self, request: &RequestView<'_>) -> bool {
        evaluate(&self.cond, request, &mut None)
    }

    /// The match result, evaluating once more to record path and captures.
    pub(crate) fn to_match(&self, request: &RequestView<'_>) -> RouteMatch {
        let mut recording = Recording::default();
        evaluate(&self.cond, request, &mut Some(&mut recording));
        RouteMatch {
            route: self.route.clone(),
            transports: self.transports,
            matched_path: recording.matched_path,
            captures: recording.captures,
        }
    }
}

/// Which connections a route accepts requests on, from its `protocols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transports {
    /// `http` or `grpc`: requests on plain-text connections.
    pub plain: bool,
    /// `https` or `grpcs`: requests on TLS connections.
    pub tls: bool,
}

impl Transports {
    pub fn of(protocols: &[String]) -> Transports {
        let has = |names: [&str; 2]| protocols.iter().any(|p| names.contains(&p.as_str()));
        Transports {
            plain: has(["http", "grpc"]),
            tls: has(["https", "grpcs"]),
        }
    }

    /// Whether a request on a connection that is (`tls`) or is not TLS may
    /// use the route.
    pub fn accepts(self, tls: bool) -> bool {
        if tls {
            self.tls
        } else {
            self.plain
        }
    }
}
