//! `kafka-upstream`'s config schema: Kong 3.9's fields and defaults.

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;

pub(super) fn schema() -> PluginSchema {
    let mut fields = crate::kafka::fields();
    fields.extend([
        ("forward_method", Field::boolean().default(json!(false))),
        ("forward_uri", Field::boolean().default(json!(false))),
        ("forward_headers", Field::boolean().default(json!(false))),
        ("forward_body", Field::boolean().default(json!(true))),
    ]);
    PluginSchema::new(fields).check(check)
}

fn check(config: &Map<String, Value>) -> Result<(), String> {
    crate::kafka::check(config)?;
    let on = |k: &str| config.get(k).and_then(Value::as_bool).unwrap_or(k == "forward_body");
    if !["forward_method", "forward_uri", "forward_headers", "forward_body"].iter().any(|k| on(k)) {
        return Err("at least one of these fields must be true: forward_method, forward_uri, forward_headers, forward_body".into());
    }
    Ok(())
}
