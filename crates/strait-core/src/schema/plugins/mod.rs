//! Config schemas of the bundled plugins Strait runs: what `config` may hold,
//! the defaults filled in when a plugin is validated, and Kong's
//! `/schemas/plugins/{name}` description of them.
//!
//! Every default filled in here must appear in the description (decK fills
//! the same defaults from it; a default missing there never diffs clean).
//! Plugins Kong bundles but Strait does not run keep their `config` as given.

use serde_json::{json, Map, Value};

mod auth;
mod observability;
mod security;
mod signed;
mod traffic;
mod transform;

use super::engine;
use super::field::{fields_to_json, Field};
use super::formats;
use crate::error::FieldError;

/// Kong's `typedefs.protocols_http`: the protocols an HTTP plugin runs on.
const HTTP_PROTOCOLS: &[&str] = &["grpc", "grpcs", "http", "https", "ws", "wss"];
const HTTP_PROTOCOLS_DEFAULT: &[&str] = &["grpc", "grpcs", "http", "https"];

/// A plugin's schema: its `config` record and a check across config fields.
pub(super) struct PluginDef {
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
pub(super) struct ConfigShorthand {
    pub name: &'static str,
    pub path: [&'static str; 2],
}

impl PluginDef {
    pub fn new(config: Vec<(&'static str, Field)>) -> PluginDef {
        PluginDef {
            config,
            check: |_| Ok(()),
            no_consumer: false,
            http_only: true,
            protocols_default: None,
            fill: |_| {},
            shorthands: &[],
        }
    }

    pub fn shorthands(mut self, shorthands: &'static [ConfigShorthand]) -> PluginDef {
        self.shorthands = shorthands;
        self
    }

    pub fn fill(mut self, fill: fn(&mut Map<String, Value>)) -> PluginDef {
        self.fill = fill;
        self
    }

    pub fn no_consumer(mut self) -> PluginDef {
        self.no_consumer = true;
        self
    }

    pub fn any_protocol(mut self) -> PluginDef {
        self.http_only = false;
        self
    }

    pub fn check(mut self, check: fn(&Map<String, Value>) -> Result<(), String>) -> PluginDef {
        self.check = check;
        self
    }
}

/// A known plugin's schema with its `config` record field, both built
/// once: every plugin entity of every document is validated against them.
struct Known {
    def: PluginDef,
    config: Field,
}

fn definition(name: &str) -> Option<&'static PluginDef> {
    known(name).map(|known| &known.def)
}

/// The `config` record of a plugin Strait has a schema for.
pub(crate) fn config_fields(name: &str) -> Option<&'static [(&'static str, Field)]> {
    definition(name).map(|def| def.config.as_slice())
}

fn known(name: &str) -> Option<&'static Known> {
    static KNOWN: std::sync::LazyLock<Vec<(&'static str, Known)>> = std::sync::LazyLock::new(|| {
        PLUGINS_WITH_SCHEMA
            .iter()
            .filter_map(|name| {
                let def = build_definition(name)?;
                let config = Field::record(def.config.clone()).default_record();
                Some((*name, Known { def, config }))
            })
            .collect()
    });
    KNOWN.iter().find(|(known, _)| *known == name).map(|(_, known)| known)
}

fn build_definition(name: &str) -> Option<PluginDef> {
    match name {
        "acl" => Some(auth::acl()),
        "basic-auth" => Some(auth::basic_auth()),
        "bot-detection" => Some(security::bot_detection()),
        "correlation-id" => Some(transform::correlation_id()),
        "cors" => Some(security::cors()),
        "file-log" => Some(observability::file_log()),
        "grpc-gateway" => Some(transform::grpc_gateway()),
        "grpc-web" => Some(transform::grpc_web()),
        "http-log" => Some(observability::http_log()),
        "hmac-auth" => Some(signed::hmac_auth()),
        "ip-restriction" => Some(security::ip_restriction()),
        "jwt" => Some(signed::jwt()),
        "key-auth" => Some(auth::key_auth()),
        "mtls-auth" => Some(auth::mtls_auth()),
        "oauth2" => Some(auth::oauth2()),
        "opentelemetry" => Some(observability::opentelemetry()),
        "prometheus" => Some(prometheus()),
        "proxy-cache" => Some(traffic::proxy_cache()),
        "rate-limiting" => Some(traffic::rate_limiting()),
        "response-ratelimiting" => Some(traffic::response_ratelimiting()),
        "request-size-limiting" => Some(security::request_size_limiting()),
        "request-termination" => Some(request_termination()),
        "request-transformer" => Some(transform::request_transformer()),
        "response-transformer" => Some(transform::response_transformer()),
        "syslog" => Some(observability::syslog()),
        "tcp-log" => Some(observability::tcp_log()),
        "udp-log" => Some(observability::udp_log()),
        _ => None,
    }
}

