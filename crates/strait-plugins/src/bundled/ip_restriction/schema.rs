//! `ip-restriction`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{Map, Value};
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;
use strait_core::schema::formats;

use crate::config_fields::non_empty_list;

fn ip_restriction_check(config: &Map<String, Value>) -> Result<(), String> {
    if !non_empty_list(config, "allow") && !non_empty_list(config, "deny") {
        return Err("at least one of these fields must be non-empty: 'config.allow', 'config.deny'".into());
    }
    if let Some(status) = config.get("status").and_then(Value::as_f64) {
        if !(100.0..=599.0).contains(&status) {
            return Err("status: value should be between 100 and 599".into());
        }
    }
    Ok(())
}

pub(super) fn schema() -> PluginSchema {
    let mut def = PluginSchema::new(vec![
        ("allow", Field::array(Field::string().check(formats::ip_or_cidr))),
        ("deny", Field::array(Field::string().check(formats::ip_or_cidr))),
        ("status", Field::number()),
        ("message", Field::string()),
    ])
    .any_protocol()
    .check(ip_restriction_check);
    def.protocols_default = Some(&["http", "https", "tcp", "tls", "grpc", "grpcs"]);
    def
}
