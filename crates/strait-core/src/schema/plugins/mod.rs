//! The registry of plugin config schemas: what a plugin's `config` may
//! hold, the defaults filled in when a plugin entity is validated, and
//! Kong's `/schemas/plugins/{name}` description of it.
//!
//! Schemas are registered at start-up ([`register_plugin_schema`]): the
//! bundled plugins' from `strait_plugins::bundled`, and later those of
//! plugins whose schema arrives at run time (Lua, plugin servers, Wasm). This
//! crate lists no plugin of its own. A plugin Kong bundles whose schema is
//! not registered keeps its `config` as given.
//!
//! Every default filled in must appear in the description (decK fills the
//! same defaults from it; a default missing there never diffs clean).

use std::sync::{Arc, PoisonError, RwLock};

use serde_json::{json, Map, Value};

use super::engine;
use super::field::{fields_to_json, Field};
use crate::error::FieldError;

/// Kong's `typedefs.protocols_http`: the protocols an HTTP plugin runs on.
const HTTP_PROTOCOLS: &[&str] = &["grpc", "grpcs", "http", "https", "ws", "wss"];
const HTTP_PROTOCOLS_DEFAULT: &[&str] = &["grpc", "grpcs", "http", "https"];

/// A plugin's schema: its `config` record and a check across config fields.
pub struct PluginSchema {
    pub config: Vec<(&'static str, Field)>,
    pub check: fn(&Map<String, Value>) -> Result<(), String>,
    /// Kong's `typedefs.no_consumer`: the plugin cannot be scoped to a consumer.
    pub no_consumer: bool,
    /// Kong's `typedefs.protocols_http` (true) or `typedefs.protocols`.
    pub http_only: bool,
    /// A plugin-specific default for `protocols`.
    pub protocols_default: Option<&'static [&'static str]>,
    /// Fills Kong's `auto = true` config fields a write left out.
    pub fill: fn(&mut Map<String, Value>),
    /// Kong's deprecated `shorthand_fields` of `config`, each with the path
    /// of the field it stands for (`redis_host` -> `redis.host`).
    pub shorthands: &'static [ConfigShorthand],
}

