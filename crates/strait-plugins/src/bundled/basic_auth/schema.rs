//! `basic-auth`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::bool_default;

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("anonymous", Field::string()),
        ("hide_credentials", bool_default(false)),
        ("realm", Field::string().required().default(json!("service"))),
    ])
    .no_consumer()
}
