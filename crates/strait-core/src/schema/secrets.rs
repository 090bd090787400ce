//! Schemas of secret material: vaults (where `{vault://...}` references are
//! read from), key sets and keys (Kong's `keys.lua`, `key_sets.lua`,
//! `vaults.lua` and `typedefs.pem` / `typedefs.jwk`), and the walk over an
//! entity's referenceable fields.

use std::sync::{Arc, PoisonError, RwLock};

use serde_json::{json, Map, Value};

use super::field::{Field, FieldType};
use super::formats;
use super::{auto_fields, definition, tags_field, EntityDef};
use crate::delta::Entity;
use crate::entities::EntityKind;
use crate::error::FieldError;
use crate::vault::{is_reference, valid_vault_prefix, VAULT_NAMES};

pub(crate) fn vault() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([
        ("prefix", Field::string().required().unique().check(vault_prefix)),
        ("name", Field::string().required().check(vault_name)),
        ("description", Field::string()),
        ("config", Field::object()),
        ("tags", tags_field()),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("prefix"),
        shorthand: |_, _| {},
        finish: vault_config,
        entity_checks: json!([]),
    }
}

fn vault_prefix(prefix: &str) -> Result<(), String> {
    if VAULT_NAMES.contains(&prefix) {
        return Err(format!("must not be one of: {}", VAULT_NAMES.join(", ")));
    }
    match valid_vault_prefix(prefix) {
        true => Ok(()),
        false => Err(format!("invalid value: {prefix}")),
    }
}

fn vault_name(name: &str) -> Result<(), String> {
    match VAULT_NAMES.contains(&name) {
        true => Ok(()),
        false => Err(format!("vault '{name}' is not installed")),
    }
}

/// Each implementation's `config` record: `env` takes Kong's `prefix`
/// (prepended to the variable name); `file` takes `base_path`, the
/// directory its resources are files in.
pub(crate) fn vault_config_fields(name: &str) -> Option<Vec<(&'static str, Field)>> {
    match name {
        "env" => Some(vec![("prefix", Field::string().check(env_prefix))]),
        "file" => Some(vec![("base_path", Field::string().required().check(absolute_path))]),
        _ => None,
    }
}

fn env_prefix(prefix: &str) -> Result<(), String> {
    let bytes = prefix.as_bytes();
    let first = |b: &u8| b.is_ascii_alphabetic() || *b == b'_' || *b == b'-';
    let rest = |b: &u8| first(b) || b.is_ascii_digit();
    match bytes.first().is_some_and(first) && bytes.iter().all(rest) {
        true => Ok(()),
        false => Err(format!("invalid value: {prefix}")),
    }
}

fn absolute_path(path: &str) -> Result<(), String> {
    match path.starts_with('/') {
        true => Ok(()),
        false => Err("must be an absolute path".to_string()),
    }
}

fn vault_config(out: &mut Map<String, Value>, _: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    let Some(fields) = out.get("name").and_then(Value::as_str).and_then(vault_config_fields) else {
        return;
    };
    let given = match out.get("config") {
        Some(Value::Object(config)) => config.clone(),
        _ => Map::new(),
    };
    let at = super::engine::At::Text("config");
    let config = super::engine::validate_record(&fields, &given, &at, errors);
    out.insert("config".into(), Value::Object(config));
}

pub(crate) fn key_set() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([("name", Field::string().unique()), ("tags", tags_field())]);
    EntityDef::plain(fields, Some("name"))
}

pub(crate) fn key() -> EntityDef {
    let mut fields = auto_fields(false);
    fields.extend([
        ("set", Field::foreign("key_sets")),
        ("name", Field::string().unique()),
        ("kid", Field::string().required()),
        ("jwk", Field::string().referenceable()),
        (
            "pem",
            Field::record(vec![
                ("private_key", Field::string().referenceable()),
                ("public_key", Field::string().referenceable()),
            ]),
        ),
        ("tags", tags_field()),
    ]);
    EntityDef {
        fields,
        endpoint_key: Some("name"),
        shorthand: |_, _| {},
        finish: key_checks,
        entity_checks: json!([
            { "mutually_exclusive": ["jwk", "pem"] },
            { "at_least_one_of": ["jwk", "pem"] },
        ]),
    }
}

