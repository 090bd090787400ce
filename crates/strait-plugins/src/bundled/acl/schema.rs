//! `acl`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{Map, Value};
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::{bool_default, non_empty_list};

/// Kong's entity checks `only_one_of` and `at_least_one_of` on
/// `config.allow` / `config.deny`.
fn acl_check(config: &Map<String, Value>) -> Result<(), String> {
    match (non_empty_list(config, "allow"), non_empty_list(config, "deny")) {
        (true, true) => Err("only one of these fields must be non-empty: 'config.allow', 'config.deny'".into()),
        (false, false) => Err("at least one of these fields must be non-empty: 'config.allow', 'config.deny'".into()),
        _ => Ok(()),
    }
}

pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
        ("allow", Field::array(Field::string())),
        ("deny", Field::array(Field::string())),
        ("hide_groups_header", bool_default(false)),
        ("always_use_authenticated_groups", bool_default(false)),
        ("include_consumer_groups", bool_default(false)),
    ])
    .no_consumer()
    .check(acl_check)
}
