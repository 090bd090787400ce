//! Walks a declarative document (flat or nested) into one list of pending
//! entities, each with its path, its input minus nested children, and the
//! nested parent it belongs to.

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use crate::entities::EntityKind;
use crate::error::FieldError;

/// One entity found in the document, not yet validated.
pub(super) struct Pending<'a> {
    pub kind: EntityKind,
    /// Where it sits in the document: `services[1].routes[0]`.
    pub path: String,
    /// Its fields as written, nested children removed (emptied once
    /// validation has taken them, unless write transformations need them).
    pub input: Map<String, Value>,
    /// Whether the input named its endpoint key (recorded before
    /// validation takes the input).
    pub key_given: bool,
    /// The item exactly as written (for `flattened_errors`).
    pub raw: Cow<'a, Value>,
    /// Index (in the pending list) of the entity it is nested under.
    pub parent: Option<usize>,
}

/// Children that may be nested under an entity: (key, child kind, the
/// child's foreign key to the parent).
pub(super) fn nested_children(kind: EntityKind) -> &'static [(&'static str, EntityKind, &'static str)] {
    use EntityKind::*;
    match kind {
        Services => &[("routes", Routes, "service"), ("plugins", Plugins, "service")],
        Routes => &[("plugins", Plugins, "route")],
        Consumers => &[
            ("plugins", Plugins, "consumer"),
            ("keyauth_credentials", KeyauthCredentials, "consumer"),
            ("basicauth_credentials", BasicauthCredentials, "consumer"),
            ("acls", Acls, "consumer"),
            ("jwt_secrets", JwtSecrets, "consumer"),
            ("hmacauth_credentials", HmacauthCredentials, "consumer"),
        ],
        Upstreams => &[("targets", Targets, "upstream")],
        Certificates => &[("snis", Snis, "certificate")],
        _ => &[],
    }
}

/// Every entity in the document, parents before their nested children.
pub(super) fn collect<'a>(document: &'a Map<String, Value>, errors: &mut Vec<FieldError>) -> Vec<Pending<'a>> {
    let mut pending = Vec::new();
    for kind in EntityKind::ALL {
        if let Some(items) = document.get(kind.table()) {
            collect_list(kind, items, kind.table(), None, &mut pending, errors);
        }
    }
    pending
}

fn collect_list<'a>(
    kind: EntityKind,
    items: &'a Value,
    path: &str,
    parent: Option<usize>,
    pending: &mut Vec<Pending<'a>>,
    errors: &mut Vec<FieldError>,
) {
    let list = match items {
        Value::Null => return,
        Value::Array(list) => list,
        _ => {
            errors.push(FieldError::new(path, "expected an array"));
            return;
        }
    };
    for (index, item) in list.iter().enumerate() {
        let item_path = format!("{path}[{index}]");
        let item = match (kind, item) {
            // `snis: ["example.com"]` under a certificate names SNIs directly.
            (EntityKind::Snis, Value::String(name)) if parent.is_some() => Cow::Owned(json!({ "name": name })),
            (_, Value::Object(_)) => Cow::Borrowed(item),
            _ => {
                errors.push(FieldError::new(item_path, "expected a record"));
                continue;
            }
        };
        collect_item(kind, item, item_path, parent, pending, errors);
    }
}

fn collect_item<'a>(
    kind: EntityKind,
    raw: Cow<'a, Value>,
    path: String,
    parent: Option<usize>,
    pending: &mut Vec<Pending<'a>>,
    errors: &mut Vec<FieldError>,
) {
    let nested = nested_children(kind);
    let is_child = |key: &str| nested.iter().any(|(name, _, _)| *name == key);
    let input: Map<String, Value> = match raw.as_object() {
        Some(object) => object
            .iter()
            .filter(|(key, _)| !is_child(key))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        None => Map::new(),
    };
    let index = pending.len();
    let children: Vec<(EntityKind, String, &'a Value)> = match &raw {
        // Only a borrowed item can have nested children (an SNI given as a
        // name is the one owned item, and has none).
        Cow::Borrowed(item) => nested
            .iter()
            .filter_map(|(key, child, _)| Some((*child, format!("{path}.{key}"), item.get(*key)?)))
            .collect(),
        Cow::Owned(_) => Vec::new(),
    };
    pending.push(Pending {
        kind,
        path,
        input,
        key_given: false,
        raw,
        parent,
    });
    for (child, child_path, items) in children {
        collect_list(child, items, &child_path, Some(index), pending, errors);
    }
}

/// The foreign-key field through which a nested child points at its parent.
pub(super) fn parent_link(parent: EntityKind, child: EntityKind) -> Option<&'static str> {
    nested_children(parent)
        .iter()
        .find(|(_, kind, _)| *kind == child)
        .map(|(_, _, field)| *field)
}
