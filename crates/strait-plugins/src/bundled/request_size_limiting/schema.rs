//! `request-size-limiting`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("allowed_payload_size", Field::integer().default(json!(128))),
        (
            "size_unit",
            Field::string()
                .required()
                .default(json!("megabytes"))
                .one_of(&["megabytes", "kilobytes", "bytes"]),
        ),
        (
            "require_content_length",
            Field::boolean().required().default(json!(false)),
        ),
    ])
}
