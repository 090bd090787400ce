//! `correlation-id`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("header_name", Field::string().default(json!("Kong-Request-ID"))),
        (
            "generator",
            Field::string()
                .required()
                .default(json!("uuid#counter"))
                .one_of(&["uuid", "uuid#counter", "tracker"]),
        ),
        ("echo_downstream", Field::boolean().required().default(json!(false))),
    ])
}
