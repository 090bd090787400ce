//! `grpc-web`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

/// Kong's `grpc-web`.
pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("proto", Field::string()),
        ("pass_stripped_path", Field::boolean()),
        ("allow_origin_header", Field::string().default(json!("*"))),
    ])
}
