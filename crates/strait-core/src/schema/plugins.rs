//! Config schemas of the bundled plugins Strait runs: what `config` may hold,
//! the defaults filled in when a plugin is validated, and Kong's
//! `/schemas/plugins/{name}` description of them.
//!
//! Every default filled in here must appear in the description (decK fills
//! the same defaults from it; a default missing there never diffs clean).
//! Plugins Kong bundles but Strait does not run keep their `config` as given.

use serde_json::{json, Map, Value};

use super::engine;
use super::field::{fields_to_json, Field};
use super::formats;
use crate::error::FieldError;

/// Kong's `typedefs.protocols_http`: the protocols an HTTP plugin runs on.
const HTTP_PROTOCOLS: &[&str] = &["grpc", "grpcs", "http", "https", "ws", "wss"];
const HTTP_PROTOCOLS_DEFAULT: &[&str] = &["grpc", "grpcs", "http", "https"];

/// A plugin's schema: its `config` record and a check across config fields.
struct PluginDef {
    config: Vec<(&'static str, Field)>,
    check: fn(&Map<String, Value>) -> Result<(), String>,
}

fn definition(name: &str) -> Option<PluginDef> {
    match name {
        "request-termination" => Some(request_termination()),
        _ => None,
    }
}

/// Names of the plugins whose config schema Strait knows.
pub const PLUGINS_WITH_SCHEMA: &[&str] = &["request-termination"];

fn request_termination() -> PluginDef {
    PluginDef {
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
    let def = definition(name)?;
    let field = Field::record(def.config).default_record();
    let before = errors.len();
    let out = engine::validate_value(&field, config, "config", errors);
    if errors.len() == before {
        if let Err(message) = out.as_object().map_or(Ok(()), def.check) {
            errors.push(FieldError::new("config", message));
        }
    }
    Some(out)
}

/// Kong's `/schemas/plugins/{name}` body, or `None` for a plugin Strait
/// has no schema for.
pub fn plugin_schema_json(name: &str) -> Option<Value> {
    let def = definition(name)?;
    let protocols = Field::set(Field::string().one_of(HTTP_PROTOCOLS))
        .required()
        .default(json!(HTTP_PROTOCOLS_DEFAULT));
    let config = Field::record(def.config).required();
    let fields = vec![
        ("consumer", Field::foreign("consumers")),
        ("protocols", protocols),
        ("config", config),
    ];
    Some(json!({ "fields": fields_to_json(&fields), "entity_checks": [] }))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(plugin_schema_json("key-auth").is_none());
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
