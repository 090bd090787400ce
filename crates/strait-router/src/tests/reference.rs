//! The naive reference: every matcher of every route, sorted by rank,
//! evaluated one after another. No index. The property tests assert the
//! indexed router returns exactly what this returns.

use std::sync::Arc;

use strait_core::Route;

use crate::compile::compile_route;
use crate::eval::RequestView;
use crate::matcher::Matcher;
use crate::regex_cache::RegexCache;
use crate::{RequestFacts, RouteMatch};

pub(crate) struct LinearRouter {
    matchers: Vec<Arc<Matcher>>,
}

impl LinearRouter {
    /// Routes that do not compile are skipped (the router rejects them too).
    pub(crate) fn new(routes: &[Arc<Route>]) -> LinearRouter {
        let mut regexes = RegexCache::default();
        let mut matchers: Vec<Arc<Matcher>> = routes
            .iter()
            .filter_map(|r| compile_route(r, &mut regexes).ok())
            .flat_map(|matchers| matchers.to_vec())
            .collect();
        matchers.sort_by_key(|m| m.rank);
        LinearRouter { matchers }
    }

    pub(crate) fn find(&self, facts: &RequestFacts<'_>) -> Option<RouteMatch<'_>> {
        let request = RequestView::new(facts);
        self.matchers
            .iter()
            .find(|m| m.satisfied_by(&request))
            .map(|m| m.to_match(&request))
    }
}
