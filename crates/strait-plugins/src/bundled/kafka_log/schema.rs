//! `kafka-log`'s config schema: Kong 3.9's fields and defaults.

use serde_json::{Map, Value};
use strait_core::schema::PluginSchema;

use crate::config_fields::{lua_code, no_lua};

pub(super) fn schema() -> PluginSchema {
    let mut fields = crate::kafka::fields();
    fields.push(("custom_fields_by_lua", lua_code()));
    PluginSchema::new(fields).any_protocol().check(check)
}

fn check(config: &Map<String, Value>) -> Result<(), String> {
    no_lua(config)?;
    crate::kafka::check(config)
}
