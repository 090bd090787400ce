//! A route entity compiled into its matchers, and the errors that stop it.

use std::fmt;
use std::sync::Arc;

use strait_core::Route;
use strait_expr::ExprError;
use uuid::Uuid;

use crate::cond::Cond;
use crate::matcher::Matcher;
use crate::priority::{expression_priority, Rank};
use crate::regex_cache::RegexCache;
use crate::traditional::{translate, TraditionalError};

/// Names a route in errors: its id, and its name when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteLabel {
    pub id: Uuid,
    pub name: Option<String>,
}

impl RouteLabel {
    fn of(route: &Route) -> RouteLabel {
        RouteLabel {
            id: route.id,
            name: route.name.clone(),
        }
    }
}

impl fmt::Display for RouteLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "route {} ({name})", self.id),
            None => write!(f, "route {}", self.id),
        }
    }
}

/// Why a route could not enter the router. Every variant names the route.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RouterError {
    #[error("{route}: expression: {error}")]
    InvalidExpression { route: RouteLabel, error: ExprError },
    #[error("{route}: invalid regex {pattern:?}: {reason}")]
    InvalidRegex {
        route: RouteLabel,
        pattern: String,
        reason: String,
    },
    #[error("{route}: invalid address {value:?} in sources/destinations")]
    InvalidAddress { route: RouteLabel, value: String },
    #[error("{route}: a route with this id is already in the router")]
    DuplicateRoute { route: RouteLabel },
}

impl RouterError {
    /// The route the error is about.
    pub fn route(&self) -> &RouteLabel {
        match self {
            RouterError::InvalidExpression { route, .. }
            | RouterError::InvalidRegex { route, .. }
            | RouterError::InvalidAddress { route, .. }
            | RouterError::DuplicateRoute { route } => route,
        }
    }
}

/// A route's matchers, as the router keeps them (one allocation).
pub(crate) type Matchers = Arc<[Arc<Matcher>]>;

/// Compile a route into one matcher (expression) or one per path group
/// (traditional).
pub(crate) fn compile_route(route: &Arc<Route>, regexes: &mut RegexCache) -> Result<Matchers, RouterError> {
    let rank = |priority: u64, part: u16| Rank {
        priority,
        created_at: route.created_at,
        id: route.id,
        part,
    };
    if let Some(text) = &route.expression {
        let expr = strait_expr::parse_with(text, regexes).map_err(|error| RouterError::InvalidExpression {
            route: RouteLabel::of(route),
            error,
        })?;
        let cond = Cond::from_expr(&expr);
        let matcher = Arc::new(Matcher::new(rank(expression_priority(route), 0), route.clone(), cond));
        return Ok(Arc::from([matcher]));
    }
    let parts = translate(route, regexes).map_err(|err| match err {
        TraditionalError::Regex { pattern, reason } => RouterError::InvalidRegex {
            route: RouteLabel::of(route),
            pattern,
            reason,
        },
        TraditionalError::Address { value } => RouterError::InvalidAddress {
            route: RouteLabel::of(route),
            value,
        },
    })?;
    Ok(parts
        .into_iter()
        .enumerate()
        .map(|(i, part)| {
            let part_index = u16::try_from(i).unwrap_or(u16::MAX);
            Arc::new(Matcher::new(rank(part.priority, part_index), route.clone(), part.cond))
        })
        .collect())
}
