//! The order in which routes are tried.
//!
//! Every matcher has one `u64` priority, the higher the earlier, as in Kong's
//! atc-router: expression routes use their `priority` field; traditional
//! routes get Kong's `traditional_compatible` bit layout (below), so both
//! styles share one order. Ties go to the older route (`created_at`), then
//! to the smaller id, so the order never depends on insertion history.

use std::cmp::Ordering;

use strait_core::Route;
use uuid::Uuid;

/// Largest header count that still fits its priority field (Kong's cap).
const MAX_HEADER_COUNT: u64 = 255;

/// Sort key of a matcher; smaller is tried first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rank {
    pub priority: u64,
    pub created_at: i64,
    pub id: Uuid,
    /// Which part of a route split by path (see `traditional`).
    pub part: u16,
}

impl Ord for Rank {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .priority
            .cmp(&self.priority)
            .then(self.created_at.cmp(&other.created_at))
            .then(self.id.cmp(&other.id))
            .then(self.part.cmp(&other.part))
    }
}

impl PartialOrd for Rank {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What Kong's `traditional_compatible` priority looks at, for one part of a route.
pub(crate) struct TraditionalShape<'a> {
    pub route: &'a Route,
    /// The paths of this part (all regexes, or prefixes of one length).
    pub paths: &'a [String],
}

fn non_empty<T>(field: &Option<Vec<T>>) -> bool {
    field.as_ref().is_some_and(|v| !v.is_empty())
}

/// Kong's bit layout, most significant first: 3 bits number of fields set,
/// 1 bit hosts are all plain (no wildcard), 8 bits header count, 1 bit has a
/// regex path, 32 bits `regex_priority` (regex parts only), 19 bits longest
/// prefix path.
pub(crate) fn traditional_priority(shape: &TraditionalShape<'_>) -> u64 {
    let route = shape.route;
    let header_count = route.headers.as_ref().map_or(0, |h| h.len() as u64);
    let fields = [
        non_empty(&route.sources),
        non_empty(&route.destinations),
        non_empty(&route.methods),
        non_empty(&route.hosts),
        !shape.paths.is_empty(),
        header_count > 0,
        non_empty(&route.snis),
    ];
    let weight = fields.iter().filter(|set| **set).count() as u64;
    let plain_hosts = non_empty(&route.hosts) && route.hosts.iter().flatten().all(|h| !h.contains('*'));
    let has_regex = shape.paths.iter().any(|p| p.starts_with('~'));
    let longest = shape
        .paths
        .iter()
        .filter(|p| !p.starts_with('~'))
        .map(|p| p.len() as u64)
        .max()
        .unwrap_or(0);
    let regex_priority = if has_regex {
        route.regex_priority.clamp(0, i64::from(u32::MAX)) as u64
    } else {
        0
    };
    (weight.min(7) << 61)
        | (u64::from(plain_hosts) << 60)
        | (header_count.min(MAX_HEADER_COUNT) << 52)
        | (u64::from(has_regex) << 51)
        | (regex_priority << 19)
        | (longest & 0x7FFFF)
}

/// An expression route's priority (negative values count as 0).
pub(crate) fn expression_priority(route: &Route) -> u64 {
    route.priority.unwrap_or(0).max(0) as u64
}
