//! Kong's `router_flavor` node setting and what it allows in a route.
//!
//! One indexed router serves every flavor (traditional routes are matched
//! with `traditional_compatible` priorities in all of them). The flavor only
//! decides which route fields a write may use: like Kong, `expression` and
//! `priority` exist only under `expressions`.

use serde_json::{Map, Value};

use crate::entities::EntityKind;
use crate::error::FieldError;

/// Route fields that only the `expressions` flavor has.
const EXPRESSION_FIELDS: &[&str] = &["expression", "priority"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RouterFlavor {
    Traditional,
    #[default]
    TraditionalCompatible,
    Expressions,
}

impl RouterFlavor {
    pub const ALL: [RouterFlavor; 3] = [
        RouterFlavor::Traditional,
        RouterFlavor::TraditionalCompatible,
        RouterFlavor::Expressions,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RouterFlavor::Traditional => "traditional",
            RouterFlavor::TraditionalCompatible => "traditional_compatible",
            RouterFlavor::Expressions => "expressions",
        }
    }

    pub fn parse(value: &str) -> Option<RouterFlavor> {
        RouterFlavor::ALL.into_iter().find(|flavor| flavor.as_str() == value)
    }

    /// Problems with `input` (an entity of `kind` as given) under this
    /// flavor: an `expression` or `priority` on a route outside
    /// `expressions`. Null values are absent, as in Kong.
    pub fn violations(self, kind: EntityKind, input: &Map<String, Value>) -> Vec<FieldError> {
        if kind != EntityKind::Routes || self == RouterFlavor::Expressions {
            return Vec::new();
        }
        EXPRESSION_FIELDS
            .iter()
            .filter(|field| input.get(**field).is_some_and(|value| !value.is_null()))
            .map(|field| {
                FieldError::new(
                    *field,
                    format!(
                        "unknown field (route expressions need router_flavor = expressions; this node runs {})",
                        self.as_str()
                    ),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_expressions_allows_expression_fields() {
        let route = json!({ "expression": "http.path == \"/a\"", "priority": 1, "paths": null });
        let route = route.as_object().expect("object");
        let errors = RouterFlavor::TraditionalCompatible.violations(EntityKind::Routes, route);
        let paths: Vec<_> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["expression", "priority"]);
        assert!(RouterFlavor::Traditional.violations(EntityKind::Routes, route).len() == 2);
        assert!(RouterFlavor::Expressions
            .violations(EntityKind::Routes, route)
            .is_empty());
        assert!(RouterFlavor::TraditionalCompatible
            .violations(EntityKind::Services, route)
            .is_empty());
        let nulls = json!({ "expression": null });
        assert!(RouterFlavor::Traditional
            .violations(EntityKind::Routes, nulls.as_object().expect("object"))
            .is_empty());
    }

    #[test]
    fn parses_kong_names() {
        for flavor in RouterFlavor::ALL {
            assert_eq!(RouterFlavor::parse(flavor.as_str()), Some(flavor));
        }
        assert_eq!(RouterFlavor::parse("atc"), None);
    }
}