/// Names of the plugins whose config schema Strait knows.
pub const PLUGINS_WITH_SCHEMA: &[&str] = &[
    "acl",
    "basic-auth",
    "bot-detection",
    "correlation-id",
    "cors",
    "file-log",
    "grpc-gateway",
    "grpc-web",
    "hmac-auth",
    "http-log",
    "ip-restriction",
    "jwt",
    "key-auth",
    "mtls-auth",
    "oauth2",
    "opentelemetry",
    "prometheus",
    "proxy-cache",
    "rate-limiting",
    "request-size-limiting",
    "request-termination",
    "request-transformer",
    "response-ratelimiting",
    "response-transformer",
    "syslog",
    "tcp-log",
    "udp-log",
];

/// Kong's `prometheus` schema: every switch off by default.
fn prometheus() -> PluginDef {
    let switch = || Field::boolean().default(json!(false));
    PluginDef::new(vec![
        ("per_consumer", switch()),
        ("status_code_metrics", switch()),
        ("ai_metrics", switch()),
        ("latency_metrics", switch()),
        ("bandwidth_metrics", switch()),
        ("upstream_health_metrics", switch()),
    ])
    .any_protocol()
}

fn request_termination() -> PluginDef {
    PluginDef {
        no_consumer: false,
        http_only: true,
        protocols_default: None,
        fill: |_| {},
        shorthands: &[],
        config: vec![
            (
                "status_code",
                Field::integer().required().default(json!(503)).between(100, 599),
            ),
            ("message", Field::string()),
            ("content_type", Field::string()),
            ("body", Field::string()),
            ("echo", Field::boolean().required().default(json!(false))),
            ("trigger", Field::string().check(formats::header_name)),
        ],
        check: request_termination_check,
    }
}

/// Kong's `custom_validator` of request-termination.
fn request_termination_check(config: &Map<String, Value>) -> Result<(), String> {
    let present = |field: &str| config.get(field).and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    if present("message") && (present("content_type") || present("body")) {
        return Err("message cannot be used with content_type or body".into());
    }
    if present("content_type") && !present("body") {
        return Err("content_type requires a body".into());
    }
    let echo = config.get("echo").and_then(Value::as_bool).unwrap_or(false);
    if echo && (present("content_type") || present("body")) {
        return Err("echo cannot be used with content_type and body".into());
    }
    Ok(())
}

