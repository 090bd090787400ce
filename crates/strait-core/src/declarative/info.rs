//! decK's meta keys: `_info` (`select_tags` added to every entity that has
//! tags, `defaults` filled into services, routes, upstreams and targets),
//! `_workspace` (only `default`) and `_konnect` (refused).
//!
//! Kong itself refuses `_info` (decK applies it before it talks to Kong);
//! Strait applies it as decK does, so a file decK syncs loads as it is:
//! - a select tag is appended to an entity's `tags` unless already there;
//! - a default fills a field the entity leaves out (or sets to null); a value
//!   in the file wins, and a default wins over Kong's schema default;
//! - `defaults` may not set an entity's `id` or its name (`name`, a
//!   target's `target`), as decK refuses;
//! - `default_lookup_tags`, `consumer_group_policy_overrides` and
//!   `include_plugin_definitions` steer decK's own reads of a gateway and
//!   change nothing in a loaded file: accepted and ignored.
//!   `skip_hash_for_basic_auth: true` is refused (decK allows it with
//!   Konnect only).

use serde_json::{Map, Value};

use super::collect::Pending;
use crate::entities::EntityKind;
use crate::error::FieldError;
use crate::schema::{definition, is_missing};

/// What `_info` asks of the entities.
#[derive(Debug, Default)]
pub(super) struct Info {
    select_tags: Vec<String>,
    defaults: Vec<(EntityKind, Map<String, Value>)>,
}

/// `_info.defaults` keys: entity, its kind, and the fields it may not set.
const DEFAULTS: &[(&str, EntityKind, &[&str])] = &[
    ("service", EntityKind::Services, &["id", "name"]),
    ("route", EntityKind::Routes, &["id", "name"]),
    ("upstream", EntityKind::Upstreams, &["id", "name"]),
    ("target", EntityKind::Targets, &["id", "target"]),
];

/// Reads (and checks) `_info`, `_workspace` and `_konnect`; `None` when
/// there is no `_info` or it is invalid (the errors say why).
pub(super) fn read(document: &Map<String, Value>, errors: &mut Vec<FieldError>) -> Option<Info> {
    match document.get("_workspace") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) if name == "default" => {}
        Some(_) => errors.push(FieldError::new(
            "_workspace",
            "only the 'default' workspace exists (Kong OSS has one workspace)",
        )),
    }
    if document.contains_key("_konnect") {
        errors.push(FieldError::new(
            "_konnect",
            "Konnect control planes are not supported: remove `_konnect` to load this file into Strait",
        ));
    }
    let info = match document.get("_info") {
        None | Some(Value::Null) => return None,
        Some(Value::Object(info)) => info,
        Some(_) => {
            errors.push(FieldError::new("_info", "expected a record"));
            return None;
        }
    };
    let before = errors.len();
    let mut read = Info::default();
    for (key, value) in info {
        let path = format!("_info.{key}");
        match (key.as_str(), value) {
            (_, Value::Null) => {}
            ("select_tags", Value::Array(tags)) => {
                for (at, tag) in tags.iter().enumerate() {
                    match tag.as_str() {
                        Some(tag) if !read.select_tags.iter().any(|t| t == tag) => {
                            read.select_tags.push(tag.to_string())
                        }
                        Some(_) => {}
                        None => errors.push(FieldError::new(format!("{path}[{at}]"), "expected a string")),
                    }
                }
            }
            ("select_tags", _) => errors.push(FieldError::new(path, "expected a set")),
            ("defaults", Value::Object(defaults)) => read_defaults(&path, defaults, &mut read, errors),
            ("defaults", _) => errors.push(FieldError::new(path, "expected a record")),
            ("default_lookup_tags", Value::Object(_)) => {}
            ("default_lookup_tags", _) => errors.push(FieldError::new(path, "expected a record")),
            ("consumer_group_policy_overrides" | "include_plugin_definitions", Value::Bool(_)) => {}
            ("skip_hash_for_basic_auth", Value::Bool(false)) => {}
            ("skip_hash_for_basic_auth", Value::Bool(true)) => errors.push(FieldError::new(
                path,
                "decK allows skipping the basic-auth password hash with Konnect only",
            )),
            ("consumer_group_policy_overrides" | "include_plugin_definitions" | "skip_hash_for_basic_auth", _) => {
                errors.push(FieldError::new(path, "expected a boolean"))
            }
            _ => errors.push(FieldError::new(path, "unknown field")),
        }
    }
    (errors.len() == before).then_some(read)
}

fn read_defaults(path: &str, defaults: &Map<String, Value>, read: &mut Info, errors: &mut Vec<FieldError>) {
    for (entity, fields) in defaults {
        let path = format!("{path}.{entity}");
        let Some((_, kind, restricted)) = DEFAULTS.iter().find(|(name, _, _)| name == entity) else {
            errors.push(FieldError::new(path, "unknown field"));
            continue;
        };
        match fields {
            Value::Null => {}
            Value::Object(fields) => {
                let mut kept = Map::new();
                for (field, value) in fields {
                    if restricted.contains(&field.as_str()) {
                        errors.push(FieldError::new(
                            format!("{path}.{field}"),
                            "defaults cannot set an entity's id or name",
                        ));
                    } else if !is_missing(Some(value)) {
                        kept.insert(field.clone(), value.clone());
                    }
                }
                read.defaults.push((*kind, kept));
            }
            _ => errors.push(FieldError::new(path, "expected a record")),
        }
    }
}

impl Info {
    /// Add the select tags and fill the defaults into every pending entity.
    pub(super) fn apply(&self, pending: &mut [Pending]) {
        for item in pending {
            if !self.select_tags.is_empty() && definition(item.kind).fields.iter().any(|(name, _)| *name == "tags") {
                add_tags(&mut item.input, &self.select_tags);
            }
            for (_, defaults) in self.defaults.iter().filter(|(kind, _)| *kind == item.kind) {
                for (field, value) in defaults {
                    if is_missing(item.input.get(field)) {
                        item.input.insert(field.clone(), value.clone());
                    }
                }
            }
        }
    }
}

/// Append each tag `input`'s `tags` lacks; tags that are not a list are left
/// for validation to report.
fn add_tags(input: &mut Map<String, Value>, select: &[String]) {
    match input.get_mut("tags") {
        None | Some(Value::Null) => {
            input.insert("tags".into(), select.iter().cloned().map(Value::String).collect());
        }
        Some(Value::Array(tags)) => {
            for tag in select {
                if !tags.iter().any(|t| t.as_str() == Some(tag)) {
                    tags.push(Value::String(tag.clone()));
                }
            }
        }
        Some(_) => {}
    }
}
