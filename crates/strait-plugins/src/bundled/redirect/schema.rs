//! `redirect`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
            (
                "status_code",
                Field::integer().required().default(json!(301)).between(100, 599),
            ),
            ("location", Field::string().required().check(crate::config_fields::url)),
            ("keep_incoming_path", Field::boolean().default(json!(false))),
    ])
}
