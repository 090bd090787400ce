//! `ldap-auth`'s config schema: Kong 3.9's fields, defaults and checks.

use serde_json::{json, Map, Value};
use strait_core::schema::field::Field;
use strait_core::schema::{formats, PluginSchema};

pub(super) fn schema() -> PluginSchema {
    let flag = || Field::boolean().required().default(json!(false));
    PluginSchema {
        no_consumer: true,
        ..PluginSchema::new(vec![
            ("ldap_host", Field::string().required().check(formats::host)),
            ("ldap_port", Field::integer().required().default(json!(389)).between(0, 65535)),
            ("ldaps", flag()),
            ("start_tls", flag()),
            ("verify_ldap_host", flag()),
            ("base_dn", Field::string().required()),
            ("attribute", Field::string().required()),
            ("cache_ttl", Field::number().required().default(json!(60))),
            ("hide_credentials", flag()),
            ("timeout", Field::number().default(json!(10000))),
            ("keepalive", Field::number().default(json!(60000))),
            ("anonymous", Field::string()),
            ("header_type", Field::string().default(json!("ldap"))),
            ("realm", Field::string()),
        ])
        .check(ldap_auth_check)
    }
}

fn ldap_auth_check(config: &Map<String, Value>) -> Result<(), String> {
    let on = |field: &str| config.get(field).and_then(Value::as_bool).unwrap_or(false);
    if on("ldaps") && on("start_tls") {
        return Err("'ldaps' and 'start_tls' cannot be enabled simultaneously".into());
    }
    Ok(())
}