/// Kong's entity checks on keys: exactly one of `jwk` and `pem`; a JWK is
/// a JSON object whose `kid` is the key's, with the members its `kty`
/// needs; a PEM record holds at least one key, each a PEM key.
fn key_checks(out: &mut Map<String, Value>, _: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    let jwk = out.get("jwk").filter(|v| !v.is_null());
    let pem = out.get("pem").filter(|v| !v.is_null());
    match (jwk, pem) {
        (Some(_), Some(_)) => {
            errors.push(FieldError::new(
                "",
                "only one of these fields must be non-empty: 'jwk', 'pem'",
            ));
            return;
        }
        (None, None) => {
            errors.push(FieldError::new(
                "",
                "at least one of these fields must be non-empty: 'jwk', 'pem'",
            ));
            return;
        }
        _ => {}
    }
    if let Some(text) = jwk.and_then(Value::as_str) {
        let kid = out.get("kid").and_then(Value::as_str).unwrap_or_default();
        if !is_reference(text) {
            if let Err(message) = check_jwk(text, kid) {
                errors.push(FieldError::new("jwk", message));
            }
        }
    }
    if let Some(Value::Object(pem)) = pem {
        let private = pem.get("private_key").and_then(Value::as_str);
        let public = pem.get("public_key").and_then(Value::as_str);
        if private.is_none() && public.is_none() {
            errors.push(FieldError::new(
                "pem",
                "need to supply a PEM formatted public and/or private key.",
            ));
        }
        for (field, value, message) in [
            ("private_key", private, "could not load private key"),
            ("public_key", public, "could not load public key"),
        ] {
            let Some(value) = value.filter(|v| !is_reference(v)) else {
                continue;
            };
            if formats::pem_key(value).is_err() {
                errors.push(FieldError::new(format!("pem.{field}"), message));
            }
        }
    }
}

/// The members a JWK of each `kty` must have (RFC 7518 section 6).
const JWK_MEMBERS: &[(&str, &[&str])] = &[
    ("RSA", &["n", "e"]),
    ("EC", &["crv", "x", "y"]),
    ("OKP", &["crv", "x"]),
    ("oct", &["k"]),
];

/// A JWK as Kong's keys schema checks it: JSON, `kid` equal to the key's,
/// a known `kty` with its members, base64url values.
pub fn check_jwk(text: &str, kid: &str) -> Result<(), String> {
    let Ok(Value::Object(jwk)) = serde_json::from_str::<Value>(text) else {
        return Err("could not json decode jwk string".to_string());
    };
    if jwk.get("kid").and_then(Value::as_str) != Some(kid) {
        return Err("kid in jwk.kid must be equal to keys.kid".to_string());
    }
    let kty = jwk.get("kty").and_then(Value::as_str).unwrap_or_default();
    let Some((_, members)) = JWK_MEMBERS.iter().find(|(name, _)| *name == kty) else {
        return Err(format!("could not load JWK: unsupported kty '{kty}'"));
    };
    for member in *members {
        let value = jwk.get(*member).and_then(Value::as_str);
        let base64url = |v: &str| v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        match value {
            None => return Err(format!("could not load JWK: missing '{member}'")),
            Some(v) if *member != "crv" && (v.is_empty() || !base64url(v)) => {
                return Err(format!("could not load JWK: '{member}' is not base64url"));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The paths (`cert`, `pem.private_key`, `config.redis.password`) of the
/// referenceable string fields of `fields`, under `prefix`.
fn referenceable_paths(fields: &[(&'static str, Field)], prefix: &str, out: &mut Vec<String>) {
    for (name, field) in fields {
        let path = match prefix {
            "" => (*name).to_string(),
            _ => format!("{prefix}.{name}"),
        };
        match &field.ty {
            FieldType::String if field.referenceable => out.push(path),
            FieldType::Record(inner) => referenceable_paths(inner, &path, out),
            _ => {}
        }
    }
}

/// Every referenceable field path of `kind` (for plugins, of the plugin
/// `plugin` names). Computed once per kind and plugin (again after the
/// plugin's schema is registered anew): the compiler asks for every plugin
/// of a configuration.
pub fn referenceable_fields(kind: EntityKind, plugin: Option<&str>) -> Arc<[String]> {
    let plugin = match kind {
        EntityKind::Plugins => plugin.filter(|name| super::plugins::has_schema(name)),
        _ => None,
    };
    // Looked up without building a key: the compiler asks for every plugin.
    if let Some((_, paths)) = REFERENCEABLE
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|((cached, name), _)| *cached == kind && name.as_deref() == plugin)
    {
        return paths.clone();
    }
    let mut paths = Vec::new();
    referenceable_paths(&definition(kind).fields, "", &mut paths);
    if let Some(config) = plugin.and_then(super::plugins::config_fields) {
        referenceable_paths(&config, "config", &mut paths);
    }
    let paths: Arc<[String]> = paths.into();
    REFERENCEABLE
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .push(((kind, plugin.map(str::to_string)), paths.clone()));
    paths
}

type ReferenceableKey = (EntityKind, Option<String>);

static REFERENCEABLE: RwLock<Vec<(ReferenceableKey, Arc<[String]>)>> = RwLock::new(Vec::new());

/// Drops the cached paths of plugin `name` (its schema was registered anew).
pub(crate) fn forget_referenceable(name: &str) {
    REFERENCEABLE
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|((_, plugin), _)| plugin.as_deref() != Some(name));
}

fn value_at<'a>(object: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let (head, rest) = match path.split_once('.') {
        Some((head, rest)) => (head, Some(rest)),
        None => (path, None),
    };
    match (object.get(head)?, rest) {
        (value, None) => Some(value),
        (Value::Object(inner), Some(rest)) => value_at(inner, rest),
        _ => None,
    }
}

fn value_at_mut<'a>(object: &'a mut Map<String, Value>, path: &str) -> Option<&'a mut Value> {
    let (head, rest) = match path.split_once('.') {
        Some((head, rest)) => (head, Some(rest)),
        None => (path, None),
    };
    match (object.get_mut(head)?, rest) {
        (value, None) => Some(value),
        (Value::Object(inner), Some(rest)) => value_at_mut(inner, rest),
        _ => None,
    }
}

