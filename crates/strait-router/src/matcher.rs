//! One indexed unit: a route (or one part of a traditional route split by
//! path), its rank and its condition (its index keys are derived from it).

use std::sync::Arc;

use strait_core::{ProtocolSet, Route};
use uuid::Uuid;

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
    /// What the proxy reads of the route on every request.
    pub facts: RouteFacts,
}

/// The route fields a proxied request reads, copied next to its matcher: a
/// request without plugins never reads the route itself, a cold cache line
/// (or two) when it is one among many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteFacts {
    pub id: Uuid,
    pub service: Option<Uuid>,
    pub strip_path: bool,
    pub preserve_host: bool,
    pub https_redirect_status_code: u16,
    /// The route's `path_handling`, `"v0"` or `"v1"`.
    pub path_handling: &'static str,
}

impl RouteFacts {
    fn of(route: &Route) -> RouteFacts {
        RouteFacts {
            id: route.id,
            service: route.service.map(|s| s.id),
            strip_path: route.strip_path,
            preserve_host: route.preserve_host,
            https_redirect_status_code: route.https_redirect_status_code as u16,
            // Kong accepts only these two; the schema rejects anything else.
            path_handling: if route.path_handling == "v0" { "v0" } else { "v1" },
        }
    }
}

impl Matcher {
    pub(crate) fn new(rank: Rank, route: Arc<Route>, cond: Cond) -> Matcher {
        let protocols = ProtocolSet::from_names(route.protocols.iter().map(String::as_str));
        Matcher {
            rank,
            facts: RouteFacts::of(&route),
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
            facts: &self.facts,
            protocols: self.protocols,
            matched_path: recording.matched_path,
            captures: recording.captures,
        }
    }
}
