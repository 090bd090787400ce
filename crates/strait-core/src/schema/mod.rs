//! Kong's entity schemas: validation of user input with every violation and
//! its path, defaults, shorthands, generated ids and timestamps, and the
//! `/schemas/{entity}` description.
//!
//! Each kind is a list of [`field::Field`]s (data, like Kong's schema tables)
//! checked by one generic engine, plus a `finish` step for rules that span
//! fields. No I/O and no clock: the caller passes `now`.

mod balancer;
pub mod compat;
mod credentials;
pub mod deck_testdata;
mod engine;
pub mod field;
pub mod formats;
mod identity;
pub mod kong_dsl;
pub mod plugins;
mod proxy;
mod route_rules;
mod router_flavor;
mod secrets;
mod wasm;

use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::delta::Entity;
use crate::entities::EntityKind;
use crate::error::FieldError;
use field::Field;

pub use balancer::default_healthchecks;
pub use credentials::{
    basicauth_password_hash, is_oauth2_secret_hash, oauth2_secret_hash, oauth2_secret_verify, transform_on_write,
    transforms_on_write, JWT_ALGORITHMS, JWT_ALGORITHMS_NEEDING_PUBLIC_KEY,
};
pub use formats::ROUTE_PATH_START;
pub use identity::BUNDLED_PLUGINS;
pub use plugins::{
    mirror_shorthands, plugin_schema_json, plugins_with_schema, register_plugin_schema, validate_plugin_config,
    ConfigShorthand, PluginSchema,
};
pub use route_rules::{ROUTE_HTTPS_NEEDS_MATCHER, ROUTE_HTTP_NEEDS_MATCHER};
pub use router_flavor::RouterFlavor;
pub use secrets::{check_jwk, plugin_has_references, referenceable_fields, references_in, resolve_references};
#[cfg(test)]
pub(crate) use wasm::test_guard as wasm_test_guard;
pub use wasm::{
    filter_config_schema, set_wasm_filters, wasm_enabled, wasm_filter_names, FilterConfigCheck, WasmFilterInfo,
    NO_SUCH_FILTER, NO_WASM_FILTERS, WASM_DISABLED,
};

type Shorthand = fn(&mut Map<String, Value>, &mut Vec<FieldError>);
type Finish = fn(&mut Map<String, Value>, &Map<String, Value>, &mut Vec<FieldError>);