/// Validates `config` of plugin `name` (absent: every default) and returns
/// it with defaults filled in; `None` when Strait has no schema for `name`.
pub(crate) fn validate_config(name: &str, config: Option<&Value>, errors: &mut Vec<FieldError>) -> Option<Value> {
    let Known { def, config: field } = known(name)?;
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
fn take_shorthands(def: &PluginDef, config: &mut Map<String, Value>, errors: &mut Vec<FieldError>) {
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
    let Some(def) = definition(name) else { return };
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
fn shorthand_fields_json(plugin: &str, def: &PluginDef) -> Value {
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

/// The plugin entity's fields the plugin's own schema restricts: a
/// consumer on a plugin that cannot have one, protocols it cannot run on.
pub(crate) fn check_entity(
    name: &str,
    entity: &mut Map<String, Value>,
    given: &Map<String, Value>,
    errors: &mut Vec<FieldError>,
) {
    let Some(def) = definition(name) else { return };
    if let (Some(default), None | Some(Value::Null)) = (def.protocols_default, given.get("protocols")) {
        entity.insert("protocols".into(), json!(default));
    }
    if def.no_consumer && entity.get("consumer").is_some_and(|c| !c.is_null()) {
        errors.push(FieldError::new("consumer", "value must be null"));
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
    let def = definition(name)?;
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
    let fields = vec![("consumer", consumer), ("protocols", protocols), ("config", config)];
    let mut fields = fields_to_json(&fields);
    if !def.shorthands.is_empty() {
        if let Some(config) = fields
            .get_mut(2)
            .and_then(|f| f.get_mut("config"))
            .and_then(Value::as_object_mut)
        {
            config.insert("shorthand_fields".into(), shorthand_fields_json(name, def));
        }
    }
    Some(json!({ "fields": fields, "entity_checks": [] }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate_limiting(config: Value) -> (Value, Vec<FieldError>) {
        let mut errors = Vec::new();
        let out = validate_config("rate-limiting", Some(&config), &mut errors).expect("known plugin");
        (out, errors)
    }

    #[test]
    fn redis_shorthands_move_to_the_redis_record() {
        let (out, errors) = rate_limiting(json!({
            "minute": 5, "policy": "redis", "redis_host": "cache.internal", "redis_port": 6380,
            "redis_ssl": true, "redis_database": 2
        }));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(out["redis"]["host"], "cache.internal");
        assert_eq!(out["redis"]["port"], 6380);
        assert_eq!(out["redis"]["ssl"], true);
        assert_eq!(out["redis"]["database"], 2);
        assert_eq!(out["redis"]["timeout"], 2000, "the record's defaults still fill in");
        assert!(out.get("redis_host").is_none(), "shorthands are not stored: {out}");
        // The same value in both places is one value; null shorthands are nothing.
        let (out, errors) = rate_limiting(json!({
            "minute": 5, "redis_host": "a", "redis": {"host": "a"}, "redis_password": null
        }));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(out["redis"]["host"], "a");
    }

    #[test]
    fn redis_shorthands_are_checked_with_their_fields_type_and_must_agree() {
        let (_, errors) = rate_limiting(json!({"minute": 5, "redis_port": "high"}));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "config.redis_port");
        assert_eq!(errors[0].message, "expected an integer");
        let (_, errors) = rate_limiting(json!({"minute": 5, "redis_host": "a", "redis": {"host": "b"}}));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "config.redis_host");
        assert_eq!(
            errors[0].message,
            "both deprecated and new field are used but their values mismatch: redis_host = a vs redis.host = b"
        );
        let mut errors = Vec::new();
        let given = json!({"limits": {"video": {"minute": 1}}, "redis_timeout": 10});
        let out = validate_config("response-ratelimiting", Some(&given), &mut errors).expect("known");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(out["redis"]["timeout"], 10);
    }

    #[test]
    fn answers_mirror_the_shorthands_and_the_schema_describes_them() {
        let (out, _) = rate_limiting(json!({"minute": 5}));
        let mut config = out.as_object().cloned().expect("a record");
        mirror_shorthands("rate-limiting", &mut config);
        assert_eq!(config["redis_port"], 6379);
        assert_eq!(config["redis_timeout"], 2000);
        assert_eq!(config["redis_database"], 0);
        assert_eq!(config["redis_ssl"], false);
        assert!(config["redis_host"].is_null() && config.contains_key("redis_host"));
        let mirrored = config.keys().filter(|k| k.starts_with("redis_")).count();
        assert_eq!(mirrored, 9);
        let mut key_auth = Map::new();
        mirror_shorthands("key-auth", &mut key_auth);
        assert!(key_auth.is_empty());

        let schema = plugin_schema_json("rate-limiting").expect("schema");
        let config = schema["fields"][2]["config"].clone();
        let shorthands = config["shorthand_fields"].as_array().expect("shorthand_fields");
        assert_eq!(shorthands.len(), 9);
        let host = &shorthands[0]["redis_host"];
        assert_eq!(host["type"], "string");
        assert_eq!(
            host["deprecation"]["replaced_with"],
            json!([{"path": ["redis", "host"]}])
        );
        assert_eq!(
            host["deprecation"]["message"],
            "rate-limiting: config.redis_host is deprecated, please use config.redis.host instead"
        );
        assert!(host.get("default").is_none());
    }

    #[test]
    fn request_termination_defaults_are_filled_and_described() {
        let mut errors = Vec::new();
        let config = validate_config("request-termination", None, &mut errors).expect("known plugin");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(config["status_code"], json!(503));
        assert_eq!(config["echo"], json!(false));
        assert!(config["message"].is_null());
        let schema = plugin_schema_json("request-termination").expect("schema");
        let text = schema.to_string();
        assert!(text.contains(r#""status_code":{"between":[100,599],"default":503"#) || text.contains("503"));
        assert!(plugin_schema_json("zipkin").is_none());
        let key_auth = plugin_schema_json("key-auth").expect("key-auth schema").to_string();
        assert!(key_auth.contains(r#""eq":null"#), "key-auth is no_consumer: {key_auth}");
    }

    #[test]
    fn request_termination_rules() {
        let mut errors = Vec::new();
        let given = json!({"message": "m", "body": "b"});
        validate_config("request-termination", Some(&given), &mut errors);
        assert_eq!(errors[0].message, "message cannot be used with content_type or body");
        let mut errors = Vec::new();
        validate_config(
            "request-termination",
            Some(&json!({"status_code": 700, "x": 1})),
            &mut errors,
        );
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["config.status_code", "config.x"]);
    }
}
