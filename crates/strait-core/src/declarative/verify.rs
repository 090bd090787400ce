//! Per-entity validation, document-wide uniqueness, and the final result:
//! a `Config`, or a `ConfigError` with full paths and Kong's flattened errors.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::collect::{item_at, Pending};
use super::resolve::uniqueness_message;
use super::Located;
use crate::delta::Entity;
use crate::entities::{Config, EntityKind};
use crate::error::{kong_path, ConfigError, FieldError, FlattenedEntityError, FlattenedFieldError};
use crate::schema::{
    endpoint_key, is_missing, transform_on_write, transforms_on_write, unique_fields, validate_record_of, RouterFlavor,
};

/// Validates every entity with its resolved references and assigned id.
/// Each input is taken (not copied) unless `keep_input` and the entity's
/// kind has a write transformation, which reads what was given.
pub(super) fn validate_all(
    pending: &mut [Pending],
    ids: &[Uuid],
    now: i64,
    flavor: RouterFlavor,
    keep_input: bool,
    errors: &mut Vec<Located>,
) -> Vec<Option<Entity>> {
    pending
        .iter_mut()
        .enumerate()
        .map(|(at, entity)| {
            entity.key_given = endpoint_key(entity.kind).is_some_and(|key| entity.input.contains_key(key));
            let input = match keep_input && transforms_on_write(entity.kind) {
                true => entity.input.clone(),
                false => std::mem::take(&mut entity.input),
            };
            match validate_input(entity.kind, input, ids[at], now, flavor) {
                Ok(valid) => Some(valid),
                Err(found) => {
                    errors.extend(found.into_iter().map(|error| Located {
                        entity: Some(at),
                        error,
                    }));
                    None
                }
            }
        })
        .collect()
}

/// One entity's input (references resolved) validated with the id it was
/// given, against the schema and the node's router flavor.
pub(super) fn validate_input(
    kind: EntityKind,
    mut input: Map<String, Value>,
    id: Uuid,
    now: i64,
    flavor: RouterFlavor,
) -> Result<Entity, Vec<FieldError>> {
    if is_missing(input.get("id")) {
        input.insert("id".into(), json!(id));
    }
    let flavor_errors = flavor.violations(kind, &input);
    match validate_record_of(kind, input, now) {
        Ok(valid) if flavor_errors.is_empty() => Ok(valid),
        Ok(_) => Err(flavor_errors),
        Err(mut found) => {
            found.extend(flavor_errors);
            Err(found)
        }
    }
}

/// Kong's write transformations on every entity, each given as written.
pub(super) fn transform_all(pending: &[Pending], entities: &mut [Option<Entity>]) {
    for (entity, written) in entities.iter_mut().zip(pending) {
        if let Some(entity) = entity {
            transform_on_write(entity, &written.input);
        }
    }
}

/// The entity's own fields as JSON (without the `kind` tag).
fn entity_fields(entity: &Entity) -> Value {
    let tagged = serde_json::to_value(entity).unwrap_or(Value::Null);
    tagged.get("entity").cloned().unwrap_or(Value::Null)
}

/// A unique text field read straight from the typed entity; `None` for a
/// field this list does not know (then the entity is read as JSON).
fn unique_text<'e>(entity: &'e Entity, field: &str) -> Option<Option<&'e str>> {
    Some(match (entity, field) {
        (Entity::Service(e), "name") => e.name.as_deref(),
        (Entity::Route(e), "name") => e.name.as_deref(),
        (Entity::FilterChain(e), "name") => e.name.as_deref(),
        (Entity::Upstream(e), "name") => Some(&e.name),
        (Entity::Consumer(e), "username") => e.username.as_deref(),
        (Entity::Consumer(e), "custom_id") => e.custom_id.as_deref(),
        (Entity::Plugin(e), "instance_name") => e.instance_name.as_deref(),
        (Entity::Sni(e), "name") => Some(&e.name),
        (Entity::CaCertificate(e), "cert_digest") => e.cert_digest.as_deref(),
        (Entity::KeyauthCredential(e), "key") => Some(&e.key),
        (Entity::BasicauthCredential(e), "username") => Some(&e.username),
        (Entity::JwtSecret(e), "key") => Some(&e.key),
        (Entity::HmacauthCredential(e), "username") => Some(&e.username),
        (Entity::Oauth2Credential(e), "client_id") => Some(&e.client_id),
        _ => return None,
    })
}

