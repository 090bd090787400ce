//! `udp-log`'s config schema: Kong 3.9's fields, defaults and checks.

use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;
use strait_core::schema::formats;

use crate::config_fields::{lua_code, no_lua, port, timeout};

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("host", Field::string().required().check(formats::host)),
        ("port", port()),
        ("timeout", timeout(10000)),
        ("custom_fields_by_lua", lua_code()),
    ])
    .any_protocol()
    .check(no_lua)
}
