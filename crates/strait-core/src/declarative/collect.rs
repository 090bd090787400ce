//! Walks a declarative document (flat or nested) into one list of pending
//! entities, each with its path, its input minus nested children, and the
//! nested parent it belongs to.

use serde_json::{Map, Value};

use crate::entities::EntityKind;
use crate::error::FieldError;

/// One entity found in the document, not yet validated.
pub(super) struct Pending {
    pub kind: EntityKind,
    /// Where it sits in the document: `services[1].routes[0]`.
    pub path: String,
    /// Its fields as written, nested children removed (emptied once
    /// validation has taken them, unless write transformations need them).
    pub input: Map<String, Value>,
    /// Whether the input named its endpoint key (recorded before
    /// validation takes the input).
    pub key_given: bool,
    /// Index (in the pending list) of the entity it is nested under.
    pub parent: Option<usize>,
}

/// Children that may be nested under an entity: (key, child kind, the
/// child's foreign key to the parent).
pub(super) fn nested_children(kind: EntityKind) -> &'static [(&'static str, EntityKind, &'static str)] {
    use EntityKind::*;
    match kind {
        Services => &[
            ("routes", Routes, "service"),
            ("plugins", Plugins, "service"),
            ("filter_chains", FilterChains, "service"),
        ],
        Routes => &[("plugins", Plugins, "route"), ("filter_chains", FilterChains, "route")],
        Consumers => &[
            ("plugins", Plugins, "consumer"),
            ("groups", ConsumerGroupConsumers, "consumer"),
            ("keyauth_credentials", KeyauthCredentials, "consumer"),
            ("basicauth_credentials", BasicauthCredentials, "consumer"),
            ("acls", Acls, "consumer"),
            ("jwt_secrets", JwtSecrets, "consumer"),
            ("hmacauth_credentials", HmacauthCredentials, "consumer"),
            ("oauth2_credentials", Oauth2Credentials, "consumer"),
        ],
        Upstreams => &[("targets", Targets, "upstream")],
        Certificates => &[("snis", Snis, "certificate")],
        KeySets => &[("keys", Keys, "set")],
        ConsumerGroups => &[
            ("plugins", Plugins, "consumer_group"),
            ("consumers", ConsumerGroupConsumers, "consumer_group"),
        ],
        _ => &[],
    }
}

/// Every entity in the document, parents before their nested children.
/// The document is taken apart, not copied: each entity's fields move into
/// its `Pending` (see [`item_at`] for an item as written).
pub(super) fn collect(mut document: Map<String, Value>, errors: &mut Vec<FieldError>) -> Vec<Pending> {
    let mut pending = Vec::new();
    for kind in EntityKind::ALL {
        if let Some(items) = document.remove(kind.table()) {
            collect_list(kind, items, kind.table(), None, &mut pending, errors);
        }
    }
    pending
}

fn collect_list(
    kind: EntityKind,
    items: Value,
    path: &str,
    parent: Option<usize>,
    pending: &mut Vec<Pending>,
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
    for (index, item) in list.into_iter().enumerate() {
        let item_path = format!("{path}[{index}]");
        let parent_kind = parent.map(|at| pending[at].kind);
        let input = match (kind, item) {
            // `snis: ["example.com"]` under a certificate names SNIs directly.
            (EntityKind::Snis, Value::String(name)) if parent.is_some() => named(name),
            (EntityKind::ConsumerGroupConsumers, item) if parent.is_some() => match membership(parent_kind, item) {
                Some(fields) => fields,
                None => {
                    errors.push(FieldError::new(item_path, "expected a record or a name"));
                    continue;
                }
            },
            (_, Value::Object(fields)) => fields,
            _ => {
                errors.push(FieldError::new(item_path, "expected a record"));
                continue;
            }
        };
        collect_item(kind, input, item_path, parent, pending, errors);
    }
}

