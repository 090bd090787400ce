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

/// Kong's oauth2 `validate_flows` and its conditional entity check.
fn oauth2_check(config: &Map<String, Value>) -> Result<(), String> {
    let on = |field: &str| config.get(field).and_then(Value::as_bool) == Some(true);
    if !(on("enable_authorization_code")
        || on("enable_implicit_grant")
        || on("enable_client_credentials")
        || on("enable_password_grant"))
    {
        return Err("at least one of these fields must be true: enable_authorization_code, enable_implicit_grant, enable_client_credentials, enable_password_grant".into());
    }
    if on("mandatory_scope") && !config.get("scopes").is_some_and(Value::is_array) {
        return Err("failed conditional validation given value of field 'config.mandatory_scope'".into());
    }
    Ok(())
}

/// Kong's oauth2 plugin schema (kong/plugins/oauth2/schema.lua).
pub(super) fn oauth2() -> PluginDef {
    PluginDef::new(vec![
        ("scopes", Field::array(Field::string())),
        ("mandatory_scope", bool_default(false)),
        ("provision_key", Field::string().required().auto().unique()),
        ("token_expiration", Field::number().required().default(json!(7200))),
        ("enable_authorization_code", bool_default(false)),
        ("enable_implicit_grant", bool_default(false)),
        ("enable_client_credentials", bool_default(false)),
        ("enable_password_grant", bool_default(false)),
        ("hide_credentials", bool_default(false)),
        ("accept_http_if_already_terminated", bool_default(false)),
        ("anonymous", Field::string()),
        ("global_credentials", bool_default(false)),
        ("auth_header_name", Field::string().default(json!("authorization"))),
        (
            "refresh_token_ttl",
            Field::number()
                .required()
                .default(json!(1_209_600))
                .between(0, 100_000_000),
        ),
        ("reuse_refresh_token", bool_default(false)),
        ("persistent_refresh_token", bool_default(false)),
        (
            "pkce",
            Field::string().one_of(&["none", "lax", "strict"]).default(json!("lax")),
        ),
        ("realm", Field::string()),
    ])
    .no_consumer()
    .check(oauth2_check)
    .fill(|config| {
        if matches!(config.get("provision_key"), None | Some(Value::Null)) {
            config.insert("provision_key".into(), json!(uuid::Uuid::new_v4().simple().to_string()));
        }
    })
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
