//! `oauth2`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

use crate::config_fields::bool_default;

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
pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![
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