/// One item of a list as `collect` takes it: its fields without nested
/// children (an SNI nested by name as a record); `None` when it is neither
/// a record nor such a name.
pub(super) fn own_fields(kind: EntityKind, item: Value, nested: bool) -> Option<Map<String, Value>> {
    let mut fields = match (kind, item) {
        (EntityKind::Snis, Value::String(name)) if nested => return Some(named(name)),
        // A nested membership is only read as changes when it is a record
        // written in Kong's own form (`consumer_group` / `consumer` set).
        (EntityKind::ConsumerGroupConsumers, Value::Object(fields)) if nested => {
            let own_form = fields.contains_key("consumer_group") || fields.contains_key("consumer");
            return own_form.then_some(fields);
        }
        (EntityKind::ConsumerGroupConsumers, _) if nested => return None,
        (_, Value::Object(fields)) => fields,
        _ => return None,
    };
    for (key, _, _) in nested_children(kind) {
        fields.shift_remove(*key);
    }
    Some(fields)
}

/// A membership nested in decK's forms: under a consumer, `groups` lists
/// its groups (`{name: ...}`, `{id: ...}`, a full group record as
/// `deck gateway dump` writes, or a name); under a consumer group,
/// `consumers` lists its members (`{username: ...}`, `{id: ...}`, a
/// consumer record, or a username). A record already in Kong's own form
/// (with `consumer_group` or `consumer`) is kept as written.
fn membership(parent: Option<EntityKind>, item: Value) -> Option<Map<String, Value>> {
    let (field, keys): (&str, &[&str]) = match parent? {
        EntityKind::Consumers => ("consumer_group", &["id", "name"]),
        EntityKind::ConsumerGroups => ("consumer", &["id", "username", "custom_id"]),
        _ => return None,
    };
    let reference = match item {
        Value::String(name) => {
            let mut by = Map::new();
            by.insert(keys[1].to_string(), Value::String(name));
            by
        }
        Value::Object(fields) if fields.contains_key("consumer_group") || fields.contains_key("consumer") => {
            return Some(fields)
        }
        Value::Object(fields) => {
            let key = keys
                .iter()
                .find(|key| fields.get(**key).is_some_and(|v| !v.is_null()))?;
            let mut by = Map::new();
            by.insert(key.to_string(), fields.get(*key).cloned().unwrap_or(Value::Null));
            by
        }
        _ => return None,
    };
    let mut out = Map::new();
    out.insert(field.to_string(), Value::Object(reference));
    Some(out)
}

/// An SNI given by name alone, as a record.
fn named(name: String) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("name".into(), Value::String(name));
    fields
}

fn collect_item(
    kind: EntityKind,
    mut input: Map<String, Value>,
    path: String,
    parent: Option<usize>,
    pending: &mut Vec<Pending>,
    errors: &mut Vec<FieldError>,
) {
    let children: Vec<(EntityKind, String, Value)> = nested_children(kind)
        .iter()
        .filter_map(|(key, child, _)| {
            let items = input.shift_remove(*key)?;
            Some((*child, format!("{path}.{key}"), items))
        })
        .collect();
    let index = pending.len();
    pending.push(Pending {
        kind,
        path,
        input,
        key_given: false,
        parent,
    });
    for (child, child_path, items) in children {
        collect_list(child, items, &child_path, Some(index), pending, errors);
    }
}

/// The item at `path` (`services[1].routes[0]`) of a decoded document,
/// exactly as written (nested children included; an SNI given by name as
/// `{"name": ...}`): what Kong's flattened errors show.
pub(super) fn item_at(document: &Map<String, Value>, path: &str) -> Option<Value> {
    let mut level: Option<&Map<String, Value>> = Some(document);
    let mut found: Option<&Value> = None;
    for segment in path.split('.') {
        let (key, index) = segment.strip_suffix(']')?.split_once('[')?;
        let list = level?.get(key)?.as_array()?;
        let item = list.get(index.parse::<usize>().ok()?)?;
        level = item.as_object();
        found = Some(item);
    }
    match found? {
        Value::String(name) => Some(Value::Object(named(name.clone()))),
        item => Some(item.clone()),
    }
}

/// The foreign-key field through which a nested child points at its parent.
pub(super) fn parent_link(parent: EntityKind, child: EntityKind) -> Option<&'static str> {
    nested_children(parent)
        .iter()
        .find(|(_, kind, _)| *kind == child)
        .map(|(_, _, field)| *field)
}
