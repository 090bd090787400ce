//! `cors`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::json;
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::regex;

const METHODS: &[&str] = &[
    "GET", "HEAD", "PUT", "PATCH", "POST", "DELETE", "OPTIONS", "TRACE", "CONNECT",
];

fn asterisk_or_regex(value: &str) -> Result<(), String> {
    if value == "*" {
        return Ok(());
    }
    regex(value)
}

pub(super) fn schema() -> PluginSchema {
    let bool_default = |v: bool| Field::boolean().required().default(json!(v));
    PluginSchema::new(vec![
        ("origins", Field::array(Field::string().check(asterisk_or_regex))),
        ("headers", Field::array(Field::string())),
        ("exposed_headers", Field::array(Field::string())),
        (
            "methods",
            Field::array(Field::string().one_of(METHODS)).default(json!(METHODS)),
        ),
        ("max_age", Field::number()),
        ("credentials", bool_default(false)),
        ("private_network", bool_default(false)),
        ("preflight_continue", bool_default(false)),
        ("allow_origin_absent", bool_default(true)),
    ])
    .no_consumer()
}
