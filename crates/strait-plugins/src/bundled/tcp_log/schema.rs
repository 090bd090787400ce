//! `tcp-log`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;
use strait_core::schema::formats;

use crate::config_fields::{lua_code, no_lua, port, timeout};

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("host", Field::string().required().check(formats::host)),
        ("port", port()),
        ("timeout", timeout(10000)),
        ("keepalive", timeout(60000)),
        ("tls", Field::boolean().required().default(json!(false))),
        ("tls_sni", Field::string()),
        ("custom_fields_by_lua", lua_code()),
    ])
    .any_protocol()
    .check(no_lua)
}
