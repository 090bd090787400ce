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
}

impl Matcher {
    pub(crate) fn new(rank: Rank, route: Arc<Route>, cond: Cond) -> Matcher {
        Matcher { rank, route, cond }
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
            matched_path: recording.matched_path,
            captures: recording.captures,
        }
    }
}
