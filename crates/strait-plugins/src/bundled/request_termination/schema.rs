//! `request-termination`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;
use strait_core::schema::formats;

pub(super) fn schema() -> PluginSchema {
    PluginSchema {
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