/// Whether a plugin's config holds a reference in a referenceable field,
/// read in place (no copy of the entity): the compiler asks it of every
/// plugin it builds.
pub fn plugin_has_references(plugin: &crate::entities::Plugin) -> bool {
    referenceable_fields(EntityKind::Plugins, Some(&plugin.name))
        .iter()
        .filter_map(|path| path.strip_prefix("config."))
        .any(|path| {
            value_at(&plugin.config, path)
                .and_then(Value::as_str)
                .is_some_and(is_reference)
        })
}

/// The references `entity` holds in referenceable fields: `(field path,
/// reference)`. Empty for kinds without such fields.
pub fn references_in(entity: &Entity) -> Vec<(String, String)> {
    let cheap = match entity {
        Entity::Certificate(c) => [Some(&c.cert), Some(&c.key), c.cert_alt.as_ref(), c.key_alt.as_ref()]
            .into_iter()
            .flatten()
            .any(|v| is_reference(v)),
        Entity::Plugin(plugin) => plugin_has_references(plugin),
        Entity::Key(_) => true,
        _ => false,
    };
    if !cheap {
        return Vec::new();
    }
    let plugin = match entity {
        Entity::Plugin(p) => Some(p.name.as_str()),
        _ => None,
    };
    let paths = referenceable_fields(entity.kind(), plugin);
    if paths.is_empty() {
        return Vec::new();
    }
    let object = entity_fields(entity);
    paths
        .iter()
        .filter_map(|path| {
            let reference = value_at(&object, path)?.as_str().filter(|v| is_reference(v))?;
            Some((path.clone(), reference.to_string()))
        })
        .collect()
}

/// `entity` with each reference in a referenceable field replaced by what
/// `resolve(field path, reference)` gives; the first failure is returned
/// with its field path. `Ok(None)`: the entity holds no reference.
pub fn resolve_references(
    entity: &Entity,
    mut resolve: impl FnMut(&str, &str) -> Result<String, String>,
) -> Result<Option<Entity>, FieldError> {
    let references = references_in(entity);
    if references.is_empty() {
        return Ok(None);
    }
    let mut object = entity_fields(entity);
    for (path, reference) in &references {
        let value = resolve(path, reference).map_err(|message| FieldError::new(path.clone(), message))?;
        if let Some(slot) = value_at_mut(&mut object, path) {
            *slot = Value::String(value);
        }
    }
    let kind = entity.kind();
    let rebuilt = super::to_entity(kind, Value::Object(object)).map_err(|e| FieldError::new("", e.to_string()))?;
    Ok(Some(rebuilt))
}

/// An entity's fields as a JSON object.
fn entity_fields(entity: &Entity) -> Map<String, Value> {
    match serde_json::to_value(entity) {
        Ok(Value::Object(mut tagged)) => match tagged.remove("entity") {
            Some(Value::Object(fields)) => fields,
            _ => Map::new(),
        },
        _ => Map::new(),
    }
}