/// A deprecated config field Kong still takes and answers with: a write may
/// give it instead of the field at `path`, and every answer mirrors that
/// field under its old name (Kong 3.7+'s "shorthand fields in responses").
pub struct ConfigShorthand {
    pub name: &'static str,
    pub path: [&'static str; 2],
}

impl PluginSchema {
    pub fn new(config: Vec<(&'static str, Field)>) -> PluginSchema {
        PluginSchema {
            config,
            check: |_| Ok(()),
            no_consumer: false,
            http_only: true,
            protocols_default: None,
            fill: |_| {},
            shorthands: &[],
        }
    }

    pub fn shorthands(mut self, shorthands: &'static [ConfigShorthand]) -> PluginSchema {
        self.shorthands = shorthands;
        self
    }

    pub fn fill(mut self, fill: fn(&mut Map<String, Value>)) -> PluginSchema {
        self.fill = fill;
        self
    }

    pub fn no_consumer(mut self) -> PluginSchema {
        self.no_consumer = true;
        self
    }

    pub fn any_protocol(mut self) -> PluginSchema {
        self.http_only = false;
        self
    }

    pub fn check(mut self, check: fn(&Map<String, Value>) -> Result<(), String>) -> PluginSchema {
        self.check = check;
        self
    }
}

/// A registered schema with its `config` record field, built once: every
/// plugin entity of every document is validated against them.
struct Known {
    def: PluginSchema,
    config: Field,
}

/// Registered schemas by plugin name. Written at start-up (and when a
/// plugin server or Wasm module announces its schema), read on every write.
static REGISTERED: RwLock<Vec<(String, Arc<Known>)>> = RwLock::new(Vec::new());

/// Registers (or replaces) the config schema of plugin `name`.
pub fn register_plugin_schema(name: &str, schema: PluginSchema) {
    let config = Field::record(schema.config.clone()).default_record();
    let known = Arc::new(Known { def: schema, config });
    {
        let mut registered = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
        match registered.iter_mut().find(|(registered, _)| registered == name) {
            Some(slot) => slot.1 = known,
            None => registered.push((name.to_string(), known)),
        }
    }
    super::secrets::forget_referenceable(name);
}

/// Names of the plugins whose config schema is registered, in the order
/// they were registered.
pub fn plugins_with_schema() -> Vec<String> {
    let registered = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    registered.iter().map(|(name, _)| name.clone()).collect()
}

fn known(name: &str) -> Option<Arc<Known>> {
    let registered = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    registered
        .iter()
        .find(|(registered, _)| registered == name)
        .map(|(_, known)| known.clone())
}

/// Whether plugin `name` has a registered schema.
pub(crate) fn has_schema(name: &str) -> bool {
    let registered = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    registered.iter().any(|(registered, _)| registered == name)
}

/// The `config` record of a plugin whose schema is registered.
pub(crate) fn config_fields(name: &str) -> Option<Vec<(&'static str, Field)>> {
    known(name).map(|known| known.def.config.clone())
}

/// Validates `config` of plugin `name` (absent: every default) and returns
/// it with defaults filled in; `None` when Strait has no schema for `name`.
pub fn validate_plugin_config(name: &str, config: Option<&Value>, errors: &mut Vec<FieldError>) -> Option<Value> {
    let known = known(name)?;
    let Known { def, config: field } = known.as_ref();
    let before = errors.len();
    let mut filled = match config {
        Some(Value::Object(given)) => given.clone(),
        _ => Map::new(),
    };
    take_shorthands(def, &mut filled, errors);
    (def.fill)(&mut filled);
    let config = match config {
        None | Some(Value::Null) | Some(Value::Object(_)) => Some(Value::Object(filled)),
        other => other.cloned(),
    };
    let out = engine::validate_value(field, config.as_ref(), &engine::At::Text("config"), errors);
    if errors.len() == before {
        if let Err(message) = out.as_object().map_or(Ok(()), def.check) {
            errors.push(FieldError::new("config", message));
        }
    }
    Some(out)
}

/// Kong's `process_auto_fields` for shorthands: each one given moves to the
/// field it stands for, checked with that field's type; given beside that
/// field with another non-null value, it is refused (Kong 3.8's "both
/// deprecated and new field are used but their values mismatch").
fn take_shorthands(def: &PluginSchema, config: &mut Map<String, Value>, errors: &mut Vec<FieldError>) {
    for shorthand in def.shorthands {
        let Some(value) = config.remove(shorthand.name) else {
            continue;
        };
        if value.is_null() {
            continue;
        }
        let [record, name] = shorthand.path;
        let Some(target) = record_field(&def.config, record, name) else {
            continue;
        };
        let at = format!("config.{}", shorthand.name);
        let before = errors.len();
        let value = engine::validate_value(target, Some(&value), &engine::At::Text(&at), errors);
        if errors.len() > before {
            continue;
        }
        let parent = config.entry(record).or_insert_with(|| Value::Object(Map::new()));
        if parent.is_null() {
            *parent = Value::Object(Map::new());
        }
        let Some(parent) = parent.as_object_mut() else { continue };
        match parent.get(name) {
            Some(current) if !current.is_null() && *current != value => errors.push(FieldError::new(
                at,
                format!(
                    "both deprecated and new field are used but their values mismatch: {} = {} vs {record}.{name} = {}",
                    shorthand.name,
                    lua_value(&value),
                    lua_value(current)
                ),
            )),
            _ => {
                parent.insert(name.to_string(), value);
            }
        }
    }
}

/// A value as Kong's message prints it (strings bare).
fn lua_value(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The field `name` of the record field `record` in `fields`.
fn record_field<'f>(fields: &'f [(&'static str, Field)], record: &str, name: &str) -> Option<&'f Field> {
    let (_, field) = fields.iter().find(|(n, _)| *n == record)?;
    match &field.ty {
        super::field::FieldType::Record(inner) => inner.iter().find(|(n, _)| *n == name).map(|(_, f)| f),
        _ => None,
    }
}

/// Adds to a stored `config` of plugin `name` its shorthands, each the
/// value of the field it stands for (null when unset), as Kong 3.9's Admin
/// API answers.
pub fn mirror_shorthands(name: &str, config: &mut Map<String, Value>) {
    let Some(known) = known(name) else { return };
    let def = &known.def;
    for shorthand in def.shorthands {
        let [record, field] = shorthand.path;
        let value = config
            .get(record)
            .and_then(|r| r.get(field))
            .cloned()
            .unwrap_or(Value::Null);
        config.insert(shorthand.name.to_string(), value);
    }
}

/// Kong's `shorthand_fields` of a plugin's `config` in its schema body.
fn shorthand_fields_json(plugin: &str, def: &PluginSchema) -> Value {
    let described: Vec<Value> = def
        .shorthands
        .iter()
        .filter_map(|shorthand| {
            let [record, name] = shorthand.path;
            let mut target = record_field(&def.config, record, name)?.to_json();
            if let Some(object) = target.as_object_mut() {
                object.remove("default");
                object.remove("required");
                object.insert(
                    "deprecation".into(),
                    json!({
                        "message": format!(
                            "{plugin}: config.{} is deprecated, please use config.{record}.{name} instead",
                            shorthand.name
                        ),
                        "removal_in_version": "4.0",
                        "replaced_with": [{ "path": [record, name] }],
                    }),
                );
            }
            Some(json!({ shorthand.name: target }))
        })
        .collect();
    Value::Array(described)
}

/// Plugins Kong allows only globally (`typedefs.no_service`, `no_route`
/// and `no_consumer`).
const GLOBAL_ONLY: &[&str] = &["acme"];

/// The plugin entity's fields the plugin's own schema restricts: a
/// consumer on a plugin that cannot have one, protocols it cannot run on.
pub(crate) fn check_entity(
    name: &str,
    entity: &mut Map<String, Value>,
    given: &Map<String, Value>,
    errors: &mut Vec<FieldError>,
) {
    let Some(known) = known(name) else { return };
    let def = &known.def;
    if let (Some(default), None | Some(Value::Null)) = (def.protocols_default, given.get("protocols")) {
        entity.insert("protocols".into(), json!(default));
    }
    if def.no_consumer && entity.get("consumer").is_some_and(|c| !c.is_null()) {
        errors.push(FieldError::new("consumer", "value must be null"));
    }
    if GLOBAL_ONLY.contains(&name) {
        for field in ["service", "route"] {
            if entity.get(field).is_some_and(|v| !v.is_null()) {
                errors.push(FieldError::new(field, "value must be null"));
            }
        }
    }
    let choices = if def.http_only {
        HTTP_PROTOCOLS
    } else {
        super::proxy::PROTOCOLS
    };
    if let Some(Value::Array(protocols)) = entity.get("protocols") {
        for (index, protocol) in protocols.iter().enumerate() {
            if protocol.as_str().is_some_and(|p| !choices.contains(&p)) {
                errors.push(FieldError::new(
                    format!("protocols.{}", index + 1),
                    format!("expected one of: {}", choices.join(", ")),
                ));
            }
        }
    }
}

/// Kong's `/schemas/plugins/{name}` body, or `None` for a plugin Strait
/// has no schema for.
pub fn plugin_schema_json(name: &str) -> Option<Value> {
    let known = known(name)?;
    let def = &known.def;
    let choices = if def.http_only {
        HTTP_PROTOCOLS
    } else {
        super::proxy::PROTOCOLS
    };
    let protocols = Field::set(Field::string().one_of(choices))
        .required()
        .default(json!(def.protocols_default.unwrap_or(HTTP_PROTOCOLS_DEFAULT)));
    let config = Field::record(def.config.clone()).required();
    let consumer = match def.no_consumer {
        true => Field::foreign("consumers").must_be_null(),
        false => Field::foreign("consumers"),
    };
    let mut fields = vec![("consumer", consumer), ("protocols", protocols), ("config", config)];
    if GLOBAL_ONLY.contains(&name) {
        fields.insert(1, ("route", Field::foreign("routes").must_be_null()));
        fields.insert(1, ("service", Field::foreign("services").must_be_null()));
    }
    let mut fields = fields_to_json(&fields);
    if !def.shorthands.is_empty() {
        if let Some(config) = fields
            .as_array_mut()
            .and_then(|all| all.iter_mut().find_map(|f| f.get_mut("config")))
            .and_then(Value::as_object_mut)
        {
            config.insert("shorthand_fields".into(), shorthand_fields_json(name, def));
        }
    }
    Some(json!({ "fields": fields, "entity_checks": [] }))
}