/// One entity kind's schema.
pub(crate) struct EntityDef {
    pub fields: Vec<(&'static str, Field)>,
    /// Kong's `endpoint_key`: the unique field that names an entity.
    pub endpoint_key: Option<&'static str>,
    /// Rewrites input before validation (service `url`, upstream `hash_on`).
    pub shorthand: Shorthand,
    /// Cross-field checks and normalization on the validated values; the
    /// second argument is the input as given.
    pub finish: Finish,
    /// Kong's `entity_checks` description for `/schemas`.
    pub entity_checks: Value,
}

impl EntityDef {
    /// A schema that is its fields alone: no shorthand, no cross-field
    /// rule, no entity checks to describe.
    pub(crate) fn plain(fields: Vec<(&'static str, Field)>, endpoint_key: Option<&'static str>) -> EntityDef {
        EntityDef {
            fields,
            endpoint_key,
            shorthand: |_, _| {},
            finish: |_, _, _| {},
            entity_checks: json!([]),
        }
    }
}

/// The schema of `kind`, built once: validation reads it for every entity
/// of every document.
pub(crate) fn definition(kind: EntityKind) -> &'static EntityDef {
    static DEFINITIONS: std::sync::LazyLock<Vec<EntityDef>> =
        std::sync::LazyLock::new(|| EntityKind::ALL.into_iter().map(build_definition).collect());
    let at = EntityKind::ALL.iter().position(|k| *k == kind).unwrap_or_default();
    &DEFINITIONS[at]
}

fn build_definition(kind: EntityKind) -> EntityDef {
    match kind {
        EntityKind::Services => proxy::service(),
        EntityKind::Routes => proxy::route(),
        EntityKind::FilterChains => wasm::filter_chain(),
        EntityKind::Upstreams => balancer::upstream(),
        EntityKind::Targets => balancer::target(),
        EntityKind::Consumers => identity::consumer(),
        EntityKind::KeyauthCredentials => credentials::keyauth_credential(),
        EntityKind::BasicauthCredentials => credentials::basicauth_credential(),
        EntityKind::Acls => credentials::acl(),
        EntityKind::JwtSecrets => credentials::jwt_secret(),
        EntityKind::HmacauthCredentials => credentials::hmacauth_credential(),
        EntityKind::Oauth2Credentials => credentials::oauth2_credential(),
        EntityKind::Plugins => identity::plugin(),
        EntityKind::Certificates => identity::certificate(),
        EntityKind::Snis => identity::sni(),
        EntityKind::CaCertificates => identity::ca_certificate(),
        EntityKind::Vaults => secrets::vault(),
        EntityKind::KeySets => secrets::key_set(),
        EntityKind::Keys => secrets::key(),
        EntityKind::ConsumerGroups => identity::consumer_group(),
        EntityKind::ConsumerGroupConsumers => identity::consumer_group_consumer(),
    }
}

/// `id`, `created_at`, `updated_at`; timestamps are floats for targets.
fn auto_fields(float_timestamps: bool) -> Vec<(&'static str, Field)> {
    let timestamp = || match float_timestamps {
        true => Field::number().auto(),
        false => Field::integer().auto(),
    };
    vec![
        ("id", Field::string().uuid().auto()),
        ("created_at", timestamp()),
        ("updated_at", timestamp()),
    ]
}

fn tags_field() -> Field {
    Field::set(Field::string().required().check(formats::tag))
}

/// Kong's `is_nonempty`: not null, not an empty string, array or object.
pub(crate) fn is_nonempty(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(map) => !map.is_empty(),
        _ => true,
    }
}

/// The name of the field that names entities of this kind (`name`,
/// `username`, `key`, `instance_name`), if any.
pub fn endpoint_key(kind: EntityKind) -> Option<&'static str> {
    definition(kind).endpoint_key
}

/// The fields of `kind` that reference other entities, with the kind each
/// one points at.
pub fn foreign_fields(kind: EntityKind) -> impl Iterator<Item = (&'static str, EntityKind)> {
    definition(kind)
        .fields
        .iter()
        .filter_map(|(name, field)| match field.ty {
            field::FieldType::Foreign(table) => EntityKind::from_table(table).map(|k| (*name, k)),
            _ => None,
        })
}

/// The fields of `kind` whose values must be unique among its entities.
pub fn unique_fields(kind: EntityKind) -> impl Iterator<Item = &'static str> {
    definition(kind)
        .fields
        .iter()
        .filter(|(_, field)| field.unique)
        .map(|(name, _)| *name)
}

/// The deterministic id of an entity of `kind` named `key` (by its endpoint
/// key): a name-based (RFC 4122 version 3) UUID, so the same declarative
/// file always yields the same ids.
pub fn entity_id_for_key(kind: EntityKind, key: &str) -> Uuid {
    use md5::{Digest, Md5};
    let digest = Md5::digest(format!("strait:{}:{key}", kind.table()).as_bytes());
    uuid::Builder::from_md5_bytes(digest.into()).into_uuid()
}

/// The id of `consumer`'s membership of `group`: one per pair, the same
/// on every node and in every file.
pub fn membership_id(group: Uuid, consumer: Uuid) -> Uuid {
    entity_id_for_key(EntityKind::ConsumerGroupConsumers, &format!("{group}:{consumer}"))
}

/// Validates one entity as a user wrote it, fills defaults, applies
/// shorthands, and generates `id` / timestamps when absent.
pub fn validate_entity(kind: EntityKind, input: &Value, now: i64) -> Result<Entity, Vec<FieldError>> {
    let Some(object) = input.as_object() else {
        return Err(vec![FieldError::new("", "expected a record")]);
    };
    validate_record_of(kind, object.clone(), now)
}