/// Unique fields other than the endpoint key (checked while indexing), and
/// endpoint keys generated during validation (key-auth keys).
pub(super) fn check_unique_fields(pending: &[Pending], entities: &[Option<Entity>], errors: &mut Vec<Located>) {
    let mut seen: HashMap<(EntityKind, &str, Cow<'_, str>), usize> = HashMap::new();
    for (at, entity) in entities.iter().enumerate() {
        let Some(entity) = entity else { continue };
        let kind = entity.kind();
        for_unique_values(entity, pending[at].key_given, |field, value| {
            if seen.insert((kind, field, value.clone()), at).is_some() {
                let message = uniqueness_message(kind.table(), field, &value);
                errors.push(Located::entity(at, message));
            }
        });
    }
}

/// Calls `each` with every unique field value of `entity` that the
/// document-wide check compares (the endpoint key only when it was
/// generated, not given: given keys are compared while indexing).
pub(super) fn for_unique_values<'e>(
    entity: &'e Entity,
    key_given: bool,
    mut each: impl FnMut(&'static str, Cow<'e, str>),
) {
    let kind = entity.kind();
    let mut as_json: Option<Value> = None;
    for field in unique_fields(kind) {
        if endpoint_key(kind) == Some(field) && key_given {
            continue;
        }
        let value: Cow<'e, str> = match unique_text(entity, field) {
            Some(Some(text)) => Cow::Borrowed(text),
            Some(None) => continue,
            None => {
                let values = as_json.get_or_insert_with(|| entity_fields(entity));
                match values.get(field) {
                    Some(Value::String(text)) => Cow::Owned(text.clone()),
                    // A unique foreign key (a filter chain's route or
                    // service) compares the id it points at.
                    Some(Value::Object(key)) => match key.get("id") {
                        Some(Value::String(id)) => Cow::Owned(id.clone()),
                        _ => continue,
                    },
                    _ => continue,
                }
            }
        };
        each(field, value);
    }
}

/// At most one plugin of a name per (route, service, consumer) scope.
pub(super) fn check_plugin_scopes(entities: &[Option<Entity>], errors: &mut Vec<Located>) {
    check_unique_key(
        entities,
        |entity| match entity {
            Entity::Plugin(plugin) => Some((
                plugin.name.as_str(),
                plugin.route.map(|fk| fk.id),
                plugin.service.map(|fk| fk.id),
                plugin.consumer.map(|fk| fk.id),
                plugin.consumer_group.map(|fk| fk.id),
            )),
            _ => None,
        },
        |entity| match entity {
            Entity::Plugin(plugin) => format!("{} for this scope", uniqueness_message("plugins", "name", &plugin.name)),
            _ => String::new(),
        },
        errors,
    );
}

