//! `bot-detection`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::regex;

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("allow", Field::array(Field::string().check(regex)).default(json!([]))),
        ("deny", Field::array(Field::string().check(regex)).default(json!([]))),
    ])
    .no_consumer()
}
