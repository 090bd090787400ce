//! `key-auth`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;
use strait_core::schema::formats;

use crate::config_fields::bool_default;

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        (
            "key_names",
            Field::array(Field::string().check(formats::header_name))
                .required()
                .default(json!(["apikey"])),
        ),
        ("hide_credentials", bool_default(false)),
        ("anonymous", Field::string()),
        ("key_in_header", bool_default(true)),
        ("key_in_query", bool_default(true)),
        ("key_in_body", bool_default(false)),
        ("run_on_preflight", bool_default(true)),
        ("realm", Field::string()),
    ])
    .no_consumer()
}