/// Errors at every entity whose `key` an earlier entity already had; the
/// message is built only for those.
fn check_unique_key<'a, K: std::hash::Hash + Eq>(
    entities: &'a [Option<Entity>],
    key: impl Fn(&'a Entity) -> Option<K>,
    message: impl Fn(&'a Entity) -> String,
    errors: &mut Vec<Located>,
) {
    let mut seen = HashMap::new();
    for (at, entity) in entities.iter().enumerate() {
        let Some(entity) = entity else { continue };
        let Some(key) = key(entity) else { continue };
        if seen.insert(key, at).is_some() {
            errors.push(Located::entity(at, message(entity)));
        }
    }
}

/// A consumer is in a consumer group at most once, however the file lists
/// the membership (under the consumer, under the group, or flat).
pub(super) fn check_memberships(entities: &[Option<Entity>], errors: &mut Vec<Located>) {
    check_unique_key(
        entities,
        |entity| match entity {
            Entity::ConsumerGroupConsumer(m) => Some((m.consumer_group.id, m.consumer.id)),
            _ => None,
        },
        |_| "the consumer is already a member of this consumer group".to_string(),
        errors,
    );
}

/// A consumer is in an ACL group at most once (Kong's ACL cache key).
pub(super) fn check_acl_groups(entities: &[Option<Entity>], errors: &mut Vec<Located>) {
    check_unique_key(
        entities,
        |entity| match entity {
            Entity::Acl(acl) => Some((acl.consumer.id, acl.group.as_str())),
            _ => None,
        },
        |entity| match entity {
            Entity::Acl(acl) => format!("{} for this consumer", uniqueness_message("acls", "group", &acl.group)),
            _ => String::new(),
        },
        errors,
    );
}

/// Puts valid entities into a `Config`, keeping document order per kind.
pub(super) fn assemble(entities: Vec<Option<Entity>>) -> Config {
    let mut config = Config::default();
    let mut counts: HashMap<EntityKind, usize> = HashMap::new();
    for entity in entities.iter().flatten() {
        *counts.entry(entity.kind()).or_default() += 1;
    }
    let count = |kind| counts.get(&kind).copied().unwrap_or(0);
    config.vaults.reserve_exact(count(EntityKind::Vaults));
    config.key_sets.reserve_exact(count(EntityKind::KeySets));
    config.keys.reserve_exact(count(EntityKind::Keys));
    config.consumer_groups.reserve_exact(count(EntityKind::ConsumerGroups));
    config
        .consumer_group_consumers
        .reserve_exact(count(EntityKind::ConsumerGroupConsumers));
    config.services.reserve_exact(count(EntityKind::Services));
    config.routes.reserve_exact(count(EntityKind::Routes));
    config.filter_chains.reserve_exact(count(EntityKind::FilterChains));
    config.upstreams.reserve_exact(count(EntityKind::Upstreams));
    config.targets.reserve_exact(count(EntityKind::Targets));
    config.consumers.reserve_exact(count(EntityKind::Consumers));
    config.plugins.reserve_exact(count(EntityKind::Plugins));
    config.certificates.reserve_exact(count(EntityKind::Certificates));
    config.snis.reserve_exact(count(EntityKind::Snis));
    config.ca_certificates.reserve_exact(count(EntityKind::CaCertificates));
    config
        .keyauth_credentials
        .reserve_exact(count(EntityKind::KeyauthCredentials));
    config
        .basicauth_credentials
        .reserve_exact(count(EntityKind::BasicauthCredentials));
    config.acls.reserve_exact(count(EntityKind::Acls));
    config.jwt_secrets.reserve_exact(count(EntityKind::JwtSecrets));
    config
        .hmacauth_credentials
        .reserve_exact(count(EntityKind::HmacauthCredentials));
    config
        .oauth2_credentials
        .reserve_exact(count(EntityKind::Oauth2Credentials));
    for entity in entities.into_iter().flatten() {
        match entity {
            Entity::Vault(e) => config.vaults.push(e),
            Entity::KeySet(e) => config.key_sets.push(e),
            Entity::Key(e) => config.keys.push(e),
            Entity::ConsumerGroup(e) => config.consumer_groups.push(e),
            Entity::ConsumerGroupConsumer(e) => config.consumer_group_consumers.push(e),
            Entity::Service(e) => config.services.push(e),
            Entity::Route(e) => config.routes.push(e),
            Entity::FilterChain(e) => config.filter_chains.push(e),
            Entity::Upstream(e) => config.upstreams.push(*e),
            Entity::Target(e) => config.targets.push(e),
            Entity::Consumer(e) => config.consumers.push(e),
            Entity::Plugin(e) => config.plugins.push(e),
            Entity::Certificate(e) => config.certificates.push(e),
            Entity::Sni(e) => config.snis.push(e),
            Entity::CaCertificate(e) => config.ca_certificates.push(e),
            Entity::KeyauthCredential(e) => config.keyauth_credentials.push(e),
            Entity::BasicauthCredential(e) => config.basicauth_credentials.push(e),
            Entity::Acl(e) => config.acls.push(e),
            Entity::JwtSecret(e) => config.jwt_secrets.push(e),
            Entity::HmacauthCredential(e) => config.hmacauth_credentials.push(e),
            Entity::Oauth2Credential(e) => config.oauth2_credentials.push(e),
        }
    }
    config
}

/// Document-level errors first, then each entity's in document order.
pub(super) fn config_error(
    top_level: Vec<FieldError>,
    mut located: Vec<Located>,
    pending: &[Pending],
    written: &Map<String, Value>,
) -> ConfigError {
    located.sort_by_key(|l| l.entity);
    let flattened = flatten(&located, pending, written);
    let mut errors = top_level;
    errors.extend(located.into_iter().map(|l| match l.entity {
        Some(at) => l.error.under(&pending[at].path),
        None => l.error,
    }));
    ConfigError { errors, flattened }
}

fn flatten(located: &[Located], pending: &[Pending], written: &Map<String, Value>) -> Vec<FlattenedEntityError> {
    let mut out: Vec<FlattenedEntityError> = Vec::new();
    let mut last: Option<usize> = None;
    for item in located {
        let Some(at) = item.entity else { continue };
        if last != Some(at) {
            out.push(flattened_entity(&pending[at], written));
            last = Some(at);
        }
        let error = &item.error;
        let field_error = FlattenedFieldError {
            field: (!error.path.is_empty()).then(|| kong_path(&error.path)),
            kind: if error.path.is_empty() { "entity" } else { "field" }.to_string(),
            message: error.message.clone(),
        };
        if let Some(entry) = out.last_mut() {
            entry.errors.push(field_error);
        }
    }
    out
}

fn flattened_entity(entity: &Pending, written: &Map<String, Value>) -> FlattenedEntityError {
    let raw = item_at(written, &entity.path).unwrap_or(Value::Null);
    let text = |field: &str| raw.get(field).and_then(Value::as_str).map(str::to_string);
    let tags = raw
        .get("tags")
        .and_then(Value::as_array)
        .and_then(|items| items.iter().map(|t| t.as_str().map(str::to_string)).collect());
    FlattenedEntityError {
        entity_type: entity.kind.singular().to_string(),
        entity_name: text("name"),
        entity_id: text("id").filter(|id| Uuid::parse_str(id).is_ok()),
        entity_tags: tags,
        entity: raw.clone(),
        errors: Vec::new(),
    }
}
