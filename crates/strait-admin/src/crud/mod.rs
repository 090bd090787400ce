//! Entity endpoints: Kong's generated CRUD API over the store.
//!
//! Reads (`read`, `pagination`) go straight to the store. Writes (`write`,
//! `delete`, `nested`) follow one path: parse the body (`body`), resolve
//! foreign keys given by name, validate with `strait_core::schema`, commit
//! every change (cascades included) in one store transaction, then publish
//! that transaction's delta and wait for it, so a 2xx means the change is
//! live on the proxy.

pub mod attempts;
pub mod body;
pub mod certificates;
pub mod consumer_groups;
pub mod delete;
pub mod handlers;
pub mod nested;
pub mod pagination;
pub mod read;
pub mod write;

use serde_json::{json, Value};
use strait_core::schema::endpoint_key;
use strait_core::{Entity, EntityKind};
use strait_store::keys::FOREIGN_FIELDS;
use uuid::Uuid;

use crate::response::{failure, AdminResponse};
use crate::AdminState;

/// The path segment of a kind's top-level collection (`/key-auths`).
pub fn collection_name(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::KeyauthCredentials => "key-auths",
        EntityKind::BasicauthCredentials => "basic-auths",
        EntityKind::JwtSecrets => "jwts",
        EntityKind::HmacauthCredentials => "hmac-auths",
        EntityKind::Oauth2Credentials => "oauth2",
        EntityKind::KeySets => "key-sets",
        EntityKind::FilterChains => "filter-chains",
        other => other.table(),
    }
}

/// The path segment of a kind under its parent (`/consumers/{c}/key-auth`).
pub fn nested_name(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::KeyauthCredentials => "key-auth",
        EntityKind::BasicauthCredentials => "basic-auth",
        EntityKind::JwtSecrets => "jwt",
        EntityKind::HmacauthCredentials => "hmac-auth",
        other => collection_name(other),
    }
}

pub fn kind_for_collection(segment: &str) -> Option<EntityKind> {
    EntityKind::ALL
        .into_iter()
        .filter(|k| crate::endpoints::has_collection(*k))
        .find(|k| collection_name(*k) == segment)
}

/// `(child kind, foreign key field)` for `/{parent}/{id}/{segment}`.
pub fn child_relation(parent: EntityKind, segment: &str) -> Option<(EntityKind, &'static str)> {
    FOREIGN_FIELDS
        .iter()
        .filter(|(child, _, _)| crate::endpoints::has_collection(*child))
        .find(|(child, _, p)| *p == parent && nested_name(*child) == segment)
        .map(|(child, field, _)| (*child, *field))
}

/// `(foreign key field, parent kind)` for `/{kind}/{id}/{segment}`.
pub fn parent_relation(kind: EntityKind, segment: &str) -> Option<(&'static str, EntityKind)> {
    FOREIGN_FIELDS
        .iter()
        .find(|(child, field, _)| *child == kind && *field == segment)
        .map(|(_, field, parent)| (*field, *parent))
}

/// The entity as Kong renders it (certificates also list their SNI names).
pub fn render(state: &AdminState, entity: &Entity) -> Result<Value, AdminResponse> {
    let tagged = serde_json::to_value(entity).map_err(|e| failure(&e))?;
    let mut value = tagged.get("entity").cloned().unwrap_or(Value::Null);
    match entity {
        Entity::Certificate(cert) => value["snis"] = json!(certificates::sni_names(state, cert.id)?),
        // Kong 3.9 answers with a plugin's deprecated config fields too,
        // each mirroring the field it stands for.
        Entity::Plugin(plugin) => {
            if let Some(config) = value.get_mut("config").and_then(Value::as_object_mut) {
                strait_core::schema::mirror_shorthands(&plugin.name, config);
            }
        }
        _ => {}
    }
    Ok(value)
}

/// The id a path segment names: as in Kong (`uuid.is_valid_uuid`), only a
/// UUID in its hyphenated form. Anything else, a generated 32-hex key-auth
/// or JWT key included, is an endpoint key.
pub fn path_id(key: &str) -> Option<Uuid> {
    Uuid::try_parse(key).ok().filter(|_| key.len() == 36)
}

/// An entity addressed by id or endpoint key (name, username, key,
/// instance_name; an SNI name for certificates). `Ok(None)` when absent.
pub fn find(state: &AdminState, kind: EntityKind, key: &str) -> Result<Option<Entity>, AdminResponse> {
    let found = match path_id(key) {
        Some(id) => state.store.get(kind, id),
        None if kind == EntityKind::Certificates => return certificates::by_sni_name(state, key),
        None => match endpoint_key(kind) {
            Some(field) => state.store.get_by_unique(kind, field, key),
            None => Ok(None),
        },
    };
    found.map_err(|e| failure(&e))
}

/// The foreign key `field` of `entity`, when set.
pub fn foreign_id(entity: &Entity, field: &str) -> Option<Uuid> {
    strait_store::keys::foreign_keys(entity)
        .into_iter()
        .find(|(name, _, _)| *name == field)
        .map(|(_, _, id)| id)
}

/// Seconds since the epoch (entity timestamps).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
