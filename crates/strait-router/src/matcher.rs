//! One indexed unit: a route (or one part of a traditional route split by
//! path), its rank and its condition (its index keys are derived from it).

use std::sync::Arc;

use strait_core::{ProtocolSet, Route};
use uuid::Uuid;

use strait_expr::Op;

use crate::cond::{Cond, Operand, Source, Test};
use crate::eval::{evaluate, Recording, RequestView};
use crate::priority::Rank;
use crate::RouteMatch;

/// `repr(C)`: what every request reads (the shortcut, protocols, facts)
/// comes first, next to the allocation's reference counts, so a cold matcher
/// costs one or two adjacent cache lines; the rank and the condition follow.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Matcher {
    /// The prefix's length when the whole condition is one case-sensitive
    /// path prefix (a traditional route with one path and nothing else).
    /// Such a matcher sits only in the index list keyed by that prefix, and
    /// the index hands that list out only for paths it compared with the key,
    /// so the condition holds without being evaluated, and without reading
    /// the prefix again (with many routes, a cache miss).
    key_is_cond: Option<u32>,
    /// The route's protocols, read once here: the request path checks them
    /// from the matcher it already has in cache rather than through the
    /// route's list of strings (two more cache misses with many routes).
    pub protocols: ProtocolSet,
    /// What the proxy reads of the route on every request.
    pub facts: RouteFacts,
    pub rank: Rank,
    pub route: Arc<Route>,
    pub cond: Cond,
}

/// A copy of what a request reads of a matcher, kept in the index slot of
/// a list that holds only it ([`crate::index::Candidates`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hot {
    pub key_is_cond: Option<u32>,
    pub protocols: ProtocolSet,
    pub facts: RouteFacts,
}

/// See [`Matcher::key_is_cond`].
fn only_path_prefix(cond: &Cond) -> Option<u32> {
    match cond {
        Cond::Test(Test {
            source: Source::Path,
            op: Op::Prefix,
            operand: Operand::Str(prefix),
            lower: false,
            ..
        }) => u32::try_from(prefix.len()).ok(),
        _ => None,
    }
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
    /// The route's `path_handling` is `"v0"` (else `"v1"`).
    pub path_handling_v0: bool,
    pub request_buffering: bool,
    pub response_buffering: bool,
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
            path_handling_v0: route.path_handling == "v0",
            request_buffering: route.request_buffering,
            response_buffering: route.response_buffering,
        }
    }

    /// The route's `path_handling`.
    pub fn path_handling(&self) -> &'static str {
        if self.path_handling_v0 {
            "v0"
        } else {
            "v1"
        }
    }
}

impl Matcher {
    pub(crate) fn new(rank: Rank, route: Arc<Route>, cond: Cond) -> Matcher {
        let protocols = ProtocolSet::from_names(route.protocols.iter().map(String::as_str));
        Matcher {
            rank,
            facts: RouteFacts::of(&route),
            key_is_cond: only_path_prefix(&cond),
            route,
            cond,
            protocols,
        }
    }

    pub(crate) fn hot(&self) -> Hot {
        Hot {
            key_is_cond: self.key_is_cond,
            protocols: self.protocols,
            facts: self.facts,
        }
    }

    /// The match of a lone candidate whose condition is its index key, from
    /// its [`Hot`] copy: nothing of the matcher is read (`route` is only the
    /// address of its field).
    pub(crate) fn keyed_match<'m>(&'m self, hot: &'m Hot, request: &RequestView<'_>) -> RouteMatch<'m> {
        debug_assert!(self.satisfied_by(request), "the index handed out a failing prefix");
        RouteMatch {
            route: &self.route,
            facts: &hot.facts,
            protocols: hot.protocols,
            matched_path: hot
                .key_is_cond
                .and_then(|len| request.facts.path.get(..len as usize))
                .map(str::to_string),
            captures: Vec::new(),
        }
    }

    /// Whether the request satisfies the condition; only for matchers the
    /// index found for this request ([`Matcher::satisfied_by`] otherwise).
    pub(crate) fn matches(&self, request: &RequestView<'_>) -> bool {
        if self.key_is_cond.is_some() {
            debug_assert!(self.satisfied_by(request), "the index handed out a failing prefix");
            return true;
        }
        self.satisfied_by(request)
    }

    /// Whether the request satisfies the condition, evaluated whole.
    pub(crate) fn satisfied_by(&self, request: &RequestView<'_>) -> bool {
        evaluate(&self.cond, request, &mut None)
    }

    /// The match result, evaluating once more to record path and captures.
    pub(crate) fn to_match(&self, request: &RequestView<'_>) -> RouteMatch<'_> {
        let mut recording = Recording::default();
        match self.key_is_cond {
            // What evaluating the prefix test records, taken from the path.
            Some(len) => recording.matched_path = request.facts.path.get(..len as usize).map(str::to_string),
            None => {
                evaluate(&self.cond, request, &mut Some(&mut recording));
            }
        }
        RouteMatch {
            route: &self.route,
            facts: &self.facts,
            protocols: self.protocols,
            matched_path: recording.matched_path,
            captures: recording.captures,
        }
    }
}
