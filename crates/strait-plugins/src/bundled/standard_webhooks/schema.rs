//! `standard-webhooks`' config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::field::Field;
use strait_core::schema::PluginSchema;

pub(super) fn schema() -> PluginSchema {
    PluginSchema {
        no_consumer: true,
        ..PluginSchema::new(vec![
            ("secret_v1", Field::string().required().referenceable()),
            (
                "tolerance_second",
                Field::integer().required().default(json!(300)).gt(-1),
            ),
        ])
    }
}