/// [`validate_entity`] on a record the caller gives up.
pub fn validate_record_of(
    kind: EntityKind,
    mut given: Map<String, Value>,
    now: i64,
) -> Result<Entity, Vec<FieldError>> {
    let def = definition(kind);
    let mut errors = Vec::new();
    (def.shorthand)(&mut given, &mut errors);
    let mut out = engine::validate_record(&def.fields, &given, &engine::At::Text(""), &mut errors);
    (def.finish)(&mut out, &given, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    fill_auto_fields(kind, def, &mut out, now);
    to_entity(kind, Value::Object(out)).map_err(|e| vec![FieldError::new("", e.to_string())])
}

fn fill_auto_fields(kind: EntityKind, def: &EntityDef, out: &mut Map<String, Value>, now: i64) {
    if is_missing(out.get("id")) {
        let key = def
            .endpoint_key
            .and_then(|field| out.get(field))
            .and_then(Value::as_str)
            .filter(|key| !key.is_empty());
        let id = match key {
            Some(key) => entity_id_for_key(kind, key),
            None => Uuid::new_v4(),
        };
        out.insert("id".into(), json!(id));
    }
    for field in ["created_at", "updated_at"] {
        let known = def.fields.iter().any(|(name, _)| *name == field);
        if known && is_missing(out.get(field)) {
            let stamp = match kind {
                EntityKind::Targets => json!(now as f64),
                _ => json!(now),
            };
            out.insert(field.into(), stamp);
        }
    }
}

/// True for an absent or null value.
pub(crate) fn is_missing(value: Option<&Value>) -> bool {
    matches!(value, None | Some(Value::Null))
}

fn to_entity(kind: EntityKind, value: Value) -> Result<Entity, serde_json::Error> {
    use serde_json::from_value;
    Ok(match kind {
        EntityKind::Services => Entity::Service(from_value(value)?),
        EntityKind::Routes => Entity::Route(from_value(value)?),
        EntityKind::FilterChains => Entity::FilterChain(from_value(value)?),
        EntityKind::Upstreams => Entity::Upstream(from_value(value)?),
        EntityKind::Targets => Entity::Target(from_value(value)?),
        EntityKind::Consumers => Entity::Consumer(from_value(value)?),
        EntityKind::KeyauthCredentials => Entity::KeyauthCredential(from_value(value)?),
        EntityKind::BasicauthCredentials => Entity::BasicauthCredential(from_value(value)?),
        EntityKind::Acls => Entity::Acl(from_value(value)?),
        EntityKind::JwtSecrets => Entity::JwtSecret(from_value(value)?),
        EntityKind::HmacauthCredentials => Entity::HmacauthCredential(from_value(value)?),
        EntityKind::Oauth2Credentials => Entity::Oauth2Credential(from_value(value)?),
        EntityKind::Plugins => Entity::Plugin(from_value(value)?),
        EntityKind::Certificates => Entity::Certificate(from_value(value)?),
        EntityKind::Snis => Entity::Sni(from_value(value)?),
        EntityKind::CaCertificates => Entity::CaCertificate(from_value(value)?),
        EntityKind::Vaults => Entity::Vault(from_value(value)?),
        EntityKind::KeySets => Entity::KeySet(from_value(value)?),
        EntityKind::Keys => Entity::Key(from_value(value)?),
        EntityKind::ConsumerGroups => Entity::ConsumerGroup(from_value(value)?),
        EntityKind::ConsumerGroupConsumers => Entity::ConsumerGroupConsumer(from_value(value)?),
    })
}

/// Kong's `/schemas/{entity}` description: `{"fields": [...], "entity_checks": [...]}`.
pub fn entity_schema_json(kind: EntityKind) -> Value {
    let def = definition(kind);
    let mut schema = json!({
        "fields": field::fields_to_json(&def.fields),
        "entity_checks": def.entity_checks.clone(),
    });
    if kind == EntityKind::FilterChains {
        wasm::describe_filter_chain(&mut schema);
    }
    schema
}

#[cfg(test)]
mod tests;
