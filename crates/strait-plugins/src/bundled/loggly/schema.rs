//! `loggly`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::field::Field;
use strait_core::schema::{formats, PluginSchema};

use crate::config_fields::{lua_code, no_lua};

pub(super) fn schema() -> PluginSchema {
    let severity = || {
        Field::string()
            .default(json!("info"))
            .one_of(&["debug", "info", "notice", "warning", "err", "crit", "alert", "emerg"])
    };
    PluginSchema::new(vec![
        (
            "host",
            Field::string().default(json!("logs-01.loggly.com")).check(formats::host),
        ),
        ("port", Field::integer().default(json!(514)).between(0, 65535)),
        ("key", Field::string().required().referenceable()),
        ("tags", Field::set(Field::string()).default(json!(["kong"]))),
        ("log_level", severity()),
        ("successful_severity", severity()),
        ("client_errors_severity", severity()),
        ("server_errors_severity", severity()),
        ("timeout", Field::number().default(json!(10000))),
        ("custom_fields_by_lua", lua_code()),
    ])
    .any_protocol()
    .check(no_lua)
}
