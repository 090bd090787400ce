//! Config schemas of the authentication plugins (Kong 3.10 field names,
//! types and defaults).

use serde_json::{json, Map, Value};

use super::PluginDef;
use crate::schema::field::Field;
use crate::schema::formats;

fn bool_default(value: bool) -> Field {
    Field::boolean().required().default(json!(value))
}

pub(super) fn key_auth() -> PluginDef {
    PluginDef::new(vec![
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

fn non_empty_list(config: &Map<String, Value>, field: &str) -> bool {
    config
        .get(field)
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

/// Kong's entity checks `only_one_of` and `at_least_one_of` on
/// `config.allow` / `config.deny`.
fn acl_check(config: &Map<String, Value>) -> Result<(), String> {
    match (non_empty_list(config, "allow"), non_empty_list(config, "deny")) {
        (true, true) => Err("only one of these fields must be non-empty: 'config.allow', 'config.deny'".into()),
        (false, false) => Err("at least one of these fields must be non-empty: 'config.allow', 'config.deny'".into()),
        _ => Ok(()),
    }
}

pub(super) fn acl() -> PluginDef {
    PluginDef::new(vec![
        ("allow", Field::array(Field::string())),
        ("deny", Field::array(Field::string())),
        ("hide_groups_header", bool_default(false)),
        ("always_use_authenticated_groups", bool_default(false)),
        ("include_consumer_groups", bool_default(false)),
    ])
    .no_consumer()
    .check(acl_check)
}

pub(super) fn basic_auth() -> PluginDef {
    PluginDef::new(vec![
        ("anonymous", Field::string()),
        ("hide_credentials", bool_default(false)),
        ("realm", Field::string().required().default(json!("service"))),
    ])
    .no_consumer()
}

/// Kong Enterprise's `mtls-auth`, with its fields and defaults.
pub(super) fn mtls_auth() -> PluginDef {
    PluginDef::new(vec![
        (
            "ca_certificates",
            Field::array(Field::string().uuid()).default(json!([])),
        ),
        ("skip_consumer_lookup", bool_default(false)),
        (
            "consumer_by",
            Field::array(Field::string().one_of(&["username", "custom_id"])).default(json!(["username", "custom_id"])),
        ),
        ("anonymous", Field::string()),
        ("default_consumer", Field::string()),
        (
            "authenticated_group_by",
            Field::string().one_of(&["CN", "DN"]).default(json!("CN")),
        ),
        (
            "revocation_check_mode",
            Field::string()
                .one_of(&["SKIP", "IGNORE_CA_ERROR", "STRICT"])
                .default(json!("IGNORE_CA_ERROR")),
        ),
        ("http_timeout", Field::integer().default(json!(30000))),
        ("cert_cache_ttl", Field::integer().default(json!(60000))),
        ("send_ca_dn", bool_default(false)),
        ("allow_partial_chain", bool_default(false)),
        ("http_proxy_host", Field::string()),
        ("http_proxy_port", Field::integer()),
        ("https_proxy_host", Field::string()),
        ("https_proxy_port", Field::integer()),
    ])
    .no_consumer()
}
