//! One indexed unit: a route (or one part of a traditional route split by
//! path), its rank and its condition (its index keys are derived from it).

use std::sync::Arc;

use strait_core::{ProtocolSet, Route};

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
    pub protocols: ProtocolSet,
}

impl Matcher {
    pub(crate) fn new(rank: Rank, route: Arc<Route>, cond: Cond) -> Matcher {
        let protocols = ProtocolSet::from_names(route.protocols.iter().map(String::as_str));
        Matcher {
            rank,
            route,
            cond,
            protocols,
        }
    }

    pub(crate) fn matches(&self, request: &RequestView<'_>) -> bool {
        evaluate(&self.cond, request, &mut None)
    }

    /// The match result, evaluating once more to record path and captures.
    pub(crate) fn to_match(&self, request: &RequestView<'_>) -> RouteMatch<'_> {
        let mut recording = Recording::default();
        evaluate(&self.cond, request, &mut Some(&mut recording));
        RouteMatch {
            route: &self.route,
            protocols: self.protocols,
            matched_path: recording.matched_path,
            captures: recording.captures,
        }
    }
}
